"""Two real `slaguard serve` processes on one PostgreSQL database: the leader's jitter
Z-scores and demotions reach the other replica's router.

All the traffic goes through the leader, so only its detectors see a target slow down
(the guard runs on the demo's time scale: TTFT p99 over 6 s, demotion after 2 s). The
other replica never sees a sample and still routes around the demoted target within a
second or so of the leader (the leader publishes at its 500 ms sync, the other takes it
at its own).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e.serve import ServeReplica, leaders, serve_pair
from helpers import FAST_GUARD as GUARD
from helpers import wait_for
from sqlalchemy.engine import URL

from slaguard.audit.engine import create_audit_engine
from slaguard.audit.migrate import upgrade
from slaguard.guard.config import GuardConfig
from slaguard.guard.leader import lease_for
from slaguard.guard.router_inputs import ROUTER_MAX_AGE_S, RouterInputs
from slaguard.guard.runtime import GuardReplica
from slaguard.guard.samples import GuardSample
from slaguard.notify.console import ConsoleNotifier

MODEL = "llama3.1-8b"
CARDS = ("h100", "h200", "a100", "l40s")
FLEET = {"targets": [{"id": f"{c}-8b", "model": MODEL, "card": c} for c in CARDS]}
SLOW = "h200-8b"
PROPAGATION_S = 1.5
"""Leader's evaluation -> its sync publishes (<= 0.5 s) -> the other's sync (<= 0.5 s)."""


@pytest.fixture
def pair(pg_url: URL, tmp_path: Path) -> Iterator[tuple[ServeReplica, ServeReplica]]:
    config = {"telemetry": {"scrape": False, "stale_after_s": 300}, "guard": GUARD}
    with serve_pair(pg_url, tmp_path, FLEET, config) as replicas:
        yield replicas


def _traffic(
    leader: ServeReplica, seconds: float, slow: bool, stop: threading.Event | None = None
) -> None:
    """Round-robin traffic through the leader, each request's feedback at once; the slow
    target answers 8x slower when `slow`."""
    c = leader.client
    end = time.monotonic() + seconds
    while time.monotonic() < end and not (stop is not None and stop.is_set()):
        for t in CARDS:
            assert c.post("/v1/telemetry", json={"target": f"{t}-8b", "queue_depth": 0}).is_success
        for _ in range(8):
            r = c.post("/v1/route", json={"model": MODEL, "prompt_tokens": 300,
                                          "max_new_tokens": 20}).json()  # fmt: skip
            if r["target"] is None:
                continue
            ttft = 0.05 * (8.0 if slow and r["target"] == SLOW else 1.0)
            fb = {"decision_id": r["decision_id"], "ttft_s": ttft, "e2e_s": ttft + 0.2}
            assert c.post("/v1/feedback", json=fb).status_code == 200


@pytest.mark.postgres
@pytest.mark.slow
def test_the_leaders_demotion_reaches_the_other_replicas_router(
    pair: tuple[ServeReplica, ServeReplica],
) -> None:
    (leader,) = wait_for("one leader", lambda: len(leaders(pair)) == 1 and leaders(pair), 5.0)
    other = pair[1] if leader is pair[0] else pair[0]
    # baselines a window (6 s) old on every target, then the H200 slows down 8x
    _traffic(leader, 9.0, slow=False)
    assert leader.demoted() == [] and other.demoted() == []
    stop = threading.Event()
    sender = threading.Thread(target=_traffic, args=(leader, 30.0, True, stop))
    sender.start()
    seen: dict[str, float] = {}
    try:
        deadline = time.monotonic() + 25.0
        while len(seen) < 2 and time.monotonic() < deadline:
            for serve in (leader, other):
                if serve.name not in seen and serve.demoted() == [SLOW]:
                    seen[serve.name] = time.monotonic()
            time.sleep(0.02)
    finally:
        stop.set()
        sender.join()
    assert set(seen) == {leader.name, other.name}, seen
    lag_s = seen[other.name] - seen[leader.name]
    assert lag_s < PROPAGATION_S, lag_s
    assert other.jitter(SLOW) >= 3.5, other.status()["targets"]
    assert other.status()["guard"]["leader"] is False
    print(f"demoted on the other replica {lag_s:.2f} s after the leader")


def test_sqlite_replicas_take_the_leaders_inputs_and_drop_stale_ones(tmp_path: Path) -> None:
    """Two replicas on one SQLite file (file lock, inputs in a file beside it), on a
    simulated clock: the follower takes the leader's demotion at its sync and forgets it
    once nothing newer than `ROUTER_MAX_AGE_S` was published."""
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    engine = create_audit_engine(url)
    upgrade(engine)
    config = GuardConfig.model_validate(GUARD)
    a, b = (
        GuardReplica(
            engine, lease_for(engine.url, rid), ConsoleNotifier(), replica_id=rid, config=config
        )
        for rid in ("a", "b")
    )
    try:
        now = 1_000.0
        assert a.sync(now).leader and not b.sync(now).leader
        now = _slow_h200(a, now)
        assert a.router.demoted == {SLOW}
        a.sync(now)
        b.sync(now + 0.5)
        assert b.router.demoted == {SLOW}
        assert b.router.jitter_z == pytest.approx(a.router.jitter_z, abs=0.005)
        b.sync(now + ROUTER_MAX_AGE_S + 0.6)  # the leader went quiet
        assert b.router == RouterInputs()
    finally:
        a.close()
        b.close()
        engine.dispose()


def _slow_h200(leader: GuardReplica, now: float) -> float:
    """20 s of first tokens fed to `leader`, evaluated every second: 6 s normal, then the
    H200 8x slower; the time it ends at."""
    for tick in range(200):
        now += 0.1
        for i, card in enumerate(CARDS):
            slow = tick >= 60 and card == "h200"
            ttft = 0.05 * (8.0 if slow else 1.0) * (1.0 + 0.05 * ((tick + i) % 4))
            leader.observe(GuardSample(now, f"{card}-8b", card, MODEL, True, 1.0, ttft))
        if tick % 10 == 9:
            leader.evaluate(now)
    return now


def test_a_restarted_sqlite_replica_keeps_its_demotion(tmp_path: Path) -> None:
    """The only replica, restarted while a target is slow, took the lock file at its first
    poll without reading what it had published there, so it led with no demotion: in a
    drill the 5x slow H200 got its full share back after a restart of `slaguard serve`,
    scored normal against a baseline learned from its slow answers, and stayed so."""
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    engine = create_audit_engine(url)
    upgrade(engine)
    config = GuardConfig.model_validate(GUARD)

    def replica(rid: str) -> GuardReplica:
        lease = lease_for(engine.url, rid)
        return GuardReplica(engine, lease, ConsoleNotifier(), replica_id=rid, config=config)

    first, restarted = replica("a"), None
    try:
        now = 1_000.0
        assert first.sync(now).leader
        now = _slow_h200(first, now)
        first.sync(now)
        assert first.router.demoted == {SLOW}
        first.close()
        restarted = replica("a")
        assert restarted.sync(now + 5.0).leader
        restarted.evaluate(now + 5.5)
        assert restarted.router.demoted == {SLOW}
    finally:
        first.close()
        if restarted is not None:
            restarted.close()
        engine.dispose()
