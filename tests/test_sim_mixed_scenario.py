"""Who the guard names in `examples/scenarios/mixed.yaml` (guarded, x8, a 30 s baseline and
20 s stages), as docs/simulate-report.md reads that run: the Ascend jitter is named within
8 s, while the breaker is still open from the hot prompt (so it is no trip of its own), and
the H200 trip at the end is the 70B tier's low-priority backlog, not the Ascend cards."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pytest
from test_simulate_scenarios import SCENARIOS
from test_traces import require_full

from slaguard.fleet import Fleet, Priority, load_fleet
from slaguard.guard.guard import Guard
from slaguard.scheduler.explain import Decision
from slaguard.scheduler.rollout import RolloutPlan
from slaguard.sim import paths
from slaguard.sim.arrival_faults import apply_arrival_faults
from slaguard.sim.engine import SimOptions, Simulation
from slaguard.sim.faults import load_faults
from slaguard.sim.guarded import GuardController, ModelRelease, releases_from
from slaguard.sim.traces import load_trace
from slaguard.sim.workload import assign_workload

RATE = 8.0


@dataclass(frozen=True)
class LowFirstToken:
    """A low-priority first token on the H200 70B tier."""

    at_s: float
    ttft_s: float
    arrived_s: float


class _Recorder(GuardController):
    """The guard as `--policy guarded` runs it, keeping the H200 70B tier's low-priority
    first tokens."""

    def __init__(self, guard: Guard, fleet: Fleet, releases: Sequence[ModelRelease]) -> None:
        super().__init__(guard, fleet, releases)
        self.h200_70b_low: list[LowFirstToken] = []

    def on_first_token(self, decision: Decision, now_s: float, ttft_s: float) -> None:
        target = decision.target
        if (
            target is not None
            and (target.card.id, target.model.id) == ("h200", "llama3.1-70b")
            and decision.request.priority is Priority.LOW
        ):
            self.h200_70b_low.append(LowFirstToken(now_s, ttft_s, now_s - ttft_s))
        super().on_first_token(decision, now_s, ttft_s)


@pytest.fixture(scope="module")
def run() -> tuple[_Recorder, Simulation]:
    fleet = load_fleet()
    schedule = load_faults(SCENARIOS / "mixed.yaml", fleet)
    trace = apply_arrival_faults(load_trace(require_full(paths.default_trace_path())), schedule, 0)
    guard = _Recorder(
        Guard(plan=RolloutPlan(baseline_s=30.0, stage_s=20.0)),
        fleet,
        releases_from(schedule, RATE),
    )
    sim = Simulation(
        fleet, assign_workload(trace, fleet), guard, schedule, SimOptions(rate_scale=RATE)
    )
    sim.run()
    return guard, sim


def test_the_breaker_trips_on_the_hot_prompt_and_at_the_end_on_h200(
    run: tuple[_Recorder, Simulation],
) -> None:
    guard, _ = run
    assert [(t["at_s"], t["detector"], t["subject"], t["switched"]) for t in guard.trips] == [
        (72.0, "hot_spot", "prefix:0044223f1e27f22a", True),
        (456.0, "ttft_zscore", "card:h200", False),
    ]


def test_the_ascend_jitter_is_named_while_the_breaker_is_open(
    run: tuple[_Recorder, Simulation],
) -> None:
    guard, _ = run
    ascend = [
        (v["phase"], v["at_s"]) for v in guard.trip_verdicts if v["subject"] == "card:ascend910b"
    ]
    # the jitter runs 900-1,500 trace s: simulated 112.5-187.5 s; the breaker is open
    # from the hot prompt's trip at 72 s to 372 s, so no breaker trip names it
    assert ascend == [("raised", 120.0), ("ended", 122.0), ("raised", 130.0), ("ended", 164.0)]


def test_what_joins_the_open_incident_is_kept_as_its_updates(
    run: tuple[_Recorder, Simulation],
) -> None:
    """The report's `guard.incident_updates` (and the incident `--audit-db` writes) hold
    what the service's incident thread says while the breaker is open; they were dropped."""
    guard, _ = run
    updates = guard.incident_updates
    assert [(u["at_s"], u["incident_id"]) for u in updates] == [
        (120.0, "inc-72-1"), (372.0, "inc-72-1"), (454.0, "inc-72-1"), (455.0, "inc-72-1"),
        (460.0, "inc-72-1"),
    ]  # fmt: skip
    assert updates[0]["summary"].startswith("also: card tier ascend910b (llama3.1-8b): ")
    assert updates[1]["summary"].startswith("detectors are back to normal; fleet stays on ")
    assert updates[4]["summary"].startswith("also: new model llama3.1-70b@v2 (122s old)")


def test_the_h200_trip_is_the_70b_tiers_low_priority_backlog_after_the_last_arrival(
    run: tuple[_Recorder, Simulation],
) -> None:
    guard, sim = run
    h200 = guard.trips[1]["evidence"]
    assert (h200["model"], h200["tier_ratio_to_baseline"], h200["ratio_vs_rest"]) == (
        "llama3.1-70b",
        93.7288,
        10.5943,
    )
    assert (h200["samples"], h200["loaded"], h200["handed_ratio_to_baseline"]) == (
        44,
        False,
        0.1357,
    )
    assert round(float(sim.arrivals[-1]), 1) == 437.7
    window = [f for f in guard.h200_70b_low if 426.0 < f.at_s <= 456.0]
    assert len(window) == 34
    assert round(float(np.median([f.ttft_s for f in window])), 1) == 117.6
    # handed during the load spike and the slower release, the last after the tier's load
    # excuse ended (319 s), so answering them no longer excuses the tier
    assert (round(min(f.arrived_s for f in window)), round(max(f.arrived_s for f in window))) == (
        283,
        372,
    )
