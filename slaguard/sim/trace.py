"""A workload trace as columns: one numpy array per field, not one object per request.

The engine replays tens of thousands of requests per run; columns keep loading, slicing and
fault injection vectorised. Prefix-cache block ids (Mooncake `hash_ids`) are stored as a
compressed sparse row pair (`block_offsets`, `blocks`); `prefix_key` is a 63-bit hash of a
request's full block list (-1 when the trace has no prefix information).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

NO_PREFIX = -1
"""`prefix_key` of a request whose trace carries no prefix blocks (e.g. Azure)."""

BLOCK_TOKENS = 512
"""Tokens per prefix-cache block, as in the Mooncake trace."""

_KEY_MASK = (1 << 63) - 1


class TraceError(ValueError):
    """Bad trace input, worded as one line: `path:line: problem; fix: ...`."""


def prefix_key_of(blocks: Sequence[int] | IntArray) -> int:
    """Stable 63-bit identity of a block list (same blocks, same key, on every machine)."""
    if len(blocks) == 0:
        return NO_PREFIX
    raw = np.asarray(blocks, dtype="<i8").tobytes()
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "little") & _KEY_MASK


def prefix_id_text(key: int) -> str | None:
    """The `Request.prefix_id` form of a key: 16 hex digits, or None without prefix."""
    return None if key == NO_PREFIX else f"{key:016x}"


def offsets_from_lengths(lengths: IntArray) -> IntArray:
    """CSR offsets (n + 1 entries, starting at 0) from per-row lengths."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def gather_rows(offsets: IntArray, values: IntArray, rows: IntArray) -> tuple[IntArray, IntArray]:
    """Select CSR rows (any order, repeats allowed) without a Python loop."""
    lengths = (offsets[1:] - offsets[:-1])[rows]
    new_offsets = offsets_from_lengths(lengths)
    shift = np.repeat(offsets[:-1][rows] - new_offsets[:-1], lengths)
    positions = np.arange(int(new_offsets[-1]), dtype=np.int64) + shift
    return new_offsets, values[positions]


@dataclass(frozen=True, eq=False)
class Trace:
    """Requests sorted by arrival; `row_id` is each request's stable identity in its source."""

    name: str
    source: str
    arrival_s: FloatArray
    prompt_tokens: IntArray
    output_tokens: IntArray
    row_id: IntArray
    prefix_key: IntArray
    block_offsets: IntArray
    blocks: IntArray

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        lengths = {len(self.prompt_tokens), len(self.output_tokens), len(self.row_id)}
        if lengths | {len(self.prefix_key)} != {n} or len(self.block_offsets) != n + 1:
            raise ValueError("trace columns must have one entry per request")

    @classmethod
    def build(
        cls,
        name: str,
        source: str,
        arrival_s: npt.ArrayLike,
        prompt_tokens: npt.ArrayLike,
        output_tokens: npt.ArrayLike,
        block_lists: Sequence[Sequence[int]] | None = None,
        row_id: npt.ArrayLike | None = None,
    ) -> Trace:
        """Columns in source order -> a trace sorted (stably) by arrival."""
        arrivals = np.asarray(arrival_s, dtype=np.float64)
        n = len(arrivals)
        rows = np.arange(n, dtype=np.int64) if row_id is None else np.asarray(row_id, np.int64)
        if block_lists is None:
            offsets = np.zeros(n + 1, dtype=np.int64)
            blocks = np.zeros(0, dtype=np.int64)
            keys = np.full(n, NO_PREFIX, dtype=np.int64)
        else:
            lengths = np.fromiter((len(b) for b in block_lists), dtype=np.int64, count=n)
            offsets = offsets_from_lengths(lengths)
            blocks = np.fromiter(
                (x for b in block_lists for x in b), dtype=np.int64, count=int(offsets[-1])
            )
            keys = np.fromiter((prefix_key_of(b) for b in block_lists), np.int64, count=n)
        trace = cls(
            name,
            source,
            arrivals,
            np.asarray(prompt_tokens, np.int64),
            np.asarray(output_tokens, np.int64),
            rows,
            keys,
            offsets,
            blocks,
        )
        if n > 1 and bool(np.any(np.diff(arrivals) < 0)):
            return trace.take(np.argsort(arrivals, kind="stable"))
        return trace

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def duration_s(self) -> float:
        """Time from the first to the last arrival."""
        return float(self.arrival_s[-1] - self.arrival_s[0]) if len(self) else 0.0

    @property
    def has_prefixes(self) -> bool:
        """Whether any request carries prefix-cache blocks."""
        return bool(np.any(self.prefix_key != NO_PREFIX))

    def prefix_id(self, i: int) -> str | None:
        return prefix_id_text(int(self.prefix_key[i]))

    def prefix_blocks(self, i: int) -> tuple[int, ...]:
        start, end = int(self.block_offsets[i]), int(self.block_offsets[i + 1])
        return tuple(int(b) for b in self.blocks[start:end])

    def take(self, rows: npt.ArrayLike) -> Trace:
        """A trace of the selected requests, in the order given."""
        idx = np.asarray(rows, dtype=np.int64)
        offsets, blocks = gather_rows(self.block_offsets, self.blocks, idx)
        return Trace(
            self.name,
            self.source,
            self.arrival_s[idx],
            self.prompt_tokens[idx],
            self.output_tokens[idx],
            self.row_id[idx],
            self.prefix_key[idx],
            offsets,
            blocks,
        )

    def between(self, start_s: float, end_s: float) -> Trace:
        """Requests arriving in [start_s, end_s), arrival times unchanged."""
        lo, hi = np.searchsorted(self.arrival_s, [start_s, end_s], side="left")
        return self.take(np.arange(lo, hi))

    def with_rate_scale(self, scale: float) -> Trace:
        """The same requests arriving `scale` times as fast (inter-arrival gaps / scale)."""
        if not scale > 0:
            raise ValueError(f"rate scale must be > 0, got {scale}")
        return Trace(
            self.name,
            self.source,
            self.arrival_s / scale,
            self.prompt_tokens,
            self.output_tokens,
            self.row_id,
            self.prefix_key,
            self.block_offsets,
            self.blocks,
        )

    def summary(self) -> dict[str, float | int | str]:
        """Headline figures for reports and docs."""
        n = len(self)
        minutes = self.duration_s / 60.0
        return {
            "name": self.name,
            "requests": n,
            "duration_s": round(self.duration_s, 3),
            "arrivals_per_min": round(n / minutes, 1) if minutes > 0 else float(n),
            "prompt_tokens_median": float(np.median(self.prompt_tokens)) if n else 0.0,
            "prompt_tokens_max": int(self.prompt_tokens.max()) if n else 0,
            "output_tokens_median": float(np.median(self.output_tokens)) if n else 0.0,
            "distinct_prefixes": len(np.unique(self.prefix_key[self.prefix_key >= 0])),
        }


def concat_traces(first: Trace, second: Trace) -> Trace:
    """Both traces' requests merged by arrival (stable: `first` wins ties); keeps first's name."""
    offsets = np.concatenate(
        [first.block_offsets, second.block_offsets[1:] + first.block_offsets[-1]]
    )
    merged = Trace(
        first.name,
        first.source,
        np.concatenate([first.arrival_s, second.arrival_s]),
        np.concatenate([first.prompt_tokens, second.prompt_tokens]),
        np.concatenate([first.output_tokens, second.output_tokens]),
        np.concatenate([first.row_id, second.row_id]),
        np.concatenate([first.prefix_key, second.prefix_key]),
        offsets,
        np.concatenate([first.blocks, second.blocks]),
    )
    return merged.take(np.argsort(merged.arrival_s, kind="stable"))
