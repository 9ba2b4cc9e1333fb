"""What the engine tells the rest of the world, and who sets the fleet mode.

A `SimObserver` hears decisions, first tokens and outcomes; the run's *controller* is the
observer whose `on_period` answer becomes the fleet mode every 500 ms. Fixed policies and
the rollout plan live here; the guard and the audit writer plug in the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slaguard.scheduler.explain import Decision
from slaguard.scheduler.rollout import LEARNED, ROUND_ROBIN, FleetMode, RolloutPlan
from slaguard.sim.results import OutcomeInfo

if TYPE_CHECKING:
    from slaguard.sim.engine import Simulation


class SimObserver:
    """No-op base: override what you need."""

    def initial_mode(self) -> FleetMode:
        return ROUND_ROBIN

    def on_decision(self, decision: Decision, now_s: float, latency_s: float) -> None:
        """A routing decision (retried requests: once routed, or once finally rejected)
        and the wall time `decide()` took for it."""

    def on_first_token(self, decision: Decision, now_s: float, ttft_s: float) -> None:
        """The request's first token arrived."""

    def on_outcome(self, decision: Decision, now_s: float, outcome: OutcomeInfo) -> None:
        """The request finished (ok, failed, rejected or timed out)."""

    def on_period(self, now_s: float, sim: Simulation) -> tuple[FleetMode, str]:
        """Every correction period: the controller returns the mode for the next one."""
        return sim.mode, ""


class FixedPolicy(SimObserver):
    """Round-robin or learned for the whole run."""

    def __init__(self, mode: FleetMode) -> None:
        self.mode = mode

    def initial_mode(self) -> FleetMode:
        return self.mode

    def on_period(self, now_s: float, sim: Simulation) -> tuple[FleetMode, str]:
        return self.mode, ""


class RolloutController(SimObserver):
    """Follows the cold-start plan's stages in simulated seconds (no automatic rollback:
    the rollback rule is the guard's `rollout_compare` detector, in `--policy guarded`)."""

    def __init__(self, plan: RolloutPlan) -> None:
        self.plan = plan

    def initial_mode(self) -> FleetMode:
        return self.plan.mode_at(0.0)

    def on_period(self, now_s: float, sim: Simulation) -> tuple[FleetMode, str]:
        mode = self.plan.mode_at(now_s)
        return mode, f"rollout plan: {mode.label} at {now_s:g} s"


__all__ = ["LEARNED", "ROUND_ROBIN", "FixedPolicy", "RolloutController", "SimObserver"]
