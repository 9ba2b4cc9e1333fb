"""The audit writer process: journal segments in, database batches out.

Started by `writer.AuditWriter` as `python -m slaguard.audit.writer_process`, so decoding,
rendering explanations and database calls never take the routing process's GIL. It reads
the parent's spill journal from the committed LSN in order, writes batches of up to
`batch_size` lines in one transaction each (idempotent by request id, see `sink`), and
reports every committed batch and every failed attempt on stdout as one JSON line. Its
stdin is the parent's control pipe: any byte wakes it, end-of-file (parent closing or
dead) makes it exit, so it never outlives the parent; a thread watching the parent's pid
ends it too while it waits inside a database call (a lock, a stuck server). It ignores
SIGINT/SIGTERM: the parent decides when to stop, after draining. It runs niced
(`WriterSettings.process_nice`) so that on a busy box the kernel gives the router's
process the CPU first; the writer catches up in the gaps, its backlog held in the journal.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import sys
import threading
import time
from pathlib import Path
from typing import BinaryIO

import msgspec
from sqlalchemy import Engine

from slaguard.audit.engine import SqliteFileWatch, create_audit_engine
from slaguard.audit.lines import FLEET_TAG, FleetLabels
from slaguard.audit.lines_decode import decode_lines
from slaguard.audit.sink import is_unreachable, write_batch
from slaguard.audit.spill import QUARANTINE_FILE, read_journal, segment_files
from slaguard.logjson import log_json_to_stderr

log = logging.getLogger(__name__)
CONTROL_FD = 0
PARENT_POLL_S = 0.5


class ChildConfig(msgspec.Struct):
    """The first line the parent writes on the control pipe."""

    url: str
    spill_dir: str
    start_lsn: int
    live_from: int
    batch_size: int
    flush_interval_s: float
    copy_min_rows: int
    retry_initial_s: float
    retry_max_s: float
    nice: int
    statement_timeout_s: float
    sqlite_identity: tuple[int, int] | None
    """The SQLite file's (device, inode) when the parent started us: a file deleted or
    replaced before we connect is noticed too."""
    log_json: bool
    """Log JSON lines (`WriterSettings.log_json`) rather than text."""


class BatchDone(msgspec.Struct, tag="batch"):
    """Every line before `lsn` is in the database (`records` excludes fleet headers)."""

    lsn: int
    records: int
    inserted: int
    unreadable: int
    torn: int
    failures: int


class WriteFailed(msgspec.Struct, tag="error"):
    """One failed batch attempt (it is retried)."""

    message: str
    first: bool


Report = BatchDone | WriteFailed
_encode = msgspec.json.Encoder().encode


class DatabaseFileGone(FileNotFoundError):
    """The SQLite file was deleted under us: nothing is written (it would vanish with the
    deleted file) until it is back; the records wait in the journal."""


def wait_control(timeout_s: float) -> bool:
    """Sleep up to `timeout_s`, woken early by the parent; False once the parent is gone."""
    ready, _, _ = select.select([CONTROL_FD], [], [], timeout_s)
    return not ready or bool(os.read(CONTROL_FD, 4096))


def exit_with_parent(parent: int) -> None:
    """End the process once `parent` is gone (re-parented), whatever the main thread is
    blocked in; an open transaction rolls back and the journal replays it."""
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os._exit(0)


def error_message(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


class _Child:
    def __init__(self, cfg: ChildConfig, reports: BinaryIO) -> None:
        self.cfg = cfg
        self.reports = reports
        self.spill = Path(cfg.spill_dir)
        self.engine: Engine = create_audit_engine(
            cfg.url, statement_timeout_s=cfg.statement_timeout_s
        )
        watch = SqliteFileWatch.of(self.engine)
        if watch is not None:
            watch.identity = cfg.sqlite_identity
        self.file_watch = watch if cfg.sqlite_identity is not None else None
        self.fleets: dict[str, FleetLabels] = {}
        self.fleet_lines: dict[bytes, bool] = {}
        """Every fleet line read, and whether the quarantine file holds it already."""
        self.lsn = cfg.start_lsn

    def send(self, report: Report) -> None:
        self.reports.write(_encode(report) + b"\n")

    def load_headers(self) -> None:
        """Starting mid-segment (a restart): the fleet lines before `lsn` in that segment."""
        starts = [start for start, _, _ in segment_files(self.spill) if start <= self.lsn]
        if not starts or starts[-1] == self.lsn:
            return
        head = read_journal(self.spill, starts[-1], 1 << 62, self.cfg.live_from, self.lsn)
        fleet_lines = [line for line in head.lines if line.startswith(FLEET_TAG)]
        self.note_fleet_lines(fleet_lines)
        decode_lines(fleet_lines, True, self.fleets)

    def note_fleet_lines(self, lines: list[bytes]) -> None:
        for line in lines:
            if line.startswith(FLEET_TAG):
                self.fleet_lines.setdefault(line, False)

    def run(self) -> None:
        self.load_headers()
        while True:
            result = read_journal(self.spill, self.lsn, self.cfg.batch_size, self.cfg.live_from)
            if result.next_lsn == self.lsn:
                if not wait_control(self.cfg.flush_interval_s):
                    return
                continue
            if not wait_control(0):
                return
            done = self.write(result.lines)
            if done is None:
                return
            inserted, unreadable, failures, headers = done
            self.lsn = result.next_lsn
            self.send(
                BatchDone(
                    self.lsn, len(result.lines) - headers, inserted, unreadable, result.torn,
                    failures,
                )
            )  # fmt: skip

    def quarantine(self, lines: list[bytes]) -> None:
        """Append unreadable lines to `QUARANTINE_FILE` (fsync'd; created 0600, like the
        segments it came from) before their segment may be deleted, after the fleet lines
        they may need, so the file replays as a segment under a version that reads them;
        a failure is logged, the batch goes on."""
        if not lines:
            return
        path = self.spill / QUARANTINE_FILE
        headers = [line for line, kept in self.fleet_lines.items() if not kept]
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "ab") as f:
                f.write(b"".join(headers + lines))
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            log.error("could not keep %d unreadable journal lines in %s: %s", len(lines), path, exc)
            return
        self.fleet_lines.update(dict.fromkeys(headers, True))

    def write(self, lines: list[bytes]) -> tuple[int, int, int, int] | None:
        """(inserted, unreadable, failed attempts, fleet header lines), retrying with
        capped backoff; None when the parent went away meanwhile. A batch the server
        refuses for its content (not for being unreachable) is retried with every line
        checked, skipping bad ones."""
        backoff = self.cfg.retry_initial_s
        failures = 0
        strict = False
        batch = decode_lines(lines, strict, self.fleets)
        self.note_fleet_lines(lines)
        while True:
            try:
                if self.file_watch is not None and (gone := self.file_watch.problem()):
                    raise DatabaseFileGone(gone)
                with self.engine.begin() as conn:
                    inserted = write_batch(conn, batch, self.cfg.copy_min_rows)
                self.quarantine(batch.rejected)
                return inserted, batch.unreadable, failures, batch.headers
            except Exception as exc:
                failures += 1
                self.send(WriteFailed(error_message(exc), failures == 1))
                if not strict and not is_unreachable(exc):
                    strict = True
                    batch = decode_lines(lines, strict, self.fleets)
                    continue
            if not wait_control(backoff):
                return None
            backoff = min(backoff * 2, self.cfg.retry_max_s)


def _read_config() -> ChildConfig:
    data = b""
    while b"\n" not in data:
        chunk = os.read(CONTROL_FD, 4096)
        if not chunk:
            raise SystemExit(0)  # the parent went away before configuring us
        data += chunk
    return msgspec.json.decode(data.split(b"\n", 1)[0], type=ChildConfig)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    parent = os.getppid()
    threading.Thread(target=exit_with_parent, args=(parent,), daemon=True).start()
    cfg = _read_config()
    os.nice(cfg.nice)
    reports = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # stray prints must not corrupt the report stream
    process = f"audit-writer-process[{os.getpid()}]"
    if cfg.log_json:
        log_json_to_stderr(logging.WARNING, {"process": process})
    else:
        logging.basicConfig(
            level=logging.WARNING, format=f"%(asctime)s %(levelname)s {process} %(message)s"
        )
    # A broken report pipe means the parent is gone: what we did not report is still in
    # its journal and replays (idempotently) on the next start.
    with contextlib.suppress(BrokenPipeError):
        _Child(cfg, reports).run()
    sys.exit(0)


if __name__ == "__main__":
    main()
