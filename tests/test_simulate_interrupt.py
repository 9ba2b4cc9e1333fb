"""Ctrl-C (or SIGTERM) during `slaguard simulate --audit-db`: the run used to exit 130
without a word, its mode switches and incidents (written only at the end) missing from the
database and the writer's journal left unreplayed, a partial run that `audit` presented as
a whole one. Now: one line saying where it stopped and what the database holds, the
history up to there written, every acknowledged row drained."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from helpers import wait_for

from slaguard.cli.errors import USER_ERROR_EXIT

SIMULATE = "from slaguard.cli.main import main; main()"


def _long_trace(path: Path, n: int = 40_000, every_s: float = 0.1) -> Path:
    """An Azure-format trace of `n` requests, one every `every_s` seconds."""
    start = datetime(2023, 11, 16, 18, 0, 0)
    at = [(start + timedelta(seconds=i * every_s)).isoformat(sep=" ") for i in range(n)]
    rows = [f"{t},{300 + i % 700},{40 + i % 90}" for i, t in enumerate(at)]
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")
    return path


def _count(db: Path, table: str) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute(f"select count(*) from {table}").fetchone()[0])


def _decisions_so_far(db: Path) -> int:
    """0 until the run has created the schema."""
    try:
        return _count(db, "decisions") if db.exists() else 0
    except sqlite3.OperationalError:
        return 0


@pytest.mark.parametrize("signo", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_run_says_where_and_leaves_a_whole_prefix(
    tmp_path: Path, signo: signal.Signals
) -> None:
    db = tmp_path / "sim.db"
    args = ["--trace", str(_long_trace(tmp_path / "long.csv")), "--policy", "guarded",
            "--baseline-s", "5", "--stage-s", "5", "--audit-db", f"sqlite:///{db}"]  # fmt: skip
    run = subprocess.Popen(
        [sys.executable, "-c", SIMULATE, "simulate", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # past the rollout's first switches (5 and 10 simulated s: 100 arrivals) and more
        wait_for("decisions in the audit DB", lambda: _decisions_so_far(db) > 400, timeout_s=60)
        run.send_signal(signo)
        out, err = run.communicate(timeout=150)
    finally:
        run.kill()
    assert run.returncode == 128 + signo, err
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith(f"error: interrupted by {signo.name} at "), line
    assert "simulated s (last arrival); no report written; sqlite:///" in line
    decisions = _count(db, "decisions")
    outcomes = _count(db, "outcomes")
    assert f"holds the run up to there: {decisions} decisions, {outcomes} outcomes" in line
    assert "still in" not in line  # every acknowledged row drained
    assert 400 < decisions < 40_000 and 0 < outcomes <= decisions
    with sqlite3.connect(db) as conn:
        switches = [m for (m,) in conn.execute("select to_mode from mode_changes order by at")]
    assert switches[:2] == ["rollout(10)", "rollout(50)"]
    assert run.returncode != USER_ERROR_EXIT
