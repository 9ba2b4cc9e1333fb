"""Per-key sums over a sliding window of time slices (the tier test's offered work)."""

from __future__ import annotations


class SlidingSum:
    """Per-key totals of amounts added over the last `slice_count` slices of `slice_s`.

    Memory is bounded by keys x slices: a slice older than the window is dropped when the
    key is next written or read.
    """

    def __init__(self, slice_s: float, slice_count: int) -> None:
        self.slice_s = slice_s
        self.slice_count = slice_count
        self._slices: dict[str, dict[int, float]] = {}

    def add(self, key: str, at_s: float, amount: float) -> None:
        """Add `amount` at `at_s` (an amount older than the key's window is ignored)."""
        slices = self._slices.setdefault(key, {})
        slice_id = int(at_s // self.slice_s)
        if slices and slice_id <= max(slices) - self.slice_count:
            return
        slices[slice_id] = slices.get(slice_id, 0.0) + amount
        self._expire(slices, max(slices))

    def total(self, key: str, now_s: float) -> float:
        """Sum of `key` over the window ending at `now_s` (0 for an unknown key)."""
        slices = self._slices.get(key)
        if not slices:
            return 0.0
        self._expire(slices, int(now_s // self.slice_s))
        return sum(slices.values())

    def _expire(self, slices: dict[int, float], newest: int) -> None:
        for slice_id in [s for s in slices if s <= newest - self.slice_count]:
            del slices[slice_id]
