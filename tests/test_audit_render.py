"""The `slaguard audit` terminal tables: what they must show whole, and how they head
what they show."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from test_audit_cli import START_S, ok
from typer.testing import CliRunner

from slaguard.audit.engine import create_audit_engine
from slaguard.audit.migrate import upgrade
from slaguard.audit.sample import load_run, synthetic_run
from slaguard.cli.main import app
from slaguard.guard.status_rows import INCIDENT_COLUMNS


def hex_id(i: int, width: int = 48) -> str:
    """A request id as the service makes them (48 hex digits), or longer."""
    digest = "".join(hashlib.sha256(f"{i}-{k}".encode()).hexdigest() for k in range(4))
    return digest[:width]


@pytest.fixture(scope="module")
def hex_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A run whose request ids are 48 hex digits (the first one 120), in a SQLite file."""
    tmp = tmp_path_factory.mktemp("render")
    run = synthetic_run(20, start_s=START_S, duration_s=600.0, seed=5)
    ids = {d.request_id: hex_id(i, 120 if i == 0 else 48) for i, d in enumerate(run.decisions)}
    run = replace(
        run,
        decisions=[replace(d, request_id=ids[d.request_id]) for d in run.decisions],
        outcomes=[replace(o, request_id=ids[o.request_id]) for o in run.outcomes],
    )
    engine = create_audit_engine(f"sqlite:///{tmp / 'hex.db'}")
    upgrade(engine)
    load_run(engine, run, tmp / "spill")
    engine.dispose()
    return str(tmp / "hex.db")


def test_request_ids_are_never_cut_in_the_decisions_table(hex_db: str) -> None:
    """A 48-hex id was shown as `c42b9dcfc4c54b59985c00000000…`, which `explain` cannot
    take; the table now widens past 160 columns rather than cut one."""
    window = ["--since", "2026-11-30T00:00Z", "--until", "2026-12-01T00:00Z"]
    table = ok("audit", "decisions", "--db", hex_db, *window)
    rows = [line.split("│")[1].strip() for line in table.splitlines() if line.startswith("│")]
    assert len(rows) == 20
    assert rows[0] == hex_id(0, 120) and all(r == hex_id(i) for i, r in enumerate(rows) if i)
    assert f"decision {rows[1]}" in ok("audit", "explain", rows[1], "--db", hex_db)


def test_incident_times_subject_and_thread_are_never_cut(hex_db: str) -> None:
    """Off a terminal the table cut `opened_at` to `2026-11-30T16:…` and its subject."""
    table = ok("incidents", "--db", hex_db)
    row = next(line for line in table.splitlines() if line.startswith("│"))
    cells = [cell.strip() for cell in row.split("│")[1:-1]]
    stored = synthetic_run(20, start_s=START_S, duration_s=600.0, seed=5).incident
    opened = datetime.fromtimestamp(stored.opened_at_s, UTC)
    assert cells[1] == opened.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert cells[2].startswith("2026-") and len(cells[2]) == len(cells[1])
    assert cells[5] == stored.subject and cells[-1] == stored.slack_ts


@pytest.mark.parametrize("columns", ["60", "80"])
def test_narrow_headers_are_folded_not_cut(hex_db: str, tmp_path: Path, columns: str) -> None:
    """With a summary too long for the width the data cells wrapped, but the headers were
    cut to `notification_s…` and `messages_waiti…`: every header is shown whole, folded."""
    db = tmp_path / "summary.db"
    db.write_bytes(Path(hex_db).read_bytes())
    summary = "learned arm violates the SLA at 40.00% vs round-robin 3.33% (> x1.05) " * 3
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE incidents SET evidence = ?", (json.dumps({"summary": summary}),))
    result = CliRunner().invoke(app, ["incidents", "--db", str(db)], env={"COLUMNS": columns})
    assert result.exit_code == 0, result.output
    header_lines = [line for line in result.stdout.splitlines() if line.startswith("┃")]
    pieces = [[cell.strip() for cell in line.split("┃")[1:-1]] for line in header_lines]
    headers = ["".join(column) for column in zip(*pieces, strict=True)]
    assert headers == INCIDENT_COLUMNS and "…" not in result.stdout


def test_a_table_without_request_ids_keeps_its_width(hex_db: str) -> None:
    window = ["--since", "2026-11-30T00:00Z", "--until", "2026-12-01T00:00Z"]
    summary = ok("audit", "summary", "--db", hex_db, *window)
    assert max(len(line) for line in summary.splitlines()) <= 160


def test_round_robin_candidates_are_headed_by_their_order_not_by_a_score(
    hex_db: str, tmp_path: Path
) -> None:
    """Round-robin stores no scores, yet its candidates were headed "best score first"."""
    db = f"sqlite:///{tmp_path / 'rr.db'}"
    ok("simulate", "--policy", "round-robin", "--duration", "10", "--audit-db", db)
    every = ["--since", "2000-01-01", "--until", "2100-01-01", "--limit", "1", "-f", "json"]
    rid = json.loads(ok("audit", "decisions", "--db", db, *every))[0]["request_id"]
    rr = ok("audit", "explain", rid, "--db", db)
    assert "eligible candidates, round-robin order (no scores)" in rr
    header = next(line for line in rr.splitlines() if line.startswith("┃ target"))
    assert "score" not in header and "best score first" not in rr
    assert "eligible candidates, best score first" in ok(
        "audit", "explain", hex_id(1), "--db", hex_db
    )


def test_an_incidents_evidence_is_shown_whole(hex_db: str, tmp_path: Path) -> None:
    """The evidence cell was cut with an ellipsis: the outbox (attempts, last error) the
    Slack-delivery runbook sends readers to was not in the output at all."""
    db = tmp_path / "evidence.db"
    db.write_bytes(Path(hex_db).read_bytes())
    outbox = [{"attempts": k, "error": "ratelimited: retry after 30s"} for k in range(1, 6)]
    evidence = {"summary": "prefix 9f3a hot", "top_prefixes": ["p"] * 40, "outbox": outbox}
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE incidents SET evidence = ?", (json.dumps(evidence),))
    table = ok("audit", "incident", "1", "--db", str(db))
    rows = [line.split("│") for line in table.splitlines() if line.startswith("│")]
    start = next(i for i, cells in enumerate(rows) if cells[1].strip() == "evidence")
    shown = ""
    for cells in rows[start:]:
        if cells[1].strip() not in ("", "evidence"):
            break
        shown += cells[2]
    shown = "".join(shown.split())
    assert shown.count('"error":"ratelimited:retryafter30s"') == 5, shown
    assert shown.endswith("}]}")
