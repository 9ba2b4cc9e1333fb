"""The audit writer's knobs, its statistics, and why `enqueue()` may refuse a record."""

from __future__ import annotations

from dataclasses import dataclass


class WriterStartError(RuntimeError):
    """The writer process could not be started (the interpreter is not executable)."""


class RecordRefusedError(RuntimeError):
    """enqueue() refused a record: it is NOT acknowledged; the caller decides (count it,
    shed load). Counted in `WriterStats.refused`."""


class SpillFullError(RecordRefusedError):
    """The spill journal reached `max_spill_bytes`."""


class JournalWriteError(RecordRefusedError):
    """The spill journal could not be written (disk full, directory read-only)."""


@dataclass(frozen=True, slots=True)
class WriterSettings:
    """Knobs of the writer; the defaults suit a router doing thousands of decisions/s."""

    batch_size: int = 2000
    flush_interval_s: float = 0.05
    segment_bytes: int = 8 << 20
    max_spill_bytes: int | None = 4 << 30
    copy_min_rows: int = 200
    retry_initial_s: float = 0.05
    retry_max_s: float = 1.0
    drain_timeout_s: float = 10.0
    process_nice: int = 10
    """Niceness added to the writer process: routing gets the CPU first."""
    statement_timeout_s: float = 15.0
    """A PostgreSQL batch waiting longer (a table lock, a stuck server) fails and is
    retried, so the wait shows in `write_errors` and the log instead of hanging."""
    log_json: bool = False
    """The writer process logs JSON lines, as `slaguard serve` does with `log_format: json`:
    it shares the service's stderr."""


@dataclass(frozen=True, slots=True)
class WriterStats:
    """A snapshot of the writer's gauges and counters."""

    queue_depth: int
    """Acknowledged records not yet confirmed in the database."""
    spill_bytes: int
    """Spill journal bytes not yet confirmed in the database."""
    rows_written: int
    """New rows inserted (replayed duplicates excluded)."""
    records_flushed: int
    """Records confirmed in the database, duplicates included."""
    write_errors: int
    """Failed batch attempts (each is retried)."""
    refused: int
    """enqueue() calls refused because the spill limit was reached."""
    torn_records: int
    """Partial or unreadable journal lines skipped (a crash mid-write, disk damage, a
    format this version cannot read): acknowledged records that are lost."""
    process_restarts: int
    """Times the writer process died and was started again."""
    last_error: str | None
    last_error_at_s: float | None = None
    """When `last_error` happened (wall clock): an error from before a recovery reads as old."""
