"""The guard's gauges on two `slaguard serve` replicas of one SQLite file: detector scores,
thresholds and per-arm ratios come from the leader alone (NaN elsewhere, also once a
replica lost the lead), and a target the guard has not scored reads NaN, not 0."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from service_helpers import Clock, build_test_service
from test_guard_store import arm_samples, start_rollout

from slaguard.guard.router_inputs import RouterInputs
from slaguard.guard.store import GuardStore
from slaguard.service.bootstrap import Service
from slaguard.service.loops import ServiceLoops
from slaguard.telemetry.labels import ARMS, DETECTORS

TARGETS = {
    "h100-8b": ("h100", "llama3.1-8b"),
    "l40s-8b-0": ("l40s", "llama3.1-8b"),
    "l40s-8b-1": ("l40s", "llama3.1-8b"),
    "a100-70b": ("a100", "llama3.1-70b"),
}
"""The test fleet's targets: card type and model."""


def replica(tmp: Path, name: str, clock: Clock) -> Service:
    """One replica on `tmp`'s shared audit database, with its own spill journal."""
    return build_test_service(tmp, clock, replica_id=name, spill_dir=tmp / f"spill-{name}")


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Service, Service, Clock]]:
    """Replicas "a" (the leader, in a 50 % rollout) and "b"."""
    clock = Clock(time.time())
    a = replica(tmp_path, "a", clock)
    start_rollout(GuardStore(a.engine), at_s=clock.now - 30)
    b = replica(tmp_path, "b", clock)
    try:
        yield a, b, clock
    finally:
        b.close()
        a.close()


def leader_gauges(service: Service) -> dict[str, float | None]:
    get = service.runtime.metrics.registry.get_sample_value
    out = {}
    for detector in DETECTORS:
        for name in ("slaguard_detector_score", "slaguard_detector_threshold"):
            out[f"{name}{{{detector}}}"] = get(name, {"detector": detector})
    for arm in ARMS:
        out[f"arm {arm}"] = get("slaguard_rollout_arm_sla_violation_ratio", {"arm": arm})
    return out


def all_nan(values: dict[str, float | None]) -> bool:
    return all(v is not None and math.isnan(v) for v in values.values())


def target_gauge(service: Service, name: str, target: str) -> float | None:
    card_type, model = TARGETS[target]
    labels = {"target": target, "card_type": card_type, "model": model}
    return service.runtime.metrics.registry.get_sample_value(name, labels)


async def step(service: Service, now_s: float) -> None:
    """One mode sync as the loop runs it (readiness first: an unready replica takes no
    lease), then the detectors."""
    await service.readiness()
    await service.runtime.modes.sync(now_s)
    await service.runtime.modes.evaluate(now_s)
    await service.modes.wait_for_delivery()


def test_only_the_leader_publishes_detector_scores_thresholds_and_arm_ratios(
    pair: tuple[Service, Service, Clock],
) -> None:
    """Followers exported 0 for them, and an ex-leader kept its last values: the
    dashboards' `max` across instances showed a follower's 0 or a stale ex-leader."""
    a, b, clock = pair
    now = clock.now

    async def run() -> None:
        for service in (a, b):
            for sample in arm_samples(now - 5):
                service.runtime.modes.on_outcome(sample)
            await step(service, now)
        led = leader_gauges(a)
        assert led["slaguard_detector_threshold{hot_spot}"] == pytest.approx(0.2)
        assert led["arm learned"] == pytest.approx(0.4)  # 2 in every 5 missed
        assert all_nan(leader_gauges(b)), leader_gauges(b)
        a.modes.replica.lease.close()  # "a" stalls; "b" takes the lead
        await step(b, now + 1)
        await step(a, now + 1)
        assert not a.modes.replica.is_leader
        assert all_nan(leader_gauges(a)), leader_gauges(a)
        assert leader_gauges(b)["slaguard_detector_threshold{hot_spot}"] == pytest.approx(0.2)

    asyncio.run(run())


def test_a_target_the_guard_has_not_scored_reads_nan_and_a_demoted_one_says_so(
    pair: tuple[Service, Service, Clock],
) -> None:
    """The router reads 0 for an unscored target and the gauge exported that 0, so a slow
    target, demoted and then too thin to score, read 0.0 ("normal") for 16 minutes."""
    a, b, clock = pair
    now = clock.now

    async def run() -> None:
        await step(a, now)  # leads with no TTFT data: nothing scored
        await ServiceLoops(a.runtime).hardware_refresh(now)
        for target in TARGETS:
            z = target_gauge(a, "slaguard_target_ttft_p99_zscore", target)
            assert z is not None and math.isnan(z), (target, z)
        # what a leader publishes once it scored h100-8b and demoted l40s-8b-0
        inputs = RouterInputs({"h100-8b": 4.2}, frozenset({"l40s-8b-0"}))
        a.modes.replica.lease.publish(inputs.to_text("a", now))
        await b.runtime.modes.sync(now)
        await ServiceLoops(b.runtime).hardware_refresh(now)
        assert target_gauge(b, "slaguard_target_ttft_p99_zscore", "h100-8b") == 4.2
        z = target_gauge(b, "slaguard_target_ttft_p99_zscore", "l40s-8b-0")
        assert z is not None and math.isnan(z)
        assert target_gauge(b, "slaguard_target_demoted", "l40s-8b-0") == 1
        assert target_gauge(b, "slaguard_target_demoted", "h100-8b") == 0

    asyncio.run(run())
