"""Writing one batch of records into the database, idempotently by request id.

PostgreSQL batches of `copy_min_rows` or more go through `COPY`: straight into the table
when none of the batch's request ids is stored yet (the normal case), else (a replay)
into a session-local staging table and `INSERT ... SELECT ... ON CONFLICT DO NOTHING`,
since COPY itself cannot skip duplicates. Smaller batches, and SQLite, use one prepared
multi-row `INSERT ... ON CONFLICT DO NOTHING`. Either way a batch is one transaction.
"""

from __future__ import annotations

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
from sqlalchemy.types import TypeEngine

from slaguard.audit.lines_decode import DecodedBatch
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
_DOUBLE: Double[float] = Double()
_WRITE_TYPES: dict[str, TypeEngine[Any]] = {
    "decided_at": _TIME, "finished_at": _TIME, "explanation": _JsonText(),
    "prompt_tokens": Integer(), "max_new_tokens": Integer(), "deadline_s": _DOUBLE,
    "decision_latency_s": _DOUBLE, "ttft_s": _DOUBLE, "tpot_s": _DOUBLE, "e2e_s": _DOUBLE,
    "sla_met": Boolean(),
}  # fmt: skip
"""Write-side column types (text otherwise); the explanation arrives as JSON text."""
_DECISIONS: TableClause = table(
    "decisions", *(column(n, _WRITE_TYPES.get(n, Text())) for n in DECISION_COLUMNS)
)
_OUTCOMES: TableClause = table(
    "outcomes", *(column(n, _WRITE_TYPES.get(n, Text())) for n in OUTCOME_COLUMNS)
)


def write_batch(conn: Connection, batch: DecodedBatch, copy_min_rows: int) -> int:
    """Insert decoded journal lines (caller owns the transaction); duplicates are skipped.
    Returns the rows that were new."""
    inserted = 0
    for target, columns, rows in (
        (_DECISIONS, DECISION_COLUMNS, batch.decision_rows),
        (_OUTCOMES, OUTCOME_COLUMNS, batch.outcome_rows),
    ):
        if not rows:
            continue
        if conn.dialect.name == "postgresql" and len(rows) >= copy_min_rows:
            inserted += _copy(conn, target.name, columns, rows)
        else:
            inserted += _insert(conn, target, columns, rows)
    return inserted


def _insert(
    conn: Connection, target: TableClause, columns: tuple[str, ...], rows: list[tuple[Any, ...]]
) -> int:
    """One prepared multi-row INSERT ... ON CONFLICT (request_id) DO NOTHING."""
    insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    stmt = (
        insert(target)
        .on_conflict_do_nothing(index_elements=["request_id"])
        .execution_options(preserve_rowcount=True)
    )
    result = conn.execute(stmt, [dict(zip(columns, row, strict=True)) for row in rows])
    inserted: int = result.rowcount
    return inserted


def _copy(
    conn: Connection, table_name: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]]
) -> int:
    """COPY straight into the table inside a savepoint; if the batch holds a request id
    already stored (a replay), COPY into a staging table and INSERT ... ON CONFLICT DO
    NOTHING from it instead."""
    raw = conn.connection.driver_connection
    assert isinstance(raw, psycopg.Connection)
    names = ", ".join(columns)
    with raw.cursor() as cur:
        try:
            with raw.transaction():
                _copy_rows(cur, f"COPY {table_name} ({names}) FROM STDIN", rows)
            return len(rows)
        except psycopg.errors.UniqueViolation:
            pass
        stage = f"audit_stage_{table_name}"
        cur.execute(
            f"CREATE TEMP TABLE IF NOT EXISTS {stage} "
            f"(LIKE {table_name} INCLUDING DEFAULTS) ON COMMIT DELETE ROWS"
        )
        cur.execute(f"TRUNCATE {stage}")
        _copy_rows(cur, f"COPY {stage} ({names}) FROM STDIN", rows)
        cur.execute(
            f"INSERT INTO {table_name} ({names}) SELECT {names} FROM {stage} "
            "ON CONFLICT (request_id) DO NOTHING"
        )
        inserted: int = cur.rowcount
        return inserted


def _copy_rows(cur: psycopg.Cursor[Any], statement: str, rows: list[tuple[Any, ...]]) -> None:
    with cur.copy(statement) as copy:
        for row in rows:
            copy.write_row(row)


def is_unreachable(exc: BaseException) -> bool:
    """True when a write failed because the database could not be reached (retry as is),
    False when it refused the batch's content (the COPY path talks to psycopg directly,
    so its errors arrive unwrapped)."""
    return isinstance(
        exc,
        OperationalError | InterfaceError | OSError | psycopg.OperationalError
        | psycopg.InterfaceError,
    )  # fmt: skip
