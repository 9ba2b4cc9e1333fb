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
import threading
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_for

SIMULATE = "from slaguard.cli.main import main; main()"


def _long_trace(path: Path, n: int = 160_000, every_s: float = 0.1) -> Path:
    """An Azure-format trace of `n` requests, one every `every_s` seconds: long enough
    (~45 s simulated on a quiet machine) that the run is still simulating when its niced
    writer, starved on a loaded machine, has stored the 400 decisions the tests wait for."""
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


def _start(tmp_path: Path, **popen: Any) -> tuple[subprocess.Popen[str], Path]:
    """A guarded run of a long trace recording into a new SQLite file, past the rollout's
    first switches (5 and 10 simulated s: 100 arrivals) and more once this returns."""
    db = tmp_path / "sim.db"
    args = ["--trace", str(_long_trace(tmp_path / "long.csv")), "--policy", "guarded",
            "--baseline-s", "5", "--stage-s", "5", "--audit-db", f"sqlite:///{db}"]  # fmt: skip
    run = subprocess.Popen(
        [sys.executable, "-c", SIMULATE, "simulate", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )
    try:
        wait_for("decisions in the audit DB", lambda: _decisions_so_far(db) > 400, timeout_s=60)
    except BaseException:
        run.kill()
        raise
    return run, db


def _last_line(run: subprocess.Popen[str], signo: signal.Signals) -> str:
    """The one `error:` line an interruption ends with (after at most a line saying the
    last rows are being written)."""
    out, err = run.communicate(timeout=150)
    assert run.returncode == 128 + signo, err
    assert out == "" and "Traceback" not in err
    *before, last = err.strip().splitlines()
    assert all(x.startswith("audit: writing the last ") for x in before), err
    return last


@pytest.mark.parametrize("signo", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_run_says_where_and_leaves_a_whole_prefix(
    tmp_path: Path, signo: signal.Signals
) -> None:
    run, db = _start(tmp_path)
    try:
        run.send_signal(signo)
        line = _last_line(run, signo)
    finally:
        run.kill()
    assert line.startswith(f"error: interrupted by {signo.name} at "), line
    assert "simulated s (last arrival); no report written; sqlite:///" in line
    decisions = _count(db, "decisions")
    outcomes = _count(db, "outcomes")
    assert f"holds the run up to there: {decisions} decisions, {outcomes} outcomes" in line
    assert "still in" not in line  # every acknowledged row drained
    assert 400 < decisions < 160_000 and 0 < outcomes <= decisions
    with sqlite3.connect(db) as conn:
        switches = [m for (m,) in conn.execute("select to_mode from mode_changes order by at")]
    assert switches[:2] == ["rollout(10)", "rollout(50)"]


def test_a_hangup_ignored_on_entry_stays_ignored(tmp_path: Path) -> None:
    """`nohup slaguard simulate ...` was stopped by the terminal's hangup."""
    run, db = _start(tmp_path, preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    try:
        run.send_signal(signal.SIGHUP)
        seen = _decisions_so_far(db)
        wait_for(
            "the run to go on after the hangup, or end",
            lambda: run.poll() is not None or _decisions_so_far(db) > seen + 500,
            timeout_s=60,
        )
        assert run.poll() is None, run.communicate()[1]
        run.send_signal(signal.SIGINT)
        line = _last_line(run, signal.SIGINT)
    finally:
        run.kill()
    assert line.startswith("error: interrupted by SIGINT at "), line


def test_a_second_interrupt_while_draining_says_what_is_left_where(tmp_path: Path) -> None:
    """Ctrl-C again during the writer's drain exited 130 without a word, the run's history
    written beside none of its rows and the spill journal not named."""
    run, db = _start(tmp_path)
    holder = sqlite3.connect(db, timeout=30)
    try:
        holder.execute("begin exclusive")  # the database stops taking rows: a slow drain
        run.send_signal(signal.SIGINT)
        assert run.stderr is not None
        stuck = threading.Timer(120, run.kill)  # a run that never says it is draining
        stuck.start()
        said = run.stderr.readline()
        stuck.cancel()
        assert said.startswith("audit: writing the last "), said + run.communicate()[1]
        run.send_signal(signal.SIGINT)
        line = _last_line(run, signal.SIGINT)
    finally:
        run.kill()
        holder.rollback()
        holder.close()
    assert line.startswith("error: interrupted by SIGINT while writing the audit rows: "), line
    assert f"stay in the spill journal {db}.spill, never replayed into another run: " in line
    assert line.endswith("the run's mode switches and incidents were not written")
    assert _count(db, "mode_changes") == 0
