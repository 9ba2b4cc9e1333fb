"""Journal lines of earlier formats, read for replay only (nothing writes them any more).

A spill journal can outlive an upgrade (the database was down, the drain timed out, the
process was killed): its acknowledged records must still reach the database.

- `X{` (2026-11-29, to 19:22): the explanation's arrays as six `RawArray` structs (dtype,
  shape, base64 bytes) after the decision header as a JSON object.
- `X[` (2026-11-29, 19:53-20:38): `R`'s JSON array with one more count, `n_groups` (the
  length of `v_used_gb` and `limit_gb`, always the candidates'), and its base64 blob.
- `R` (2026-11-29, from 20:44): `lines.RAW_DECISION_TAG`'s JSON array and array layout,
  the arrays' bytes base64-encoded instead of escaped (`base64_blob` reads them).

`tests/fixtures/journal_formats.json` holds lines each of these versions wrote.
"""

from __future__ import annotations

import binascii
from typing import Any

import msgspec
import numpy as np

from slaguard.audit.lines import DecisionHeader, RawDecision
from slaguard.scheduler.explain import ExplanationArrays

LEGACY_RAW_DECISION_TAG = b"X"
BASE64_RAW_DECISION_TAG = b"R"


class OneBlobRawDecision(DecisionHeader, array_like=True):
    """An `X[` line's JSON array: `RawDecision`'s fields with `n_groups`."""

    fleet: str
    policy: str
    explanation_weights_version: str
    n_candidates: int
    n_components: int
    has_scores: bool
    n_groups: int
    v_peak_gb: float
    weights: tuple[float, ...]
    prefiltered_out: int
    chosen: int | None
    notes: list[str]
    spill: dict[str, Any] | None
    degraded_from: str | None


_decode_one_blob = msgspec.json.Decoder(OneBlobRawDecision).decode


def one_blob_decision(head: bytes) -> RawDecision:
    """An `X[` line's JSON array as today's `RawDecision` (its blob is an `R` line's)."""
    old = _decode_one_blob(head)
    if old.n_groups != old.n_candidates:
        raise ValueError(f"n_groups {old.n_groups} != n_candidates {old.n_candidates}")
    fields = {f: getattr(old, f) for f in RawDecision.__struct_fields__}
    return RawDecision(**fields)


def base64_blob(blob: bytes) -> bytes:
    """An `R` line's array bytes (ValueError if not base64)."""
    try:
        return binascii.a2b_base64(blob, strict_mode=True)
    except binascii.Error as exc:
        raise ValueError(f"raw explanation arrays: {exc}") from None


class RawArray(msgspec.Struct, array_like=True):
    dtype: str
    shape: tuple[int, ...]
    data: bytes


class RawExplanation(msgspec.Struct, array_like=True):
    fleet: str
    policy: str
    candidates: RawArray
    reasons: RawArray
    components: RawArray | None
    scores: RawArray | None
    v_peak_gb: float
    v_used_gb: RawArray
    limit_gb: RawArray
    weights: tuple[float, ...]
    weights_version: str
    prefiltered_out: int
    chosen: int | None
    notes: list[str]
    spill: dict[str, Any] | None
    degraded_from: str | None


_decode = msgspec.json.Decoder(RawExplanation).decode


def _array(r: RawArray) -> np.ndarray:
    return np.frombuffer(r.data, np.dtype(r.dtype)).reshape(r.shape)


def _array_opt(r: RawArray | None) -> np.ndarray | None:
    return None if r is None else _array(r)


def legacy_arrays(raw: bytes) -> tuple[str, str, ExplanationArrays]:
    """(fleet key, policy, arrays) of a legacy raw explanation."""
    r = _decode(raw)
    arrays = ExplanationArrays(
        candidates=_array(r.candidates), reasons=_array(r.reasons),
        components=_array_opt(r.components), scores=_array_opt(r.scores),
        v_peak_gb=r.v_peak_gb, v_used_gb=_array(r.v_used_gb), limit_gb=_array(r.limit_gb),
        weights=r.weights, weights_version=r.weights_version,
        prefiltered_out=r.prefiltered_out, chosen=r.chosen, notes=r.notes, spill=r.spill,
        degraded_from=r.degraded_from,
    )  # fmt: skip
    return r.fleet, r.policy, arrays
