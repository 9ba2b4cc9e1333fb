"""Standard output that cannot be written (a full disk, a closed pipe): one line, no traceback.

A command's answer goes to stdout through rich, click, pandas and plain writes; any of
them failing (`> /dev/full`) raised an OSError traceback, or at interpreter exit printed
"Exception ignored" and exited 120. stdout's own failures are tagged so they are told
apart from the command's other I/O, which keeps its own handling.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import sys
from collections.abc import Callable
from typing import Any, BinaryIO

from slaguard.cli.errors import USER_ERROR_EXIT


class StdoutWriteError(OSError):
    """A write to standard output failed; an OSError still, for handlers of those."""


class _TaggedStdout(io.TextIOWrapper):
    """sys.stdout whose write and flush failures are `StdoutWriteError`; `unbuffered`
    flushes each write, as PYTHONUNBUFFERED asks."""

    def __init__(self, buffer: BinaryIO, *, unbuffered: bool, **kwargs: Any) -> None:
        super().__init__(buffer, **kwargs)
        self._unbuffered = unbuffered

    def write(self, text: str, /) -> int:
        try:
            written = super().write(text)
            if self._unbuffered:
                super().flush()
            return written
        except OSError as exc:
            raise StdoutWriteError(exc.errno, exc.strerror) from exc

    def flush(self) -> None:
        try:
            super().flush()
        except OSError as exc:
            raise StdoutWriteError(exc.errno, exc.strerror) from exc


def _tag_stdout() -> None:
    stdout = sys.stdout
    if not isinstance(stdout, io.TextIOWrapper):  # closed (None) or replaced by a host
        return
    binary = stdout.detach()
    # PYTHONUNBUFFERED (containers) leaves the raw file, where a short write (a reader
    # leaving mid-write) was taken as done: the rest was dropped, and exit 0. A buffer
    # writes all or raises; flushing each write keeps the output unbuffered.
    unbuffered = isinstance(binary, io.RawIOBase)
    sys.stdout = _TaggedStdout(
        io.BufferedWriter(binary) if unbuffered else binary,
        unbuffered=unbuffered,
        encoding=stdout.encoding,
        errors=stdout.errors,
        line_buffering=stdout.line_buffering,
        write_through=stdout.write_through,
    )


def _failed(exc: StdoutWriteError) -> None:
    """Say so once (a reader that left a pipe early needs no word) and leave the unwritten
    rest to /dev/null, where the exit's own flush cannot fail again."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    if exc.errno == errno.EPIPE:
        raise SystemExit(1)
    with contextlib.suppress(OSError):
        print(
            f"error: cannot write to standard output: {exc.strerror or exc}; fix: free space "
            "where it goes, or send it elsewhere",
            file=sys.stderr,
        )
    raise SystemExit(USER_ERROR_EXIT)


def run_guarded(command: Callable[[], object]) -> None:
    """Run the CLI with stdout's failures turned into one `error:` line."""
    _tag_stdout()
    try:
        try:
            command()
        finally:
            sys.stdout.flush()  # here: at interpreter exit a failure is not ours to word
    except StdoutWriteError as exc:
        _failed(exc)
