"""`slaguard_detector_trips_total` counts what acted: a breaker trip (under the detector
its reason names first), an operator's rollback or hold; never a resume, nor a trip
verdict the breaker did not act on. The fleet-switch runbook and the guard dashboard
read it as "what took the fleet off the learned policy"."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import Engine
from sqlalchemy.engine import URL
from test_guard_store import arm_samples, start_rollout

from slaguard.audit.engine import create_audit_engine
from slaguard.audit.migrate import upgrade
from slaguard.fleet import load_fleet
from slaguard.guard.config import BreakerConfig, GuardConfig, RolloutCompareConfig
from slaguard.guard.leader import SoloLease
from slaguard.guard.runtime import GuardReplica
from slaguard.guard.store import GuardStore
from slaguard.notify.file import FileNotifier
from slaguard.scheduler.state import FleetState
from slaguard.service.modes import ReplicaModes
from slaguard.telemetry.metrics import SlaguardMetrics


@pytest.fixture
def engine(sqlite_url: URL) -> Engine:
    engine = create_audit_engine(sqlite_url)
    upgrade(engine)
    return engine


def modes_on(engine: Engine, tmp: Path, now: float, trip_after: int) -> ReplicaModes:
    """The service's adapter over a leading replica whose rollout comparison judges 60
    requests per arm."""
    config = GuardConfig(
        rollout_compare=RolloutCompareConfig(min_samples_per_arm=60),
        breaker=BreakerConfig(trip_after=trip_after),
    )
    replica = GuardReplica(
        engine, SoloLease(), FileNotifier(tmp / "notify.jsonl"), replica_id="a", config=config
    )
    assert replica.sync(now).leader
    return ReplicaModes(replica, FleetState(load_fleet()), SlaguardMetrics(CollectorRegistry()))


def trips(modes: ReplicaModes, detector: str) -> float | None:
    registry = modes.metrics.registry
    return registry.get_sample_value("slaguard_detector_trips_total", {"detector": detector})


def evaluate_losing_arm(modes: ReplicaModes, now: float, seconds: int) -> list[str]:
    """A learned arm missing 40 % against round-robin's 2 %; the modes it went through."""
    for sample in arm_samples(now - 5):
        modes.on_outcome(sample)

    async def run() -> list[str]:
        seen = []
        for k in range(seconds):
            await modes.evaluate(now + k)
            seen.append(modes.current().label)
        await modes.wait_for_delivery()
        return seen

    try:
        return asyncio.run(run())
    finally:
        modes.close()


@pytest.mark.parametrize(("trip_after", "counted"), [(3, 1.0), (100, 0.0)])
def test_a_trip_is_the_breakers_not_a_raised_verdict(
    engine: Engine, tmp_path: Path, trip_after: int, counted: float
) -> None:
    now = time.time()
    start_rollout(GuardStore(engine), at_s=now - 30)
    modes = modes_on(engine, tmp_path, now, trip_after)
    seen = evaluate_losing_arm(modes, now, 10)
    verdicts = modes.metrics.registry.get_sample_value(
        "slaguard_detector_verdicts_total", {"detector": "rollout_compare", "verdict": "anomalous"}
    )
    assert verdicts is not None and verdicts >= 3  # the verdict was raised either way
    assert (seen[-1] == "round_robin") is (trip_after == 3)
    assert trips(modes, "rollout_compare") == counted


def test_rollbacks_and_holds_count_as_manual_trips_resumes_do_not(
    engine: Engine, tmp_path: Path
) -> None:
    now = time.time()
    start_rollout(GuardStore(engine), at_s=now - 30)
    modes = modes_on(engine, tmp_path, now, trip_after=3)

    async def run() -> list[float | None]:
        counts = []
        for k, action in enumerate(("rollback", "resume", "hold", "hold", "resume")):
            change = await modes.command(action, now + k, actor="ana", reason="test")
            assert change.changed is (k != 3), (action, change.message)
            counts.append(trips(modes, "manual"))
        return counts

    try:
        assert asyncio.run(run()) == [1.0, 1.0, 2.0, 2.0, 2.0]
    finally:
        modes.close()
