"""`slaguard rollback | resume | status | history | incidents` end to end on both backends:
one line per change, idempotent answers, who and why recorded, incidents resolved by a
resume, status figures from the audit rows, and bad input as one `error:` line, exit 2."""

from __future__ import annotations

import getpass
import json
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select, update
from test_guard_store import insert_arm_rows, start_rollout, trip, tripping_guard
from typer.testing import CliRunner

from slaguard.audit.engine import operator_url, shown_url
from slaguard.audit.models import Decision, ModeChange, Outcome
from slaguard.cli.main import app
from slaguard.guard import modes
from slaguard.guard.incident_store import IncidentStore
from slaguard.guard.leader import lease_for
from slaguard.guard.persist import EventPersister
from slaguard.guard.store import GuardStore
from slaguard.scheduler.rollout import RolloutPlan

runner = CliRunner()


def url_of(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=False)


def ok(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def change(engine: Engine, *args: str) -> str:
    """A mode command: exactly one line out."""
    out = ok(*args, "--db", url_of(engine))
    assert out.count("\n") == 1, out
    where = f"; database {shown_url(operator_url(engine.url))}"
    assert out.strip().endswith(where), out
    return out.strip().removesuffix(where)


def one_line_error(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    return result.stderr


def test_changes_say_what_happened_once_and_are_idempotent(audit_engine: Engine) -> None:
    me = getpass.getuser()
    said = [
        change(audit_engine, "rollback", "--reason", "drill"),
        change(audit_engine, "resume", "--stage", "50", "--actor", "alice", "--reason", "ok"),
        change(audit_engine, "resume", "--stage", "50"),
        change(audit_engine, "resume"),
        change(audit_engine, "rollback", "--reason", "l40s slow", "--actor", "bob"),
        change(audit_engine, "rollback", "--reason", "again"),
        change(audit_engine, "rollback", "--hold", "--reason", "freeze", "--actor", "bob"),
        change(audit_engine, "rollback", "--hold", "--reason", "freeze again"),
        change(audit_engine, "resume"),
    ]
    assert said == [
        f"rollout plan stopped: fleet stays on round_robin by {me} (drill)",
        "fleet resumed at rollout(50) by alice (ok)",
        "fleet already on rollout(50) (the learned policy routes 50 % of requests); nothing to "
        "resume",
        "fleet already on rollout(50) (the learned policy routes 50 % of requests); nothing to "
        "resume (to restart at rollout(10), roll back first)",
        "rollout 'rollout(50)' aborted: fleet on round_robin by bob (l40s slow)",
        "fleet already on round_robin; nothing to roll back",
        "fleet held on round-robin by bob (freeze)",
        "fleet already on held_round_robin; nothing to hold",
        f"fleet resumed at rollout(10) by {me} (manual resume)",
    ]
    with audit_engine.connect() as conn:
        rows = conn.execute(
            select(ModeChange.to_mode, ModeChange.actor, ModeChange.reason).order_by(ModeChange.id)
        ).all()
    assert [tuple(r) for r in rows] == [
        ("round_robin", me, "drill"),
        ("rollout(50)", "alice", "ok"),
        ("round_robin", "bob", "l40s slow"),
        ("held_round_robin", "bob", "freeze"),
        ("rollout(10)", me, "manual resume"),
    ]
    history = json.loads(ok("history", "--db", url_of(audit_engine), "-f", "json"))
    assert [(h["kind"], h["to_mode"], h["actor"]) for h in history] == [
        ("manual_rollback", "round_robin", me),
        ("manual_resume", "rollout(50)", "alice"),
        ("manual_rollback", "round_robin", "bob"),
        ("manual_hold", "held_round_robin", "bob"),
        ("manual_resume", "rollout(10)", me),
    ]
    assert history[0]["incident_id"] is None
    old = ok("history", "--db", url_of(audit_engine), "--since", "-3h", "--until", "-2h")
    assert "(0 rows)" in " ".join(old.split())  # the title wraps at 80 columns


def trip_the_rollout(engine: Engine, now: float) -> None:
    """A rollout started 30 s ago that the guard tripped 15 s ago, stored with its incident."""
    store = GuardStore(engine)
    start_rollout(store, at_s=now - 30)
    guard = tripping_guard(store.load(now - 20))
    EventPersister(store, IncidentStore(engine)).persist(guard, trip(guard, now - 15), now - 10)


def test_trip_then_status_incidents_and_a_resume_that_resolves(audit_engine: Engine) -> None:
    now = time.time()
    trip_the_rollout(audit_engine, now)
    insert_arm_rows(audit_engine, now - 60)  # learned 24/60 missed, round-robin 2/60
    db = ["--db", url_of(audit_engine)]
    text = ok("status", *db)
    assert "fleet mode:   round_robin since " in text
    assert "why:          rollout_compare: learned arm violates the SLA at 40.00%" in text
    assert "(trip)" in text and "who:          guard (version 2)" in text
    assert "switches:     2 policy switches (learned <-> round-robin) in the last hour" in text
    nobody = (
        "none (no guard replica is connected to this database)"
        if audit_engine.url.get_backend_name() == "postgresql"
        else "none (no replica holds the guard lease: none runs, or none is ready to write)"
    )
    assert f"guard leader: {nobody}" in text
    assert "incidents:    1 open" in text and "rollout_compare on arm:learned (critical)" in text
    assert "notification pending:r0" in text
    assert (
        "learned            60 decisions       60 outcomes      24 violations  rate 40.00%" in text
    )
    assert (
        "round_robin        60 decisions       60 outcomes       2 violations  rate 3.33%" in text
    )
    assert "x12.00 (above the x1.05 rollback rule; fewer than 200 outcomes per arm" in text
    status = json.loads(ok("status", *db, "--json", "--window", "5m"))
    assert status["mode"] == "round_robin" and status["entered_by"] == "trip"
    assert status["plan_advances"] is False and status["switches_last_hour"] == 2
    assert status["learned_vs_round_robin"] == pytest.approx(12.0)
    assert [a["sla_violations"] for a in status["arms"]] == [24, 2]
    assert status["leader"] is None and status["leader_error"] is None  # not a sentence
    since = datetime.fromtimestamp(status["since_s"], UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert status["since"] == since
    (open_one,) = json.loads(ok("incidents", "--open", *db, "-f", "json"))
    assert (open_one["detector"], open_one["messages_waiting"]) == ("rollout_compare", 1)
    assert status["open_incidents"] == [open_one]  # one JSON form of an incident everywhere
    inc = open_one["id"]
    said = change(audit_engine, "resume", "--reason", f"incident {inc} reviewed", "--actor", "c")
    assert said == (
        f"fleet resumed at rollout(10) by c (incident {inc} reviewed); incident {inc} resolved "
        "(message queued for the guard)"
    )
    assert "(0 rows)" in " ".join(ok("incidents", "--open", *db).split())
    (closed,) = json.loads(ok("incidents", *db, "-f", "json", "--since", "-1h"))
    assert closed["resolved_at"] is not None and closed["messages_waiting"] == 2
    history = json.loads(ok("history", *db, "-f", "json"))
    assert [(h["kind"], h["incident_id"]) for h in history] == [
        ("manual_resume", None), ("trip", inc), ("manual_resume", inc),
    ]  # fmt: skip


def test_resume_on_a_fleet_the_plan_took_to_learned_changes_nothing(
    audit_engine: Engine,
) -> None:
    """It said "fleet resumed at rollout(10)", exit 0: 90 % of the traffic back on
    round-robin without a word, from a runbook step a second on-call repeated."""
    store = GuardStore(audit_engine)
    now = time.time()
    plan = RolloutPlan(baseline_s=0.0, stage_s=1.0, stages_pct=(50,))
    for at in (now + 1, now + 3):  # round_robin -> rollout(50) -> learned
        advanced = modes.advance(store.load(at), at, plan)
        assert advanced.transition is not None and store.save(advanced.transition, at).saved
    version = store.version()
    for args in (["resume"], ["resume", "--stage", "10", "--reason", "incident 3 reviewed"]):
        assert change(audit_engine, *args) == (
            "fleet already on learned (the learned policy routes); nothing to resume"
        )
    assert store.version() == version and store.load(now).mode.label == "learned"


def test_status_names_the_current_leader(audit_engine: Engine) -> None:
    lease = lease_for(audit_engine.url, "host-a:4242")
    try:
        assert lease.poll()
        assert "guard leader: host-a:4242" in ok("status", "--db", url_of(audit_engine))
        leader = json.loads(ok("status", "--db", url_of(audit_engine), "--json"))["leader"]
        assert leader == "host-a:4242"
    finally:
        lease.close()


def test_bad_input_is_one_line_and_exit_2(audit_engine: Engine, tmp_path: Path) -> None:
    db = ["--db", url_of(audit_engine)]
    assert "--reason: required" in one_line_error("rollback", *db)
    assert "--reason: required" in one_line_error("rollback", "--reason", "  ", *db)
    assert "--actor: empty" in one_line_error("rollback", "--reason", "x", "--actor", "", *db)
    for actor in ("bob\nalice", "x" * 200):  # the column holds 128; a newline split log lines
        assert "is not a name on one line of at most 120" in one_line_error(
            "rollback", "--reason", "x", "--actor", actor, *db
        )
    assert "--window: cannot read '30' as a duration" in one_line_error(
        "status", "--window", "30", *db
    )
    for stage in ("0", "101", "ten"):
        assert f"--stage: '{stage}' is not a percentage" in one_line_error(
            "resume", "--stage", stage, *db
        )
    assert "--since" in one_line_error("history", "--since", "yesterday-ish", *db)
    assert "--since" in one_line_error("history", "--since", "now", "--until", "-1h", *db)
    assert "--since" in one_line_error("incidents", "--since", "soon", *db)
    assert "--window" in one_line_error("status", "--window", "-5", *db)
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).execute("CREATE TABLE unrelated (x)").connection.close()
    for command in (["status"], ["rollback", "--reason", "x"], ["resume"], ["history"],
                    ["incidents"], ["audit", "summary"]):  # fmt: skip
        assert one_line_error(*command, "--db", str(empty)) == (
            f"error: database sqlite:///{empty} has no slaguard schema; fix: pass as --db the "
            "database `slaguard serve` uses (its --db, `db:` or $SLAGUARD_SERVE_DB) or a "
            "`slaguard simulate --audit-db` run wrote; only for a new, empty one run "
            f"`slaguard db upgrade --db sqlite:///{empty}`\n"
        )
    assert "does not exist" in one_line_error("status", "--db", str(tmp_path / "nope.db"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with pytest.MonkeyPatch.context() as mp:  # a relative file, run from another directory
        mp.chdir(elsewhere)
        assert one_line_error("status", "--db", "sqlite:///sub/x.db").startswith(
            f"error: --db: SQLite file {elsewhere / 'sub' / 'x.db'} does not exist, nor does "
            f"its directory {elsewhere / 'sub'}; fix: "
        )
    unreachable = "postgresql+psycopg://postgres@127.0.0.1:1/x"
    assert "cannot reach database" in one_line_error("rollback", "--reason", "x", "--db",
                                                     unreachable)  # fmt: skip
    assert "not supported" in one_line_error("incidents", "--db", "mysql://u@h/db")


def test_the_installed_command_acts_on_the_database(pg_audit_engine: Engine) -> None:
    """The real `slaguard` binary, with no service running."""
    db = ["--db", url_of(pg_audit_engine)]
    ok("rollback", "--hold", "--reason", "setup", *db)  # from whatever the module left
    ok("resume", "--stage", "10", "--reason", "setup", *db)
    exe = Path(sys.executable).with_name("slaguard")
    done = subprocess.run(
        [str(exe), "rollback", "--reason", "drill", "--actor", "ops", "--db",
         url_of(pg_audit_engine)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "rollout 'rollout(10)' aborted: fleet on round_robin by ops (drill); database "
        f"{shown_url(pg_audit_engine.url)}\n"
    )
    assert GuardStore(pg_audit_engine).load(time.time()).mode.label == "round_robin"


def test_resume_enters_the_plans_first_stage_as_the_guard_last_did(audit_engine: Engine) -> None:
    """A service whose plan starts at 20 %: `slaguard resume` (no --stage) entered 10 %,
    a stage that plan does not have. It now takes the stage the guard entered from
    round-robin; the status line of a hold no longer offers the breaker as a way out."""
    store = GuardStore(audit_engine)
    now = time.time()
    plan = RolloutPlan(baseline_s=0.0, stage_s=60.0, stages_pct=(20, 60, 100))
    advanced = modes.advance(store.load(now), now, plan)
    assert advanced.transition is not None and store.save(advanced.transition, now).saved
    assert store.planned_first_stage() == 20
    change(audit_engine, "rollback", "--hold", "--reason", "drill")
    assert "held: nothing automatic leaves it" in ok("status", "--db", url_of(audit_engine))
    me = getpass.getuser()
    assert change(audit_engine, "resume") == f"fleet resumed at rollout(20) by {me} (manual resume)"
    change(audit_engine, "rollback", "--reason", "again")
    plan = [x for x in ok("status", "--db", url_of(audit_engine)).splitlines() if "plan:" in x]
    assert plan == ["plan:         stays until `slaguard resume`"], (
        "no automatic return after a human's"
    )
    assert change(audit_engine, "resume", "--stage", "60").startswith(
        "fleet resumed at rollout(60)"
    )
    assert store.planned_first_stage() == 20, "a human's stage is not the plan's"


@pytest.mark.parametrize(
    "args",
    [
        ["rollback", "--reason", "--hold"],
        ["rollback", "--reason", "--help"],
        ["resume", "--reason", "--help"],
        ["rollback", "--reason", "x", "--actor", "--hold"],
    ],
)
def test_an_option_given_as_a_value_switches_nothing(audit_engine: Engine, args: list[str]) -> None:
    """`rollback --reason --hold` rolled back without the hold (reason "--hold"), and
    `--reason --help` switched the fleet: these commands act at once."""
    before = GuardStore(audit_engine).load(time.time())
    flag, value = args[-2:]
    error = one_line_error(*args, "--db", url_of(audit_engine))
    assert error.startswith(f"error: {flag}: '{value}' looks like an option, not a value; "), error
    after = GuardStore(audit_engine).load(time.time())
    assert (after.version, after.mode) == (before.version, before.mode)


def _strict_json(text: str) -> Any:
    """JSON as other tools read it: `Infinity` and `NaN` are not JSON."""

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_status_json_is_strict_json_when_round_robin_has_no_violations(
    audit_engine: Engine,
) -> None:
    """`"learned_vs_round_robin": Infinity` (jq and every strict parser refuse it) when the
    learned arm had violations and round-robin none."""
    insert_arm_rows(audit_engine, time.time() - 60)  # learned 24/60 missed, round-robin 2/60
    with audit_engine.begin() as conn:
        conn.execute(
            update(Outcome)
            .where(
                Outcome.request_id.in_(
                    select(Decision.request_id).where(Decision.policy_arm == "round_robin")
                )
            )
            .values(sla_met=True)
        )
    status = _strict_json(ok("status", "--db", url_of(audit_engine), "--json"))
    assert status["learned_vs_round_robin"] is None
    assert [a["sla_violation_rate"] for a in status["arms"]] == [0.4, 0.0]
    assert status["verdict"].startswith("learned / round_robin violation rate xinf (above")


def test_a_reason_of_several_words_starting_with_dashes_is_text(audit_engine: Engine) -> None:
    """Refusing every value that starts with `--` left no way to write such a reason;
    a flag is one word."""
    start_rollout(GuardStore(audit_engine), at_s=time.time() - 30)
    result = runner.invoke(
        app, ["rollback", "--reason", "--force was needed", "--db", url_of(audit_engine)]
    )
    assert result.exit_code == 0, result.output
    stored = GuardStore(audit_engine).load(time.time())
    assert stored.mode.label == "round_robin" and stored.reason == "--force was needed"


def test_status_names_the_database_it_read_and_where_that_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stray `./slaguard.db` with `$SLAGUARD_DB` unset: `status` read it without a word."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLAGUARD_DB", raising=False)
    ok("db", "upgrade", "--db", "slaguard.db")
    absolute = f"sqlite:///{tmp_path / 'slaguard.db'}"
    said = {
        "default": f"database:     {absolute} (the default ./slaguard.db: no --db, "
        "$SLAGUARD_DB unset)",
        "--db": f"database:     {absolute} (from --db)",
        "$SLAGUARD_DB": f"database:     {absolute} (from $SLAGUARD_DB)",
    }
    assert said["default"] in ok("status").splitlines()
    assert json.loads(ok("status", "--json"))["database"] == {"url": absolute, "from": "default"}
    assert said["--db"] in ok("status", "--db", "slaguard.db").splitlines()
    monkeypatch.setenv("SLAGUARD_DB", "slaguard.db")
    assert said["$SLAGUARD_DB"] in ok("status").splitlines()
    assert json.loads(ok("status", "--json"))["database"] == {
        "url": absolute, "from": "$SLAGUARD_DB",
    }  # fmt: skip


def test_status_names_a_postgres_database_without_its_password(pg_audit_engine: Engine) -> None:
    url = pg_audit_engine.url.set(password="s3cret")
    text = ok("status", "--db", url.render_as_string(hide_password=False))
    assert f"database:     {url.render_as_string(hide_password=True)} (from --db)" in text
    assert "s3cret" not in text
