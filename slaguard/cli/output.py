"""`--format` / `--output` / `--plot` checks shared by the commands that print frames."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from slaguard.audit.formats import OutputFormat
from slaguard.cli.errors import fail


def check_output(fmt: OutputFormat, output: Path | None) -> None:
    """Refuse an `--output` the frame cannot be written to, before any query runs."""
    if fmt is OutputFormat.PARQUET and output is None:
        fail("--format parquet writes a file: add --output FILE.parquet")
    if output is not None and fmt is OutputFormat.TABLE:
        fail("--output: the table is for the terminal; add --format csv, json or parquet")
    if output is not None:
        check_writable(output, "--output")


def check_writable(path: Path, option: str) -> None:
    """Refuse a file that cannot be created or overwritten, in one line."""
    parent = path.parent
    if not parent.is_dir():
        why = "is not a directory" if parent.exists() else "does not exist"
        fail(f"{option}: {parent} {why}; fix: name a file in an existing directory")
    if path.is_dir():
        fail(f"{option}: {path} is a directory; fix: name a file")
    if not os.access(path if path.exists() else parent, os.W_OK):
        fail(f"{option}: cannot write {path}: permission denied; fix: write somewhere else")


@contextmanager
def writing(path: Path | None, option: str = "--output") -> Iterator[None]:
    """A failed write to `path` (a full disk, a vanished directory) as one line, exit 2."""
    if path is None:
        yield
        return
    try:
        yield
    except OSError as exc:
        fail(f"{option}: cannot write {path}: {exc.strerror or exc}; fix: write somewhere else")
