"""KV-cache budget across devices (reference scheduler, section 2).

Three layers: the static reservation leaves `V_kv(h)` (see `Target.kv_budget_gb`); a
soft-isolated shared pool per target evicts least-recently-used cached prefix blocks when
an admission would overflow; cross-device spillover is gated by the destination's relative
free ratio and the request's priority, and refused when the KV transfer is too slow.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from slaguard.fleet.fleet import Target
from slaguard.fleet.request import Priority
from slaguard.scheduler.config import SpillConfig

BLOCK_TOKENS = 512
"""Prefix-cache block size (Mooncake's hash_ids are 512-token blocks)."""


class KvPool:
    """One target's KV pool: active requests plus an LRU cache of prefix blocks."""

    def __init__(self, target: Target) -> None:
        self.bytes_per_token = target.model.kv_bytes_per_token
        self.capacity_tokens = int(target.kv_budget_gb * 1e9 / self.bytes_per_token)
        self.active: dict[str, int] = {}
        self.active_tokens = 0
        self.cached: OrderedDict[int, int] = OrderedDict()
        self.cached_tokens = 0
        self.evictions = 0

    @property
    def used_tokens(self) -> int:
        return self.active_tokens + self.cached_tokens

    @property
    def used_gb(self) -> float:
        return self.used_tokens * self.bytes_per_token / 1e9

    @property
    def free_ratio(self) -> float:
        return max(0.0, 1.0 - self.active_tokens / self.capacity_tokens)

    def reusable_tokens(self, blocks: tuple[int, ...]) -> int:
        """Tokens of the longest cached leading run of `blocks` (prefix reuse)."""
        n = 0
        for b in blocks:
            if b not in self.cached:
                break
            n += 1
        return n * BLOCK_TOKENS

    def admit(self, request_id: str, tokens: int, blocks: tuple[int, ...] = ()) -> bool:
        """Reserve `tokens` for a request, evicting LRU cached blocks if needed.

        Returns False (and changes nothing) when even an empty cache cannot make room.
        """
        if self.active_tokens + tokens > self.capacity_tokens:
            return False
        while self.used_tokens + tokens > self.capacity_tokens and self.cached:
            _, size = self.cached.popitem(last=False)
            self.cached_tokens -= size
            self.evictions += 1
        for b in blocks:
            if b in self.cached:
                self.cached.move_to_end(b)
        self.active[request_id] = tokens
        self.active_tokens += tokens
        return True

    def release(self, request_id: str, blocks: tuple[int, ...] = ()) -> None:
        """Free a request's KV; its prefix blocks stay cached for reuse until evicted."""
        tokens = self.active.pop(request_id, 0)
        self.active_tokens -= tokens
        self.cache_prefix(blocks)

    def cache_prefix(self, blocks: tuple[int, ...]) -> None:
        """Make a request's prefix blocks reusable once its prefill has computed them
        (vLLM and SGLang cache computed blocks while the request still runs; waiting for
        its end sent every copy of a flooding prompt through a full prefill), and
        refresh the ones already cached. While the request runs its blocks are counted
        twice, in its reservation and in the cache: admission (on active tokens) is
        unchanged, but other prefixes are evicted a little earlier than in an engine that
        shares the blocks, so hit rates err low."""
        for b in blocks:
            if b in self.cached:
                self.cached.move_to_end(b)
                continue
            if self.used_tokens + BLOCK_TOKENS > self.capacity_tokens:
                break
            self.cached[b] = BLOCK_TOKENS
            self.cached_tokens += BLOCK_TOKENS

    def clear_cache(self) -> None:
        """Forget every cached prefix block (the target failed)."""
        self.cached.clear()
        self.cached_tokens = 0


class PrefixDirectory:
    """Where each prompt prefix was last served (its "home"), bounded LRU."""

    def __init__(self, max_entries: int = 100_000) -> None:
        self.max_entries = max_entries
        self._home: OrderedDict[str, int] = OrderedDict()

    def home(self, prefix_id: str | None) -> int | None:
        if prefix_id is None:
            return None
        return self._home.get(prefix_id)

    def record(self, prefix_id: str | None, target_index: int) -> None:
        if prefix_id is None:
            return
        self._home[prefix_id] = target_index
        self._home.move_to_end(prefix_id)
        if len(self._home) > self.max_entries:
            self._home.popitem(last=False)


@dataclass(frozen=True, slots=True)
class SpillVerdict:
    allowed: bool
    reason: str
    transfer_s: float


def spill_share(dest_free_ratio: float, priority: Priority, cfg: SpillConfig) -> float:
    """Share of new requests that may probe spillover at this destination free ratio.

    >= 50 % free: all; 30-50 %: half; 10-30 %: high and normal; < 10 %: high only.
    """
    if dest_free_ratio >= cfg.all_free_ratio:
        return 1.0
    if dest_free_ratio >= cfg.half_free_ratio:
        return cfg.half_share
    if dest_free_ratio >= cfg.high_only_below:
        return 1.0 if priority is not Priority.LOW else 0.0
    return 1.0 if priority is Priority.HIGH else 0.0


def kv_transfer_s(
    tokens: int, bytes_per_token: float, src: Target, dst: Target, cfg: SpillConfig
) -> float:
    """Time to move a prompt's KV across cards: the slower link, capped at PCIe Gen5."""
    gbps = min(src.card.interconnect_gbps, dst.card.interconnect_gbps, cfg.transfer_gbps_cap)
    return tokens * bytes_per_token / (gbps * 1e9)


def decide_spill(
    *,
    dest_free_ratio: float,
    priority: Priority,
    probe: float,
    transfer_s: float,
    cfg: SpillConfig,
) -> SpillVerdict:
    """May this request spill from its saturated home to the destination?

    `probe` is the request's deterministic position in [0, 1) (a hash of its id).
    """
    share = spill_share(dest_free_ratio, priority, cfg)
    if probe >= share:
        return SpillVerdict(
            False,
            f"destination free ratio {dest_free_ratio:.2f} lets {share:.0%} of "
            f"{priority.value} requests spill",
            transfer_s,
        )
    if transfer_s > cfg.timeout_s:
        return SpillVerdict(
            False,
            f"KV transfer {transfer_s:.2f}s exceeds spill timeout {cfg.timeout_s}s",
            transfer_s,
        )
    return SpillVerdict(
        True, f"home saturated; destination free ratio {dest_free_ratio:.2f}", transfer_s
    )
