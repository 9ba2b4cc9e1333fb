"""The simulate report (`slaguard.simulate/v1`): every key of issue 3's schema, typed, JSON-safe.

`REPORT_SCHEMA` is the issue's key list as a JSON-schema-like dict and
`schema_problems(report)` checks a report against it; the CLI tests reuse both.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from rich.console import Console
from test_engine_support import AZURE_FIXTURE, SimRun, run_sim

from slaguard.fleet import Fleet, load_fleet
from slaguard.scheduler.rollout import RolloutPlan
from slaguard.sim.observers import RolloutController
from slaguard.sim.report import SCHEMA, build_report, print_summary
from slaguard.sim.synthetic import synthetic_trace
from slaguard.sim.traces import load_trace

NUMBER = "number"
OPTIONAL_NUMBER = "number|null"
TEXT = "string"
OPTIONAL_TEXT = "string|null"
INTEGER = "integer"


def map_of(value: Any) -> dict[str, Any]:
    """An object with free keys (card types, priorities, arms), each holding `value`."""
    return {"*": value}


def list_of(item: Any) -> list[Any]:
    return [item]


REPORT_SCHEMA: dict[str, Any] = {
    "schema": TEXT,
    "trace": {"path": TEXT, "requests": INTEGER, "duration_s": NUMBER},
    "policy": TEXT,
    "requests": {"total": INTEGER, "completed": INTEGER, "rejected": INTEGER, "failed": INTEGER},
    "sla": {
        "violation_rate": OPTIONAL_NUMBER,
        "by_priority": map_of(OPTIONAL_NUMBER),
        "by_arm": map_of({"requests": INTEGER, "violation_rate": OPTIONAL_NUMBER}),
    },
    "ttft_s": {"p50": OPTIONAL_NUMBER, "p90": OPTIONAL_NUMBER, "p99": OPTIONAL_NUMBER},
    "by_card_type": map_of(
        {
            "requests": INTEGER,
            "capacity_share": NUMBER,
            "ttft_p99_s": OPTIONAL_NUMBER,
            "utilisation": NUMBER,
        }
    ),
    "decision_latency_s": {"p50": OPTIONAL_NUMBER, "p99": OPTIONAL_NUMBER},
    "wall_s": NUMBER,
    "sim_s": NUMBER,
    "faults": list_of(
        {"kind": TEXT, "target": OPTIONAL_TEXT, "start_s": NUMBER, "end_s": OPTIONAL_NUMBER}
    ),
    "guard": {
        "trips": list_of({"detector": TEXT, "at_s": NUMBER, "subject": TEXT, "evidence": {}}),
        "mode_timeline": list_of({"at_s": NUMBER, "mode": TEXT, "reason": TEXT}),
    },
}
"""Issue 3's keys; more keys are allowed everywhere (`{}` is any object)."""


def _scalar_ok(kind: str, value: Any) -> bool:
    if value is None:
        return kind.endswith("|null")
    if isinstance(value, bool):
        return False
    base = kind.removesuffix("|null")
    if base == NUMBER:
        return isinstance(value, int | float) and bool(np.isfinite(value))
    if base == INTEGER:
        return isinstance(value, int)
    return isinstance(value, str)


def schema_problems(value: Any, schema: Any = None, where: str = "report") -> list[str]:
    """Every place `value` breaks `schema` (default: the report schema); [] when it fits."""
    schema = REPORT_SCHEMA if schema is None else schema
    if isinstance(schema, str):
        return [] if _scalar_ok(schema, value) else [f"{where}: {value!r} is not {schema}"]
    if isinstance(schema, list):
        if not isinstance(value, list):
            return [f"{where}: {type(value).__name__} is not a list"]
        return [
            p for i, v in enumerate(value) for p in schema_problems(v, schema[0], f"{where}[{i}]")
        ]
    if not isinstance(value, dict):
        return [f"{where}: {type(value).__name__} is not an object"]
    if "*" in schema:
        return [
            p for k, v in value.items() for p in schema_problems(v, schema["*"], f"{where}.{k}")
        ]
    problems = [f"{where}.{k}: missing" for k in schema if k not in value]
    for key, sub in schema.items():
        if key in value:
            problems += schema_problems(value[key], sub, f"{where}.{key}")
    return problems


FAULTS = """faults:
  - {kind: jitter, target: l40s, start_s: 5, end_s: 15, factor: 3}
  - {kind: new_model, model: llama3.1-70b, start_s: 10, latency_factor: 1.8}
"""


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    return load_fleet()


@pytest.fixture(scope="module")
def rollout_run(fleet: Fleet) -> SimRun:
    plan = RolloutPlan(baseline_s=10.0, stage_s=5.0)
    return run_sim(load_trace(AZURE_FIXTURE), fleet, RolloutController(plan), FAULTS)


def test_every_key_of_the_issue_schema_is_there_with_its_type(rollout_run: SimRun) -> None:
    report = rollout_run.report
    assert schema_problems(report) == []
    assert report["schema"] == SCHEMA == "slaguard.simulate/v1"
    again = json.loads(json.dumps(report, allow_nan=False))  # no NaN may leak into JSON
    assert schema_problems(again) == []
    assert set(report["by_card_type"]) == {"h100", "h200", "a100", "l40s", "ascend910b", "mlu370"}
    assert set(report["sla"]["by_priority"]) == {"high", "normal", "low"}
    assert set(report["sla"]["by_arm"]) == {"round_robin", "learned"}


def test_figures_add_up(rollout_run: SimRun) -> None:
    report, n = rollout_run.report, len(rollout_run.workload)
    cards = report["by_card_type"].values()
    assert sum(c["capacity_share"] for c in cards) == pytest.approx(1.0)
    assert sum(c["requests"] for c in cards) == n  # all routed in this light run
    assert sum(c["request_share"] for c in cards) == pytest.approx(1.0)
    assert all(0.0 <= c["utilisation"] <= 1.0 for c in cards)
    assert sum(a["requests"] for a in report["sla"]["by_arm"].values()) == n
    assert sum(t["requests"] for t in report["by_target"].values()) == n
    ttft = report["ttft_s"]
    assert 0 < ttft["p50"] <= ttft["p90"] <= ttft["p99"]
    latency = report["decision_latency_s"]
    assert 0 < latency["p50"] <= latency["p99"]  # wall seconds: speed is bench/'s business
    assert report["sim_s"] > report["trace"]["duration_s"]


def test_faults_are_listed_as_in_the_scenario(rollout_run: SimRun) -> None:
    assert rollout_run.report["faults"] == [
        {"kind": "jitter", "target": "l40s", "start_s": 5.0, "end_s": 15.0},
        {"kind": "new_model", "target": "llama3.1-70b", "start_s": 10.0, "end_s": None},
    ]


def test_rollout_mode_timeline_shows_the_stages_at_the_configured_seconds(
    rollout_run: SimRun,
) -> None:
    guard = rollout_run.report["guard"]
    assert guard["trips"] == []
    timeline = [(m["at_s"], m["mode"]) for m in guard["mode_timeline"]]
    assert timeline == [
        (0.0, "round_robin"),
        (10.0, "rollout(10)"),
        (15.0, "rollout(50)"),
        (20.0, "rollout(100)"),
        (25.0, "learned"),
    ]
    assert all(m["reason"] for m in guard["mode_timeline"])


def test_fixed_policy_has_one_mode_and_no_trips(fleet: Fleet) -> None:
    run = run_sim(load_trace(AZURE_FIXTURE), fleet, "round-robin")
    guard = run.report["guard"]
    assert isinstance(guard["trips"], list) and isinstance(guard["mode_timeline"], list)
    assert guard == {
        "trips": [],
        "incident_updates": [],
        "mode_timeline": [{"at_s": 0.0, "mode": "round_robin", "reason": "start"}],
    }


def test_empty_groups_are_null_not_nan(fleet: Fleet) -> None:
    """Three requests leave most card types and one arm without data: null, valid JSON."""
    run = run_sim(synthetic_trace(3, 1.0, seed=1), fleet, "round-robin")
    report = run.report
    json.dumps(report, allow_nan=False)
    assert schema_problems(report) == []
    idle = [c for c in report["by_card_type"].values() if c["requests"] == 0]
    assert idle and all(c["ttft_p99_s"] is None for c in idle)
    assert report["sla"]["by_arm"]["learned"] == {"requests": 0, "violation_rate": None}


def test_trips_from_the_guard_fit_the_schema(rollout_run: SimRun, fleet: Fleet) -> None:
    trip = {"detector": "ttft_zscore", "at_s": 12.5, "subject": "l40s-8b-0", "evidence": {"z": 4}}
    report = build_report(
        fleet=fleet,
        workload=rollout_run.workload,
        results=rollout_run.results,
        policy="guarded",
        trace_path="t",
        faults=[],
        trips=[trip],
    )
    assert report["guard"]["trips"] == [trip]
    assert schema_problems(report) == []
    broken = {**report, "guard": {"trips": [{"detector": "x"}], "mode_timeline": {}}}
    assert schema_problems(broken) == [
        "report.guard.trips[0].at_s: missing",
        "report.guard.trips[0].subject: missing",
        "report.guard.trips[0].evidence: missing",
        "report.guard.mode_timeline: dict is not a list",
    ]
    assert schema_problems({**report, "wall_s": float("nan")}) == [
        "report.wall_s: nan is not number"
    ]


def test_summary_shows_the_issue_rows(rollout_run: SimRun) -> None:
    console = Console(record=True, width=140)
    print_summary(rollout_run.report, console)
    text = console.export_text()
    for needle in (
        "SLA violation rate",
        "priority high",
        "arm round_robin",
        "arm learned",
        "TTFT p50 / p90 / p99",
        "capacity share",
        "utilisation",
        "ascend910b",
        "mode -> rollout(10)",
    ):
        assert needle in text, needle


def test_summary_timeline_is_in_time_order_trip_before_its_switch(rollout_run: SimRun) -> None:
    """Trips were printed first, then every mode change, whatever their times."""
    trip = {"subject": "l40s", "evidence": {}}
    guard = {
        "trips": [
            {**trip, "detector": "late", "at_s": 50.0},
            {**trip, "detector": "hot_spot", "at_s": 20.0},
            {**trip, "detector": "tier_load", "at_s": 20.0},
        ],
        "mode_timeline": [
            {"at_s": 0.0, "mode": "round_robin", "reason": "start"},
            {"at_s": 10.0, "mode": "rollout(10)", "reason": "plan"},
            {"at_s": 20.0, "mode": "held_round_robin", "reason": "guard"},
        ],
    }
    console = Console(record=True, width=140)
    print_summary({**rollout_run.report, "guard": guard}, console)
    text = console.export_text()
    events = ["rollout(10)", "trip hot_spot", "trip tier_load", "held_round_robin", "trip late"]
    places = [text.index(event) for event in events]
    assert places == sorted(places)
