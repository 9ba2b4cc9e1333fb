"""`slaguard audit`: postmortem questions over the audit database.

Every subcommand takes `--db` and `--format table|csv|json|parquet` (`--output FILE`;
parquet needs it). Times are ISO 8601 or relative to now (`-2h`, `-30m`, `-7d`).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import pandas as pd  # type: ignore[import-untyped]
import typer
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from slaguard.audit import known, service
from slaguard.audit.engine import error_line
from slaguard.audit.formats import OutputFormat
from slaguard.audit.group_stats import TargetCapacity, fleet_capacity
from slaguard.audit.incident_timeline import (
    GUARD_INCIDENT_PREFIX,
    incident_timeline,
    incident_with_guard_id,
    mode_in_force,
)
from slaguard.audit.isotime import iso_utc
from slaguard.audit.records import POLICY_ARMS
from slaguard.audit.render import emit_explanation, emit_frame, emit_timeline
from slaguard.audit.service import DecisionExplanation, UnknownRequestError
from slaguard.audit.store import UnknownIncidentError
from slaguard.audit.timeargs import TIME_HELP, parse_duration, parse_range, span_title
from slaguard.cli.dbopen import DbOption, open_audit_db
from slaguard.cli.errors import fail
from slaguard.cli.fleet import FleetOption, load_or_fail
from slaguard.cli.output import FORMAT_HELP, check_output, check_writable, writing, writing_to
from slaguard.cli.paths import path_option
from slaguard.cli.usage import defaulted
from slaguard.plaintext import visible
from slaguard.scheduler.rollout import FleetMode

app = typer.Typer(help="Postmortem queries over recorded routing decisions.", no_args_is_help=True)

_T = TypeVar("_T")

FormatOption = typer.Option(None, "--format", "-f", help=FORMAT_HELP, show_default=False)
OutputOption = path_option(
    None, "--output", "-o", help="Write to this file (needed for parquet).", metavar="<file>"
)
SinceOption = typer.Option("-1h", "--since", help=f"Start (inclusive). {TIME_HELP}.")
UntilOption = typer.Option("now", "--until", help="End (exclusive), same forms as --since.")
PlotOption = path_option(
    None,
    "--plot",
    help="Also draw TTFT p99 per target, mode switches marked, to this PNG.",
    metavar="<file>",
)
TABLE_DECISION_COLUMNS = (
    "request_id", "decided_at", "model_id", "priority", "policy_arm", "fleet_mode",
    "outcome", "target_id", "ttft_s", "sla_met",
)  # fmt: skip
"""The terminal table's columns; csv/json/parquet carry every column."""
LIMIT_MAX = 1_000_000_000
"""More rows than any answer holds; past 2**63 the database driver raised OverflowError."""


def _now() -> datetime:
    return datetime.now(UTC)


def _answer(query: Callable[[], _T]) -> _T:
    """Run a query; user-fixable problems and database failures become one line."""
    try:
        return query()
    except (UnknownRequestError, UnknownIncidentError) as exc:
        fail(str(exc.args[0]))
    except ValueError as exc:
        fail(str(exc))
    except SQLAlchemyError as exc:
        fail(f"database query failed: {error_line(exc)}")


@app.command("decisions")
def decisions_command(
    since: str = SinceOption,
    until: str = UntilOption,
    target: str | None = typer.Option(None, help="Only this target id."),
    model: str | None = typer.Option(None, help="Only this model id."),
    policy: str | None = typer.Option(
        None, help="Only this arm: round_robin or learned (also round-robin)."
    ),
    mode: str | None = typer.Option(None, help="Only this fleet mode, e.g. rollout(10)."),
    limit: int = typer.Option(1000, help=f"At most this many rows, up to {LIMIT_MAX:,} (0: all)."),
    db: str | None = DbOption,
    fmt: OutputFormat | None = FormatOption,
    output: Path | None = OutputOption,
) -> None:
    """Decisions in a time range, with their outcomes, oldest first."""
    fmt = check_output(fmt, output)
    if not 0 <= limit <= LIMIT_MAX:
        fail(f"--limit: {limit} is not in 0..{LIMIT_MAX:,}; give a row count, or 0 for all")
    if policy is not None:
        policy = _policy_arm(policy)
    if mode is not None:
        mode = _mode_label(mode)
    start, end = _answer(lambda: parse_range(since, until, _now(), defaulted("since")))
    engine = open_audit_db(db)
    # one row more than asked tells a cut answer from one of exactly --limit rows
    frame = _answer(
        lambda: service.decisions(
            engine, start, end, target=target, model=model, policy=policy, mode=mode,
            limit=limit + 1 if limit else None,
        )
    )  # fmt: skip
    if limit and len(frame) > limit:
        frame = frame.iloc[:limit]
        first = "the first decision" if limit == 1 else f"the first {limit} decisions"
        typer.echo(f"note: {first}; --limit 0 for all of them", err=True)
    if frame.empty:
        _note_unknown_ids(engine, start, end, target, model)
    if fmt is OutputFormat.TABLE:
        frame = frame[list(TABLE_DECISION_COLUMNS)]
    with writing(output) as out:
        emit_frame(frame, fmt, out, f"decisions {span_title(start, end)}")


def _policy_arm(arm: str) -> str:
    """An arm as stored (`round_robin`), also spelt as `simulate --policy` takes it
    (`round-robin`), or one line."""
    stored = arm.replace("-", "_")
    if stored not in POLICY_ARMS:
        fail(f"--policy: unknown arm {arm!r}; fix: use one of {sorted(POLICY_ARMS)}")
    return stored


def _mode_label(label: str) -> str:
    """A fleet mode as stored (`rollout(010)` matched nothing, silently), also spelt with
    hyphens as `--policy` takes them (`round-robin`, `held-round-robin`), or one line."""
    try:
        return FleetMode.parse(label.replace("-", "_")).label
    except ValueError:
        fail(
            f"--mode: unknown fleet mode {label!r}; fix: use round_robin, held_round_robin "
            "(or round-robin, held-round-robin), learned or rollout(N) with N in 1..100 (the "
            "plan's stages: 10, 50, 100; a resume --stage can enter any)"
        )


def _note_unknown_ids(
    engine: Engine, start: datetime, end: datetime, target: str | None, model: str | None
) -> None:
    """An empty answer to a misspelt --target or --model looked like a quiet hour: say
    when no decision names the value, with the known ids nearest to it."""
    unknown = []
    if target is not None:
        targets = _answer(lambda: known.recorded_targets(engine))
        if target not in targets:
            unknown.append(
                f"--target {target!r} is unknown: no decision was routed to it"
                f" ({_nearest(target, targets)})"
            )
    if model is not None:
        fleet_models = {t.model.id for t in load_or_fail(None).targets}
        models = sorted(
            fleet_models | set(_answer(lambda: known.models_between(engine, start, end)))
        )
        base, at, release = model.partition("@")
        if model not in models and at and base in models:
            unknown.append(
                f"--model {model!r} is unknown: decisions record the model without its release "
                f"(@{release}, as a cold_start incident's subject names it); fix: --model {base}"
            )
        elif model not in models:
            unknown.append(
                f"--model {model!r} is unknown: neither the built-in fleet nor a decision in "
                f"this range names it ({_nearest(model, models)})"
            )
    if unknown:
        typer.echo(visible(f"note: {'; '.join(unknown)}"), err=True)


def _nearest(value: str, ids: list[str]) -> str:
    """A few known ids, the likeliest meant first (`l40s-8b-0` for `l40s-8b-O`)."""
    if not ids:
        return "the database holds none"
    ranked = sorted(ids, key=lambda i: (-difflib.SequenceMatcher(None, value, i).ratio(), i))
    return "known: " + _some(ranked)


@app.command("explain")
def explain_command(
    request_id: str = typer.Argument(..., help="The request id to explain."),
    db: str | None = DbOption,
    fmt: OutputFormat | None = FormatOption,
    output: Path | None = OutputOption,
) -> None:
    """Why one request went where it went, and how it turned out.

    Every candidate's component scores, the rejected targets and why, the weights version
    and the fleet mode."""
    fmt = check_output(fmt, output)
    engine = open_audit_db(db)
    found = _answer(lambda: _explained(engine, request_id))
    with writing(output) as out:
        emit_explanation(found, fmt, out)


def _explained(engine: Engine, request_id: str) -> DecisionExplanation:
    """The explanation, or an unknown id with the command that lists the known ones."""
    try:
        return service.explain(engine, request_id)
    except UnknownRequestError as exc:
        raise UnknownRequestError(
            f"{exc.args[0]}; fix: `slaguard audit decisions --since -1h` lists request ids "
            "(an earlier --since for older ones)"
        ) from None


@app.command("summary")
def summary_command(
    since: str = SinceOption,
    until: str = UntilOption,
    fleet_file: Path | None = FleetOption,
    db: str | None = DbOption,
    fmt: OutputFormat | None = FormatOption,
    output: Path | None = OutputOption,
) -> None:
    """Per arm, target and card type: decision vs capacity share, TTFT, SLA violations.

    TTFT p50/p99, and the SLA violation rate over the outcomes an SLA judges."""
    fmt = check_output(fmt, output)
    start, end = _answer(lambda: parse_range(since, until, _now(), defaulted("since")))
    capacity = fleet_capacity(load_or_fail(fleet_file))
    engine = open_audit_db(db)
    frame = _answer(lambda: service.summary(engine, start, end, capacity))
    _warn_targets_outside(frame, capacity, fleet_file)
    with writing(output) as out:
        emit_frame(frame, fmt, out, f"summary {span_title(start, end)}")


def _incident_ref(value: str) -> str:
    """An audit id (a number) or the guard's `inc-...` id a simulate report names."""
    if value.startswith(GUARD_INCIDENT_PREFIX) and value != GUARD_INCIDENT_PREFIX:
        return value
    try:
        return str(int(value))
    except ValueError:
        raise ValueError(
            f"{value!r}: input should be an incident's audit id (a number) or the guard's id "
            "from a simulate report (inc-...)"
        ) from None


@app.command("incident")
def incident_command(
    incident_id: str = typer.Argument(
        ...,
        parser=_incident_ref,
        help="Incident id: the audit id, or the guard's inc-... id from a simulate report.",
    ),
    before: str = typer.Option("30m", help="How far before the opening to look."),
    after: str = typer.Option("30m", help="How far after the resolution to look."),
    plot: Path | None = PlotOption,
    fleet_file: Path | None = FleetOption,
    db: str | None = DbOption,
    fmt: OutputFormat | None = FormatOption,
    output: Path | None = OutputOption,
) -> None:
    """The timeline around an incident: evidence, mode switches, per-target figures.

    Per target: decision share and TTFT p50/p99 before / during / after."""
    fmt = check_output(fmt, output)
    if plot is not None and plot.suffix.lower() != ".png":
        fail(
            f"--plot: {plot} is not a .png file (the plot is written as PNG only); fix: name "
            f"a .png file, e.g. --plot {plot.with_suffix('.png')}"
        )
    if plot is not None:
        check_writable(plot, "--plot")
    pre = _answer(lambda: parse_duration(before, "--before"))
    post = _answer(lambda: parse_duration(after, "--after"))
    capacity = fleet_capacity(load_or_fail(fleet_file))
    engine = open_audit_db(db)
    now = _now()
    audit_id = _answer(
        lambda: (
            incident_with_guard_id(engine, incident_id)
            if incident_id.startswith(GUARD_INCIDENT_PREFIX)
            else int(incident_id)
        )
    )
    timeline = _answer(
        lambda: incident_timeline(
            engine, audit_id, before=pre, after=post, now=now, capacity=capacity
        )
    )
    _warn_targets_outside(timeline.per_target, capacity, fleet_file)
    with writing(output) as out:
        emit_timeline(timeline, fmt, out)
    if timeline.per_target.empty:
        start, end = timeline.window
        typer.echo(
            f"note: no decisions {span_title(start, end)}: pruned, or routed into another "
            "database (--db)",
            err=True,
        )
    if plot is not None:
        from slaguard.audit.incident_subject import served_models, subject_targets
        from slaguard.audit.plot import plot_incident

        start, end = timeline.window
        series = _answer(lambda: service.ttft_p99_series(engine, start, end))
        served = _answer(lambda: served_models(engine, start, end))
        rec = timeline.incident.record
        covered = subject_targets(rec.subject, rec.evidence, served)
        in_force = None
        if timeline.mode_changes.empty:
            in_force = _answer(lambda: mode_in_force(engine, timeline))
        with writing_to(plot, "--plot") as png:
            plot_incident(
                timeline, series, png, now, mode_in_force=in_force, subject_targets=covered
            )
        typer.echo(f"plot written to {plot}", err=True)


def _warn_targets_outside(
    rows: pd.DataFrame, capacity: Mapping[str, TargetCapacity], fleet_file: Path | None
) -> None:
    """Capacity shares come from the fleet file: say so when it lacks targets the
    database names, or puts them on another card (a service run on another fleet): their
    shares are then unknown (left empty)."""
    named = {(t, c) for t, c in zip(rows["target_id"], rows["card_type"], strict=True)}
    missing = sorted({t for t, _ in named if isinstance(t, str)} - set(capacity))
    moved = sorted(
        f"{t} ({c} in the database, {capacity[t].card_id} in the file)"
        for t, c in named
        if isinstance(t, str) and t in capacity and capacity[t].card_id != c
    )
    problems = []
    if missing:
        problems.append(f"lacks {len(missing)} of these targets ({_some(missing)})")
    if moved:
        problems.append(f"puts {len(moved)} on another card ({_some(moved)})")
    if not problems:
        if fleet_file is None:
            _note_idle_targets(rows, capacity)
        return
    typer.echo(
        visible(
            f"warning: capacity shares are computed on {fleet_file or 'the built-in fleet'}, "
            f"which {' and '.join(problems)}; pass --fleet FILE, the fleet these decisions "
            "were made on"
        ),
        err=True,
    )


def _note_idle_targets(rows: pd.DataFrame, capacity: Mapping[str, TargetCapacity]) -> None:
    """The built-in fleet, taken by default, is silently wrong for a run on a smaller fleet
    reusing its ids (a100-70b read 0.087 instead of 1.0): when some of its targets serving
    these models got no decision, say whose capacity the shares are of."""
    models, used = set(rows["model_id"]), set(rows["target_id"])
    idle = sorted(t for t, cap in capacity.items() if cap.model_id in models and t not in used)
    if idle:
        typer.echo(
            visible(
                "note: capacity shares are computed on the built-in fleet, but "
                f"{len(idle)} of its targets serving these models got no decision here "
                f"({_some(idle)}); pass --fleet FILE if the decisions were made on another fleet"
            ),
            err=True,
        )


def _some(items: list[str]) -> str:
    return ", ".join(items[:4]) + (f" and {len(items) - 4} more" if len(items) > 4 else "")


@app.command("prune")
def prune_command(
    older_than: str = typer.Option(..., "--older-than", help="Retention, e.g. 30d."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Count, do not delete."),
    db: str | None = DbOption,
) -> None:
    """Delete decisions (and their outcomes) older than the retention period."""
    keep = _answer(lambda: parse_duration(older_than, "--older-than"))
    engine = open_audit_db(db)
    result = _answer(lambda: service.prune(engine, _now() - keep, dry_run=dry_run))
    verb = "would delete" if dry_run else "deleted"
    typer.echo(
        f"{verb} {result.decisions} decisions and {result.outcomes} outcomes older than "
        f"{iso_utc(result.cutoff)}"
    )
