"""`simulate --audit-db` refuses, before anything is simulated, a database that would not
take the run whole: one `error:` line, exit 2, and nothing left behind."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import create_scratch_database, drop_database, pg_connect, require_postgres
from test_engine_support import AZURE_FIXTURE
from typer.testing import CliRunner

from slaguard.audit.engine import create_audit_engine
from slaguard.audit.records import OutcomeRecord
from slaguard.audit.writer import AuditWriter
from slaguard.cli.main import app


def _simulate(db: str, *extra: str) -> tuple[int, str, float]:
    started = time.monotonic()
    result = CliRunner().invoke(
        app, ["simulate", "--trace", str(AZURE_FIXTURE), *extra, "--audit-db", db]
    )
    assert result.exit_code == 0 or result.stdout == "", result.output
    return result.exit_code, result.stderr, time.monotonic() - started


@contextmanager
def _immutable(path: Path) -> Iterator[None]:
    """`chattr +i`: even root cannot write it (chmod does not stop root)."""
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i does not work here (needs root and a filesystem with it)")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_a_read_only_sqlite_file_is_refused_before_simulating(tmp_path: Path) -> None:
    """It simulated the whole run, retried for 120 s, then failed, leaving the run's rows
    in a spill journal that the next run replayed."""
    db = tmp_path / "ro.db"
    assert CliRunner().invoke(app, ["db", "upgrade", "--db", str(db)]).exit_code == 0
    with _immutable(db):
        code, err, took = _simulate(str(db))
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: --audit-db: sqlite:///{db} does not take writes: "), err
    assert "attempt to write a readonly database; fix: make " in err
    assert took < 30 and not (tmp_path / "ro.db.spill").exists()


@pytest.mark.postgres
def test_a_read_only_postgres_database_is_refused_before_simulating(tmp_path: Path) -> None:
    require_postgres()
    url = create_scratch_database()
    try:
        assert CliRunner().invoke(app, ["db", "upgrade", "--db", str(url)]).exit_code == 0
        with pg_connect(url) as conn:
            conn.execute(f'ALTER DATABASE "{url.database}" SET default_transaction_read_only = on')
        db = url.render_as_string(hide_password=False)
        code, err, took = _simulate(db)
    finally:
        drop_database(url)
    assert code == 2 and err.count("\n") == 1, err
    assert "does not take writes: cannot execute INSERT in a read-only transaction" in err
    assert "default_transaction_read_only off" in err
    assert took < 30


def _leave_in_journal(spill_dir: Path, request_ids: list[str]) -> None:
    """Outcomes acknowledged into `spill_dir` and never written (their database is down):
    what a run that failed while draining leaves behind."""
    down = create_audit_engine("postgresql+psycopg://x@127.0.0.1:1/x")
    with AuditWriter(down, spill_dir) as writer:
        for rid in request_ids:
            writer.enqueue(OutcomeRecord(rid, 1_700_000_000.0, 9.0, 9.0, 99.0, "failed", False))
        assert writer.close(drain_timeout_s=0).queue_depth == len(request_ids)


def test_a_journal_an_earlier_run_left_is_refused_not_replayed_into_this_run(
    tmp_path: Path,
) -> None:
    """The leftover journal was replayed first: the database held the earlier run's rows,
    this run's with the same request ids were dropped as duplicates beside this run's
    history, and the closing line said every row was recorded (or, when the drain timed
    out, more rows not written than the run had)."""
    db = tmp_path / "sim.db"
    assert CliRunner().invoke(app, ["db", "upgrade", "--db", str(db)]).exit_code == 0
    ids = ["azure_conv_200-0", "azure_conv_200-1"]  # the run's own request ids
    _leave_in_journal(tmp_path / "sim.db.spill", ids)
    size = sum(p.stat().st_size for p in (tmp_path / "sim.db.spill").glob("*.journal"))
    code, err, _ = _simulate(str(db))
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(
        f"error: --audit-db: the spill journal {tmp_path / 'sim.db.spill'} holds 2 records "
        f"({size} bytes) not written to sqlite:///{db}, left by an earlier run; "
    ), err
    assert f"fix: remove {tmp_path / 'sim.db.spill'} to simulate again" in err
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM outcomes").fetchone() == (0,)
    conn.close()
    assert size == sum(p.stat().st_size for p in (tmp_path / "sim.db.spill").glob("*.journal"))
    shutil.rmtree(tmp_path / "sim.db.spill")  # the fix the line gives
    code, err, _ = _simulate(str(db), "--policy", "round-robin")
    assert code == 0 and "(400 rows written)" in err, err
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM outcomes WHERE e2e_s = 99").fetchone() == (0,)
    conn.close()


def test_a_locked_sqlite_file_is_refused_as_locked(tmp_path: Path) -> None:
    db = tmp_path / "sim.db"
    assert CliRunner().invoke(app, ["db", "upgrade", "--db", str(db)]).exit_code == 0
    holder = sqlite3.connect(db, timeout=30)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        code, err, _ = _simulate(str(db))
    finally:
        holder.rollback()
        holder.close()
    assert code == 2 and err.count("\n") == 1, err
    assert f"sqlite:///{db} is locked: database is locked (another connection holds" in err
