"""Sliding-window quantiles per key: a ring of log-bucket histograms, one per time slice.

The bucket mapping is DDSketch's (relative accuracy `a`: bucket i holds
(gamma^(i-1), gamma^i] with gamma = (1+a)/(1-a)), so a quantile read from a bucket is within
`a` of the true value. The `ddsketch` package has no subtraction, so a sliding window would
mean merging every slice's sketch per key per evaluation in pure Python; here one numpy
running total per key is updated on insert and on slice expiry, and a quantile read is one
cumulative sum. Memory is bounded: keys x (slices + 1) x buckets counters.
"""

from __future__ import annotations

import math

import numpy as np


class SlidingLogHistogram:
    """Per-key counts of positive values over the last `slice_count` slices of `slice_s`."""

    def __init__(
        self,
        slice_s: float,
        slice_count: int,
        relative_accuracy: float,
        min_value: float,
        max_value: float,
    ) -> None:
        self.slice_s = slice_s
        self.slice_count = slice_count
        self.gamma = (1 + relative_accuracy) / (1 - relative_accuracy)
        self._log_gamma = math.log(self.gamma)
        self._offset = math.floor(math.log(min_value) / self._log_gamma)
        top = math.ceil(math.log(max_value) / self._log_gamma)
        self.bucket_count = top - self._offset + 2  # + underflow (0) and overflow (last)
        self._rings: dict[str, np.ndarray] = {}
        self._totals: dict[str, np.ndarray] = {}
        self._newest: dict[str, int] = {}

    def bucket_of(self, value: float) -> int:
        """Bucket index of a value; +inf lands in the overflow bucket."""
        if value == math.inf:
            return self.bucket_count - 1
        idx = math.ceil(math.log(value) / self._log_gamma) - self._offset + 1
        return min(max(idx, 0), self.bucket_count - 1)

    def value_of(self, bucket: int) -> float:
        """Representative value of a bucket (within the relative accuracy of its members).

        The overflow bucket reads as the top of the range: finite, so scores stay finite.
        """
        bucket = min(bucket, self.bucket_count - 2)
        upper = self.gamma ** (bucket + self._offset - 1)
        return 2 * upper / (1 + self.gamma)

    def add(self, key: str, at_s: float, value: float) -> None:
        """Count `value` (> 0; above the range, +inf included, lands in overflow) at `at_s`."""
        if not value > 0:
            raise ValueError(f"histogram values must be > 0, got {value}")
        if key not in self._rings:
            self._rings[key] = np.zeros((self.slice_count, self.bucket_count), dtype=np.uint32)
            self._totals[key] = np.zeros(self.bucket_count, dtype=np.int64)
            self._newest[key] = int(at_s // self.slice_s)
        slice_id = int(at_s // self.slice_s)
        self._expire_key(key, slice_id)
        if slice_id <= self._newest[key] - self.slice_count:
            return  # older than the window: ignored
        bucket = self.bucket_of(value)
        self._rings[key][slice_id % self.slice_count, bucket] += 1
        self._totals[key][bucket] += 1

    def _expire_key(self, key: str, newest_slice: int) -> None:
        """Clear the ring positions that slices up to `newest_slice` will reuse."""
        previous = self._newest[key]
        if newest_slice <= previous:
            return
        ring = self._rings[key]
        for slice_id in range(
            max(previous + 1, newest_slice - self.slice_count + 1), newest_slice + 1
        ):
            pos = slice_id % self.slice_count
            self._totals[key] -= ring[pos]
            ring[pos] = 0
        self._newest[key] = newest_slice

    def advance(self, now_s: float) -> None:
        """Drop slices older than the window for every key (call before reading)."""
        newest = int(now_s // self.slice_s)
        for key in self._rings:
            self._expire_key(key, newest)

    def count(self, key: str) -> int:
        """Samples of `key` in the window."""
        total = self._totals.get(key)
        return 0 if total is None else int(total.sum())

    def counts(self, key: str) -> np.ndarray:
        """Bucket counts of `key` over the window (zeros for an unknown key)."""
        total = self._totals.get(key)
        return np.zeros(self.bucket_count, dtype=np.int64) if total is None else total.copy()

    def quantile_of(self, counts: np.ndarray, q: float) -> float:
        """The q-quantile of a bucket-count array (NaN when empty)."""
        n = int(counts.sum())
        if n == 0:
            return math.nan
        rank = math.floor(q * (n - 1)) + 1
        return self.value_of(int(np.searchsorted(np.cumsum(counts), rank)))

    def quantile(self, key: str, q: float) -> float:
        """The q-quantile of `key` in the window (NaN when the key has no samples)."""
        total = self._totals.get(key)
        return math.nan if total is None else self.quantile_of(total, q)
