"""`slaguard rollback | resume | status | history | incidents`: the fleet mode by hand.

They act on the audit database, so they work with the service down: a change is a
compare-and-set on the shared `fleet_state` row that every replica picks up within a
second; the guard leader sends the incident message it queues. Each change records who
(`--actor`, default the OS user) and why, prints one line saying what happened, and is
idempotent (a rollback of a fleet already on round-robin says so and exits 0).
"""

from __future__ import annotations

import getpass
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import typer
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from slaguard.audit.engine import error_line, shown_url
from slaguard.audit.render import OutputFormat, emit_frame
from slaguard.audit.timeargs import (
    TIME_HELP,
    parse_duration,
    parse_range,
    parse_time,
    span_title,
)
from slaguard.cli.db import DbOption, open_audit_db
from slaguard.cli.errors import fail
from slaguard.cli.output import check_output, writing
from slaguard.guard.guard import Guard
from slaguard.guard.incident_store import IncidentStore
from slaguard.guard.leader import current_leader
from slaguard.guard.manual import ManualAction, ManualOutcome, ModeBusyError, apply_manual
from slaguard.guard.modes import TransitionKind
from slaguard.guard.persist import EventPersister
from slaguard.guard.queries import arm_sla, incident_list, mode_history
from slaguard.guard.runtime import NOT_LOADED
from slaguard.guard.store import GuardStore
from slaguard.plaintext import visible
from slaguard.scheduler.rollout import ModeKind

_T = TypeVar("_T")
GUARD_STATEMENT_TIMEOUT_S = 15.0
"""A command waiting longer on a lock (a stuck migration, a manual LOCK TABLE) fails in
one line instead of hanging without a word."""
ActorOption = typer.Option(None, "--actor", help="Who does this (default: the OS user).")
FormatOption = typer.Option(OutputFormat.TABLE, "--format", "-f", help="Output format.")
OutputOption = typer.Option(None, "--output", "-o", help="Write to this file.", dir_okay=False)


_MAX_ACTOR = 120
"""`actor` columns hold 128 characters; the API prefixes its actors with `api:`."""


def _actor(value: str | None) -> str:
    if value is not None:
        name = value.strip()
        if not name:
            fail("--actor: empty; give a name, or leave it out to use the OS user")
        if len(name) > _MAX_ACTOR or not name.isprintable():
            fail(
                f"--actor: {name[:40]!r} is not a name on one line of at most {_MAX_ACTOR} "
                "characters; fix: give a user or team name"
            )
        return name
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def _reason(value: str | None, default: str | None = None) -> str:
    text = (value or "").strip() or default
    if not text:
        fail("--reason: required; say why, e.g. --reason 'l40s tier TTFT 3x since 14:02'")
    return text


def _run(engine: Engine, action: ManualAction, **kwargs: Any) -> ManualOutcome:
    store = GuardStore(engine)
    persister = EventPersister(store, IncidentStore(engine))
    try:
        # NOT_LOADED (version -1): the first stored state read is always adopted
        return apply_manual(Guard(state=NOT_LOADED), persister, action, time.time(), **kwargs)
    except ModeBusyError as exc:
        fail(str(exc))
    except SQLAlchemyError as exc:
        fail(f"database {shown_url(engine.url)}: {error_line(exc)}")


def _say(outcome: ManualOutcome) -> None:
    line = outcome.result.message
    resolved = [e for e in outcome.queued if e.state.value == "resolved"]
    if resolved:
        line += f"; incident {resolved[0].incident_id} resolved (message queued for the guard)"
    typer.echo(visible(line))


def rollback(
    reason: str | None = typer.Option(
        None, "--reason", help="Why (required; recorded with the switch)."
    ),
    hold: bool = typer.Option(False, "--hold", help="Keep it there: nothing automatic leaves."),
    actor: str | None = ActorOption,
    db: str | None = DbOption,
) -> None:
    """Send the whole fleet to round-robin now (`--hold`: and keep it there)."""
    why = _reason(reason)
    who = _actor(actor)
    engine = open_audit_db(db, statement_timeout_s=GUARD_STATEMENT_TIMEOUT_S)
    action = ManualAction.HOLD if hold else ManualAction.ROLLBACK
    _say(_run(engine, action, actor=who, reason=why))


def resume(
    stage: str | None = typer.Option(
        None,
        "--stage",
        help="Rollout stage in percent (default: the plan's first, as the guard last entered "
        "it from round-robin; 10 before it ever has).",
    ),
    reason: str | None = typer.Option(None, "--reason", help="Why (recorded with the switch)."),
    actor: str | None = ActorOption,
    db: str | None = DbOption,
) -> None:
    """Re-enter the gray rollout (also leaves a hold); resolves the open incident."""
    stage_pct: int | None = None
    if stage is not None:
        try:
            stage_pct = int(stage)
        except ValueError:
            stage_pct = -1
        if not 0 < stage_pct <= 100:
            fail(f"--stage: {stage!r} is not a percentage in 1..100; e.g. --stage 10")
    who = _actor(actor)
    why = _reason(reason, "manual resume")
    engine = open_audit_db(db, statement_timeout_s=GUARD_STATEMENT_TIMEOUT_S)
    if stage_pct is None:
        stage_pct = _query(GuardStore(engine).planned_first_stage)
    _say(_run(engine, ManualAction.RESUME, actor=who, reason=why, stage_pct=stage_pct))


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _ago(seconds: float) -> str:
    left = max(0, int(seconds))
    h, rest = divmod(left, 3600)
    return f"{h}h{rest // 60:02d}m" if h else f"{rest // 60}m{rest % 60:02d}s"


def _leader(engine: Engine) -> str:
    try:
        return current_leader(engine.url) or "none (no guard replica is running)"
    except Exception as exc:
        return f"unknown ({type(exc).__name__})"


def status(
    window: str = typer.Option("15m", "--window", help="SLA figures over this much history."),
    db: str | None = DbOption,
    as_json: bool = typer.Option(False, "--json", help="One JSON object instead of text."),
) -> None:
    """Fleet mode (since when, why, who), leader, open incidents, per-arm SLA figures."""
    try:
        span = parse_duration(window, "--window")
    except ValueError as exc:
        fail(str(exc))
    engine = open_audit_db(db, statement_timeout_s=GUARD_STATEMENT_TIMEOUT_S)
    now_s = time.time()
    now = datetime.fromtimestamp(now_s, UTC)
    try:
        st = GuardStore(engine).load(now_s)
        incidents = incident_list(engine, open_only=True)
        arms = arm_sla(engine, now - span, now)
    except SQLAlchemyError as exc:
        fail(f"database query failed: {error_line(exc)}")
    leader = _leader(engine)
    if as_json:
        payload = {
            "mode": st.mode.label, "since_s": st.since_s, "reason": st.reason,
            "actor": st.actor, "version": st.version,
            "entered_by": None if st.entered_by is None else st.entered_by.value,
            "plan_advances": st.auto_advance,
            "switches_last_hour": st.switches_within_hour(now_s), "leader": leader,
            "open_incidents": json.loads(incidents.to_json(orient="records", date_format="iso")),
            "arms": json.loads(arms.arms.to_json(orient="records")),
            "window_s": span.total_seconds(), "learned_vs_round_robin": arms.ratio,
            "verdict": arms.verdict,
        }  # fmt: skip
        typer.echo(json.dumps(payload, indent=2))
        return
    kind = "" if st.entered_by is None else f" ({st.entered_by.value})"
    plan = _plan_line(st.mode.kind, st.auto_advance, st.entered_by)
    lines = [
        f"fleet mode:   {st.mode.label} since {_utc(st.since_s)} ({_ago(now_s - st.since_s)} ago)",
        f"why:          {st.reason}{kind}",
        f"who:          {st.actor} (version {st.version})",
        f"plan:         {plan}",
        f"switches:     {_switches(st.switches_within_hour(now_s))} in the last hour",
        f"guard leader: {leader}",
        f"incidents:    {len(incidents)} open",
    ]
    for inc in incidents.itertuples(index=False):
        lines.append(
            f"  #{inc.id} {inc.detector} on {inc.subject} ({inc.severity}), opened "
            f"{_utc(inc.opened_at.timestamp())}; notification {inc.notification_state}"
        )
    lines.append(f"SLA by arm over the last {window}:")
    if arms.arms.empty:
        lines.append("  no decisions in the window")
    for arm in arms.arms.itertuples(index=False):
        rate = "-" if arm.sla_violation_rate is None else f"{arm.sla_violation_rate:.2%}"
        lines.append(
            f"  {arm.arm:<12} {arm.decisions:>8} decisions {arm.outcomes:>8} outcomes "
            f"{arm.sla_violations:>7} violations  rate {rate}"
        )
    lines.append(f"  {arms.verdict}")
    # reasons, actors and subjects are data: one line each, their control characters inert
    typer.echo("\n".join(visible(line) for line in lines))


def history(
    since: str = typer.Option("-2h", "--since", help=f"Start (inclusive). {TIME_HELP}."),
    until: str = typer.Option("now", "--until", help="End (exclusive), same forms."),
    db: str | None = DbOption,
    fmt: OutputFormat = FormatOption,
    output: Path | None = OutputOption,
) -> None:
    """Mode switches in a time range: when, from, to, kind, who, why, incident."""
    try:
        start, end = parse_range(since, until, datetime.now(UTC))
    except ValueError as exc:
        fail(str(exc))
    check_output(fmt, output)
    engine = open_audit_db(db, statement_timeout_s=GUARD_STATEMENT_TIMEOUT_S)
    frame = _query(lambda: mode_history(engine, start, end))
    with writing(output):
        emit_frame(frame, fmt, output, f"mode switches {span_title(start, end)}")


def incidents(
    open_only: bool = typer.Option(False, "--open", help="Only unresolved incidents."),
    since: str | None = typer.Option(None, "--since", help=f"Opened at or after. {TIME_HELP}."),
    db: str | None = DbOption,
    fmt: OutputFormat = FormatOption,
    output: Path | None = OutputOption,
) -> None:
    """Incidents, newest first: detector, subject, state, notification delivery."""
    start = None
    if since is not None:
        try:
            start = parse_time(since, "--since", datetime.now(UTC))
        except ValueError as exc:
            fail(str(exc))
    check_output(fmt, output)
    engine = open_audit_db(db, statement_timeout_s=GUARD_STATEMENT_TIMEOUT_S)
    frame = _query(lambda: incident_list(engine, open_only=open_only, since=start))
    with writing(output):
        emit_frame(frame, fmt, output, "open incidents" if open_only else "incidents")


def _switches(n: int) -> str:
    """Between the round-robin and learned families, which the cap counts; `history`
    also lists the rollout's stage steps."""
    return f"{n} policy switch{'' if n == 1 else 'es'} (learned <-> round-robin)"


def _plan_line(kind: ModeKind, auto_advance: bool, entered_by: TransitionKind | None) -> str:
    """What moves the fleet from here (a hold said "or the breaker", which never leaves
    one; an automatic return follows only a trip)."""
    if auto_advance:
        return "advances by the rollout plan"
    if kind is ModeKind.HELD_ROUND_ROBIN:
        return "held: nothing automatic leaves it; `slaguard resume` does"
    if kind is ModeKind.ROUND_ROBIN and entered_by is TransitionKind.TRIP:
        return "stays until `slaguard resume` (or an automatic return: breaker.auto_return)"
    if kind is ModeKind.ROUND_ROBIN:
        return "stays until `slaguard resume`"
    return "stays until the breaker trips or a human moves it"


def _query(run: Callable[[], _T]) -> _T:
    try:
        return run()
    except SQLAlchemyError as exc:
        fail(f"database query failed: {error_line(exc)}")
