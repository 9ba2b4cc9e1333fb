"""Every time a query command writes has one form, `2026-11-30T00:53:20.123456Z`, in
csv, json and the terminal table (parquet keeps its timestamp type).

csv wrote `2026-11-30 00:53:20.123456+00:00` (pandas' form, with a space), json
`...+00:00`, the table `...T00:53:20.123Z` and prune `...+00:00` to the second."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest
from test_audit_cli import RUN, WINDOW, ok, run_db

from slaguard.audit.sample import SICK_TARGET
from slaguard.cli import audit as audit_cli

EVERYTHING = ["--since", "2026-11-29T00:00Z", "--until", "2026-12-01T00:00Z"]
SICK = [d for d in RUN.decisions if d.target_id == SICK_TARGET]


def written(seconds: float) -> str:
    """Unix seconds as the outputs write them (independent of the code under test)."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    return run_db(tmp_path_factory.mktemp("times"))


def test_csv_writes_iso_times_with_t_and_z(db: str) -> None:
    decisions = ok("audit", "decisions", "--db", db, *WINDOW, "--target", SICK_TARGET, "-f", "csv")
    frame = pd.read_csv(io.StringIO(decisions), dtype=str)
    assert list(frame["decided_at"]) == [written(d.decided_at_s) for d in SICK]
    incidents = pd.read_csv(io.StringIO(ok("incidents", "--db", db, "-f", "csv")), dtype=str)
    assert list(incidents[["opened_at", "resolved_at"]].iloc[0]) == [
        written(RUN.incident.opened_at_s),
        written(RUN.incident.resolved_at_s or 0.0),
    ]
    history = ok("history", "--db", db, *EVERYTHING, "-f", "csv")
    ats = list(pd.read_csv(io.StringIO(history), dtype=str)["at"])
    assert sorted(ats) == [written(c.at_s) for c in RUN.mode_changes]


def test_json_writes_the_same_form(db: str) -> None:
    rows = json.loads(
        ok("audit", "decisions", "--db", db, *WINDOW, "--target", SICK_TARGET, "-f", "json")
    )
    assert [r["decided_at"] for r in rows] == [written(d.decided_at_s) for d in SICK]
    incident = json.loads(ok("audit", "incident", "1", "--db", db, "-f", "json"))
    opened = written(RUN.incident.opened_at_s)
    assert incident["incident"]["opened"] == incident["phases"]["during"][0] == opened
    assert [m["at"] for m in incident["mode_changes"]] == [
        written(c.at_s) for c in RUN.mode_changes
    ]
    explained = json.loads(ok("audit", "explain", SICK[0].request_id, "--db", db, "-f", "json"))
    assert explained["decision"]["decided_at"] == written(SICK[0].decided_at_s)
    (listed,) = json.loads(ok("incidents", "--db", db, "-f", "json"))
    assert listed["opened_at"] == opened


def test_the_table_writes_the_same_form(db: str) -> None:
    table = ok("audit", "decisions", "--db", db, *WINDOW, "--target", SICK_TARGET)
    rows = [line.split("│") for line in table.splitlines() if line.startswith("│")]
    assert [cells[2].strip() for cells in rows] == [written(d.decided_at_s) for d in SICK]
    incident = ok("audit", "incident", "1", "--db", db)
    opened = written(RUN.incident.opened_at_s)
    assert f"│ opened       │ {opened}" in incident
    assert f"│ during │ {opened} .. {written(RUN.incident.resolved_at_s or 0.0)}" in incident


def test_parquet_keeps_utc_timestamps(db: str, tmp_path: Path) -> None:
    out = tmp_path / "sick.parquet"
    ok("audit", "decisions", "--db", db, *WINDOW, "--target", SICK_TARGET, "-f", "parquet",
       "-o", str(out))  # fmt: skip
    decided = pd.read_parquet(out)["decided_at"]
    assert str(decided.dtype.tz) == "UTC"
    assert [t.strftime("%Y-%m-%dT%H:%M:%S.%fZ") for t in decided] == [
        written(d.decided_at_s) for d in SICK
    ]


def test_prune_names_its_cutoff_in_the_same_form(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    now = datetime(2026, 12, 1, 0, 22, 20, 123456, tzinfo=UTC)
    monkeypatch.setattr(audit_cli, "_now", lambda: now)
    said = ok("audit", "prune", "--older-than", "30d", "--dry-run", "--db", db)
    assert said == (
        "would delete 0 decisions and 0 outcomes older than 2026-11-01T00:22:20.123456Z\n"
    )
