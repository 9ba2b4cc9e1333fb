"""The learned weights in the service: refitted by the weight job only (never on a
request), every version stored under a name that is its own, and restored at start."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
from service_helpers import Clock, build_test_service
from sqlalchemy import select
from sqlalchemy.orm import Session

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
