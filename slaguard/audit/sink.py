"""Writing one batch of records into the database, idempotently by request id.

PostgreSQL batches of `copy_min_rows` or more go through `COPY` into a session-local
staging table, then `INSERT ... SELECT ... ON CONFLICT DO NOTHING` (COPY itself cannot
skip duplicates); smaller batches, and SQLite, use one prepared multi-row insert with
`ON CONFLICT DO NOTHING`. Either way the batch is one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
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
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.sql.expression import TableClause

from slaguard.audit.lines import DECISION_TAG, OUTCOME_TAG, decode_lines
from slaguard.audit.models import UtcDateTime

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


@dataclass(frozen=True, slots=True)
class BatchResult:
    """What one batch did: rows that were new, lines that could not be read."""

    inserted: int
    unreadable: int


def write_lines(
    conn: Connection, lines: Sequence[bytes], copy_min_rows: int, *, server_parse: bool = True
) -> BatchResult:
    """Insert journal lines (caller owns the transaction).

    On PostgreSQL, batches of `copy_min_rows` or more are COPYed verbatim and parsed by
    the server (`json_to_record`), so the writer thread does almost no per-row Python work
    and leaves the GIL to the router. `server_parse=False` decodes in Python first (the
    fallback when the server rejects a batch as malformed, skipping only the bad lines).
    """
    if conn.dialect.name == "postgresql" and server_parse and len(lines) >= copy_min_rows:
        return _copy_documents(conn, lines)
    batch = decode_lines(lines)
    inserted = 0
    if batch.decision_rows:
        inserted += _insert(conn, _DECISIONS, DECISION_COLUMNS, batch.decision_rows)
    if batch.outcome_rows:
        inserted += _insert(conn, _OUTCOMES, OUTCOME_COLUMNS, batch.outcome_rows)
    return BatchResult(inserted, batch.unreadable)


def _insert(
    conn: Connection, target: TableClause, columns: tuple[str, ...], rows: list[tuple[Any, ...]]
) -> int:
    insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    stmt = (
        insert(target)
        .on_conflict_do_nothing(index_elements=["request_id"])
        .execution_options(preserve_rowcount=True)
    )
    result = conn.execute(stmt, [dict(zip(columns, row, strict=True)) for row in rows])
    inserted: int = result.rowcount
    return inserted


# JSON never contains raw control characters, so \x01 / \x02 as CSV quote and delimiter
# make COPY take a journal line verbatim: header text, then the explanation (decisions).
_COPY_DOCS = "COPY {stage} FROM STDIN WITH (FORMAT csv, DELIMITER E'\\x02', QUOTE E'\\x01')"
_DECISION_FIELDS = (
    "request_id text, decided_at_s float8, model_id text, priority text, prompt_tokens int, "
    "max_new_tokens int, deadline_s float8, policy_arm text, fleet_mode text, outcome text, "
    "target_id text, card_type text, weights_version text, "
    "config_hash text, decision_latency_s float8"
)
_OUTCOME_FIELDS = (
    "request_id text, finished_at_s float8, ttft_s float8, tpot_s float8, e2e_s float8, "
    "status text, sla_met boolean"
)


def _utc(seconds: str) -> str:
    """Unix seconds -> timestamptz rounded exactly like `datetime.fromtimestamp` (whole
    seconds, then the fraction to microseconds half-even), so both write paths agree."""
    return (
        f"(to_timestamp(floor({seconds})) + "
        f"round(({seconds} - floor({seconds})) * 1e6) * interval '1 microsecond')"
    )


_FROM_DOCS = "FROM {stage} AS s, json_to_record(s.doc::json) AS r({fields})"
_STAGE_COLUMNS = {"decisions": "doc text, explanation json", "outcomes": "doc text"}
_INSERT_FROM_DOCS = {
    "decisions": (
        f"INSERT INTO decisions ({', '.join(DECISION_COLUMNS)}) "
        f"SELECT r.request_id, {_utc('r.decided_at_s')}, r.model_id, r.priority, "
        "r.prompt_tokens, r.max_new_tokens, r.deadline_s, r.policy_arm, r.fleet_mode, "
        "r.outcome, r.target_id, r.card_type, s.explanation, r.weights_version, "
        "r.config_hash, r.decision_latency_s "
        + _FROM_DOCS.format(stage="audit_stage_decisions", fields=_DECISION_FIELDS)
        + " ON CONFLICT (request_id) DO NOTHING"
    ),
    "outcomes": (
        f"INSERT INTO outcomes ({', '.join(OUTCOME_COLUMNS)}) "
        f"SELECT r.request_id, {_utc('r.finished_at_s')}, r.ttft_s, r.tpot_s, r.e2e_s, "
        "r.status, r.sla_met "
        + _FROM_DOCS.format(stage="audit_stage_outcomes", fields=_OUTCOME_FIELDS)
        + " ON CONFLICT (request_id) DO NOTHING"
    ),
}


def _copy_documents(conn: Connection, lines: Sequence[bytes]) -> BatchResult:
    docs: dict[str, list[bytes]] = {"decisions": [], "outcomes": []}
    for line in lines:
        tag = line[:1]
        if tag == DECISION_TAG:
            docs["decisions"].append(line[1:])
        elif tag == OUTCOME_TAG:
            docs["outcomes"].append(line[1:])
    unreadable = len(lines) - len(docs["decisions"]) - len(docs["outcomes"])
    raw = conn.connection.driver_connection
    assert raw is not None
    inserted = 0
    with raw.cursor() as cur:
        for table, chunk in docs.items():
            if not chunk:
                continue
            stage = f"audit_stage_{table}"
            cur.execute(
                f"CREATE TEMP TABLE IF NOT EXISTS {stage} ({_STAGE_COLUMNS[table]}) "
                "ON COMMIT DELETE ROWS"
            )
            with cur.copy(_COPY_DOCS.format(stage=stage)) as copy:
                copy.write(b"".join(chunk))
            cur.execute(_INSERT_FROM_DOCS[table])
            inserted += cur.rowcount
    return BatchResult(inserted, unreadable)


def is_unreachable(exc: BaseException) -> bool:
    """True when a write failed because the database could not be reached (retry as is),
    False when it refused the batch's content (the COPY path talks to psycopg directly,
    so its errors arrive unwrapped)."""
    return isinstance(
        exc,
        OperationalError | InterfaceError | OSError | psycopg.OperationalError
        | psycopg.InterfaceError,
    )  # fmt: skip
