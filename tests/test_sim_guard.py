"""`--policy guarded`: the real guard on simulated time, from samples to the fleet mode.

Synthetic Poisson traffic (20 req/s, Azure-like lengths) on the default fleet, so every
run is seconds long and needs no shared data; faults start at 150 s, after the guard has
seen ~3,000 requests. The efficacy figures on the real traces are bench/'s business
(bench/guard_efficacy.py, docs/guard-efficacy.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_report_schema import schema_problems
from typer.testing import CliRunner

from slaguard.cli.main import app
from slaguard.fleet import Fleet, load_fleet
from slaguard.guard.guard import Guard
from slaguard.guard.modes import ModeState
from slaguard.scheduler.rollout import LEARNED, ROUND_ROBIN, FleetMode, RolloutPlan
from slaguard.scheduler.state import JITTER_Z
from slaguard.sim.arrival_faults import apply_arrival_faults
from slaguard.sim.engine import SimOptions, Simulation
from slaguard.sim.faults import FaultSchedule, parse_faults
from slaguard.sim.guarded import NEW_VERSION, GuardController, releases_from
from slaguard.sim.observers import FixedPolicy, SimObserver
from slaguard.sim.report import build_report
from slaguard.sim.results import OutcomeInfo, Results
from slaguard.sim.synthetic import synthetic_trace
from slaguard.sim.workload import Workload, assign_workload

FAULT_AT = 150.0
RATE = 20.0
REQUESTS = 5000
JITTER = "faults:\n  - {kind: jitter, target: l40s, start_s: 150, end_s: 400, factor: 3}\n"
HOT = "faults:\n  - {kind: hot_prompt, start_s: 150, end_s: 400, share: 0.3, prompt_tokens: 6000}\n"
NEW_MODEL = (
    "faults:\n  - {kind: new_model, model: llama3.1-70b, start_s: 150, latency_factor: 1.8}\n"
)
runner = CliRunner()


@dataclass
class GuardedRun:
    sim: Simulation
    guard: GuardController
    results: Results
    workload: Workload
    schedule: FaultSchedule


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    return load_fleet()


def on_learned() -> ModeState:
    return ModeState(LEARNED, reason="learned policy in production", auto_advance=False)


def guarded_run(
    fleet: Fleet,
    faults: str | None,
    state: ModeState | None = None,
    plan: RolloutPlan | None = None,
    *,
    requests: int = REQUESTS,
    shadow: bool = False,
) -> GuardedRun:
    """Replay synthetic traffic with the guard in control (or in shadow on `learned`)."""
    schedule = parse_faults(faults, "<test>", fleet) if faults else FaultSchedule()
    trace = apply_arrival_faults(synthetic_trace(requests, RATE, seed=1), schedule, 0)
    workload = assign_workload(trace, fleet)
    guard = GuardController(
        Guard(plan=plan or RolloutPlan(), state=state or on_learned()),
        fleet,
        releases_from(schedule),
        act=not shadow,
    )
    controller: SimObserver = FixedPolicy(LEARNED) if shadow else guard
    observers = [guard] if shadow else []
    sim = Simulation(fleet, workload, controller, schedule, SimOptions(), observers=observers)
    return GuardedRun(sim, guard, sim.run(), workload, schedule)


def modes(run: GuardedRun) -> list[tuple[float, str]]:
    return [(at, mode.label) for at, mode, _ in run.results.mode_timeline]


@pytest.fixture(scope="module")
def jitter_run(fleet: Fleet) -> GuardedRun:
    return guarded_run(fleet, JITTER)


def test_jitter_trips_and_the_fleet_is_on_round_robin_within_one_period(
    jitter_run: GuardedRun,
) -> None:
    trips = jitter_run.guard.trips
    assert len(trips) == 1
    trip = trips[0]
    assert (trip["detector"], trip["subject"]) == ("ttft_zscore", "card:l40s")
    # 7 s: TTFTs fed at the first token and the 10 s tier window; 17 s with the 30 s
    # window alone, 28 s when the TTFTs waited for the completion
    assert FAULT_AT < trip["at_s"] <= FAULT_AT + 10
    assert trip["evidence"]["ratio_vs_rest"] >= 2.0 and trip["evidence"]["z"] >= 4.5
    assert (trip["mode_before"], trip["mode_after"], trip["switched"]) == (
        "learned",
        "round_robin",
        True,
    )
    assert trip["incident_id"] and trip["trip_after"] == 3
    (switched_at, mode), *_ = [(at, m) for at, m in modes(jitter_run) if at > 0]
    assert mode == "round_robin" and 0.0 <= switched_at - trip["at_s"] <= 0.5
    res = jitter_run.results
    after = res.arrival_s >= switched_at
    before = res.arrival_s < switched_at
    assert after.sum() > 1000 and (res.arm[after] == 0).all(), "round-robin arm from the switch"
    assert (res.arm[before] == 1).all(), "learned arm until the switch"
    reason = jitter_run.results.mode_timeline[-1][2]
    assert reason.startswith("trip: learned policy rolled back") and "card tier l40s" in reason


def test_the_guard_feeds_the_routers_jitter_term(fleet: Fleet, jitter_run: GuardedRun) -> None:
    # traffic until the fault ends (400 s), so the last evaluations still have samples in
    # their 5-minute window (first tokens stop soon after the last arrival)
    run = guarded_run(fleet, JITTER, requests=8000)
    rows = run.sim.scheduler.state.rows
    z = run.guard.guard.jitter_zscores()
    # the trip changed the routing policy, so baselines restarted; by the end of the run the
    # six L40S targets (a peer group of one card and model) are scored again at least
    assert {f"l40s-8b-{i}" for i in range(6)} <= set(z)
    for t in run.sim.fleet:
        assert rows[t.index, JITTER_Z] == pytest.approx(z.get(t.id, 0.0)), "thin targets: 0"
    guard = jitter_run.guard
    # one first token and one finished request per served request
    assert guard.queued > 2 * 0.99 * REQUESTS
    assert 0 <= guard.queued - guard.observed <= 5, "only those finished after the last tick"


def test_clean_run_never_trips_and_the_shadow_never_acts(fleet: Fleet) -> None:
    run = guarded_run(fleet, None)
    assert run.guard.trips == [] and run.guard.trip_verdicts == []
    assert modes(run) == [(0.0, "learned")]
    assert run.guard.evaluations == int(run.results.sim_s)
    shadow = guarded_run(fleet, JITTER, shadow=True)
    assert [t["subject"] for t in shadow.guard.trips] == ["card:l40s"]
    assert modes(shadow) == [(0.0, "learned")], "a shadow guard's mode answer is ignored"
    assert (shadow.sim.scheduler.state.rows[:, JITTER_Z] == 0).all()


def test_the_rollout_plan_is_followed_when_nothing_trips(fleet: Fleet) -> None:
    run = guarded_run(
        fleet, None, ModeState(), RolloutPlan(baseline_s=20, stage_s=10), requests=2000
    )
    assert run.guard.trips == []
    assert modes(run) == [
        (0.0, "round_robin"),
        (20.0, "rollout(10)"),
        (30.0, "rollout(50)"),
        (40.0, "rollout(100)"),
        (50.0, "learned"),
    ]
    reasons = [why for _, _, why in run.results.mode_timeline[1:]]
    assert reasons[0] == (
        "stage_advance: fleet advanced to rollout(10) "
        "(rollout plan: round_robin lasted 20s (>= 20s))"
    )
    res = run.results
    rollout_50 = (res.arrival_s >= 30.5) & (res.arrival_s < 40)
    assert 0.4 < res.arm[rollout_50].mean() < 0.6


def test_hot_prompt_trips_the_hot_spot_detector(fleet: Fleet) -> None:
    run = guarded_run(fleet, HOT)
    trip = run.guard.trips[0]
    assert trip["detector"] == "hot_spot" and trip["subject"].startswith("prefix:")
    assert FAULT_AT < trip["at_s"] <= FAULT_AT + 20
    assert trip["evidence"]["share"] >= 0.2 and trip["evidence"]["counts"] == "arrivals"


def test_new_model_trips_cold_start_on_the_new_version(fleet: Fleet) -> None:
    run = guarded_run(fleet, NEW_MODEL)
    assert releases_from(run.schedule, 8.0)[0].deployed_at_s == FAULT_AT / 8.0
    trip = run.guard.trips[0]
    assert (trip["detector"], trip["subject"]) == (
        "cold_start",
        f"model:llama3.1-70b@{NEW_VERSION}",
    )
    assert FAULT_AT < trip["at_s"] <= FAULT_AT + 60
    assert trip["evidence"]["baseline_from"] == "same model"
    assert trip["evidence"]["ttft_slowdown_vs_baseline"] >= 1.5


def test_a_sample_reaches_the_guard_only_once_its_finish_time_has_passed(fleet: Fleet) -> None:
    """The engine may resolve a prefill ahead of its tick; the guard must not hear of it early."""
    workload = assign_workload(synthetic_trace(1, 1.0, seed=2), fleet)
    guard = GuardController(Guard(state=on_learned()), fleet)
    sim = Simulation(fleet, workload, guard)
    decision = sim.scheduler.decide(workload.request(0), 0.0, LEARNED)
    guard.on_outcome(decision, 7.3, OutcomeInfo("ok", 0.2, 0.01, 7.3, True))
    assert guard.on_period(7.0, sim) == (LEARNED, "")
    assert (guard.queued, guard.observed, guard.evaluations) == (1, 0, 1)
    guard.on_period(7.5, sim)
    assert (guard.observed, guard.evaluations) == (1, 1), "next evaluation at 8 s"
    guard.on_period(8.0, sim)
    assert guard.evaluations == 2


def _write_azure_csv(path: Path, requests: int) -> None:
    trace = synthetic_trace(requests, RATE, seed=1)
    stamps = np.datetime64("2023-11-16T18:15:00") + (trace.arrival_s * 1e6).astype(
        "timedelta64[us]"
    )
    rows = [
        f"{str(s).replace('T', ' ')},{p},{o}"
        for s, p, o in zip(stamps, trace.prompt_tokens, trace.output_tokens, strict=True)
    ]
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")


def test_simulate_guarded_fills_the_reports_guard_section(tmp_path: Path) -> None:
    trace, faults, out = tmp_path / "t.csv", tmp_path / "hot.yaml", tmp_path / "r.json"
    _write_azure_csv(trace, 2400)
    faults.write_text(HOT.replace("150", "80"))
    args = ["simulate", "--trace", str(trace), "--faults", str(faults), "--policy", "guarded"]
    plan = ["--baseline-s", "20", "--stage-s", "10", "--report-json", str(out)]
    result = runner.invoke(app, [*args, *plan])
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(out.read_text())
    assert schema_problems(report) == []
    guard = report["guard"]
    trip = guard["trips"][0]
    assert set(trip) >= {"detector", "at_s", "subject", "evidence", "summary", "mode_after"}
    assert trip["detector"] == "hot_spot" and 80 < trip["at_s"] <= 100
    assert isinstance(trip["evidence"], dict) and trip["evidence"]["trip_share"] == 0.2
    timeline = [(m["at_s"], m["mode"]) for m in guard["mode_timeline"]]
    assert timeline[:5] == [
        (0.0, "round_robin"),
        (20.0, "rollout(10)"),
        (30.0, "rollout(50)"),
        (40.0, "rollout(100)"),
        (50.0, "learned"),
    ]
    assert timeline[5] == (trip["at_s"], "round_robin")
    assert all(m["reason"] for m in guard["mode_timeline"])
    assert "trip hot_spot" in result.stdout
    assert report["sla"]["by_arm"]["learned"]["requests"] > 0


def test_a_trip_during_the_baseline_says_it_switched_nothing(tmp_path: Path) -> None:
    """The timeline showed a bare "trip" and then a baseline that lasted long past its
    time, with nothing linking the two."""
    trace, faults = tmp_path / "t.csv", tmp_path / "hot.yaml"
    _write_azure_csv(trace, 2400)
    faults.write_text(HOT.replace("150", "80"))
    args = ["simulate", "--trace", str(trace), "--faults", str(faults), "--policy", "guarded"]
    result = runner.invoke(app, [*args, "--baseline-s", "500", "--stage-s", "10"])
    assert result.exit_code == 0, result.output
    assert "(no switch: already" in result.stdout  # wrapped at 80 columns


def test_report_built_from_a_guarded_run_fits_the_schema(
    jitter_run: GuardedRun, fleet: Fleet
) -> None:
    report = build_report(
        fleet=fleet,
        workload=jitter_run.workload,
        results=jitter_run.results,
        policy="guarded",
        trace_path="synthetic",
        faults=jitter_run.schedule.report_rows(),
        trips=jitter_run.guard.trips,
    )
    assert schema_problems(report) == []
    json.dumps(report, allow_nan=False)
    assert [m["mode"] for m in report["guard"]["mode_timeline"]] == ["learned", "round_robin"]


def test_round_robin_start_mode_is_the_guards(fleet: Fleet) -> None:
    guard = GuardController(Guard(), fleet)
    assert guard.initial_mode() == ROUND_ROBIN
    assert GuardController(Guard(state=on_learned()), fleet).initial_mode() == FleetMode.parse(
        "learned"
    )


def test_the_reports_incident_id_opens_the_incident_in_the_audit_database(
    tmp_path: Path,
) -> None:
    """The report names the guard's `inc-...` id, the database its own integer id: `audit
    incident` took only the latter ('input should be a valid integer')."""
    trace, faults, out = tmp_path / "t.csv", tmp_path / "hot.yaml", tmp_path / "r.json"
    db = f"sqlite:///{tmp_path / 'a.db'}"
    _write_azure_csv(trace, 2400)
    faults.write_text(HOT.replace("150", "80"))
    args = ["simulate", "--trace", str(trace), "--faults", str(faults), "--policy", "guarded"]
    plan = ["--baseline-s", "20", "--stage-s", "10", "--report-json", str(out)]
    result = runner.invoke(app, [*args, *plan, "--audit-db", db])
    assert result.exit_code == 0, result.output
    guard_id = json.loads(out.read_text())["guard"]["trips"][0]["incident_id"]
    assert guard_id.startswith("inc-")
    by_guard_id = runner.invoke(app, ["audit", "incident", guard_id, "--db", db, "-f", "json"])
    by_audit_id = runner.invoke(app, ["audit", "incident", "1", "--db", db, "-f", "json"])
    assert by_guard_id.exit_code == 0, by_guard_id.output
    assert by_guard_id.stdout == by_audit_id.stdout
    incident = json.loads(by_guard_id.stdout)["incident"]
    assert incident["id"] == 1 and incident["evidence"]["incident"] == guard_id
    unknown = runner.invoke(app, ["audit", "incident", "inc-9-9", "--db", db])
    assert unknown.exit_code == 2
    assert unknown.stderr.startswith("error: no incident with guard id inc-9-9; fix: ")
