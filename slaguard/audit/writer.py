"""The audit writer: the routing path journals, a separate process writes batches.

`enqueue()` encodes the record (a scheduler `Explanation` raw, see `lines`) and appends it
to the spill journal with one `write()`; it never touches the database nor renders. A
record is *acknowledged* when `enqueue()` returns: it survives a database outage, a
crash or SIGKILL (the journal replays on the next start) and shutdown.

The database side is a child process (`writer_process`) reading the journal in LSN order,
so its decoding, rendering and inserts never hold this process's GIL. A watcher thread
here reads its reports, deletes committed segments, runs the monitoring callbacks, fsyncs
the journal every flush interval and restarts the child if it dies; the child exits when
its control pipe closes, so it never outlives us.
"""

from __future__ import annotations

import logging
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec
from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError

import slaguard
from slaguard.audit.engine import (
    SqliteFileWatch,
    create_audit_engine,
    default_spill_dir,
    error_line,
    shown_url,
)
from slaguard.audit.lines import FLEET_TAG, JournalEncoder
from slaguard.audit.migrate import require_current_schema, upgrade
from slaguard.audit.records import AuditRecord
from slaguard.audit.spill import QUARANTINE_FILE, SpillJournal
from slaguard.audit.writer_process import BatchDone, ChildConfig, Report, WriteFailed
from slaguard.audit.writer_settings import (
    JournalWriteError,
    SpillFullError,
    WriterSettings,
    WriterStartError,
    WriterStats,
)
from slaguard.scheduler.explain import Explanation

log = logging.getLogger(__name__)
_T = TypeVar("_T")
_decode_report = msgspec.json.Decoder(Report).decode
STOP_GRACE_S = 2.0  # how long a child inside a database call may take to exit on close


class AuditWriter:
    """Owns one spill directory and one writer process; use as a context manager."""

    def __init__(
        self,
        engine: Engine,
        spill_dir: Path | str,
        settings: WriterSettings | None = None,
        *,
        on_rows_written: Callable[[int], None] | None = None,
        on_write_error: Callable[[str], None] | None = None,
        on_records_lost: Callable[[int], None] | None = None,
    ) -> None:
        self.engine = engine
        self.spill_dir = Path(spill_dir)
        self.settings = settings or WriterSettings()
        self._on_rows_written = on_rows_written
        self._on_write_error = on_write_error
        self._on_records_lost = on_records_lost
        self._journal = SpillJournal(Path(spill_dir), self.settings.segment_bytes, FLEET_TAG)
        self._encoder = JournalEncoder()
        self._lock = self._journal.lock
        self._backlog = self._journal.recovered_records
        self._rows_written = 0
        self._records_flushed = 0
        self._write_errors = 0
        self._refused = 0
        self._torn = 0
        self._restarts = 0
        self._last_error: str | None = None
        self._last_error_at_s: float | None = None
        self._closed = False
        self._stopping = threading.Event()
        self._child_lock = threading.Lock()
        if self._backlog:
            log.info(
                "audit writer: replaying the journal left in %s: %d records (%d bytes), "
                "those the database already holds skipped",
                spill_dir, self._backlog, self._journal.pending_bytes,
            )  # fmt: skip
        try:
            self._child = self._spawn()
        except OSError as exc:
            self._journal.close()
            raise WriterStartError(
                f"cannot start the audit writer process ({sys.executable} -m "
                f"slaguard.audit.writer_process): {exc.strerror or exc}; fix: run slaguard "
                "with a Python this user may execute"
            ) from exc
        except BaseException:
            self._journal.close()
            raise
        self._watcher = threading.Thread(target=self._watch, name="audit-writer", daemon=True)
        self._watcher.start()

    def enqueue(self, record: AuditRecord) -> None:
        """Acknowledge a record: journal it; never waits on the database."""
        self._append(*self._encoder.encode(record))

    def enqueue_decision(self, head: tuple[Any, ...], explanation: Explanation) -> None:
        """`enqueue(record_from_head(head, explanation))` without building the record:
        the routing path's acknowledgement (`head` from `from_scheduler.decision_head`)."""
        self._append(*self._encoder.encode_raw(head, explanation))

    def _append(self, line: bytes, header: tuple[str, bytes] | None) -> None:
        """The limit check and the write under the journal's lock, taken once."""
        limit, journal = self.settings.max_spill_bytes, self._journal
        with self._lock:
            if self._closed:
                raise RuntimeError("audit writer is closed")
            if limit is not None and journal.end_lsn - journal.committed_lsn + len(line) > limit:
                self._refused += 1
                raise SpillFullError(
                    f"audit spill journal holds {journal.pending_bytes} bytes "
                    f"(limit {limit}); database {shown_url(self.engine.url)} unreachable?"
                )
            try:
                journal.append_held(line, header)
            except OSError as exc:
                self._refused += 1
                self._last_error = f"audit spill journal in {journal.directory}: {exc}"
                self._last_error_at_s = time.time()
                raise JournalWriteError(self._last_error) from exc
            self._backlog += 1

    def stats(self) -> WriterStats:
        """A consistent snapshot of every gauge and counter."""
        with self._lock:
            return WriterStats(
                queue_depth=self._backlog,
                spill_bytes=self._journal.pending_bytes,
                rows_written=self._rows_written,
                records_flushed=self._records_flushed,
                write_errors=self._write_errors,
                refused=self._refused,
                torn_records=self._torn,
                process_restarts=self._restarts,
                last_error=self._last_error,
                last_error_at_s=self._last_error_at_s,
            )

    @property
    def process_id(self) -> int:
        """The writer process's pid (changes when it is restarted)."""
        return self._child.pid

    def wait_flushed(self, timeout_s: float) -> bool:
        """Poll until every acknowledged record is in the database, or the timeout."""
        deadline = time.monotonic() + timeout_s
        self._poke()
        while self._backlog > 0:
            if time.monotonic() >= deadline or not self._watcher.is_alive():
                return False
            time.sleep(0.005)
        return True

    def close(self, drain_timeout_s: float | None = None) -> WriterStats:
        """Stop accepting, drain for at most `drain_timeout_s`, fsync, log what is left."""
        timeout = self.settings.drain_timeout_s if drain_timeout_s is None else drain_timeout_s
        with self._lock:
            if self._closed:
                return self.stats()
            self._closed = True
        started = time.monotonic()
        self.wait_flushed(timeout)
        with self._child_lock:
            self._stopping.set()
            child = self._child
        if child.stdin is not None:
            child.stdin.close()  # end-of-file: the child exits after its current batch
        self._watcher.join(STOP_GRACE_S)
        if self._watcher.is_alive():
            log.warning(
                "audit writer: process %d still inside a database call after %.1fs; killed",
                child.pid, time.monotonic() - started,
            )  # fmt: skip
            child.kill()
            self._watcher.join()
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

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _spawn(self) -> subprocess.Popen[bytes]:
        s = self.settings
        config = ChildConfig(
            self.engine.url.render_as_string(hide_password=False),
            str(self._journal.directory.resolve()), self._journal.committed_lsn,
            self._journal.live_from, s.batch_size, s.flush_interval_s, s.copy_min_rows,
            s.retry_initial_s, s.retry_max_s, s.process_nice, s.statement_timeout_s,
            None if (watch := SqliteFileWatch.of(self.engine)) is None else watch.identity,
            s.log_json,
        )  # fmt: skip
        env = dict(os.environ)
        root = str(Path(slaguard.__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        child = subprocess.Popen(
            [sys.executable, "-m", "slaguard.audit.writer_process"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0, env=env,
        )  # fmt: skip
        assert child.stdin is not None
        child.stdin.write(msgspec.json.encode(config) + b"\n")
        return child

    def _poke(self) -> None:
        """Wake the child now (it polls the journal every flush interval otherwise)."""
        stdin = self._child.stdin
        try:
            if stdin is not None:
                stdin.write(b"w")
        except (OSError, ValueError):
            pass  # exiting or being replaced: the watcher handles it

    def _watch(self) -> None:
        backoff = self.settings.retry_initial_s
        while True:
            child = self._child
            try:
                if self._pump(child):
                    backoff = self.settings.retry_initial_s
            except Exception:
                # Everything unconfirmed is still in the journal: start over from it.
                log.exception("audit writer: watcher failed; restarting the writer process")
                child.kill()
            code = child.wait()
            if child.stdin is not None:
                child.stdin.close()
            with self._child_lock:
                if self._stopping.is_set():
                    return
            log.warning(
                "audit writer: process %d exited (%s); restarting it, the journal holds "
                "every unconfirmed record", child.pid, code,
            )  # fmt: skip
            while self._pause(backoff):
                backoff = min(backoff * 2, self.settings.retry_max_s)
                with self._child_lock:
                    if self._stopping.is_set():
                        return
                    try:
                        self._child = self._spawn()
                    except OSError:
                        log.exception("audit writer: could not start the writer process")
                        continue
                    self._restarts += 1
                    break
            else:
                return

    def _pause(self, seconds: float) -> bool:
        """Wait before a restart, still fsyncing every flush interval; False if closing."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self._stopping.wait(min(left, self.settings.flush_interval_s)):
                return False
            self._sync()
        return not self._stopping.is_set()

    def _pump(self, child: subprocess.Popen[bytes]) -> bool:
        """Handle the child's reports until it exits, fsyncing the journal every flush
        interval; True if it committed anything."""
        assert child.stdout is not None
        fd = child.stdout.fileno()
        interval = self.settings.flush_interval_s
        buffered = b""
        committed = False
        next_sync = time.monotonic() + interval
        while True:
            ready, _, _ = select.select([fd], [], [], max(0.0, next_sync - time.monotonic()))
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    child.stdout.close()
                    self._sync()
                    return committed
                *messages, buffered = (buffered + chunk).split(b"\n")
                for message in messages:
                    committed |= self._handle(_decode_report(message))
            if time.monotonic() >= next_sync:
                self._sync()
                next_sync = time.monotonic() + interval

    def _sync(self) -> None:
        try:
            self._journal.sync()
        except OSError:
            log.exception("audit writer: fsync of the spill journal failed")

    def _handle(self, report: BatchDone | WriteFailed) -> bool:
        if isinstance(report, WriteFailed):
            with self._lock:
                self._write_errors += 1
                self._last_error = report.message
                self._last_error_at_s = time.time()
            level = logging.WARNING if report.first else logging.DEBUG
            log.log(level, "audit writer: batch write failed, will retry: %s", report.message)
            _notify(self._on_write_error, report.message)
            return False
        self._journal.commit(report.lsn)
        with self._lock:
            self._backlog -= report.records
            self._rows_written += report.inserted
            self._records_flushed += report.records - report.unreadable
            self._torn += report.torn + report.unreadable
        if report.failures:
            log.info("audit writer: database back after %d failed attempts", report.failures)
        if lost := report.torn + report.unreadable:
            log.warning(
                "audit writer: %d journal records are not in the audit database: %d torn "
                "(cut short by a crash), %d unreadable (kept in %s; the errors above say why)",
                lost, report.torn, report.unreadable, self._journal.directory / QUARANTINE_FILE,
            )  # fmt: skip
            _notify(self._on_records_lost, lost)
        _notify(self._on_rows_written, report.inserted)
        return True


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
            shown_url(engine.url), error_line(exc),
        )  # fmt: skip
    return AuditWriter(engine, spill_dir or default_spill_dir(engine.url), settings)
