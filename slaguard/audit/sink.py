"""Writing one batch of records into the database, idempotently by request id.

PostgreSQL batches of `copy_min_rows` or more go through `COPY` into a session-local
staging table, then `INSERT ... SELECT ... ON CONFLICT DO NOTHING` (COPY itself cannot
skip duplicates); smaller batches, and SQLite, use one prepared multi-row insert with
`ON CONFLICT DO NOTHING`. Either way the batch is one transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
from sqlalchemy import (
    JSON,
    Boolean,
    Connection,
    Dialect,
    Double,
    Integer,
    Text,
    TypeDecorator,
    column,
    table,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.expression import TableClause

from slaguard.audit.models import UtcDateTime, utc_from_unix
from slaguard.audit.records import AuditRecord, DecisionRecord

log = logging.getLogger(__name__)

DECISION_COLUMNS: tuple[str, ...] = (
    "request_id", "decided_at", "model_id", "priority", "prompt_tokens", "max_new_tokens",
    "deadline_s", "policy_arm", "fleet_mode", "outcome", "target_id", "card_type",
    "explanation", "weights_version", "config_hash", "decision_latency_s",
)  # fmt: skip
OUTCOME_COLUMNS: tuple[str, ...] = (
    "request_id", "finished_at", "ttft_s", "tpot_s", "e2e_s", "status", "sla_met",
)  # fmt: skip


class _JsonText(TypeDecorator[str]):
    """A JSON column fed text that is already JSON: cast on PostgreSQL, never re-encoded."""

    impl = JSON
    cache_ok = True

    def bind_processor(self, dialect: Dialect) -> None:
        return None


_TIME = UtcDateTime()
# Write-side views of the tables: the explanation arrives already encoded as JSON text.
_DECISIONS: TableClause = table(
    "decisions",
    *(
        column(name, Text())
        for name in DECISION_COLUMNS
        if name
        not in {
            "decided_at",
            "explanation",
            "prompt_tokens",
            "max_new_tokens",
            "deadline_s",
            "decision_latency_s",
        }
    ),
    column("decided_at", _TIME),
    column("explanation", _JsonText()),
    column("prompt_tokens", Integer()),
    column("max_new_tokens", Integer()),
    column("deadline_s", Double()),
    column("decision_latency_s", Double()),
)
_OUTCOMES: TableClause = table(
    "outcomes",
    column("request_id", Text()),
    column("finished_at", _TIME),
    column("ttft_s", Double()),
    column("tpot_s", Double()),
    column("e2e_s", Double()),
    column("status", Text()),
    column("sla_met", Boolean()),
)


class _DecisionWire(msgspec.Struct):
    """A journalled decision as read back: the explanation stays raw JSON bytes."""

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
    explanation: msgspec.Raw
    weights_version: str
    config_hash: str
    decision_latency_s: float


class _OutcomeWire(msgspec.Struct):
    request_id: str
    finished_at_s: float
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None
    status: str
    sla_met: bool


def _encode_hook(value: object) -> object:
    """JSON for any Mapping, and for explanation objects that offer `to_dict()`."""
    if isinstance(value, Mapping):
        return dict(value)
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


json_encoder = msgspec.json.Encoder(enc_hook=_encode_hook)
"""Compact JSON for records, explanations and evidence."""

_DECISION_TAG = b"D"
_OUTCOME_TAG = b"O"
_decode_decision = msgspec.json.Decoder(_DecisionWire).decode
_decode_outcome = msgspec.json.Decoder(_OutcomeWire).decode


def encode_record(record: AuditRecord) -> bytes:
    """One journal line: a type tag, the record as JSON, a newline."""
    tag = _DECISION_TAG if isinstance(record, DecisionRecord) else _OUTCOME_TAG
    return tag + json_encoder.encode(record) + b"\n"


@dataclass(slots=True)
class DecodedBatch:
    """Journal lines turned into insert rows, split per table."""

    decision_rows: list[tuple[Any, ...]] = field(default_factory=list)
    outcome_rows: list[tuple[Any, ...]] = field(default_factory=list)
    unreadable: int = 0

    def __len__(self) -> int:
        return len(self.decision_rows) + len(self.outcome_rows)


def decode_lines(lines: Iterable[bytes]) -> DecodedBatch:
    """Journal lines -> rows; a line that does not decode is counted and logged, not fatal."""
    batch = DecodedBatch()
    for line in lines:
        tag, body = line[:1], line[1:]
        try:
            if tag == _DECISION_TAG:
                d = _decode_decision(body)
                batch.decision_rows.append((
                    d.request_id, utc_from_unix(d.decided_at_s), d.model_id, d.priority,
                    d.prompt_tokens, d.max_new_tokens, d.deadline_s, d.policy_arm,
                    d.fleet_mode, d.outcome, d.target_id, d.card_type,
                    bytes(d.explanation).decode(), d.weights_version, d.config_hash,
                    d.decision_latency_s,
                ))  # fmt: skip
            elif tag == _OUTCOME_TAG:
                o = _decode_outcome(body)
                batch.outcome_rows.append((
                    o.request_id, utc_from_unix(o.finished_at_s), o.ttft_s, o.tpot_s,
                    o.e2e_s, o.status, o.sla_met,
                ))  # fmt: skip
            else:
                raise ValueError(f"unknown record tag {tag!r}")
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
            log.error("audit journal: skipping an unreadable record (%s)", exc)
            batch.unreadable += 1
    return batch


def decision_row(rec: DecisionRecord) -> tuple[Any, ...]:
    """A decision as a row in `DECISION_COLUMNS` order (explanation as JSON text)."""
    return (
        rec.request_id, utc_from_unix(rec.decided_at_s), rec.model_id, rec.priority,
        rec.prompt_tokens, rec.max_new_tokens, rec.deadline_s, rec.policy_arm,
        rec.fleet_mode, rec.outcome, rec.target_id, rec.card_type,
        json_encoder.encode(rec.explanation).decode(), rec.weights_version,
        rec.config_hash, rec.decision_latency_s,
    )  # fmt: skip


def write_batch(conn: Connection, batch: DecodedBatch, copy_min_rows: int) -> int:
    """Insert the batch (caller owns the transaction); return how many rows were new."""
    inserted = 0
    if batch.decision_rows:
        inserted += _insert(conn, _DECISIONS, DECISION_COLUMNS, batch.decision_rows, copy_min_rows)
    if batch.outcome_rows:
        inserted += _insert(conn, _OUTCOMES, OUTCOME_COLUMNS, batch.outcome_rows, copy_min_rows)
    return inserted


def _insert(
    conn: Connection,
    target: TableClause,
    columns: tuple[str, ...],
    rows: list[tuple[Any, ...]],
    copy_min_rows: int,
) -> int:
    dialect = conn.dialect.name
    if dialect == "postgresql" and len(rows) >= copy_min_rows:
        return _copy_insert(conn, target.name, columns, rows)
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    stmt = (
        insert(target)
        .on_conflict_do_nothing(index_elements=["request_id"])
        .execution_options(preserve_rowcount=True)
    )
    result = conn.execute(stmt, [dict(zip(columns, row, strict=True)) for row in rows])
    inserted: int = result.rowcount
    return inserted


def _copy_insert(
    conn: Connection, table_name: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]]
) -> int:
    stage = f"audit_stage_{table_name}"
    names = ", ".join(columns)
    raw = conn.connection.driver_connection
    assert raw is not None
    with raw.cursor() as cur:
        cur.execute(
            f"CREATE TEMP TABLE IF NOT EXISTS {stage} "
            f"(LIKE {table_name} INCLUDING DEFAULTS) ON COMMIT DELETE ROWS"
        )
        with cur.copy(f"COPY {stage} ({names}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        cur.execute(
            f"INSERT INTO {table_name} ({names}) SELECT {names} FROM {stage} "
            "ON CONFLICT (request_id) DO NOTHING"
        )
        inserted: int = cur.rowcount
    return inserted
