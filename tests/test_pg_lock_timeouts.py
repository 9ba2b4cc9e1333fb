"""A table lock held in PostgreSQL bounds what it blocks: the service's guard and the
guard CLI fail in one counted, logged line instead of waiting without a word."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import pg_connect
from service_helpers import Clock, build_test_service
from sqlalchemy import Engine, text
from typer.testing import CliRunner

from slaguard.cli import mode as mode_cli
from slaguard.cli import status as status_cli
from slaguard.cli.main import app
from slaguard.service import bootstrap

pytestmark = pytest.mark.postgres


def test_a_locked_fleet_state_is_a_counted_sync_error_not_a_silent_wait(
    pg_audit_engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mode sync waited 33 s on a 40 s lock with sync_errors unchanged and nothing in
    the log; `slaguard status` and `rollback` hung 38 s."""
    monkeypatch.setattr(bootstrap, "SERVICE_STATEMENT_TIMEOUT_S", 0.5)
    monkeypatch.setattr(status_cli, "GUARD_STATEMENT_TIMEOUT_S", 0.5)
    monkeypatch.setattr(mode_cli, "GUARD_STATEMENT_TIMEOUT_S", 0.5)
    url = pg_audit_engine.url.render_as_string(hide_password=False)
    service = build_test_service(tmp_path, Clock(time.time()), db=url)
    try:
        replica = service.modes.replica
        metric = service.runtime.metrics.registry.get_sample_value
        synced_at = time.time()
        asyncio.run(service.runtime.modes.sync(synced_at))
        assert metric("slaguard_fleet_mode_synced_timestamp_seconds") == synced_at
        assert metric("slaguard_guard_sync_errors_total") == 0
        assert metric("slaguard_guard_leader") == 1  # the only replica, ready
        with pg_connect(pg_audit_engine.url) as locker, locker.transaction():
            locker.execute("LOCK TABLE fleet_state IN ACCESS EXCLUSIVE MODE")
            asyncio.run(service.runtime.modes.sync(time.time()))  # the lock is still held
            # the job did not fail, so only these say the replica routes on an old mode
            assert metric("slaguard_guard_sync_errors_total") == 1
            assert metric("slaguard_fleet_mode_synced_timestamp_seconds") == synced_at
            started = time.monotonic()
            results = [
                CliRunner().invoke(app, [*command, "--db", url])
                for command in (["status"], ["rollback", "--reason", "drill"])
            ]
            took = time.monotonic() - started
        assert replica.stats.sync_errors >= 1
        assert "statement timeout" in (replica.stats.last_error or "")
        for result in results:
            assert result.exit_code == 2, result.output
            assert "statement timeout" in result.stderr and len(result.stderr.splitlines()) == 1
        assert took < 10  # each bounded by the 0.5 s set here, not the 15 s default
    finally:
        service.close()


def test_a_rollback_waits_for_a_resume_being_written_and_then_rolls_it_back(
    pg_audit_engine: Engine,
) -> None:
    """It read the committed round-robin while a resume was landing, said "already on
    round_robin; nothing to roll back", and the fleet ended on the learned policy."""
    with pg_audit_engine.begin() as conn:
        conn.execute(text("TRUNCATE mode_changes, incidents RESTART IDENTITY CASCADE"))
        conn.execute(text("UPDATE fleet_state SET mode = 'round_robin', version = 0"))
    url = pg_audit_engine.url.render_as_string(hide_password=False)
    with pg_connect(pg_audit_engine.url) as resuming, resuming.transaction():
        # a resume written, not yet committed (it waits on another table meanwhile)
        resuming.execute(
            "UPDATE fleet_state SET mode = 'rollout(10)', version = 1, reason = 'resume'"
        )
        evidence = '{"transition": {"kind": "manual_resume", "version": 1}}'
        resuming.execute(
            "INSERT INTO mode_changes (at, from_mode, to_mode, reason, actor, evidence) "
            "VALUES (now(), 'round_robin', 'rollout(10)', 'manual_resume: ok', 'op', %s)",
            (evidence,),
        )
        rollback = threading.Thread(
            target=lambda: results.append(
                CliRunner().invoke(app, ["rollback", "--reason", "x", "--db", url])
            )
        )
        results: list[Any] = []
        rollback.start()
        rollback.join(1.0)
        assert rollback.is_alive()  # waiting for the resume's row lock, not answering
    rollback.join(30)
    (result,) = results
    assert result.exit_code == 0, result.output
    assert "nothing to roll back" not in result.stdout
    with pg_audit_engine.connect() as conn:
        assert conn.execute(text("SELECT mode FROM fleet_state")).scalar_one() == "round_robin"
