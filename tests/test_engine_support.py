"""Builders shared by the simulator tests (no tests here): run a trace the way the CLI does.

`run_sim` applies a fault scenario to the trace (arrival-side faults) and to the engine
(target-side faults), replays it with the real scheduler and builds the report.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from slaguard.fleet import Fleet
from slaguard.scheduler.rollout import LEARNED, ROUND_ROBIN, FleetMode
from slaguard.sim.arrival_faults import apply_arrival_faults
from slaguard.sim.engine import SimOptions, Simulation
from slaguard.sim.faults import FaultSchedule, parse_faults
from slaguard.sim.observers import FixedPolicy, SimObserver
from slaguard.sim.report import build_report
from slaguard.sim.results import Results
from slaguard.sim.trace import Trace
from slaguard.sim.workload import Workload, assign_workload

FIXTURES = Path(__file__).parent / "fixtures"
AZURE_FIXTURE = FIXTURES / "azure_conv_200.csv"
MOONCAKE_FIXTURE = FIXTURES / "mooncake_conv_200.jsonl"

POLICIES: dict[str, FleetMode] = {"round-robin": ROUND_ROBIN, "learned": LEARNED}


@dataclass
class SimRun:
    """One finished simulation with everything a test may inspect."""

    sim: Simulation
    workload: Workload
    results: Results
    report: dict[str, Any]

    def ttft_p99(self, mask: np.ndarray) -> float:
        values = self.results.ttft_s[mask]
        return float(np.percentile(values[np.isfinite(values)], 99))


def run_sim(
    trace: Trace,
    fleet: Fleet,
    policy: str | SimObserver = "learned",
    faults: str | None = None,
    *,
    seed: int = 0,
    rate_scale: float = 1.0,
    drain_s: float = 600.0,
) -> SimRun:
    """Replay `trace` under `policy` with an optional scenario given as YAML text."""
    schedule = parse_faults(faults, "<test>", fleet) if faults else FaultSchedule()
    workload = assign_workload(apply_arrival_faults(trace, schedule, seed), fleet)
    controller = FixedPolicy(POLICIES[policy]) if isinstance(policy, str) else policy
    sim = Simulation(
        fleet,
        workload,
        controller,
        schedule,
        SimOptions(rate_scale=rate_scale, drain_s=drain_s),
    )
    results = sim.run()
    report = build_report(
        fleet=fleet,
        workload=workload,
        results=results,
        policy=policy if isinstance(policy, str) else type(policy).__name__,
        trace_path=trace.source,
        faults=schedule.report_rows(),
    )
    return SimRun(sim, workload, results, report)


def without_wall_time(report: dict[str, Any]) -> dict[str, Any]:
    """The report minus the fields that measure the machine, not the simulation."""
    return {k: v for k, v in report.items() if k not in ("wall_s", "decision_latency_s")}
