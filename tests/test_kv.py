"""KV budget: LRU pool, prefix reuse, spillover tiers and transfer penalty."""

from __future__ import annotations

import pytest

from slaguard.fleet import Priority, load_fleet
from slaguard.scheduler.batching import Batcher
from slaguard.scheduler.config import BatchingConfig, SpillConfig
from slaguard.scheduler.kv import (
    BLOCK_TOKENS,
    KvPool,
    PrefixDirectory,
    decide_spill,
    kv_transfer_s,
    spill_share,
)
from slaguard.sim.latency import LatencyModel
from slaguard.sim.replica import Replica

CFG = SpillConfig()


@pytest.mark.parametrize(
    ("free", "prio", "share"),
    [
        (0.60, Priority.LOW, 1.0),
        (0.50, Priority.LOW, 1.0),
        (0.49, Priority.LOW, 0.5),
        (0.30, Priority.HIGH, 0.5),
        (0.29, Priority.NORMAL, 1.0),
        (0.29, Priority.LOW, 0.0),
        (0.10, Priority.NORMAL, 1.0),
        (0.09, Priority.NORMAL, 0.0),
        (0.09, Priority.HIGH, 1.0),
        (0.00, Priority.HIGH, 1.0),
    ],
)
def test_spill_tiers_by_relative_free_ratio(free: float, prio: Priority, share: float) -> None:
    assert spill_share(free, prio, CFG) == share


def test_half_tier_lets_about_half_probe() -> None:
    allowed = sum(
        decide_spill(
            dest_free_ratio=0.4, priority=Priority.NORMAL, probe=i / 1000, transfer_s=0.01, cfg=CFG
        ).allowed
        for i in range(1000)
    )
    assert allowed == 500


def test_spill_refused_past_timeout() -> None:
    v = decide_spill(
        dest_free_ratio=0.9, priority=Priority.HIGH, probe=0.0, transfer_s=2.5, cfg=CFG
    )
    assert not v.allowed and "exceeds spill timeout 2.0s" in v.reason


def test_transfer_uses_slowest_link_capped_at_pcie5() -> None:
    fleet = load_fleet()
    h100, l40s = fleet.target("h100-8b-0"), fleet.target("l40s-8b-0")
    assert kv_transfer_s(8192, 131_072, h100, h100, CFG) == pytest.approx(8192 * 131_072 / 64e9)
    assert kv_transfer_s(1000, 1e6, h100, l40s, CFG) == pytest.approx(1e9 / 64e9)


def test_pool_capacity_is_kv_budget_in_tokens() -> None:
    t = load_fleet().target("l40s-8b-0")
    pool = KvPool(t)
    assert pool.capacity_tokens == int(t.kv_budget_gb * 1e9 / 131_072)
    assert pool.admit("a", pool.capacity_tokens)
    assert not pool.admit("b", 1)
    assert pool.free_ratio == 0.0


def test_lru_eviction_of_cached_prefixes_on_pressure() -> None:
    pool = KvPool(load_fleet().target("l40s-8b-0"))
    cap = pool.capacity_tokens
    pool.admit("a", 1000)
    pool.release("a", blocks=(1, 2, 3))
    assert pool.cached_tokens == 3 * BLOCK_TOKENS and pool.active_tokens == 0
    assert pool.reusable_tokens((1, 2, 3, 4)) == 3 * BLOCK_TOKENS
    assert pool.reusable_tokens((9, 1)) == 0
    pool.admit("touch", 10, blocks=(1,))  # block 1 becomes most recently used
    pool.release("touch")
    assert pool.admit("big", cap - BLOCK_TOKENS)  # needs two evictions
    assert pool.evictions == 2
    assert list(pool.cached) == [1]  # 2 and 3 were least recently used


def test_prefix_directory_is_bounded_lru() -> None:
    d = PrefixDirectory(max_entries=2)
    d.record("a", 1)
    d.record("b", 2)
    d.record("a", 3)
    d.record("c", 4)
    assert d.home("a") == 3 and d.home("b") is None and d.home("c") == 4
    assert d.home(None) is None


def test_prefix_blocks_are_cached_from_the_first_token_and_lost_with_a_failed_target() -> None:
    target = load_fleet().target("l40s-8b-0")
    latency = LatencyModel.load().for_target(target)
    replica = Replica(latency, KvPool(target), Batcher(BatchingConfig()))
    pool = replica.pool
    assert pool.admit("a", 4000, blocks=(1, 2, 3))
    pool.cache_prefix((1, 2, 3))  # prefill done, the request still decodes
    assert pool.reusable_tokens((1, 2, 3)) == 3 * BLOCK_TOKENS
    assert pool.active_tokens == 4000
    replica.drop_all()
    assert pool.active_tokens == 0 and pool.cached_tokens == 0
    assert pool.reusable_tokens((1, 2, 3)) == 0
