"""Append-only, segmented spill journal: every acknowledged record until the DB has it.

`enqueue()` appends one line per record with a single `write()` before it returns, so an
acknowledged record is in the kernel even if the process is SIGKILLed a microsecond
later; the owning process fsyncs the journal at least once per flush interval (power
loss). Bytes are addressed by a log sequence number (LSN) that only grows: a segment file
is named by the LSN of its first byte, and is deleted once the database has committed
every record in it. On start, whatever segments remain are replayed in LSN order; the
inserts are idempotent, so a record committed just before a crash is not duplicated.

One process owns a journal directory (an exclusive `flock`): it appends (one thread at a
time, under `lock`; fsyncs and segment deletions run outside it, so an append never waits
on them), syncs and commits. Another process may read it with `read_journal` (the audit
writer process): every segment that starts at or after `live_from` may still be growing,
so an incomplete last line there means "not written yet", not "torn".

A *header line* (`append(..., header=...)`) is written at most once per segment, before
the first line that needs it, so every segment decodes on its own; header lines start
with `header_tag` and are not counted as records.
"""

from __future__ import annotations

import fcntl
import logging
import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

SEGMENT_SUFFIX = ".journal"
LOCK_FILE = "LOCK"
QUARANTINE_FILE = "unreadable.lines"
"""Journal lines the writer could not decode, appended as they were: kept for recovery
(a downgrade, a bug report) when their segment is deleted. Not a segment: never replayed."""
READ_CHUNK_BYTES = 1 << 20

log = logging.getLogger(__name__)
_A = TypeVar("_A")


class SpillInUseError(RuntimeError):
    """Another live process owns this spill directory."""


class SpillDirUnsafeError(RuntimeError):
    """The spill directory is another user's, or writable by every user."""


def unsafe_directory(directory: Path) -> str | None:
    """Why `directory` (if it exists) is not ours alone, or None. The writer replays every
    segment in it into the database and deletes what it committed: whoever may write there
    can forge audit records or delete unwritten ones (the default name is predictable)."""
    try:
        st = directory.stat()
    except OSError:
        return None  # absent: slaguard makes it owner-only
    harm = (
        "whoever may write there can add records the audit writer replays into the "
        "database, or delete ones not yet written"
    )
    if st.st_uid != os.geteuid():
        return (
            f"spill directory {directory} belongs to another user (uid {st.st_uid}): {harm}; "
            f"fix: remove it, or name a new directory inside it ({directory / 'spill'}: "
            "slaguard makes it private)"
        )
    if st.st_mode & stat.S_IWOTH:  # a group's members were let in by whoever set it so
        return (
            f"spill directory {directory} is writable by every user (mode "
            f"{stat.S_IMODE(st.st_mode):04o}): {harm}; fix: `chmod o-w {directory}`, or name "
            f"a new directory inside it ({directory / 'spill'}: slaguard makes it private, as a "
            "volume mounted 0777 needs)"
        )
    return None


@dataclass(slots=True)
class _Segment:
    start_lsn: int
    path: Path
    size: int

    @property
    def end_lsn(self) -> int:
        return self.start_lsn + self.size


@dataclass(frozen=True, slots=True)
class ReadResult:
    """Complete lines read from `start_lsn`, the LSN after them, and torn lines skipped."""

    lines: list[bytes]
    next_lsn: int
    torn: int


class SpillJournal:
    """The journal in one directory; `lock` guards appends and bookkeeping."""

    def __init__(
        self, directory: Path, segment_bytes: int = 8 << 20, header_tag: bytes | None = None
    ) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        self.lock = threading.RLock()
        # audit records are private: owner-only when we create them (an existing directory
        # and lock file keep their modes)
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        # after the mkdir: a directory someone made between a check and it is caught too
        if (problem := unsafe_directory(directory)) is not None:
            raise SpillDirUnsafeError(problem)
        self._lock_fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise SpillInUseError(
                f"spill directory {directory} is in use by another process; give each "
                "writer process its own spill directory"
            ) from None
        self._segments = self._scan()
        self.committed_lsn = self._segments[0].start_lsn if self._segments else 0
        self.end_lsn = self._segments[-1].end_lsn if self._segments else 0
        self.live_from = self.end_lsn
        """Segments this process writes start here; those before it are sealed."""
        self.recovered_records = sum(_count_records(s.path, header_tag) for s in self._segments)
        self._headers: set[str] = set()
        self._active_fd: int | None = None
        self._active: _Segment | None = None
        """The segment `_active_fd` appends to."""
        self._rotated_fds: list[int] = []
        self._dirty = False
        self._dir_dirty = False
        self._closed = False

    def _scan(self) -> list[_Segment]:
        found: list[_Segment] = []
        for path in sorted(self.directory.glob(f"*{SEGMENT_SUFFIX}")):
            start = segment_start(path)
            if start is None:
                log.warning(
                    "spill directory %s: %s is not a journal segment (its name is not an "
                    "LSN); left alone, not replayed; fix: move it out of the spill directory",
                    self.directory,
                    path.name,
                )
                continue
            size = path.stat().st_size
            if size == 0:
                path.unlink()
                continue
            found.append(_Segment(start, path, size))
        found.sort(key=lambda s: s.start_lsn)
        return found

    @property
    def pending_bytes(self) -> int:
        """Journal bytes the database has not confirmed yet."""
        return self.end_lsn - self.committed_lsn

    def append(self, line: bytes, header: tuple[str, bytes] | None = None) -> int:
        """Write one complete line (ending in newline); return the LSN after it.

        `header` is (key, header line): written first, in the same `write()`, unless the
        current segment already holds that key's header."""
        with self.lock:
            return self.append_held(line, header)

    def append_held(self, line: bytes, header: tuple[str, bytes] | None = None) -> int:
        """`append` for a caller that holds `lock` (the writer checks its limit under it):
        the routing path's one lock."""
        segment, fd = self._active, self._active_fd
        if segment is None or fd is None or segment.size >= self.segment_bytes:
            segment, fd = self._open_segment()
        new_header = None
        if header is not None and header[0] not in self._headers:
            new_header, line = header[0], header[1] + line
        try:
            written = os.write(fd, line)
            while written < len(line):
                written += os.write(fd, line[written:])
        except OSError:
            os.ftruncate(fd, segment.size)
            raise
        if new_header is not None:
            self._headers.add(new_header)
        segment.size += len(line)
        self.end_lsn += len(line)
        self._dirty = True
        return self.end_lsn

    def _open_segment(self) -> tuple[_Segment, int]:
        if self._closed:
            raise RuntimeError("spill journal is closed")
        path = self.directory / f"{self.end_lsn:020d}{SEGMENT_SUFFIX}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC
        fd = os.open(path, flags, 0o600)  # raising here leaves every descriptor as it was
        if self._active_fd is not None:
            self._rotated_fds.append(self._active_fd)
        self._active_fd = fd
        segment = self._active = _Segment(self.end_lsn, path, 0)
        self._segments.append(segment)
        self._headers.clear()
        self._dir_dirty = True
        return segment, fd

    def sync(self) -> None:
        """fsync what was appended since the last call (off the hot path)."""
        with self.lock:
            fds = list(self._rotated_fds)
            if self._dirty and self._active_fd is not None:
                fds.append(self._active_fd)
            to_close, self._rotated_fds = self._rotated_fds, []
            dir_dirty, self._dir_dirty, self._dirty = self._dir_dirty, False, False
        errors: list[OSError] = []
        for fd in fds:
            _attempt(errors, os.fsync, fd)
        if dir_dirty:
            _attempt(errors, _fsync_directory, self.directory)
        for fd in to_close:
            _attempt(errors, os.close, fd)  # each rotated descriptor is closed exactly once
        if errors:
            raise errors[0]

    def commit(self, lsn: int) -> None:
        """The database holds everything before `lsn`: forget (delete) covered segments
        (the unlinks outside `lock`, so no append waits on them)."""
        with self.lock:
            self.committed_lsn = max(self.committed_lsn, lsn)
            keep: list[_Segment] = []
            done: list[_Segment] = []
            for segment in self._segments:
                covered = segment.end_lsn <= self.committed_lsn
                (done if covered and segment is not self._active else keep).append(segment)
            self._segments = keep
        for segment in done:
            segment.path.unlink(missing_ok=True)

    def close(self) -> None:
        """fsync and close; delete every segment when the database has all of them."""
        self.sync()
        with self.lock:
            if self._closed:
                return
            self._closed = True
            if self._active_fd is not None:
                os.close(self._active_fd)
                self._active_fd = self._active = None
            if self.committed_lsn >= self.end_lsn:
                for segment in self._segments:
                    segment.path.unlink(missing_ok=True)
                self._segments = []
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)


def remove_if_unused(directory: Path) -> bool:
    """Remove a journal directory that holds nothing but its `LOCK` file, under that lock
    (a writer starting meanwhile keeps it): a drained simulated run left one behind each
    time. Anything else in it (a segment, `unreadable.lines`, a file of the user's), a
    symlink, or a live owner keeps it; True when it is gone."""
    if directory.is_symlink() or not directory.is_dir():
        return False
    if {p.name for p in directory.iterdir()} - {LOCK_FILE}:
        return False
    try:
        fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        (directory / LOCK_FILE).unlink()
        directory.rmdir()  # refused if a file appeared meanwhile
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def segment_start(path: Path) -> int | None:
    """The LSN a segment's name gives; None for another file named `*.journal` (a copy
    an operator left there), which is not ours to replay or delete."""
    stem = path.name.removesuffix(SEGMENT_SUFFIX)
    return int(stem) if stem.isascii() and stem.isdigit() else None


def segment_files(directory: Path) -> list[tuple[int, Path, int]]:
    """(start LSN, path, size) of every segment, in LSN order; vanished files and files
    that are not segments (`segment_start`) skipped."""
    found = []
    for path in directory.glob(f"*{SEGMENT_SUFFIX}"):
        start = segment_start(path)
        if start is None:
            continue
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            continue
        found.append((start, path, size))
    found.sort()
    return found


def _attempt(errors: list[OSError], call: Callable[[_A], object], arg: _A) -> None:
    try:
        call(arg)
    except OSError as exc:
        errors.append(exc)


def _fsync_directory(directory: Path) -> None:
    dir_fd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_journal(
    directory: Path,
    start_lsn: int,
    max_lines: int,
    live_from: int,
    stop_lsn: int | None = None,
) -> ReadResult:
    """Up to `max_lines` complete lines from `start_lsn` (and before `stop_lsn`).

    An incomplete last line in a segment starting before `live_from` is torn (a crash
    mid-write): skipped and counted. In a later segment it is still being written: the
    read stops before it."""
    lines: list[bytes] = []
    torn = 0
    lsn = start_lsn
    for seg_start, path, size in segment_files(directory):
        seg_end = seg_start + size if stop_lsn is None else min(seg_start + size, stop_lsn)
        if seg_end <= lsn:
            continue
        lsn = max(lsn, seg_start)
        try:
            f = path.open("rb")
        except FileNotFoundError:
            continue  # committed and deleted by the owner meanwhile
        with f:
            f.seek(lsn - seg_start)
            partial = b""
            while lsn + len(partial) < seg_end and len(lines) < max_lines:
                data = partial + f.read(min(READ_CHUNK_BYTES, seg_end - lsn - len(partial)))
                parts = data.split(b"\n")
                partial = parts.pop()
                room = max_lines - len(lines)
                for part in parts[:room]:
                    lines.append(part + b"\n")
                    lsn += len(part) + 1
                if len(parts) > room:
                    partial = b""
            if len(lines) >= max_lines or seg_end < seg_start + size:
                break
            if partial:
                if seg_start >= live_from:
                    break
                log.warning("spill %s: skipping a torn last line (%d bytes)", path, len(partial))
                torn += 1
                lsn = seg_end
    return ReadResult(lines, lsn, torn)


def _count_records(path: Path, header_tag: bytes | None) -> int:
    """Complete lines in a segment, header lines excluded."""
    data = path.read_bytes()
    complete = data[: data.rfind(b"\n") + 1]
    count = complete.count(b"\n")
    if header_tag is not None:
        count -= complete.count(b"\n" + header_tag) + complete.startswith(header_tag)
    return count
