"""`slaguard history | incidents`: the fleet mode's switches and the incidents, as tables.

They read the audit database, so they work with the service down. `mode.py` (rollback,
resume) and `status.py` import none of the pandas these tables need.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import typer

from slaguard.audit.formats import OutputFormat
from slaguard.audit.render import emit_frame
from slaguard.audit.timeargs import (
    TIME_HELP,
    parse_range,
    parse_time,
    span_title,
)
from slaguard.cli.dbopen import DbOption, open_audit_db
from slaguard.cli.errors import fail
from slaguard.cli.mode import GUARD_STATEMENT_TIMEOUT_S, query_or_fail
from slaguard.cli.output import FORMAT_HELP, check_output, writing
from slaguard.cli.paths import path_option
from slaguard.cli.usage import defaulted
from slaguard.guard.queries import incident_list, mode_history

FormatOption = typer.Option(None, "--format", "-f", help=FORMAT_HELP, show_default=False)
OutputOption = path_option(None, "--output", "-o", help="Write to this file.", metavar="<file>")


def history(
    since: str = typer.Option("-2h", "--since", help=f"Start (inclusive). {TIME_HELP}."),
    until: str = typer.Option("now", "--until", help="End (exclusive), same forms."),
    db: str | None = DbOption,
    fmt: OutputFormat | None = FormatOption,
    output: Path | None = OutputOption,
) -> None:
    """Mode switches in a time range: when, from, to, kind, who, why, incident."""
    try:
        start, end = parse_range(since, until, datetime.now(UTC), defaulted("since"))
    except ValueError as exc:
        fail(str(exc))
    fmt = check_output(fmt, output)
    engine = open_audit_db(db, statement_timeout_s=GUARD_STATEMENT_TIMEOUT_S)
    frame = query_or_fail(engine, lambda: mode_history(engine, start, end))
    with writing(output) as out:
        emit_frame(frame, fmt, out, f"mode switches {span_title(start, end)}")


def incidents(
    open_only: bool = typer.Option(False, "--open", help="Only unresolved incidents."),
    since: str | None = typer.Option(None, "--since", help=f"Opened at or after. {TIME_HELP}."),
    db: str | None = DbOption,
    fmt: OutputFormat | None = FormatOption,
    output: Path | None = OutputOption,
) -> None:
    """Incidents, newest first: detector, subject, state, notification delivery."""
    start = None
    if since is not None:
        try:
            start = parse_time(since, "--since", datetime.now(UTC))
        except ValueError as exc:
            fail(str(exc))
    fmt = check_output(fmt, output)
    engine = open_audit_db(db, statement_timeout_s=GUARD_STATEMENT_TIMEOUT_S)
    frame = query_or_fail(engine, lambda: incident_list(engine, open_only=open_only, since=start))
    with writing(output) as out:
        emit_frame(frame, fmt, out, "open incidents" if open_only else "incidents")
