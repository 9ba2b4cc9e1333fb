"""`--format` / `--output` / `--plot` checks shared by the commands that print frames."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from slaguard.audit.formats import OutputFormat
from slaguard.cli.errors import fail

FORMAT_HELP = "Output format; default: --output's extension (.csv, .json, .parquet), else table."
_BY_SUFFIX = {f".{f.value}": f for f in OutputFormat if f is not OutputFormat.TABLE}


def check_output(fmt: OutputFormat | None, output: Path | None) -> OutputFormat:
    """The format to write (`--format`, else `--output`'s extension, else the table);
    refuse an `--output` the frame cannot be written to, before any query runs."""
    if fmt is None:
        by_suffix = None if output is None else _BY_SUFFIX.get(output.suffix.lower())
        if output is not None and by_suffix is None:
            fail(
                f"--output: {output.name} does not say its format; fix: add --format csv, json "
                "or parquet, or end the file name in .csv, .json or .parquet"
            )
        fmt = by_suffix or OutputFormat.TABLE
    if fmt is OutputFormat.PARQUET and output is None:
        fail("--format parquet writes a file: add --output FILE.parquet")
    if output is not None and fmt is OutputFormat.TABLE:
        fail("--output: the table is for the terminal; add --format csv, json or parquet")
    if output is not None:
        check_writable(output, "--output")
    return fmt


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
def writing(path: Path | None, option: str = "--output") -> Iterator[Path | None]:
    """`writing_to(path)`, or stdout's None when no file is given."""
    if path is None:
        yield None
        return
    with writing_to(path, option) as partial:
        yield partial


@contextmanager
def writing_to(path: Path, option: str) -> Iterator[Path]:
    """The file to write for `path`: a partial one beside it, put in its place only once
    whole, so a failed write (a full disk) leaves the previous file as it was, where it
    left the new one's first bytes. The failure is one line, exit 2."""
    direct = path.exists() and not path.is_file()  # /dev/null, /dev/stdout, a FIFO
    real = path.resolve()  # a symbolic link's file is replaced, not the link
    partial = real.with_name(f".{real.stem}.partial-{os.getpid()}{real.suffix}")
    try:
        yield path if direct else partial
        if not direct and partial.exists():  # a writer that wrote nothing leaves `path`
            if real.is_file():  # a file kept private stays so, not widened to the umask's
                shutil.copymode(real, partial)
            os.replace(partial, real)
    except OSError as exc:
        fail(f"{option}: cannot write {path}: {exc.strerror or exc}; fix: write somewhere else")
    finally:
        partial.unlink(missing_ok=True)
