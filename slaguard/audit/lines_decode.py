"""Journal lines read back: the writer process turns them into insert rows (line format:
`lines`). `B`, `R` and `X` explanations are rendered here with the scheduler's own
renderer, from the arrays and the `F` line their fleet key names."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from slaguard.audit.jsonenc import json_encoder
from slaguard.audit.lines import (
    DECISION_TAG,
    EXPLANATION_SEPARATOR,
    F64,
    FLEET_TAG,
    I8,
    I64,
    OUTCOME_TAG,
    RAW_DECISION_TAG,
    DecisionHeader,
    FleetLabels,
    FleetLine,
    OutcomeLine,
    RawDecision,
    explanation_dict,
    unescape_blob,
)
from slaguard.audit.lines_legacy import (
    BASE64_RAW_DECISION_TAG,
    LEGACY_RAW_DECISION_TAG,
    base64_blob,
    legacy_arrays,
    one_blob_decision,
)
from slaguard.audit.models import utc_from_unix
from slaguard.audit.records import DecisionRecord
from slaguard.scheduler.explain import ExplanationArrays, render_explanation

log = logging.getLogger(__name__)

_decode_header = msgspec.json.Decoder(DecisionHeader).decode
_decode_outcome = msgspec.json.Decoder(OutcomeLine).decode
_decode_fleet = msgspec.json.Decoder(FleetLine).decode
_decode_raw = msgspec.json.Decoder(RawDecision).decode


def _cut(blob: bytes, start: int, count: int, dtype: np.dtype[Any]) -> tuple[np.ndarray, int]:
    end = start + count * dtype.itemsize
    if end > len(blob):
        raise ValueError(f"raw explanation arrays end at byte {len(blob)}, expected >= {end}")
    return np.frombuffer(blob, dtype, count, start), end


def raw_arrays(r: RawDecision, blob: bytes) -> ExplanationArrays:
    """An `R` line's arrays cut from its blob (a length that disagrees is an error)."""
    n, k = r.n_candidates, r.n_components
    candidates, at = _cut(blob, 0, n, I64)
    reasons, at = _cut(blob, at, n, I8)
    components = None
    if k >= 0:
        flat, at = _cut(blob, at, n * k, F64)
        components = flat.reshape(n, k)
    scores = None
    if r.has_scores:
        scores, at = _cut(blob, at, n, F64)
    v_used, at = _cut(blob, at, n, F64)
    limit, at = _cut(blob, at, n, F64)
    if at != len(blob):
        raise ValueError(f"raw explanation arrays hold {len(blob)} bytes, layout says {at}")
    return ExplanationArrays(
        candidates=candidates, reasons=reasons, components=components, scores=scores,
        v_peak_gb=r.v_peak_gb, v_used_gb=v_used, limit_gb=limit, weights=r.weights,
        weights_version=r.explanation_weights_version, prefiltered_out=r.prefiltered_out,
        chosen=r.chosen, notes=r.notes, spill=r.spill, degraded_from=r.degraded_from,
    )  # fmt: skip


def _render(
    fleet_key: str, policy: str, arrays: ExplanationArrays, fleets: Mapping[str, FleetLabels]
) -> str:
    """The JSON `Explanation.to_dict()` gives (same renderer), from journalled arrays."""
    fleet = fleets.get(fleet_key)
    if fleet is None:
        raise ValueError(f"raw explanation names fleet {fleet_key!r}, not journalled before it")
    rendered = render_explanation(arrays, policy, fleet.target_ids, fleet.card_ids, fleet.static_gb)
    return json_encoder.encode(rendered).decode()


@dataclass(slots=True)
class DecodedBatch:
    """Journal lines turned into insert rows, split per table."""

    decision_rows: list[tuple[Any, ...]] = field(default_factory=list)
    outcome_rows: list[tuple[Any, ...]] = field(default_factory=list)
    unreadable: int = 0
    rejected: list[bytes] = field(default_factory=list)
    """The unreadable lines themselves (the writer keeps them aside, see `QUARANTINE_FILE`)."""
    headers: int = 0
    """Fleet lines read (segment headers, not records)."""


def _decision_row(body: bytes, check_explanation: bool) -> tuple[Any, ...]:
    head, sep, explanation = body.rstrip(b"\n").partition(EXPLANATION_SEPARATOR)
    if not sep:
        raise ValueError("decision line without an explanation")
    if check_explanation:
        msgspec.json.decode(explanation)
    return _row(_decode_header(head), explanation.decode())


def _raw_decision_row(
    body: bytes,
    fleets: Mapping[str, FleetLabels],
    unpack: Callable[[bytes], bytes],
    decode: Callable[[bytes], RawDecision] = _decode_raw,
) -> tuple[Any, ...]:
    """A `B` line (`unpack` = `unescape_blob`), an `R` line (`base64_blob`) or an `X[`
    line (`base64_blob`, `decode` = `one_blob_decision`)."""
    head, sep, blob = body.rstrip(b"\n").partition(EXPLANATION_SEPARATOR)
    if not sep:
        raise ValueError("decision line without an explanation")
    r = decode(head)
    return _row(r, _render(r.fleet, r.policy, raw_arrays(r, unpack(blob)), fleets))


def _legacy_decision_row(body: bytes, fleets: Mapping[str, FleetLabels]) -> tuple[Any, ...]:
    head, sep, raw = body.rstrip(b"\n").partition(EXPLANATION_SEPARATOR)
    if not sep:
        raise ValueError("decision line without an explanation")
    fleet_key, policy, arrays = legacy_arrays(raw)
    return _row(_decode_header(head), _render(fleet_key, policy, arrays, fleets))


def _row(d: DecisionHeader | RawDecision, explanation: str) -> tuple[Any, ...]:
    return (
        d.request_id, utc_from_unix(d.decided_at_s), d.model_id, d.priority,
        d.prompt_tokens, d.max_new_tokens, d.deadline_s, d.policy_arm, d.fleet_mode,
        d.outcome, d.target_id, d.card_type, explanation, d.weights_version,
        d.config_hash, d.decision_latency_s,
    )  # fmt: skip


def _outcome_row(body: bytes) -> tuple[Any, ...]:
    o = _decode_outcome(body.rstrip(b"\n"))
    return (
        o.request_id, utc_from_unix(o.finished_at_s), o.ttft_s, o.tpot_s, o.e2e_s,
        o.status, o.sla_met,
    )  # fmt: skip


def _fleet(body: bytes) -> tuple[str, FleetLabels]:
    f = _decode_fleet(body.rstrip(b"\n"))
    static = np.asarray(f.static_gb, dtype=np.float64)
    return f.key, FleetLabels(tuple(f.target_ids), tuple(f.card_ids), static)


def decode_lines(
    lines: Iterable[bytes],
    check_explanations: bool = True,
    fleets: dict[str, FleetLabels] | None = None,
) -> DecodedBatch:
    """Journal lines -> rows; a line that does not decode is counted and logged, not fatal.

    `fleets` (key -> labels) is filled from `F` lines and renders `B`, `R` and `X` lines;
    pass the same dict for consecutive batches. `D` explanations pass through as text;
    `check_explanations` parses them too (slower)."""
    batch = DecodedBatch()
    known: dict[str, FleetLabels] = {} if fleets is None else fleets
    for line in lines:
        tag, body = line[:1], line[1:]
        try:
            if tag == DECISION_TAG:
                batch.decision_rows.append(_decision_row(body, check_explanations))
            elif tag == RAW_DECISION_TAG:
                batch.decision_rows.append(_raw_decision_row(body, known, unescape_blob))
            elif tag == BASE64_RAW_DECISION_TAG:
                batch.decision_rows.append(_raw_decision_row(body, known, base64_blob))
            elif tag == LEGACY_RAW_DECISION_TAG and body.startswith(b"["):
                row = _raw_decision_row(body, known, base64_blob, one_blob_decision)
                batch.decision_rows.append(row)
            elif tag == LEGACY_RAW_DECISION_TAG:
                batch.decision_rows.append(_legacy_decision_row(body, known))
            elif tag == OUTCOME_TAG:
                batch.outcome_rows.append(_outcome_row(body))
            elif tag == FLEET_TAG:
                batch.headers += 1
                key, labels = _fleet(body)
                known[key] = labels
            else:
                raise ValueError(f"unknown record tag {tag!r}")
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError, IndexError) as exc:
            log.error("audit journal: skipping an unreadable record (%s)", exc)
            batch.unreadable += 1
            batch.rejected.append(line)
    return batch


def decision_row(rec: DecisionRecord) -> tuple[Any, ...]:
    """A decision as a row in `sink.DECISION_COLUMNS` order, straight from the record."""
    return (
        rec.request_id, utc_from_unix(rec.decided_at_s), rec.model_id, rec.priority,
        rec.prompt_tokens, rec.max_new_tokens, rec.deadline_s, rec.policy_arm,
        rec.fleet_mode, rec.outcome, rec.target_id, rec.card_type,
        json_encoder.encode(explanation_dict(rec)).decode(), rec.weights_version,
        rec.config_hash, rec.decision_latency_s,
    )  # fmt: skip
