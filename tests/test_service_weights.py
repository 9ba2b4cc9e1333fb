"""The learned weights in the service: refitted by the weight job only (never on a
request), every version stored under a name that is its own, and restored at start."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest
from service_helpers import Clock, build_test_service
from sqlalchemy import select, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from slaguard.audit.engine import create_audit_engine
from slaguard.audit.models import WeightVersion
from slaguard.scheduler.weights import generation_of
from slaguard.service.app import create_app
from slaguard.service.bootstrap import Service
from slaguard.service.local import ServerThread
from slaguard.service.loops import ServiceLoops

ROUTE = {"model": "llama3.1-8b", "prompt_tokens": 500, "max_new_tokens": 50}
SETTINGS = {"telemetry": {"scrape": False, "stale_after_s": 300}, "loops": {"weights_s": 60}}


def _learned_outcomes(service: Service, clock: Clock, n: int) -> None:
    """`n` learned-arm decisions (the fleet resumed at 100 %) and their outcomes, the
    slow ones on the L40S targets."""
    rt = service.runtime
    asyncio.run(rt.modes.command("resume", clock(), actor="test", reason="t", stage_pct=100))
    app = create_app(rt, admin_token=None, readiness=service.readiness)
    with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=10) as c:
        for t in rt.fleet:
            assert c.post("/v1/telemetry", json={"target": t.id, "queue_depth": 0}).is_success
        for _ in range(n):
            out = c.post("/v1/route", json=ROUTE).json()
            assert out["arm"] == "learned", out
            ttft = 2.0 if out["target"].startswith("l40s") else 0.2
            fb = {"decision_id": out["decision_id"], "ttft_s": ttft, "e2e_s": ttft + 1}
            assert c.post("/v1/feedback", json=fb).json()["recorded"] is True


def _stored(service: Service) -> dict[str, dict[str, float]]:
    with Session(service.engine) as session:
        return {w.version: w.weights for w in session.scalars(select(WeightVersion))}


def test_the_weight_job_refits_stores_and_a_restart_continues(tmp_path: Path) -> None:
    clock = Clock(time.time())
    service = build_test_service(tmp_path, clock, **SETTINGS)
    try:
        asyncio.run(service.readiness())
        start = service.runtime.scheduler.weights
        assert generation_of(start.version) == 0 and set(_stored(service)) == {start.version}
        _learned_outcomes(service, clock, 30)
        clock.now += 7_200.0  # past the learner's hourly period: a request refitted here
        _learned_outcomes(service, clock, 30)
        assert service.runtime.scheduler.weights == start, "no refit on the request path"
        assert service.runtime.scheduler.learner.pending == 60
        asyncio.run(ServiceLoops(service.runtime).weight_update(clock()))
        refit = service.runtime.scheduler.weights
        assert generation_of(refit.version) == 1 and refit.values != start.values
        assert _stored(service)[refit.version] == refit.as_dict()
    finally:
        service.close()
    again = build_test_service(tmp_path, clock, **SETTINGS)
    try:
        assert again.runtime.scheduler.weights == refit, "the restart kept the learned weights"
        clock.now += 60.0
        _learned_outcomes(again, clock, 60)
        asyncio.run(ServiceLoops(again.runtime).weight_update(clock()))
        second = again.runtime.scheduler.weights
        assert generation_of(second.version) == 2
        assert set(_stored(again)) == {start.version, refit.version, second.version}
    finally:
        again.close()


def test_a_refit_the_database_refuses_is_not_routed_with_until_stored(tmp_path: Path) -> None:
    """The router took the new weights before the store; when the database refused it,
    decisions named a version `weight_versions` never held."""
    clock = Clock(time.time())
    service = build_test_service(tmp_path, clock, **SETTINGS)
    loops = ServiceLoops(service.runtime)
    try:
        asyncio.run(service.readiness())
        start = service.runtime.scheduler.weights
        _learned_outcomes(service, clock, 60)
        with service.engine.begin() as conn:  # the database refuses the insert for real
            conn.execute(text("ALTER TABLE weight_versions RENAME TO weight_versions_away"))
        with pytest.raises(OperationalError):
            asyncio.run(loops.weight_update(clock()))
        assert service.runtime.scheduler.weights == start, "not routed with, not stored"
        with service.engine.begin() as conn:
            conn.execute(text("ALTER TABLE weight_versions_away RENAME TO weight_versions"))
        asyncio.run(loops.weight_update(clock() + 60))
        refit = service.runtime.scheduler.weights
        assert generation_of(refit.version) == 1 and refit.version in _stored(service)
    finally:
        service.close()


def test_a_service_started_before_its_database_was_ready_restores_when_it_is(
    tmp_path: Path,
) -> None:
    """Started on a database one migration behind, it routed with the configured start;
    once the schema was current it never looked for the stored weights, and its next refit
    became the newest version, losing the learned line for every later restart."""
    clock = Clock(time.time())
    first = build_test_service(tmp_path, clock, **SETTINGS)
    try:
        asyncio.run(first.readiness())
        _learned_outcomes(first, clock, 60)
        asyncio.run(ServiceLoops(first.runtime).weight_update(clock()))
        learned = first.runtime.scheduler.weights
    finally:
        first.close()
    engine = create_audit_engine(f"sqlite:///{tmp_path / 'audit.db'}")
    with engine.begin() as conn:
        current = conn.execute(text("select version_num from alembic_version")).scalar_one()
        conn.execute(text("update alembic_version set version_num = '0001_audit_log'"))
    again = build_test_service(tmp_path, clock, **{**SETTINGS, "migrate": False})
    try:
        assert generation_of(again.runtime.scheduler.weights.version) == 0
        asyncio.run(again.readiness())
        assert again.runtime.ready_problem is not None
        with engine.begin() as conn:
            conn.execute(text("update alembic_version set version_num = :v"), {"v": current})
        asyncio.run(again.readiness())
        assert again.runtime.ready_problem is None
        assert again.runtime.scheduler.weights == learned
    finally:
        again.close()
        engine.dispose()
