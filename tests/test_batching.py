"""Continuous batching: prompt-length buckets, thresholds, refill, preemption, factor decay."""

from __future__ import annotations

from helpers import req

from slaguard.fleet import Priority, Request
from slaguard.scheduler.batching import Batcher, bucket_of
from slaguard.scheduler.config import BatchingConfig

CFG = BatchingConfig()


def always(_: Request) -> bool:
    return True


def test_buckets_split_by_prompt_length() -> None:
    assert bucket_of(2047, CFG) == "short"
    assert bucket_of(2048, CFG) == "medium"
    assert bucket_of(32_768, CFG) == "medium"
    assert bucket_of(32_769, CFG) == "long"


def test_each_bucket_has_its_own_threshold_and_refills_at_once() -> None:
    b = Batcher(CFG)
    for i in range(60):
        b.submit(req(f"s{i}", prompt=100), 0.0)
    for i in range(4):
        b.submit(req(f"l{i}", prompt=40_000), 0.0)
    res = b.tick(0.1, always, always)
    assert len(res.admitted) == 48 + 2
    assert b.queued == 12 + 2
    b.finish("s0")
    b.finish("l0")
    res = b.tick(0.2, always, always)
    assert {r.request_id for r in res.admitted} == {"s48", "l2"}


def test_kv_refusal_keeps_request_queued() -> None:
    b = Batcher(CFG)
    b.submit(req("a"), 0.0)
    assert b.tick(0.1, lambda r: False, always).admitted == []
    assert b.queued == 1


def test_short_bucket_preempts_lowest_priority_for_higher() -> None:
    b = Batcher(CFG)
    for i in range(48):
        prio = Priority.LOW if i == 7 else Priority.NORMAL
        b.submit(req(f"n{i}", prompt=100, priority=prio), 0.0)
    b.tick(0.1, always, always)
    b.submit(req("hi", prompt=100, priority=Priority.HIGH), 0.15)
    released: list[str] = []
    res = b.tick(0.2, always, lambda r: released.append(r.request_id) or True)
    assert [r.request_id for r in res.preempted] == ["n7"] and released == ["n7"]
    assert [r.request_id for r in res.admitted] == ["hi"]
    assert b.queued == 1  # the victim waits again


def test_medium_bucket_needs_a_two_rank_gap_and_long_never_preempts() -> None:
    b = Batcher(CFG)
    for i in range(16):
        b.submit(req(f"m{i}", prompt=4000, priority=Priority.NORMAL), 0.0)
    for i in range(2):
        b.submit(req(f"L{i}", prompt=50_000, priority=Priority.LOW), 0.0)
    b.tick(0.1, always, always)
    b.submit(req("hm", prompt=4000, priority=Priority.HIGH), 0.1)
    b.submit(req("hl", prompt=50_000, priority=Priority.HIGH), 0.1)
    res = b.tick(0.2, always, always)
    assert res.preempted == [] and res.admitted == []  # normal vs high: gap 1 < 2


def test_correction_factor_scales_threshold_and_decays_when_global_loop_dies() -> None:
    b = Batcher(CFG)
    b.set_factor(0.5, now_s=1.0)
    assert b.threshold("short") == 24 and b.threshold("medium") == 8
    for i in range(40):
        b.submit(req(f"s{i}", prompt=100), 1.0)
    assert len(b.tick(1.1, always, always).admitted) == 24
    # no new signal for more than the TTL: batching goes on at the base threshold
    assert len(b.tick(7.0, always, always).admitted) == 16
    assert b.factor == 1.0
