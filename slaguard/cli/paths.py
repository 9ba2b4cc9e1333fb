"""Options naming a file, a folder or a database, refusing a blank value in one line.

`Path("")` is `.`: `--fleet ""` was read as the working directory (`.: is a directory`),
`--plot ""` and `--output ""` got click's error box, `--db ""` opened the default database
and `--audit-db ""` recorded nothing, all without a word about the blank value.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from slaguard.cli.errors import fail


def _refuse_blank(flag: str, value: str | Path, what: str) -> str:
    text = str(value)
    if not text.strip():
        fail(f"{flag}: blank ({text!r}); fix: give {what}, or omit {flag}")
    return text


def path_option(default: Path | None, *decls: str, **kwargs: Any) -> Any:
    """`typer.Option` for a file or folder path; `decls[0]` names it in the refusal."""

    def parse(value: str | Path) -> Path:
        return Path(_refuse_blank(decls[0], value, "a path"))

    kwargs.setdefault("metavar", "<path>")  # what the help said before the parser
    return typer.Option(default, *decls, parser=parse, **kwargs)


def db_option(default: str | None, *decls: str, **kwargs: Any) -> Any:
    """`typer.Option` for a database URL or SQLite file path, refusing a blank one."""

    def parse(value: str) -> str:
        return _refuse_blank(decls[0], value, "a database URL or SQLite file path")

    return typer.Option(default, *decls, parser=parse, **kwargs)
