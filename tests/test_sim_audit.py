"""A simulated run recorded through the real audit writer, then examined with `slaguard audit`."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import URL
from test_engine_support import AZURE_FIXTURE
from typer.testing import CliRunner

from slaguard.audit.writer import AuditWriter, open_writer
from slaguard.cli.main import app
from slaguard.fleet import load_fleet
from slaguard.guard.queries import mode_history
from slaguard.guard.store import GuardStore
from slaguard.scheduler.rollout import (
    HELD_ROUND_ROBIN,
    LEARNED,
    ROUND_ROBIN,
    FleetMode,
    ModeKind,
    RolloutPlan,
)
from slaguard.sim.audit_sink import AuditObserver
from slaguard.sim.engine import SimOptions, Simulation
from slaguard.sim.observers import RolloutController, SimObserver
from slaguard.sim.report import build_report
from slaguard.sim.traces import load_trace
from slaguard.sim.workload import assign_workload


@pytest.fixture
def writer(sqlite_url: URL, tmp_path: Path) -> Iterator[AuditWriter]:
    """The run's writer on `sqlite_url`; the tests close it to read the rows, the teardown
    when a test failed first (its writer process ran on for the rest of the worker)."""
    with open_writer(
        sqlite_url.render_as_string(hide_password=False),
        spill_dir=tmp_path / "spill",
        migrate=True,
    ) as opened:
        yield opened


def test_every_simulated_request_lands_once_and_explains(
    sqlite_url: URL, writer: AuditWriter
) -> None:
    fleet = load_fleet()
    workload = assign_workload(load_trace(AZURE_FIXTURE), fleet)
    db = sqlite_url.render_as_string(hide_password=False)
    sim = Simulation(
        fleet,
        workload,
        RolloutController(RolloutPlan(baseline_s=5, stage_s=5)),
        options=SimOptions(rate_scale=1.0),
    )
    base = time.time() - 3600
    sink = AuditObserver(writer, sim, base_epoch_s=base)
    sim.observers = [sink]
    results = sim.run()
    report = build_report(
        fleet=fleet,
        workload=workload,
        results=results,
        policy="rollout",
        trace_path=str(AZURE_FIXTURE),
        faults=[],
    )
    report["guard"]["trips"] = [
        {
            "detector": "ttft_zscore",
            "at_s": 12.0,
            "subject": "card_type:l40s",
            "summary": "card tier l40s: median TTFT 2.5x the rest's",
            "evidence": {"z": 5.1},
        }
    ]
    incident_ids = sink.record_guard_history(report)
    stats = writer.close(drain_timeout_s=30)
    n = len(workload)
    assert sink.decisions == n and sink.outcomes == n and stats.rows_written == 2 * n
    with writer.engine.connect() as conn:
        assert conn.execute(text("select count(distinct request_id) from decisions")).scalar() == n
        assert conn.execute(text("select count(*) from outcomes")).scalar() == n
        modes = conn.execute(text("select from_mode, to_mode from mode_changes order by at")).all()
        # a service on this file must not continue from the simulation's learned weights
        assert conn.execute(text("select count(*) from weight_versions")).scalar() == 0
    assert [tuple(m) for m in modes][:2] == [
        ("round_robin", "rollout(10)"),
        ("rollout(10)", "rollout(50)"),
    ]
    now = time.time()
    assert GuardStore(writer.engine).load(now).switches_within_hour(now) == 0, "history only"
    runner = CliRunner()
    rid = workload.request_id(7)
    shown = runner.invoke(app, ["audit", "explain", rid, "--db", db, "--format", "json"])
    assert shown.exit_code == 0, shown.output
    assert rid in shown.output and "weights_version" in shown.output
    inc = runner.invoke(
        app, ["audit", "incident", str(incident_ids[0]), "--db", db, "--format", "json"]
    )
    assert inc.exit_code == 0, inc.output
    assert "ttft_zscore" in inc.output
    listed = runner.invoke(app, ["incidents", "--db", db, "--format", "json"])
    assert listed.exit_code == 0, listed.output
    assert [i["summary"] for i in json.loads(listed.output)] == [
        "card tier l40s: median TTFT 2.5x the rest's"
    ]
    summary = runner.invoke(
        app, ["audit", "summary", "--since", "-3h", "--db", db, "--format", "json"]
    )
    assert summary.exit_code == 0, summary.output
    rows = json.loads(summary.output)
    assert sum(int(r["decisions"]) for r in rows) == n
    assert sum(int(r["outcomes"]) for r in rows) == n
    assert {r["policy_arm"] for r in rows} == {"round_robin", "learned"}


def test_simulate_cli_records_the_run(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'sim.db'}"
    result = CliRunner().invoke(
        app,
        ["simulate", "--trace", str(AZURE_FIXTURE), "--policy", "round-robin", "--audit-db", db],
    )
    assert result.exit_code == 0, result.output
    assert "200 decisions and 200 outcomes recorded (400 rows written) in" in result.output
    listed = CliRunner().invoke(
        app, ["audit", "decisions", "--since", "-3h", "--db", db, "--format", "csv"]
    )
    assert listed.exit_code == 0 and len(listed.output.strip().splitlines()) == 201


def test_a_second_run_into_one_database_is_refused_and_times_are_past(tmp_path: Path) -> None:
    """A second run's request ids are its trace's: its rows were dropped as duplicates
    while it said "recorded" and exit 0, its history appended to the first run's. And the
    drain after the last arrival was dated in the future."""
    db = f"sqlite:///{tmp_path / 'sim.db'}"
    args = ["simulate", "--trace", str(AZURE_FIXTURE), "--rate-scale", "20", "--audit-db", db]
    first = CliRunner().invoke(app, [*args, "--policy", "round-robin"])
    assert first.exit_code == 0, first.output
    ended = time.time()
    with sqlite3.connect(tmp_path / "sim.db") as conn:
        latest = conn.execute("select max(finished_at) from outcomes").fetchone()[0]
        rows = conn.execute("select count(*) from decisions").fetchone()[0]
    assert datetime.fromisoformat(latest).replace(tzinfo=UTC).timestamp() < ended - 60
    again = CliRunner().invoke(app, [*args, "--policy", "learned"])
    assert again.exit_code == 2 and again.stdout == "", again.output
    assert "already holds decisions (another run, or a service's)" in again.stderr
    assert "fix: record each run in a new database" in again.stderr
    with sqlite3.connect(tmp_path / "sim.db") as conn:
        assert conn.execute("select count(*) from decisions").fetchone()[0] == rows


def test_simulate_cli_takes_a_bare_file_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It recorded the run, then died in the closing line on the path (not a URL)."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        app, ["simulate", "--trace", str(AZURE_FIXTURE), "--audit-db", "sim.db"]
    )
    assert result.exit_code == 0, result.output
    assert "(400 rows written) in sqlite:///sim.db" in result.stderr


@pytest.mark.parametrize(
    ("db", "problem"),
    [
        ("nosuchdb://x", "--audit-db: backend 'nosuchdb' is not supported"),
        # it simulated, retried for 120 s, then said "recorded" and exited 0
        ("postgresql+psycopg://postgres@127.0.0.1:1/x", "cannot reach database"),
        ("NOTADB", "is not a SQLite database (SQLite: file is not a database); fix: check "),
        ("FOREIGN", "cannot create the audit schema in sqlite:///"),
        # a traceback ending in Alembic's "Can't locate revision", exit 1
        ("ALIEN", "is at schema revision abc123def, which this slaguard (head"),
        ("sqlite:////proc/nowhere/a.db", "--audit-db: /proc/nowhere does not exist; fix: create"),
        ("postgresql+psycopg://u:secret@h:port/db", "'postgresql+psycopg://u:***@h:port/db'"),
    ],
)
def test_simulate_cli_refuses_an_unusable_audit_db_before_simulating(
    tmp_path: Path, db: str, problem: str
) -> None:
    if db == "NOTADB":
        db = str(tmp_path / "not.db")
        (tmp_path / "not.db").write_text("not a database")
    if db == "FOREIGN":
        db = str(tmp_path / "foreign.db")
        sqlite3.connect(db).execute("CREATE TABLE decisions (x)").connection.close()
    if db == "ALIEN":
        db = str(tmp_path / "other.db")
        with sqlite3.connect(db) as conn:
            conn.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY)")
            conn.execute("INSERT INTO alembic_version VALUES ('abc123def')")
        conn.close()
    result = CliRunner().invoke(app, ["simulate", "--trace", str(AZURE_FIXTURE), "--audit-db", db])
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr.count("\n") == 1 and problem in result.stderr, result.stderr


def _sim_s(stored: object, base: float) -> float:
    """A stored UTC timestamp back on the simulated clock (ms)."""
    at = datetime.fromisoformat(str(stored)).replace(tzinfo=UTC)
    return round(at.timestamp() - base, 3)


class ScriptedModes(SimObserver):
    """Sets the fleet mode from a script of (from simulated second, mode)."""

    def __init__(self, script: list[tuple[float, FleetMode]]) -> None:
        self.script = script

    def initial_mode(self) -> FleetMode:
        return self.script[0][1]

    def on_period(self, now_s: float, sim: Simulation) -> tuple[FleetMode, str]:
        mode = [m for at, m in self.script if at <= now_s][-1]
        return mode, f"script: {mode.label}"


def _scripted_run(
    writer: AuditWriter, script: list[tuple[float, FleetMode]]
) -> tuple[AuditObserver, float, dict[str, Any]]:
    """A run whose modes follow `script`, recorded by `writer`: (sink, base, report)."""
    fleet = load_fleet()
    workload = assign_workload(load_trace(AZURE_FIXTURE), fleet)
    sim = Simulation(fleet, workload, ScriptedModes(script))
    base = 1_700_000_000.0
    sink = AuditObserver(writer, sim, base_epoch_s=base)
    results = sim.run()
    report = build_report(
        fleet=fleet, workload=workload, results=results, policy="x", trace_path="x", faults=[]
    )
    return sink, base, report


def test_trips_resolve_when_learned_traffic_resumes_and_link_their_switch(
    writer: AuditWriter,
) -> None:
    """A trip's incident stays open through round-robin and held round-robin, closes at the
    next switch that routes learned traffic (else at the run's end); a switch within a
    second of a trip carries that trip's incident."""
    script = [
        (0.0, ROUND_ROBIN),
        (4.0, FleetMode(ModeKind.ROLLOUT, 50)),
        (6.0, HELD_ROUND_ROBIN),
        (8.0, ROUND_ROBIN),
        (10.0, LEARNED),
        (12.0, ROUND_ROBIN),
    ]
    sink, base, report = _scripted_run(writer, script)
    sim_s = sink.sim.results.sim_s
    report["guard"]["trips"] = [
        {"detector": "hot_spot", "at_s": 5.8, "subject": "prefix:a", "severity": "warning"},
        {"detector": "ttft_zscore", "at_s": 12.0, "subject": "fleet"},
    ]
    ids = sink.record_guard_history(report)
    writer.close(drain_timeout_s=30)
    with writer.engine.connect() as conn:
        incidents = conn.execute(
            text("select id, severity, opened_at, resolved_at from incidents order by id")
        ).all()
        changes = conn.execute(
            text("select at, from_mode, to_mode, reason, incident_id from mode_changes order by id")
        ).all()
    assert [(i, sev) for i, sev, _, _ in incidents] == [(ids[0], "warning"), (ids[1], "critical")]
    opened_resolved = [(_sim_s(o, base), _sim_s(r, base)) for _, _, o, r in incidents]
    assert sim_s > 12.0
    assert opened_resolved == [(5.8, 10.0), (12.0, round(sim_s, 3))]
    assert [(_sim_s(at, base), f, t, r, i) for at, f, t, r, i in changes] == [
        (4.0, "round_robin", "rollout(50)", "script: rollout(50)", None),
        (6.0, "rollout(50)", "held_round_robin", "script: held_round_robin", ids[0]),
        (8.0, "held_round_robin", "round_robin", "script: round_robin", None),
        (10.0, "round_robin", "learned", "script: learned", None),
        (12.0, "learned", "round_robin", "script: round_robin", ids[1]),
    ]
    # `history` marks them: they never changed the stored mode `status` shows
    shown = mode_history(writer.engine, datetime(2000, 1, 1, tzinfo=UTC), datetime.now(UTC))
    assert list(shown["kind"]) == ["simulated"] * 5


def test_trips_the_guard_counted_to_one_incident_are_one_row_with_updates(
    writer: AuditWriter,
) -> None:
    """Three trips of one fault episode (the report's `incident_id` shared) were three
    incidents in the database against one in the report and in the service's own rows."""
    script = [(0.0, LEARNED), (3.0, ROUND_ROBIN), (9.0, LEARNED), (11.0, ROUND_ROBIN)]
    sink, base, report = _scripted_run(writer, script)
    report["guard"]["trips"] = [
        {"detector": "ttft_zscore", "at_s": 3.0, "subject": "card:l40s", "summary": "a",
         "incident_id": "inc-3-1", "evidence": {"z": 7.5}},
        {"detector": "ttft_zscore", "at_s": 5.0, "subject": "card:h200", "summary": "b",
         "incident_id": "inc-3-1"},
        {"detector": "hot_spot", "at_s": 7.0, "subject": "prefix:p", "summary": "c",
         "incident_id": "inc-3-1"},
        {"detector": "ttft_zscore", "at_s": 11.0, "subject": "fleet", "summary": "d",
         "incident_id": "inc-11-2"},
    ]  # fmt: skip
    # a verdict that joined the open incident with no trip of its own (the breaker open)
    report["guard"]["incident_updates"] = [
        {"at_s": 6.0, "incident_id": "inc-3-1", "state": "updated", "detector": "ttft_zscore",
         "subject": "card:l40s", "summary": "also: card tier ascend910b"},
    ]  # fmt: skip
    ids = sink.record_guard_history(report)
    writer.close(drain_timeout_s=30)
    with writer.engine.connect() as conn:
        rows = conn.execute(
            text("select id, subject, opened_at, resolved_at, evidence from incidents order by id")
        ).all()
        linked = conn.execute(text("select incident_id from mode_changes order by id")).all()
    assert len(rows) == 2 and ids == [rows[0][0], rows[1][0]]
    first = rows[0]
    assert first[1] == "card:l40s"
    assert (_sim_s(first[2], base), _sim_s(first[3], base)) == (3.0, 9.0)
    evidence = json.loads(first[4]) if isinstance(first[4], str) else first[4]
    assert evidence["incident"] == "inc-3-1" and evidence["z"] == 7.5
    assert [(u["subject"], u["summary"]) for u in evidence["updates"]] == [
        ("card:h200", "b"),
        ("card:l40s", "also: card tier ascend910b"),
        ("prefix:p", "c"),
    ]
    assert [u["at_s"] - base for u in evidence["updates"]] == [5.0, 6.0, 7.0]
    assert [i for (i,) in linked] == [ids[0], None, ids[1]]


def test_the_closing_hint_names_the_fleet_file_a_custom_fleet_run_needs(tmp_path: Path) -> None:
    """`audit summary` reads capacity shares from the fleet: the hint after a custom-fleet
    run left `--fleet` out, and following it gave the built-in fleet's shares."""
    fleet_file = tmp_path / "fleet.yaml"
    fleet_file.write_text(
        "targets:\n  - {id: h100-8b, model: llama3.1-8b, card: h100, count: 2}\n"
        "  - {id: l40s-8b, model: llama3.1-8b, card: l40s, count: 3}\n"
    )
    db = f"sqlite:///{tmp_path / 'sim.db'}"
    result = CliRunner().invoke(
        app,
        ["simulate", "--trace", str(AZURE_FIXTURE), "--fleet", str(fleet_file), "--audit-db", db],
    )
    assert result.exit_code == 0, result.output
    assert f"--db '{db}' --fleet '{fleet_file}'" in result.stderr
    hinted = CliRunner().invoke(
        app, ["audit", "summary", "--since", "-3h", "--db", db, "--fleet", str(fleet_file)]
    )
    assert hinted.exit_code == 0 and "capacity shares are computed" not in hinted.output


def test_the_closing_hint_names_the_run_s_own_time_range(tmp_path: Path) -> None:
    """The hint said `--since -2h` whatever the run: a run placed more than 2 h back (the
    Azure hour below x0.53) lost its start, and read 2 h later it showed nothing.
    The run's range, written out, holds all of it at any length and at any time later."""
    db = f"sqlite:///{tmp_path / 'sim.db'}"
    report = tmp_path / "report.json"
    args = ["--trace", str(AZURE_FIXTURE), "--rate-scale", "0.5", "--report-json", str(report)]
    result = CliRunner().invoke(app, ["simulate", *args, "--audit-db", db])
    assert result.exit_code == 0, result.output
    with sqlite3.connect(tmp_path / "sim.db") as conn:
        (first,) = conn.execute("select min(decided_at) from decisions").fetchone()
    start_s = datetime.fromisoformat(first).replace(tzinfo=UTC).timestamp()  # simulated 0 s
    end_s = int(start_s + json.loads(report.read_text())["sim_s"]) + 1
    since = datetime.fromtimestamp(int(start_s), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    until = datetime.fromtimestamp(end_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert f"try: slaguard audit summary --since {since} --until {until} --db '{db}'" in (
        result.stderr
    )
    hinted = CliRunner().invoke(
        app, ["audit", "summary", "--since", since, "--until", until, "--db", db, "-f", "json"]
    )
    assert hinted.exit_code == 0, hinted.output
    assert sum(int(r["decisions"]) for r in json.loads(hinted.stdout)) == 200
