"""The cold-start test on the real Azure hour: a release exactly as fast as the old version
must not trip the fleet (it did, 29 s after the release, with a 25 % tolerance), and a
1.8x slower one still trips within a minute."""

from __future__ import annotations

import pytest
from test_traces import require_full

from slaguard.fleet import load_fleet
from slaguard.guard.guard import Guard
from slaguard.scheduler.rollout import RolloutPlan
from slaguard.sim import paths
from slaguard.sim.engine import SimOptions, Simulation
from slaguard.sim.faults import parse_faults
from slaguard.sim.guarded import GuardController, releases_from
from slaguard.sim.traces import load_trace
from slaguard.sim.workload import assign_workload

RATE = 6.0
RELEASE_AT = 1800.0
"""Trace seconds: the hour's busiest stretch, where the 70B tier's TTFT swings 1.3-1.5x."""


@pytest.mark.parametrize(("factor", "trips"), [(1.0, False), (1.8, True)])
def test_a_release_trips_only_when_it_is_slower(factor: float, trips: bool) -> None:
    fleet = load_fleet()
    schedule = parse_faults(
        "faults:\n  - {kind: new_model, model: llama3.1-70b, "
        f"start_s: {RELEASE_AT:g}, latency_factor: {factor}}}\n",
        "<test>",
        fleet,
    )
    workload = assign_workload(
        load_trace(require_full(paths.default_trace_path())).between(0.0, 2400.0), fleet
    )
    guard = GuardController(
        Guard(plan=RolloutPlan(baseline_s=30.0, stage_s=20.0)),
        fleet,
        releases_from(schedule, RATE),
    )
    Simulation(fleet, workload, guard, schedule, SimOptions(rate_scale=RATE)).run()
    cold = [t["at_s"] - RELEASE_AT / RATE for t in guard.trips if t["detector"] == "cold_start"]
    if trips:
        assert cold and 0 < cold[0] <= 60.0, cold
    else:
        assert cold == [], cold
