"""The background audit writer: the routing path enqueues, a thread writes batches.

`enqueue()` costs one JSON encode, one `write()` to the spill journal and a deque append
under a lock; it never touches the database. A record is *acknowledged* when `enqueue()`
returns: from then on it survives a database outage (journal), a crash or SIGKILL (the
journal is replayed on the next start) and shutdown (drained, or left in the journal).

The writer thread takes batches from the bounded in-memory queue; when that queue is
full (database down or slow), new records live only in the journal and the thread reads
them back from it, in order, once the queue has drained. Failed batches are retried with
capped exponential backoff. `stats()` exposes queue depth, spill bytes, rows written and
write errors for the monitoring line to publish.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError

from slaguard.audit.engine import create_audit_engine, default_spill_dir, shown_url
from slaguard.audit.lines import encode_record
from slaguard.audit.migrate import require_current_schema, upgrade
from slaguard.audit.records import AuditRecord
from slaguard.audit.sink import is_unreachable, write_lines
from slaguard.audit.spill import SpillJournal

log = logging.getLogger(__name__)
_T = TypeVar("_T")


class SpillFullError(RuntimeError):
    """enqueue() refused a record: the spill journal reached `max_spill_bytes`.

    The record is NOT acknowledged; the caller decides (count it, shed load)."""


@dataclass(frozen=True, slots=True)
class WriterSettings:
    """Knobs of the writer; the defaults suit a router doing thousands of decisions/s."""

    batch_size: int = 2000
    flush_interval_s: float = 0.05
    memory_queue_records: int = 50_000
    segment_bytes: int = 8 << 20
    max_spill_bytes: int | None = 4 << 30
    copy_min_rows: int = 200
    retry_initial_s: float = 0.05
    retry_max_s: float = 1.0
    drain_timeout_s: float = 10.0


@dataclass(frozen=True, slots=True)
class WriterStats:
    """A snapshot of the writer's gauges and counters."""

    queue_depth: int
    """Acknowledged records not yet confirmed in the database (memory + spill)."""
    memory_queue: int
    """Of those, records held in memory."""
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
    """Partial journal lines skipped on replay (only after a power loss)."""
    last_error: str | None


class AuditWriter:
    """Owns one spill directory and one writer thread; use as a context manager."""

    def __init__(
        self,
        engine: Engine,
        spill_dir: Path | str,
        settings: WriterSettings | None = None,
        *,
        on_rows_written: Callable[[int], None] | None = None,
        on_write_error: Callable[[str], None] | None = None,
    ) -> None:
        self.engine = engine
        self.settings = settings or WriterSettings()
        self._on_rows_written = on_rows_written
        self._on_write_error = on_write_error
        self._journal = SpillJournal(Path(spill_dir), self.settings.segment_bytes)
        self._lock = self._journal.lock
        self._pending: deque[tuple[int, bytes]] = deque()
        self._overflow = self._journal.pending_bytes > 0
        self._backlog = self._journal.recovered_records
        self._rows_written = 0
        self._records_flushed = 0
        self._write_errors = 0
        self._refused = 0
        self._torn = 0
        self._last_error: str | None = None
        self._closed = False
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._drain_deadline = float("inf")
        if self._backlog:
            log.info(
                "audit writer: replaying %d records (%d bytes) left in %s",
                self._backlog, self._journal.pending_bytes, spill_dir,
            )  # fmt: skip
        self._thread = threading.Thread(target=self._run, name="audit-writer", daemon=True)
        self._thread.start()

    # -- the routing side -------------------------------------------------------------

    def enqueue(self, record: AuditRecord) -> None:
        """Acknowledge a record: journal it and queue it; never waits on the database."""
        line = encode_record(record)
        limit = self.settings.max_spill_bytes
        with self._lock:
            if self._closed:
                raise RuntimeError("audit writer is closed")
            if limit is not None and self._journal.pending_bytes + len(line) > limit:
                self._refused += 1
                raise SpillFullError(
                    f"audit spill journal holds {self._journal.pending_bytes} bytes "
                    f"(limit {limit}); database {shown_url(self.engine.url)} unreachable?"
                )
            lsn = self._journal.append(line)
            self._backlog += 1
            if not self._overflow and len(self._pending) < self.settings.memory_queue_records:
                self._pending.append((lsn, line))
                wake = len(self._pending) == self.settings.batch_size
            else:
                self._overflow = True
                wake = False
        if wake:
            self._wake.set()

    # -- gauges and counters ----------------------------------------------------------

    def stats(self) -> WriterStats:
        """A consistent snapshot of every gauge and counter."""
        with self._lock:
            return WriterStats(
                queue_depth=self._backlog,
                memory_queue=len(self._pending),
                spill_bytes=self._journal.pending_bytes,
                rows_written=self._rows_written,
                records_flushed=self._records_flushed,
                write_errors=self._write_errors,
                refused=self._refused,
                torn_records=self._torn,
                last_error=self._last_error,
            )

    @property
    def queue_depth(self) -> int:
        return self._backlog

    @property
    def spill_bytes(self) -> int:
        return self._journal.pending_bytes

    @property
    def rows_written(self) -> int:
        return self._rows_written

    @property
    def write_errors(self) -> int:
        return self._write_errors

    def wait_flushed(self, timeout_s: float) -> bool:
        """Poll until every acknowledged record is in the database, or the timeout."""
        deadline = time.monotonic() + timeout_s
        self._wake.set()
        while self._backlog > 0:
            if time.monotonic() >= deadline or not self._thread.is_alive():
                return False
            time.sleep(0.005)
        return True

    # -- shutdown ---------------------------------------------------------------------

    def close(self, drain_timeout_s: float | None = None) -> WriterStats:
        """Stop accepting, drain for at most `drain_timeout_s`, fsync, log what is left."""
        timeout = self.settings.drain_timeout_s if drain_timeout_s is None else drain_timeout_s
        with self._lock:
            if self._closed:
                return self.stats()
            self._closed = True
        started = time.monotonic()
        self._drain_deadline = started + timeout
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout + 1.0)
        if self._thread.is_alive():
            log.warning("audit writer: thread still inside a database call after %.1fs", timeout)
        self._journal.close()
        final = self.stats()
        took = time.monotonic() - started
        if final.queue_depth == 0:
            log.info(
                "audit writer drained in %.2fs: %d rows written, %d write errors",
                took, final.rows_written, final.write_errors,
            )  # fmt: skip
        else:
            log.warning(
                "audit writer stopped after %.2fs with %d records (%d bytes) not yet in "
                "the database; they stay in %s and replay on the next start",
                took, final.queue_depth, final.spill_bytes, self._journal.directory,
            )  # fmt: skip
        return final

    def __enter__(self) -> AuditWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- the writer thread ------------------------------------------------------------

    def _run(self) -> None:
        while True:
            try:
                if not self._step():
                    return
            except Exception as exc:
                # Unexpected (a journal read, an fsync): everything is still in the
                # journal, so forget the memory queue and replay from the last commit.
                log.exception("audit writer: unexpected error; replaying from the journal")
                self._record_failure(exc, first=False)
                with self._lock:
                    self._pending.clear()
                    self._overflow = True
                if self._stop.is_set() and time.monotonic() >= self._drain_deadline:
                    return
                time.sleep(self.settings.retry_max_s)

    def _step(self) -> bool:
        """Sync the journal and write one batch; False when the thread should end."""
        self._journal.sync()
        if self._stop.is_set() and time.monotonic() >= self._drain_deadline:
            return False  # drain time is up: the rest waits in the journal
        taken = self._take_batch()
        if taken is None:
            if self._stop.is_set():
                return False
            self._wake.wait(self.settings.flush_interval_s)
            self._wake.clear()
            return True
        lines, end_lsn, torn = taken
        unreadable = self._write_with_retry(lines)
        if unreadable is None:
            return False
        self._journal.commit(end_lsn)
        with self._lock:
            self._backlog -= len(lines)
            self._torn += torn + unreadable
            if self._overflow and not self._pending and self._journal.pending_bytes == 0:
                self._overflow = False
        return True

    def _take_batch(self) -> tuple[list[bytes], int, int] | None:
        """Lines from memory, or from the journal once memory is drained after overflow."""
        with self._lock:
            if self._pending:
                n = min(self.settings.batch_size, len(self._pending))
                taken = [self._pending.popleft() for _ in range(n)]
                return [line for _, line in taken], taken[-1][0], 0
            if not self._overflow:
                return None
            start = self._journal.committed_lsn
        result = self._journal.read(start, self.settings.batch_size)
        if result.next_lsn == start:
            with self._lock:
                if self._journal.pending_bytes == 0:
                    self._overflow = False
            return None
        return result.lines, result.next_lsn, result.torn

    def _write_with_retry(self, lines: list[bytes]) -> int | None:
        """Write until it works (unreadable line count) or the drain deadline passes
        during close (None). A batch the server rejects for its content (not for being
        unreachable) is retried with client-side decoding, which skips only bad lines."""
        backoff = self.settings.retry_initial_s
        failures = 0
        strict = False
        while True:
            try:
                with self.engine.begin() as conn:
                    result = write_lines(conn, lines, self.settings.copy_min_rows, strict=strict)
            except Exception as exc:
                failures += 1
                self._record_failure(exc, first=failures == 1)
                if not strict and not is_unreachable(exc):
                    strict = True
                    continue
                if self._stop.is_set() and time.monotonic() >= self._drain_deadline:
                    return None
                time.sleep(min(backoff, max(0.0, self._drain_deadline - time.monotonic())))
                backoff = min(backoff * 2, self.settings.retry_max_s)
                continue
            if failures:
                log.info("audit writer: database back after %d failed attempts", failures)
            with self._lock:
                self._rows_written += result.inserted
                self._records_flushed += len(lines) - result.unreadable
            _notify(self._on_rows_written, result.inserted)
            return result.unreadable

    def _record_failure(self, exc: BaseException, first: bool) -> None:
        text = str(exc).strip()
        message = f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"
        with self._lock:
            self._write_errors += 1
            self._last_error = message
        level = logging.WARNING if first else logging.DEBUG
        log.log(level, "audit writer: batch write failed, will retry: %s", message)
        _notify(self._on_write_error, message)


def _notify(callback: Callable[[_T], None] | None, value: _T) -> None:
    """Run a monitoring callback; its failure must never stop the writer."""
    if callback is None:
        return
    try:
        callback(value)
    except Exception:
        log.exception("audit writer: monitoring callback failed")


def open_writer(
    db_url: str,
    *,
    spill_dir: Path | str | None = None,
    settings: WriterSettings | None = None,
    migrate: bool = False,
) -> AuditWriter:
    """A writer for `db_url` (what `simulate --audit-db URL` needs in one call).

    With `migrate`, the schema is created/upgraded first. A reachable database at the
    wrong schema raises SchemaNotCurrentError; an unreachable one only logs a warning:
    records wait in the spill journal (default: beside the SQLite file, or ./) until it
    answers."""
    engine = create_audit_engine(db_url)
    try:
        if migrate:
            upgrade(engine)
        require_current_schema(engine)
    except OperationalError as exc:
        log.warning(
            "audit database %s unreachable at start (%s); journalling until it answers",
            shown_url(engine.url), str(exc.orig).strip().splitlines()[0] if exc.orig else exc,
        )  # fmt: skip
    return AuditWriter(engine, spill_dir or default_spill_dir(engine.url), settings)
