"""The writer process: restarted when it dies, gone when its parent dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import pg_connect
from helpers import wait_for
from sqlalchemy import Engine, select, text

from slaguard.audit.engine import create_audit_engine
from slaguard.audit.migrate import upgrade
from slaguard.audit.models import Decision
from slaguard.audit.sample import synthetic_run
from slaguard.audit.writer import AuditWriter
from slaguard.audit.writer_settings import WriterSettings

N = 3000
RUN = synthetic_run(N, seed=5)


def alive(pid: int) -> bool:
    """Running (a zombie awaiting its reaper counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def stored(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(select(Decision.request_id)).scalars())


def test_a_killed_writer_process_is_restarted_and_nothing_is_lost(
    audit_engine: Engine, tmp_path: Path
) -> None:
    half = N // 2
    with AuditWriter(audit_engine, tmp_path / "spill", WriterSettings(batch_size=200)) as w:
        first = w.process_id
        for record in RUN.decisions[:half]:
            w.enqueue(record)
        wait_for("the first committed batch", lambda: w.stats().rows_written > 0, 30)
        os.kill(first, signal.SIGKILL)
        for record in RUN.decisions[half:]:
            w.enqueue(record)
        assert w.wait_flushed(60), w.stats()
        stats = w.stats()
        assert w.process_id != first and not alive(first)
    assert stats.process_restarts == 1
    # Every record confirmed; `rows_written` may miss one batch the killed process
    # committed but never reported (its replay then inserts nothing): the rows decide.
    assert stats.records_flushed == N
    assert N - 200 <= stats.rows_written <= N
    ids = stored(audit_engine)
    assert len(ids) == len(set(ids)) == N


PARENT = """
import sys, threading
from slaguard.audit.engine import create_audit_engine
from slaguard.audit.sample import synthetic_run
from slaguard.audit.writer import AuditWriter
writer = AuditWriter(create_audit_engine(sys.argv[1]), sys.argv[2])
for record in synthetic_run(200, seed=5).decisions:
    writer.enqueue(record)
print(writer.process_id, flush=True)
threading.Event().wait()
"""


@pytest.mark.parametrize("database", ["reachable", "unreachable"])
def test_a_sigkilled_parent_leaves_no_writer_process(tmp_path: Path, database: str) -> None:
    if database == "reachable":
        url = f"sqlite:///{tmp_path / 'a.db'}"
        upgrade(create_audit_engine(url))
    else:
        url = "postgresql+psycopg://postgres@127.0.0.1:1/nowhere"  # retrying, backing off
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, url, str(tmp_path / "spill")], stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:  # a failure before the SIGKILL left the parent, and its writer, running
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert alive(child)
        parent.send_signal(signal.SIGKILL)
        assert parent.wait(10) == -signal.SIGKILL
    finally:
        parent.kill()
    wait_for(f"writer process {child} to exit", lambda: not alive(child), 10)
    if database == "reachable":
        engine = create_audit_engine(url)
        with AuditWriter(engine, tmp_path / "spill") as restarted:
            assert restarted.wait_flushed(30)
        assert sorted(stored(engine)) == sorted(d.request_id for d in RUN.decisions[:200])


@pytest.mark.postgres
def test_a_batch_waiting_on_a_locked_table_is_reported_and_retried(
    pg_audit_engine: Engine, tmp_path: Path
) -> None:
    with pg_audit_engine.begin() as conn:
        conn.execute(text("TRUNCATE decisions, outcomes"))
    settings = WriterSettings(statement_timeout_s=0.3, retry_max_s=0.2)
    with AuditWriter(pg_audit_engine, tmp_path / "spill", settings) as w:
        with pg_connect(pg_audit_engine.url) as locker, locker.transaction():
            locker.execute("LOCK TABLE decisions IN ACCESS EXCLUSIVE MODE")
            for record in RUN.decisions[:100]:
                w.enqueue(record)
            wait_for("a reported write failure", lambda: w.stats().write_errors >= 2, 15)
            assert "statement timeout" in (w.stats().last_error or "")
            assert w.stats().queue_depth == 100
        assert w.wait_flushed(30), w.stats()
    assert sorted(stored(pg_audit_engine)) == sorted(d.request_id for d in RUN.decisions[:100])


@pytest.mark.postgres
def test_a_sigkilled_parent_leaves_no_writer_blocked_in_the_database(
    pg_audit_engine: Engine, tmp_path: Path
) -> None:
    url = pg_audit_engine.url.render_as_string(hide_password=False)
    with pg_connect(pg_audit_engine.url) as locker, locker.transaction():
        locker.execute("LOCK TABLE decisions IN ACCESS EXCLUSIVE MODE")
        parent = subprocess.Popen(
            [sys.executable, "-c", PARENT, url, str(tmp_path / "spill")],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert parent.stdout is not None
            child = int(parent.stdout.readline())
            wait_for(
                "the writer to wait on the lock",
                lambda: bool(locker.execute(LOCK_WAITERS).fetchone()[0]),  # type: ignore[index]
                15,
            )
            parent.send_signal(signal.SIGKILL)
            assert parent.wait(10) == -signal.SIGKILL
        finally:
            parent.kill()
        # The default statement timeout (15 s) has not passed: the watchdog ended it.
        wait_for(f"writer process {child} to exit", lambda: not alive(child), 5)


LOCK_WAITERS = (
    "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'decisions'::regclass"
)
