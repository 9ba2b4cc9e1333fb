"""The journal line format: how an acknowledged record is written and read back.

    D<header JSON>\\x02<explanation JSON>\\n     a decision
    O<outcome JSON>\\n                           an outcome

The explanation (most of a decision's bytes) travels as its own JSON text (JSON never
contains a raw control byte such as \\x02), so the writer hands it to the database
without decoding and re-encoding it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from slaguard.audit.models import utc_from_unix
from slaguard.audit.records import AuditRecord, DecisionRecord

log = logging.getLogger(__name__)

DECISION_TAG = b"D"
OUTCOME_TAG = b"O"
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

_decode_header = msgspec.json.Decoder(DecisionHeader).decode
_decode_outcome = msgspec.json.Decoder(OutcomeLine).decode


def explanation_dict(record: DecisionRecord) -> Mapping[str, Any]:
    """The explanation as a mapping: as given, or the producer object's `to_dict()`."""
    explanation = record.explanation
    return explanation if isinstance(explanation, Mapping) else explanation.to_dict()


def encode_record(record: AuditRecord) -> bytes:
    """One journal line (see the module docstring)."""
    if isinstance(record, DecisionRecord):
        header = DecisionHeader(
            record.request_id, record.decided_at_s, record.model_id, record.priority,
            record.prompt_tokens, record.max_new_tokens, record.deadline_s,
            record.policy_arm, record.fleet_mode, record.outcome, record.target_id,
            record.card_type, record.weights_version, record.config_hash,
            record.decision_latency_s,
        )  # fmt: skip
        return (
            DECISION_TAG
            + json_encoder.encode(header)
            + EXPLANATION_SEPARATOR
            + json_encoder.encode(explanation_dict(record))
            + b"\n"
        )
    return OUTCOME_TAG + json_encoder.encode(record) + b"\n"


@dataclass(slots=True)
class DecodedBatch:
    """Journal lines turned into insert rows, split per table."""

    decision_rows: list[tuple[Any, ...]] = field(default_factory=list)
    outcome_rows: list[tuple[Any, ...]] = field(default_factory=list)
    unreadable: int = 0


def _decision_row(body: bytes, check_explanation: bool) -> tuple[Any, ...]:
    head, sep, explanation = body.rstrip(b"\n").partition(EXPLANATION_SEPARATOR)
    if not sep:
        raise ValueError("decision line without an explanation")
    if check_explanation:
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


def decode_lines(lines: Iterable[bytes], check_explanations: bool = True) -> DecodedBatch:
    """Journal lines -> rows; a line that does not decode is counted and logged, not fatal.

    Explanations pass through as text; `check_explanations` parses them too (slower)."""
    batch = DecodedBatch()
    for line in lines:
        tag, body = line[:1], line[1:]
        try:
            if tag == DECISION_TAG:
                batch.decision_rows.append(_decision_row(body, check_explanations))
            elif tag == OUTCOME_TAG:
                batch.outcome_rows.append(_outcome_row(body))
            else:
                raise ValueError(f"unknown record tag {tag!r}")
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
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
