"""The scheduler facade: one object the simulator and the service both drive.

It owns the fleet picture, the router, the weight learner and the per-target batchers;
every method takes the time as an argument, so simulated and wall clocks run the same code.
"""

from __future__ import annotations

import numpy as np

from slaguard.fleet.fleet import Fleet
from slaguard.fleet.request import Request
from slaguard.scheduler.batching import Batcher
from slaguard.scheduler.config import SchedulerConfig
from slaguard.scheduler.correction import CorrectionSignal, correction_signal
from slaguard.scheduler.explain import Decision
from slaguard.scheduler.kv import PrefixDirectory
from slaguard.scheduler.rollout import Arm, FleetMode, assign_arm
from slaguard.scheduler.router import Router
from slaguard.scheduler.state import QUEUE, FleetState
from slaguard.scheduler.weights import WeightLearner, Weights, initial_weights


class Scheduler:
    """Routing, feedback and the two control loops for one fleet."""

    def __init__(
        self,
        fleet: Fleet,
        cfg: SchedulerConfig | None = None,
        *,
        now_s: float = 0.0,
        weights: Weights | None = None,
    ) -> None:
        self.fleet = fleet
        self.cfg = cfg or SchedulerConfig()
        self.config_hash = self.cfg.digest()
        self.state = FleetState(fleet, now_s)
        start = weights or initial_weights(self.cfg.router.initial_weights)
        self.learner = WeightLearner(start, self.cfg.learning, started_s=now_s)
        self.router = Router(fleet, self.state, self.cfg, start, PrefixDirectory())
        speed = np.array([t.tflops for t in fleet]) / max(t.tflops for t in fleet)
        self.capacities = np.maximum(speed, 1e-3)
        self.batchers = [Batcher(self.cfg.batching, capacity_scale=1.0) for _ in fleet]
        self.factors = np.ones(len(fleet))
        self.last_signal: CorrectionSignal | None = None

    @property
    def weights(self) -> Weights:
        return self.router.weights

    def decide(self, request: Request, now_s: float, mode: FleetMode) -> Decision:
        """Route one request under the fleet mode (A/B arm by a hash of the request id)."""
        return self.router.route(request, now_s, assign_arm(mode, request.request_id))

    def feedback(self, decision: Decision, ttft_s: float | None, now_s: float) -> Weights | None:
        """Feed one outcome to the learner (learned arm only); `ttft_s=None` is a failure.

        Returns new weights when the periodic update ran.
        """
        comps = None
        if decision.arm is Arm.LEARNED and decision.target is not None:
            comps = decision.chosen_components()
        return self.learn(comps, ttft_s, decision.request.deadline_s, now_s)

    def learn(
        self, components: np.ndarray | None, ttft_s: float | None, deadline_s: float, now_s: float
    ) -> Weights | None:
        """`feedback` from the chosen row's components (None: nothing to learn, only the
        periodic update)."""
        self.observe_outcome(components, ttft_s, deadline_s)
        return self.update_weights(now_s)

    def observe_outcome(
        self, components: np.ndarray | None, ttft_s: float | None, deadline_s: float
    ) -> None:
        """Feed one outcome to the learner without updating: a driver with its own weight
        job (the service) refits there and stores each version."""
        if components is None:
            return
        if ttft_s is None:
            self.learner.observe_failure(components)
        else:
            self.learner.observe(components, ttft_s, deadline_s)

    def update_weights(self, now_s: float) -> Weights | None:
        """The hourly (configurable) weight update; the router picks up new weights at once."""
        return self._adopt(self.learner.maybe_update(now_s))

    def refit_weights(self, now_s: float) -> Weights | None:
        """The weight update now, for a driver whose job keeps the period; the router
        routes with the result once the driver `adopt_weights` it (after storing it)."""
        return self.learner.update(now_s)

    def adopt_weights(self, weights: Weights) -> None:
        """Route with `weights` from now on (a refit, once stored)."""
        self.router.weights = weights

    def restore_weights(self, weights: Weights) -> None:
        """Continue from stored weights (a restart): the learner counts on from them."""
        self.learner.restart_from(weights)
        self.router.weights = weights

    def _adopt(self, new: Weights | None) -> Weights | None:
        if new is not None:
            self.router.weights = new
        return new

    def correct(self, violation_rate: float) -> CorrectionSignal:
        """One 500 ms global correction step: new batching factors per target."""
        signal = correction_signal(
            self.state.rows[:, QUEUE],
            self.capacities,
            violation_rate,
            self.factors,
            self.cfg.correction,
        )
        self.factors = np.asarray(signal.factors)
        self.last_signal = signal
        return signal

    def apply_factors(self, now_s: float) -> None:
        """Hand the last correction's factors to the per-target batchers."""
        for batcher, factor in zip(self.batchers, self.factors, strict=True):
            batcher.set_factor(float(factor), now_s)
