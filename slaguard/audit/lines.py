"""The journal line format: how an acknowledged record is written and read back.

    X<header JSON>\\x02<raw explanation JSON>\\n   a decision with the scheduler's Explanation
    D<header JSON>\\x02<explanation JSON>\\n       a decision with a mapping explanation
    O<outcome JSON>\\n                             an outcome
    F<fleet JSON>\\n                               a fleet (a segment header, not a record)

`X` keeps the routing path cheap: the explanation is journalled as the router's arrays
(`.tobytes()`, base64 in JSON) with target indices, and rendered to the stored JSON by
`scheduler.explain.render_explanation` in the writer process, using the `F` line (target
ids, card ids, static GB) its fleet key names; every segment holding an `X` line holds
that fleet's `F` line before it, so any segment decodes alone. A `D` explanation is JSON
text already (JSON never holds a raw control byte such as \\x02): passed through as is.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from slaguard.audit.models import utc_from_unix
from slaguard.audit.records import AuditRecord, DecisionRecord
from slaguard.fleet.fleet import Fleet
from slaguard.scheduler.explain import Explanation, ExplanationArrays, render_explanation

log = logging.getLogger(__name__)

DECISION_TAG = b"D"
RAW_DECISION_TAG = b"X"
OUTCOME_TAG = b"O"
FLEET_TAG = b"F"
EXPLANATION_SEPARATOR = b"\x02"


class DecisionHeader(msgspec.Struct):
    """A decision's fields other than the explanation, as journalled."""

    request_id: str
    decided_at_s: float
    model_id: str
    priority: str
    prompt_tokens: int
    max_new_tokens: int
    deadline_s: float
    policy_arm: str
    fleet_mode: str
    outcome: str
    target_id: str | None
    card_type: str | None
    weights_version: str
    config_hash: str
    decision_latency_s: float


class OutcomeLine(msgspec.Struct):
    """An outcome as journalled."""

    request_id: str
    finished_at_s: float
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None
    status: str
    sla_met: bool


def _encode_hook(value: object) -> object:
    """JSON for any Mapping (msgspec itself takes dicts only)."""
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


json_encoder = msgspec.json.Encoder(enc_hook=_encode_hook)
"""Compact JSON for records, explanations and evidence."""


class FleetLine(msgspec.Struct, array_like=True):
    """What rendering needs of a fleet, journalled once per segment under its key."""

    key: str
    target_ids: list[str]
    card_ids: list[str]
    static_gb: list[float]


class RawArray(msgspec.Struct, array_like=True):
    dtype: str
    shape: tuple[int, ...]
    data: bytes


class RawExplanation(msgspec.Struct, array_like=True):
    """An `Explanation` as journalled: its arrays' bytes, the fleet by key."""

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


@dataclass(frozen=True, slots=True)
class FleetLabels:
    target_ids: tuple[str, ...]
    card_ids: tuple[str, ...]
    static_gb: np.ndarray


_decode_header = msgspec.json.Decoder(DecisionHeader).decode
_decode_outcome = msgspec.json.Decoder(OutcomeLine).decode
_decode_fleet = msgspec.json.Decoder(FleetLine).decode
_decode_raw = msgspec.json.Decoder(RawExplanation).decode


def _raw(a: np.ndarray) -> RawArray:
    return RawArray(a.dtype.str, a.shape, a.tobytes())


def _raw_opt(a: np.ndarray | None) -> RawArray | None:
    return None if a is None else _raw(a)


def _array(r: RawArray) -> np.ndarray:
    return np.frombuffer(r.data, dtype=np.dtype(r.dtype)).reshape(r.shape)


def _array_opt(r: RawArray | None) -> np.ndarray | None:
    return None if r is None else _array(r)


def explanation_dict(record: DecisionRecord) -> Mapping[str, Any]:
    """The explanation as a mapping: as given, or the producer object's `to_dict()`."""
    explanation = record.explanation
    return explanation if isinstance(explanation, Mapping) else explanation.to_dict()


def _header(record: DecisionRecord) -> DecisionHeader:
    return DecisionHeader(
        record.request_id, record.decided_at_s, record.model_id, record.priority,
        record.prompt_tokens, record.max_new_tokens, record.deadline_s,
        record.policy_arm, record.fleet_mode, record.outcome, record.target_id,
        record.card_type, record.weights_version, record.config_hash,
        record.decision_latency_s,
    )  # fmt: skip


def encode_record(record: AuditRecord) -> bytes:
    """One `D` or `O` journal line (the explanation rendered here; see `JournalEncoder`)."""
    if isinstance(record, DecisionRecord):
        return (
            DECISION_TAG
            + json_encoder.encode(_header(record))
            + EXPLANATION_SEPARATOR
            + json_encoder.encode(explanation_dict(record))
            + b"\n"
        )
    return OUTCOME_TAG + json_encoder.encode(record) + b"\n"


def fleet_header(fleet: Fleet) -> tuple[str, bytes]:
    """(fleet key, `F` line): the key hashes exactly what rendering reads."""
    ids, cards, static = list(fleet.target_ids), list(fleet.card_ids), fleet.static_gb_array
    digest = hashlib.blake2b(json_encoder.encode([ids, cards]), digest_size=8)
    digest.update(static.tobytes())
    key = digest.hexdigest()
    return key, FLEET_TAG + json_encoder.encode(FleetLine(key, ids, cards, static.tolist())) + b"\n"


class JournalEncoder:
    """Records -> journal lines on the routing path; a scheduler `Explanation` is
    journalled raw (`X`), never rendered here."""

    def __init__(self) -> None:
        self._fleet: tuple[Fleet, tuple[str, bytes]] | None = None
        """The fleet last seen and its header (one fleet is live at a time)."""

    def encode(self, record: AuditRecord) -> tuple[bytes, tuple[str, bytes] | None]:
        """(line, segment header it needs or None)."""
        if not isinstance(record, DecisionRecord):
            return encode_record(record), None
        e = record.explanation
        if not isinstance(e, Explanation):
            return encode_record(record), None
        if self._fleet is None or self._fleet[0] is not e.fleet:
            self._fleet = (e.fleet, fleet_header(e.fleet))
        header = self._fleet[1]
        raw = RawExplanation(
            header[0], e.arm.value, _raw(e.candidates), _raw(e.reasons),
            _raw_opt(e.components), _raw_opt(e.scores), e.v_peak_gb, _raw(e.v_used_gb),
            _raw(e.limit_gb), e.weights, e.weights_version, e.prefiltered_out,
            None if e.chosen is None else int(e.chosen), list(e.notes), e.spill,
            e.degraded_from,
        )  # fmt: skip
        line = (
            RAW_DECISION_TAG
            + json_encoder.encode(_header(record))
            + EXPLANATION_SEPARATOR
            + json_encoder.encode(raw)
            + b"\n"
        )
        return line, header


def render_raw(raw: bytes, fleets: Mapping[str, FleetLabels]) -> bytes:
    """A raw explanation -> the JSON `Explanation.to_dict()` gives (same renderer)."""
    r = _decode_raw(raw)
    fleet = fleets.get(r.fleet)
    if fleet is None:
        raise ValueError(f"raw explanation names fleet {r.fleet!r}, not journalled before it")
    arrays = ExplanationArrays(
        candidates=_array(r.candidates), reasons=_array(r.reasons),
        components=_array_opt(r.components), scores=_array_opt(r.scores),
        v_peak_gb=r.v_peak_gb, v_used_gb=_array(r.v_used_gb), limit_gb=_array(r.limit_gb),
        weights=r.weights, weights_version=r.weights_version,
        prefiltered_out=r.prefiltered_out, chosen=r.chosen, notes=r.notes, spill=r.spill,
        degraded_from=r.degraded_from,
    )  # fmt: skip
    rendered = render_explanation(
        arrays, r.policy, fleet.target_ids, fleet.card_ids, fleet.static_gb
    )
    return json_encoder.encode(rendered)


@dataclass(slots=True)
class DecodedBatch:
    """Journal lines turned into insert rows, split per table."""

    decision_rows: list[tuple[Any, ...]] = field(default_factory=list)
    outcome_rows: list[tuple[Any, ...]] = field(default_factory=list)
    unreadable: int = 0
    headers: int = 0
    """Fleet lines read (segment headers, not records)."""


def _decision_row(
    body: bytes, check_explanation: bool, fleets: Mapping[str, FleetLabels] | None
) -> tuple[Any, ...]:
    head, sep, explanation = body.rstrip(b"\n").partition(EXPLANATION_SEPARATOR)
    if not sep:
        raise ValueError("decision line without an explanation")
    if fleets is not None:
        explanation = render_raw(explanation, fleets)
    elif check_explanation:
        msgspec.json.decode(explanation)
    d = _decode_header(head)
    return (
        d.request_id, utc_from_unix(d.decided_at_s), d.model_id, d.priority,
        d.prompt_tokens, d.max_new_tokens, d.deadline_s, d.policy_arm, d.fleet_mode,
        d.outcome, d.target_id, d.card_type, explanation.decode(), d.weights_version,
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

    `fleets` (key -> labels) is filled from `F` lines and renders `X` lines; pass the
    same dict for consecutive batches. `D` explanations pass through as text;
    `check_explanations` parses them too (slower)."""
    batch = DecodedBatch()
    known: dict[str, FleetLabels] = {} if fleets is None else fleets
    for line in lines:
        tag, body = line[:1], line[1:]
        try:
            if tag == DECISION_TAG:
                batch.decision_rows.append(_decision_row(body, check_explanations, None))
            elif tag == RAW_DECISION_TAG:
                batch.decision_rows.append(_decision_row(body, False, known))
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
