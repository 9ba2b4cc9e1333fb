"""`slaguard audit` answers that say what they are: a cut answer or not, an unknown
filter value, whose capacity the shares are of, json ids and times in one form."""

from __future__ import annotations

import io
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from sqlalchemy import text
from test_audit_cli import EMPTY, RUN, START_S, WINDOW, ok, one_line_error, run_db, runner

from slaguard.audit.engine import create_audit_engine
from slaguard.audit.migrate import upgrade
from slaguard.audit.records import IncidentRecord
from slaguard.audit.sample import SICK_TARGET, load_run, synthetic_run
from slaguard.audit.store import open_incident
from slaguard.cli.main import app


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """`test_audit_cli`'s run in a database of this module's own."""
    return run_db(tmp_path_factory.mktemp("answers"))


def test_a_limit_of_exactly_the_row_count_is_not_a_cut_answer(db: str) -> None:
    """`--limit N` with exactly N rows said the answer was cut."""
    n = len(RUN.decisions)
    for limit, cut in ((n, False), (n - 1, True)):
        args = ["audit", "decisions", "--db", db, *WINDOW, "-f", "json", "--limit", str(limit)]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        assert len(json.loads(result.stdout)) == limit
        assert ("note: the first" in result.stderr) is cut, result.stderr


def test_an_empty_answer_to_an_unknown_target_or_model_says_so(db: str) -> None:
    """`--target l40s-8b-O` or `--model llama-3.1-8b` answered 0 rows like a quiet hour;
    `--mode 'rollout( 50 )'` passed the check and matched nothing."""

    def decisions(*args: str) -> tuple[list[object], str]:
        result = runner.invoke(app, ["audit", "decisions", "--db", db, "-f", "json", *args])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout), result.stderr

    assert decisions(*WINDOW, "--target", "l40s-8b-O") == ([], (
        "note: --target 'l40s-8b-O' is unknown: no decision was routed to it (known: "
        "l40s-8b-0, l40s-8b-1, l40s-8b-2, l40s-8b-3 and 15 more)\n"
    ))  # fmt: skip
    rows, note = decisions(*WINDOW, "--model", "llama-3.1-8b", "--target", SICK_TARGET)
    assert rows == [] and note == (
        "note: --model 'llama-3.1-8b' is unknown: neither the built-in fleet nor a decision "
        "in this range names it (known: llama3.1-8b, llama3.1-70b)\n"
    )
    # known ones with nothing in the range, or in this combination: an empty answer only
    assert decisions(*EMPTY, "--target", SICK_TARGET, "--model", "llama3.1-8b") == ([], "")
    assert decisions(*WINDOW, "--target", SICK_TARGET, "--model", "llama3.1-70b") == ([], "")
    want, _ = decisions(*WINDOW, "--mode", "rollout(50)", "--limit", "0")
    assert len(want) > 100
    for spelt in ("rollout( 50 )", "rollout(050)"):
        assert decisions(*WINDOW, "--mode", spelt, "--limit", "0") == (want, "")


def test_a_model_with_its_release_points_at_the_model(db: str) -> None:
    """A cold-start incident names `model:llama3.1-70b@v2`; `--model llama3.1-70b@v2`
    matched nothing and the note offered the known ids without saying why."""
    result = runner.invoke(
        app, ["audit", "decisions", "--db", db, *WINDOW, "-f", "json", "--model", "llama3.1-70b@v2"]
    )
    assert result.exit_code == 0 and json.loads(result.stdout) == [], result.output
    assert result.stderr == (
        "note: --model 'llama3.1-70b@v2' is unknown: decisions record the model without "
        "its release (@v2, as a cold_start incident's subject names it); fix: --model "
        "llama3.1-70b\n"
    )


def test_shares_on_the_built_in_fleet_for_a_run_on_a_smaller_one_are_flagged(
    tmp_path: Path,
) -> None:
    """A run on a smaller fleet reusing the built-in ids got the built-in fleet's shares
    without a word (a100-70b 0.087 instead of 1.0): say whose capacity they are of."""
    small = synthetic_run(200, start_s=START_S, seed=8)
    kept = ("a100-70b", "h200-8b", None)
    run = replace(small, decisions=[d for d in small.decisions if d.target_id in kept])
    engine = create_audit_engine(f"sqlite:///{tmp_path / 'small.db'}")
    upgrade(engine)
    load_run(engine, run, tmp_path / "spill")
    engine.dispose()
    args = ["audit", "summary", "--db", str(tmp_path / "small.db"), *WINDOW, "-f", "csv"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert result.stderr == (
        "note: capacity shares are computed on the built-in fleet, but 17 of its targets "
        "serving these models got no decision here (a100-8b, ascend-70b, ascend-8b-0, "
        "ascend-8b-1 and 13 more); pass --fleet FILE if the decisions were made on another "
        "fleet\n"
    )
    fleet = tmp_path / "small.yaml"
    fleet.write_text(
        "targets:\n  - {id: a100-70b, model: llama3.1-70b, card: a100, tp: 4}\n"
        "  - {id: h200-8b, model: llama3.1-8b, card: h200}\n"
    )
    result = runner.invoke(app, [*args, "--fleet", str(fleet)])
    assert result.exit_code == 0 and result.stderr == "", result.output
    routed = pd.read_csv(io.StringIO(result.stdout)).dropna(subset=["target_id"])
    assert (routed["capacity_share"] == 1.0).all()


def test_incident_json_has_int_ids_and_microsecond_times(db: str, tmp_path: Path) -> None:
    """Linked mode changes' incident ids came out as 1.0 (a nullable int read as float),
    and the opening time with nanoseconds of float noise while the phases had microseconds."""
    copy = tmp_path / "copy.db"
    shutil.copy(db, copy)
    engine = create_audit_engine(f"sqlite:///{copy}")
    opened_s = START_S + 1200.9333219
    iid = open_incident(
        engine, IncidentRecord(opened_s, "hot_spot", "ticket", "x", resolved_at_s=opened_s + 9)
    )
    engine.dispose()
    payload = json.loads(ok("audit", "incident", str(iid), "--db", str(copy), "-f", "json"))
    ids = [m["incident_id"] for m in payload["mode_changes"]]
    assert ids == [None, 1, 1] and all(type(i) is int for i in ids[1:])
    opened = "2026-11-30T01:13:20.933322Z"
    assert payload["incident"]["opened"] == opened == payload["phases"]["during"][0]
    assert payload["mode_changes"][0]["at"] == "2026-11-30T00:48:20.000000Z"
    table = ok("audit", "incident", str(iid), "--db", str(copy))
    assert "incident_id" in table and "<NA>" not in table


EVIDENCE_OPENED_S = START_S + 1200.25
"""An incident as the service stores it: the opening verdicts, later updates and the
outbox carry the guard's times as Unix seconds."""
SERVICE_EVIDENCE = {
    "summary": "card tier l40s slow",
    "verdicts": [{"subject": "card:l40s", "at_s": EVIDENCE_OPENED_S,
                  "evidence": {"model": "llama3.1-8b", "tier_window_s": 30.0}}],
    "updates": [{"state": "updated", "at_s": EVIDENCE_OPENED_S + 42.5,
                 "opened_at_s": EVIDENCE_OPENED_S, "summary": "also: fleet",
                 "evidence": {"verdicts": [{"at_s": EVIDENCE_OPENED_S + 42.5, "for_s": 12.0}]}}],
    "outbox": [{"attempts": 1, "next_attempt_s": EVIDENCE_OPENED_S + 44.5,
                "event": {"at_s": EVIDENCE_OPENED_S + 42.5}}],
    "guard": {"revision": 2, "seen": [["ttft_zscore", "card:l40s"]]},
}  # fmt: skip


def test_incident_evidence_times_are_iso_not_unix_seconds(db: str, tmp_path: Path) -> None:
    """`evidence.updates[].at_s` came out as 1796084909.22899 in the table and the json,
    beside ISO times everywhere else; durations (`for_s`, `tier_window_s`) stay seconds."""
    copy = tmp_path / "copy.db"
    shutil.copy(db, copy)
    engine = create_audit_engine(f"sqlite:///{copy}")
    iid = open_incident(
        engine,
        IncidentRecord(EVIDENCE_OPENED_S, "ttft_zscore", "critical", "card:l40s",
                       evidence=SERVICE_EVIDENCE, resolved_at_s=EVIDENCE_OPENED_S + 60),
    )  # fmt: skip
    engine.dispose()
    payload = json.loads(ok("audit", "incident", str(iid), "--db", str(copy), "-f", "json"))
    evidence = payload["incident"]["evidence"]
    (verdict,) = evidence["verdicts"]
    (update,) = evidence["updates"]
    (queued,) = evidence["outbox"]
    opened, later = "2026-11-30T01:13:20.250000Z", "2026-11-30T01:14:02.750000Z"
    assert payload["incident"]["opened"] == verdict["at_s"] == update["opened_at_s"] == opened
    assert update["at_s"] == queued["event"]["at_s"] == later
    assert update["evidence"]["verdicts"][0]["at_s"] == later
    assert queued["next_attempt_s"] == "2026-11-30T01:14:04.750000Z"
    assert verdict["evidence"]["tier_window_s"] == 30.0
    assert update["evidence"]["verdicts"][0]["for_s"] == 12.0
    assert evidence["guard"] == SERVICE_EVIDENCE["guard"]
    table = "".join(ok("audit", "incident", str(iid), "--db", str(copy)).split())
    assert f'"at_s":"{later}"' in table and str(EVIDENCE_OPENED_S + 42.5) not in table


def test_the_phases_say_how_many_decisions_each_holds(db: str, tmp_path: Path) -> None:
    """A simulated run's incident is resolved at the run's end: its "after" phase holds
    no decision, and the per-target table just had no "after" rows, without a word."""
    copy = tmp_path / "copy.db"
    shutil.copy(db, copy)
    engine = create_audit_engine(f"sqlite:///{copy}")
    opened_s, resolved_s = START_S + 3000, START_S + 3700
    iid = open_incident(
        engine,
        IncidentRecord(opened_s, "hot_spot", "critical", "prefix:p", resolved_at_s=resolved_s),
    )
    still = open_incident(engine, IncidentRecord(opened_s, "hot_spot", "critical", "prefix:p"))
    engine.dispose()
    before = sum(opened_s - 1800 <= d.decided_at_s < opened_s for d in RUN.decisions)
    during = sum(opened_s <= d.decided_at_s < resolved_s for d in RUN.decisions)
    assert before > 100 and during > 100 and max(d.decided_at_s for d in RUN.decisions) < resolved_s
    table = " ".join(ok("audit", "incident", str(iid), "--db", str(copy)).split())
    assert f"2026-11-30T01:43:20.000000Z ({before} decisions) │" in table
    assert f"2026-11-30T01:55:00.000000Z ({during} decisions) │" in table
    assert "2026-11-30T02:25:00.000000Z (no decisions) │" in table
    since = sum(d.decided_at_s >= opened_s for d in RUN.decisions)
    table = " ".join(ok("audit", "incident", str(still), "--db", str(copy)).split())
    assert f"({since} decisions; now: still open) │" in table
    assert "│ after │ none yet: the incident is open │" in table


def test_an_unknown_guard_id_names_the_ones_held_and_the_fix(db: str, tmp_path: Path) -> None:
    """`audit incident inc-999-1` said only which ids a report names, without a fix nor
    the guard ids this database holds."""
    copy = tmp_path / "copy.db"
    shutil.copy(db, copy)
    engine = create_audit_engine(f"sqlite:///{copy}")
    for guard_id in ("inc-72-1", "inc-456-2"):
        evidence = {"simulated": True, "incident": guard_id}
        open_incident(engine, IncidentRecord(START_S, "hot_spot", "critical", "x", evidence))
    engine.dispose()
    assert one_line_error("audit", "incident", "inc-999-1", "--db", str(copy)) == (
        "error: no incident with guard id inc-999-1; fix: give one a simulate report's trips "
        "name (this database holds inc-72-1, inc-456-2), or an audit id `slaguard incidents` "
        "lists\n"
    )


def test_an_empty_answer_in_parquet_keeps_the_column_types(db: str, tmp_path: Path) -> None:
    """An empty answer's columns were untyped, written to parquet as `null`: a folder of
    daily exports whose first day was quiet could not be read back (pandas: 'Unsupported
    cast from large_string to null'), and `decided_at` was no UTC timestamp."""
    copy = tmp_path / "copy.db"
    shutil.copy(db, copy)
    engine = create_audit_engine(f"sqlite:///{copy}")
    long_ago = START_S - 30 * 86400
    quiet = open_incident(
        engine, IncidentRecord(long_ago, "hot_spot", "ticket", "x", resolved_at_s=long_ago + 60)
    )
    engine.dispose()
    asked = {
        "decisions": (["audit", "decisions", "--limit", "0"], WINDOW, EMPTY),
        "summary": (["audit", "summary"], WINDOW, EMPTY),
        "incident": (["audit", "incident"], ["1"], [str(quiet)]),
    }
    for name, (command, full, empty) in asked.items():
        days = tmp_path / name
        days.mkdir()
        for day, window in (("0-quiet", empty), ("1-busy", full)):
            out = days / f"{day}.parquet"
            ok(*command, *window, "--db", str(copy), "-f", "parquet", "-o", str(out))
        quiet_schema = pq.read_schema(days / "0-quiet.parquet")
        busy_schema = pq.read_schema(days / "1-busy.parquet")
        assert quiet_schema.remove_metadata() == busy_schema.remove_metadata(), name
        both = pd.read_parquet(days)
        assert len(both) == len(pd.read_parquet(days / "1-busy.parquet")) > 10, name
    assert str(
        pq.read_schema(tmp_path / "decisions" / "0-quiet.parquet").field("decided_at").type
    ) == ("timestamp[us, tz=UTC]")


def test_history_and_incidents_in_parquet_keep_their_column_types(db: str, tmp_path: Path) -> None:
    """`history` and `incidents` typed each column from its values: a quiet window's
    export, and an open incident's `resolved_at` or a run without Slack's `slack_ts`
    (all empty), were written as `null`, unlike the same columns of a busy export."""
    copy = tmp_path / "copy.db"
    shutil.copy(db, copy)
    engine = create_audit_engine(f"sqlite:///{copy}")
    open_incident(engine, IncidentRecord(START_S + 3000, "hot_spot", "critical", "prefix:p"))
    engine.dispose()
    asked = {
        "history": (["history", *EMPTY], ["history", *WINDOW]),
        "incidents": (["incidents", "--since", "2030-01-01"], ["incidents"]),
        "open": (["incidents", "--open"], ["incidents"]),
    }
    for name, (quiet, busy) in asked.items():
        schemas = []
        for day, args in (("quiet", quiet), ("busy", busy)):
            out = tmp_path / f"{name}-{day}.parquet"
            ok(*args, "--db", str(copy), "-f", "parquet", "-o", str(out))
            schemas.append(pq.read_schema(out).remove_metadata())
        assert schemas[0] == schemas[1], name
        for field in schemas[0]:
            assert str(field.type) != "null", (name, field.name)


def test_history_of_switches_without_incidents_keeps_the_incident_id_type(
    tmp_path: Path,
) -> None:
    """A window holding only manual switches (no incident id on any row) wrote
    `incident_id` as `null` in parquet, unlike a quiet window's or an incident's; the
    table still shows the missing id as "-"."""
    db = str(tmp_path / "manual.db")
    ok("db", "upgrade", "--db", db)
    ok("rollback", "--hold", "--reason", "drill", "--db", db)
    out = tmp_path / "manual.parquet"
    ok("history", "--db", db, "-o", str(out))
    assert str(pq.read_schema(out).field("incident_id").type) == "int64"
    assert pd.read_parquet(out)["incident_id"].isna().tolist() == [True]
    table = ok("history", "--db", db).splitlines()
    row = next(line for line in table if "manual_hold" in line)
    assert row.split("│")[-2].strip() == "-", row


def test_decisions_whose_outcomes_are_all_missing_keep_the_column_types(
    db: str, tmp_path: Path
) -> None:
    """A window whose outcomes had not arrived yet (the last minutes) had every outcome
    column NULL: typed from the values only when no row came back, they were written to
    parquet as `null`, unlike the same columns of a window with outcomes."""
    copy = tmp_path / "copy.db"
    shutil.copy(db, copy)
    engine = create_audit_engine(f"sqlite:///{copy}")
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM outcomes"))
    engine.dispose()
    schemas = []
    for name, source in (("pending", copy), ("done", Path(db))):
        out = tmp_path / f"{name}.parquet"
        ok("audit", "decisions", *WINDOW, "--limit", "0", "--db", str(source), "-o", str(out))
        schemas.append(pq.read_schema(out).remove_metadata())
    assert [f.name for f in schemas[0] if str(f.type) == "null"] == []
    assert schemas[0] == schemas[1]
    pending = pd.read_parquet(tmp_path / "pending.parquet")
    assert len(pending) > 100 and pending["ttft_s"].isna().all()
