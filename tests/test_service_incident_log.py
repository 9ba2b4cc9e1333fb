"""The service log names each incident state change once, with the audit id that the
database, Slack, `slaguard incidents` and the resume command use.

It logged the guard's in-memory id (`incident inc-1796046484-1 opened`) while everything
else said `1`, and nothing at all for an incident opened by an Alertmanager rollback or
resolved by an admin resume or hold."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.engine import URL
from test_guard_store import arm_samples, start_rollout
from test_service_trip_metrics import modes_on

from slaguard.audit.engine import create_audit_engine
from slaguard.audit.migrate import upgrade
from slaguard.audit.models import Incident
from slaguard.guard.store import GuardStore
from slaguard.service.modes import FiringAlert, ReplicaModes


@pytest.fixture
def engine(sqlite_url: URL) -> Engine:
    engine = create_audit_engine(sqlite_url)
    upgrade(engine)
    return engine


def incident_ids(engine: Engine) -> list[int]:
    with engine.connect() as conn:
        return list(conn.execute(select(Incident.id).order_by(Incident.id)).scalars())


async def trip_then_commands(modes: ReplicaModes, now: float) -> None:
    """A detector's trip, an admin resume, an Alertmanager rollback and its alert
    resolving, then an admin hold."""
    for sample in arm_samples(now - 5):
        modes.on_outcome(sample)
    for k in range(10):
        await modes.evaluate(now + k)
    assert modes.current().label == "round_robin"
    await modes.command("resume", now + 11, actor="api:ana", reason="incident reviewed")
    firing = FiringAlert("SlaguardSLAErrorBudgetBurn", "TTFT budget burning", starts_at_s=now + 12)
    assert (await modes.alerts([firing], now + 13)).changed
    assert await modes.alerts_resolved({"SlaguardSLAErrorBudgetBurn"}, now + 14)
    await modes.command("hold", now + 15, actor="api:bo", reason="investigating")


def test_each_incident_change_is_logged_once_with_its_audit_id(
    engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    now = time.time()
    start_rollout(GuardStore(engine), at_s=now - 30)
    modes = modes_on(engine, tmp_path, now, trip_after=3)
    try:
        with caplog.at_level(logging.INFO, logger="slaguard"):
            asyncio.run(trip_then_commands(modes, now))
    finally:
        modes.close()
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("incident ")]
    first, second = incident_ids(engine)
    assert [line.split(":")[0] for line in said] == [
        f"incident {first} opened",
        f"incident {first} resolved",
        f"incident {second} opened",
        f"incident {second} updated",
        f"incident {second} resolved",
    ], said
    assert said[0].startswith(f"incident {first} opened: learned arm violates the SLA")
    assert said[2].startswith(f"incident {second} opened: SlaguardSLAErrorBudgetBurn firing")
    assert not any("inc-" in r.getMessage() for r in caplog.records)
