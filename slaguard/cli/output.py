"""`--format` / `--output` checks shared by the commands that print frames."""

from __future__ import annotations

from pathlib import Path

from slaguard.audit.render import OutputFormat
from slaguard.cli.errors import fail


def check_output(fmt: OutputFormat, output: Path | None) -> None:
    """Refuse an `--output` the frame cannot be written to, before any query runs."""
    if fmt is OutputFormat.PARQUET and output is None:
        fail("--format parquet writes a file: add --output FILE.parquet")
    if output is not None and not output.parent.is_dir():
        fail(f"--output: directory {output.parent} does not exist")
