"""Followers forward their guard samples and arrivals to the leader: the SQLite spool
directory and what the leader does with them, on a simulated clock with two replicas on
one SQLite file (the batch format: `test_replicas_forward_format`)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import FAST_GUARD as GUARD
from sqlalchemy import Engine

from slaguard.audit.engine import create_audit_engine
from slaguard.audit.migrate import upgrade
from slaguard.guard.breaker import BreakerPhase
from slaguard.guard.config import GuardConfig
from slaguard.guard.forward import (
    MAX_AGE_S,
    SpoolDir,
)
from slaguard.guard.leader import lease_for
from slaguard.guard.lease_file import FileLeaderLease
from slaguard.guard.runtime import HANDED_PARTIAL_HOLD_S, GuardReplica
from slaguard.guard.samples import GuardSample
from slaguard.notify.console import ConsoleNotifier
from slaguard.scheduler.rollout import ModeKind, RolloutPlan

MODEL = "llama3.1-8b"
CARDS = ("h100", "h200", "a100", "l40s")
SLOW = "h200-8b"


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = create_audit_engine(f"sqlite:///{tmp_path / 'audit.db'}")
    upgrade(engine)
    yield engine
    engine.dispose()


def _replicas(engine: Engine) -> tuple[GuardReplica, GuardReplica]:
    config = GuardConfig.model_validate(GUARD)
    a, b = (
        GuardReplica(
            engine, lease_for(engine.url, rid), ConsoleNotifier(), replica_id=rid, config=config
        )
        for rid in ("a", "b")
    )
    return a, b


def _h200_slowing_down_through(
    follower: GuardReplica, leader: GuardReplica, now: float, ticks: int
) -> Iterator[float]:
    """100 ms ticks of traffic through `follower`: 6 s normal, then the H200 8x slower;
    both replicas sync every 500 ms; yields the time every second (to evaluate)."""
    for tick in range(1, ticks + 1):
        now += 0.1
        for i, card in enumerate(CARDS):
            slow = tick > 60 and card == "h200"
            ttft = 0.05 * (8.0 if slow else 1.0) * (1.0 + 0.05 * ((tick + i) % 4))
            follower.observe(GuardSample(now, f"{card}-8b", card, MODEL, True, 1.0, ttft))
        if tick % 5 == 0:
            leader.sync(now)
            follower.sync(now)
        if tick % 10 == 0:
            yield now


def test_the_leader_demotes_a_target_only_the_follower_saw(engine: Engine) -> None:
    """All the traffic goes through the follower: 6 s normal, then the H200 8x slower.
    The follower's samples reach the leader's detectors through the spool at each sync,
    and the leader demotes the H200 (2 s of high Z-score) as if it had seen them."""
    a, b = _replicas(engine)
    assert isinstance(b.lease, FileLeaderLease)
    spool = b.lease.spool.path
    try:
        start = now = 1_000.0
        assert a.sync(start).leader and not b.sync(start).leader
        demoted_at = None
        for now in _h200_slowing_down_through(b, a, start, ticks=200):
            assert b.evaluate(now) == []
            a.evaluate(now)
            if demoted_at is None and a.router.demoted == {SLOW}:
                demoted_at = now
        assert b.stats.forwarded_out == 800 and a.stats.forwarded_in == 800
        assert demoted_at is not None and demoted_at - 1_006.0 <= 4.0, demoted_at
        assert list(spool.glob("*.batch")) == []  # the leader took every batch
        b.sync(now + 0.5)
        assert b.router.demoted == {SLOW}  # and published its verdict back
        print(f"demoted {demoted_at - 1_006.0:.1f} s (simulated) after the slowdown")
    finally:
        a.close()
        b.close()


def test_the_leader_drops_batches_older_than_max_age(engine: Engine) -> None:
    """At most once, and only fresh: what waited longer than MAX_AGE_S (no leader reading
    it) is removed unread instead of being fed as if it had just happened."""
    a, b = _replicas(engine)
    try:
        now = 2_000.0
        assert a.sync(now).leader and not b.sync(now).leader
        b.observe_arrival(now, "p")
        b.observe(GuardSample(now, "h100-8b", "h100", MODEL, True, 1.0, 0.05))
        b.sync(now)
        assert b.stats.forwarded_out == 2
        a.evaluate(now + MAX_AGE_S + 1.0)
        assert a.stats.forwarded_in == 0 and a.lease.take_forwarded() == []
        b.observe_arrival(now + 12.0, "p")
        b.sync(now + 12.0)
        a.evaluate(now + 12.5)
        assert a.stats.forwarded_in == 1
    finally:
        a.close()
        b.close()


def test_the_spool_is_bounded_and_abandoned_partial_files_are_removed(tmp_path: Path) -> None:
    """A stopped leader reads nothing: followers stop at `max_files`; a follower that died
    mid-write leaves a `.tmp` the leader removes once it is older than MAX_AGE_S."""
    spool = SpoolDir(tmp_path / "spool", "replica-b", max_files=3)
    spool.put(["a", "b"])
    spool.put(["c", "d"])  # 2 waiting < 3: both written
    spool.put(["e"])  # 4 waiting >= 3: dropped
    assert sorted(p.read_text() for p in spool.path.glob("*.batch")) == ["a", "b", "c", "d"]
    old = spool.path / ".replica-c.1.000000000001.tmp"
    fresh = spool.path / ".replica-c.1.000000000002.tmp"
    old.write_text("half")
    fresh.write_text("half")
    past = time.time() - MAX_AGE_S - 5.0
    os.utime(old, (past, past))
    assert spool.take() == ["a", "b", "c", "d"]
    assert not old.exists() and fresh.exists()
    assert spool.take() == []


@pytest.mark.parametrize("mode", [0o777, 0o1777])
def test_a_spool_every_user_can_write_is_neither_read_nor_written(
    tmp_path: Path, mode: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Its name is predictable (beside the SQLite file): a spool another local user made,
    or could write to, fed the leader their batches, forged samples that could trip the
    guard and roll the fleet back."""
    path = tmp_path / "spool"
    path.mkdir()
    path.chmod(mode)
    (path / "planted.1.000000000001.batch").write_text("forged")
    spool = SpoolDir(path, "replica-b")
    with caplog.at_level(logging.WARNING, logger="slaguard.guard.forward"):
        assert spool.take() == []
        spool.put(["mine"])
    assert sorted(p.name for p in path.iterdir()) == ["planted.1.000000000001.batch"]
    assert any(
        f"guard sample spool {path} is writable by every user" in m and "fix: remove it" in m
        for m in caplog.messages
    ), caplog.messages
    path.chmod(0o700)
    assert spool.take() == ["forged"]  # the owner made it private: read again


def test_a_new_leader_keeps_the_demotions_of_the_last_one(engine: Engine) -> None:
    """The new leader's detectors start empty: it published no demotion, and a target
    still 5x slow got its full share back for ~50 s until it was demoted again."""
    a, b = _replicas(engine)
    try:
        start = now = 1_000.0
        assert a.sync(start).leader and not b.sync(start).leader
        for now in _h200_slowing_down_through(b, a, start, ticks=120):
            a.evaluate(now)
        a.sync(now)
        assert a.router.demoted == {SLOW}
        a.close()  # the leader goes; b takes over with no samples of its own
        now += 1.0
        assert b.sync(now).leader
        b.evaluate(now)
        assert b.router.demoted == {SLOW}
    finally:
        a.close()
        b.close()


def test_a_follower_with_another_fleet_file_says_so_once(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """Replicas with different fleet files on one database started and ran without a
    word; the shared guard judged targets only one of them routes to."""
    config = GuardConfig.model_validate(GUARD)
    a, b, c = (
        GuardReplica(
            engine, lease_for(engine.url, rid), ConsoleNotifier(), replica_id=rid,
            config=config, fleet_digest=digest,
        )
        for rid, digest in (("a", "fleet-one"), ("b", "fleet-two"), ("c", "fleet-one"))
    )  # fmt: skip
    try:
        now = 1_000.0
        assert a.sync(now).leader
        a.evaluate(now)
        for _ in range(3):
            now += 0.5
            a.sync(now)
            b.sync(now)
            c.sync(now)
        assert b.fleet_matches_leader is False and c.fleet_matches_leader is True
        assert a.fleet_matches_leader is None  # the leader compares with nobody
        warned = [r for r in caplog.records if "another fleet file" in r.getMessage()]
        assert len(warned) == 1 and "fleet-one" in warned[0].getMessage()
    finally:
        for replica in (a, b, c):
            replica.close()


def test_a_new_leader_keeps_the_baseline_tripped_breaker_of_the_last_one(
    engine: Engine,
) -> None:
    """A trip during the round-robin baseline switches nothing; only the open breaker kept
    the plan from entering its first stage. That breaker lived in the old leader's memory:
    the new leader, its detectors empty, advanced the plan at once while the flood went
    on. It now reopens the breaker from the incident the trip left open."""
    config = GuardConfig.model_validate({**GUARD, "breaker": {"cooldown_s": 30.0}})
    plan = RolloutPlan(baseline_s=20.0, stage_s=600.0)
    a, b = (
        GuardReplica(
            engine, lease_for(engine.url, rid), ConsoleNotifier(), replica_id=rid,
            config=config, plan=plan,
        )
        for rid in ("a", "b")
    )  # fmt: skip
    try:
        start = now = time.time()  # the migration stamped the baseline's start: now
        assert a.sync(now).leader and not b.sync(now).leader
        for _ in range(15):  # one prompt is the whole traffic: a flood
            for i in range(40):
                a.observe_arrival(now + i / 40, "the-same-prompt")
            now += 1.0
            a.evaluate(now)
        assert a.guard.incidents.current is not None, "the flood tripped"
        assert a.current().kind is ModeKind.ROUND_ROBIN  # the baseline: nothing to switch
        a.close()
        now = start + 25.0  # the baseline is due, the flood goes on, b knows nothing of it
        assert b.sync(now).leader
        b.evaluate(now)
        assert b.current().kind is ModeKind.ROUND_ROBIN, "no advance with the breaker open"
        assert b.guard.breaker.phase is BreakerPhase.OPEN
        for _ in range(40):  # the flood ends: varied prompts, good evaluations
            for i in range(40):
                b.observe_arrival(now + i / 40, f"prompt-{now}-{i}")
            now += 1.0
            b.sync(now)
            b.evaluate(now)
        assert b.current().label == "rollout(10)", "cleared after the cooldown, then advanced"
        assert b.guard.incidents.current is None, "and the baseline's incident resolved"
    finally:
        a.close()
        b.close()


def _handed_tiers(replica: GuardReplica) -> set[tuple[str, str]]:
    """The tiers whose handed work the leader's tier test is counting (each window alike)."""
    return set(replica.guard.ttft._tier_test.windows[0]._handed._since)


def test_handed_work_waits_until_every_replica_sends_it(engine: Engine) -> None:
    """During a rolling upgrade the leader counted handed work from the upgraded replicas
    only; each upgrade stepped every tier's count up against a 30-minute baseline, and the
    tiers read as handed >= 1.25x their usual work (excused as loaded) for minutes."""
    a, b = _replicas(engine)
    try:
        now = 1_000.0
        assert a.sync(now).leader and not b.sync(now).leader
        assert _handed_tiers(a) == set()  # taking the lead restarted them
        old = '{"r":"b","at":%s,"s":[],"a":[[%s,null]]}'  # an earlier version's batch
        for _k in range(5):
            a.observe_arrival(now, None, ("l40s", MODEL, 500))
            a.lease.forward([old % (now, now)])
            a.evaluate(now)
            now += 1.0
        assert a.stats.handed_work_partial and _handed_tiers(a) == set()
        now += HANDED_PARTIAL_HOLD_S  # the old replica was upgraded: its batches stop
        for _k in range(3):
            a.observe_arrival(now, None, ("l40s", MODEL, 500))
            a.evaluate(now)
            now += 1.0
        assert not a.stats.handed_work_partial and _handed_tiers(a) == {("l40s", MODEL)}
        a.lease.forward([old % (now, now)])  # a replica of the earlier version is back
        a.evaluate(now)
        # unknown at once: a warm count left unfed read as "handed less than usual"
        assert a.stats.handed_work_partial and _handed_tiers(a) == set()
        now += HANDED_PARTIAL_HOLD_S + 1.0
        a.observe_arrival(now, None, ("l40s", MODEL, 500))
        a.evaluate(now)
        b.observe_arrival(now, None, ("l40s", MODEL, 500))
        b.sync(now)  # forwarded, and counted by b's own detectors: its share alone
        assert _handed_tiers(b) == {("l40s", MODEL)}
        a.close()
        assert b.sync(now + 1.0).leader
        assert _handed_tiers(b) == set()  # as leader it counts everyone's: a new baseline
    finally:
        a.close()
        b.close()
