"""Nothing acknowledged is lost, nothing is stored twice: real outages on real backends.

- PostgreSQL unreachable (wrong port), then the right one;
- a real PostgreSQL server restart while decisions keep coming;
- SQLite held by another process's exclusive transaction;
- a writer process SIGKILLed right after `enqueue()` returned.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import pg_connect
from helpers import wait_for
from sqlalchemy import Engine, text
from sqlalchemy.engine import URL

from slaguard.audit.engine import create_audit_engine
from slaguard.audit.migrate import upgrade
from slaguard.audit.sample import synthetic_run
from slaguard.audit.spill import SEGMENT_SUFFIX
from slaguard.audit.writer import AuditWriter
from slaguard.audit.writer_settings import WriterSettings

pytestmark = pytest.mark.slow

N = 3000
RUN = synthetic_run(N, seed=3)
IDS = [d.request_id for d in RUN.decisions]
WRONG_PORT = 1


def stored_ids(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        order = "rowid" if engine.dialect.name == "sqlite" else "request_id"
        rows = conn.execute(text(f"SELECT request_id FROM decisions ORDER BY {order}"))
        return [r[0] for r in rows]


def assert_exactly_once(engine: Engine) -> None:
    ids = stored_ids(engine)
    assert len(ids) == len(set(ids)) == N
    assert set(ids) == set(IDS)


def no_segments(spill: Path) -> bool:
    return not list(spill.glob(f"*{SEGMENT_SUFFIX}"))


@pytest.fixture
def pg_engine(pg_audit_engine: Engine) -> Engine:
    with pg_audit_engine.begin() as conn:
        conn.execute(text("TRUNCATE decisions, outcomes"))
    return pg_audit_engine


@pytest.mark.postgres
def test_postgres_unreachable_then_reachable(pg_engine: Engine, tmp_path: Path) -> None:
    spill = tmp_path / "spill"
    wrong: URL = pg_engine.url.set(port=WRONG_PORT)
    with AuditWriter(create_audit_engine(wrong), spill) as down:
        for record in RUN.decisions:
            down.enqueue(record)
        wait_for("a failed write against the wrong port", lambda: down.stats().write_errors > 0, 10)
        left = down.close(drain_timeout_s=0.2)
    assert (left.queue_depth, left.rows_written) == (N, 0)
    assert stored_ids(pg_engine) == []
    with AuditWriter(pg_engine, spill) as up:
        assert up.wait_flushed(30)
        assert up.stats().rows_written == N
    assert_exactly_once(pg_engine)
    assert no_segments(spill)


def _cluster_version() -> str:
    versions = sorted(os.listdir("/etc/postgresql"))
    return versions[-1]


@pytest.fixture
def restartable_cluster(pg_url: URL) -> Iterator[Callable[[], subprocess.Popen[bytes]]]:
    """Starts `pg_ctlcluster ... restart`; whatever happens, the server is up afterwards."""
    if not Path("/etc/postgresql").is_dir() or os.geteuid() != 0:
        pytest.skip("needs root and a Debian PostgreSQL cluster to restart")
    version = _cluster_version()
    cmd = ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main"]

    def restart() -> subprocess.Popen[bytes]:
        return subprocess.Popen([*cmd, "restart"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    yield restart
    probe = pg_url.set(database="test")
    try:
        pg_connect(probe, retry_s=20).close()
    except Exception:
        subprocess.run([*cmd, "start"], check=False, capture_output=True, timeout=60)
        pg_connect(probe, retry_s=30).close()


@pytest.mark.postgres
@pytest.mark.serial
def test_postgres_server_restart_mid_stream(
    pg_engine: Engine,
    tmp_path: Path,
    restartable_cluster: Callable[[], subprocess.Popen[bytes]],
) -> None:
    spill = tmp_path / "spill"
    half = N // 2
    with AuditWriter(pg_engine, spill, WriterSettings(retry_max_s=0.2)) as writer:
        for record in RUN.decisions[:half]:
            writer.enqueue(record)
        assert writer.wait_flushed(30)
        restarting = restartable_cluster()
        sent = half
        # Keep deciding while the server goes down and comes back.
        while restarting.poll() is None or writer.stats().write_errors == 0:
            if sent < N - 100:
                writer.enqueue(RUN.decisions[sent])
                sent += 1
            if restarting.poll() is not None and sent >= N - 100:
                break
            time.sleep(0.001)
        assert restarting.wait(60) == 0, restarting.stderr.read() if restarting.stderr else ""
        for record in RUN.decisions[sent:]:
            writer.enqueue(record)
        assert writer.stats().write_errors > 0, "the restart was never noticed by the writer"
        assert writer.wait_flushed(60), writer.stats()
    assert_exactly_once(pg_engine)
    assert no_segments(spill)


LOCK_HOLDER = """
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.readline()
con.execute("COMMIT")
"""


def test_sqlite_locked_by_another_process(tmp_path: Path) -> None:
    db = tmp_path / "audit.db"
    engine = create_audit_engine(f"sqlite:///{db}")
    upgrade(engine)
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(db)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        spill = tmp_path / "spill"
        with AuditWriter(engine, spill) as writer:
            for record in RUN.decisions:
                writer.enqueue(record)
            wait_for("a 'database is locked' failure", lambda: writer.stats().write_errors > 0, 15)
            assert "locked" in (writer.stats().last_error or "")
            assert writer.stats().rows_written == 0
            assert writer.stats().queue_depth == N
            assert holder.stdin is not None
            holder.stdin.write("release\n")
            holder.stdin.flush()
            assert holder.wait(10) == 0
            assert writer.wait_flushed(30), writer.stats()
    finally:
        holder.kill()
    assert_exactly_once(engine)
    assert stored_ids(engine) == IDS, "replay must keep the acknowledged order"
    assert no_segments(spill)


KILLED_WRITER = """
import sys, threading
from slaguard.audit.engine import create_audit_engine
from slaguard.audit.sample import synthetic_run
from slaguard.audit.writer import AuditWriter
url, spill, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
writer = AuditWriter(create_audit_engine(url), spill)
for record in synthetic_run(n, seed=3).decisions:
    writer.enqueue(record)
print("acknowledged", n, flush=True)
threading.Event().wait()
"""


def _run_and_kill(url: str, spill: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, url, str(spill), str(N)],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1],
    )  # fmt: skip
    assert child.stdout is not None
    try:
        line = child.stdout.readline().strip()
    finally:  # killed whatever happened: the test's point, and nothing left running
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    assert line == f"acknowledged {N}"
    assert child.returncode == -signal.SIGKILL


@pytest.mark.postgres
def test_sigkill_after_acknowledging_replays_into_postgres(
    pg_engine: Engine, tmp_path: Path
) -> None:
    spill = tmp_path / "spill"
    wrong = pg_engine.url.set(port=WRONG_PORT).render_as_string(hide_password=False)
    _run_and_kill(wrong, spill)
    with AuditWriter(pg_engine, spill) as restarted:
        assert restarted.wait_flushed(30)
        assert restarted.stats().rows_written == N
    assert_exactly_once(pg_engine)
    assert no_segments(spill)


def test_sigkill_mid_flush_replays_sqlite_exactly_once(tmp_path: Path) -> None:
    db = tmp_path / "audit.db"
    engine = create_audit_engine(f"sqlite:///{db}")
    upgrade(engine)
    spill = tmp_path / "spill"
    _run_and_kill(f"sqlite:///{db}", spill)
    already = len(stored_ids(engine))
    with AuditWriter(engine, spill) as restarted:
        assert restarted.wait_flushed(30)
        assert restarted.stats().rows_written == N - already
    assert_exactly_once(engine)
    assert no_segments(spill)
    with AuditWriter(engine, spill) as third:
        assert third.stats().queue_depth == 0
