"""One way to fail on a user mistake: one line on stderr, exit 2, no traceback."""

from __future__ import annotations

import sys
from typing import NoReturn

import typer

from slaguard.plaintext import visible

USER_ERROR_EXIT = 2


def fail(message: str, code: int = USER_ERROR_EXIT) -> NoReturn:
    """Print `error: <message>` on stderr and exit with `code` (2 for user mistakes); a
    message quoting data (a request id, a database error) stays on one inert line."""
    print_error(message)
    raise typer.Exit(code)


def print_error(message: str) -> None:
    """`error: <message>` on stderr, one inert line, for a failure told in several."""
    print(f"error: {visible(message)}", file=sys.stderr)
