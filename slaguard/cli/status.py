"""`slaguard status`: the fleet mode (since when, why, who), the guard leader, open
incidents and per-arm SLA figures, read from the audit database (the service may be down).

No pandas here (`guard/status_rows.py`): it is what an SRE runs first in an incident.
"""

from __future__ import annotations

import json
import math
import time
from datetime import UTC, datetime
from typing import Any

import typer
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from slaguard.audit.engine import (
    DB_ENV_VAR,
    DEFAULT_SQLITE_FILE,
    operator_url,
    shown_url,
)
from slaguard.audit.isotime import iso_utc
from slaguard.audit.timeargs import parse_duration
from slaguard.cli.dbopen import DbOption, db_origin, failure_line, open_audit_db
from slaguard.cli.errors import fail
from slaguard.cli.mode import GUARD_STATEMENT_TIMEOUT_S
from slaguard.guard.leader import current_leader, guard_replicas
from slaguard.guard.modes import TransitionKind
from slaguard.guard.status_rows import arm_sla, incident_rows
from slaguard.guard.store import GuardStore
from slaguard.plaintext import visible
from slaguard.scheduler.rollout import ModeKind


def _iso_times(row: dict[str, Any]) -> dict[str, Any]:
    """A JSON row's times as every other command writes them (`isotime`)."""
    return {k: iso_utc(v) if isinstance(v, datetime) else v for k, v in row.items()}


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _ago(seconds: float) -> str:
    left = max(0, int(seconds))
    h, rest = divmod(left, 3600)
    return f"{h}h{rest // 60:02d}m" if h else f"{rest // 60}m{rest % 60:02d}s"


def _leader(engine: Engine) -> tuple[str | None, list[str] | None, str | None]:
    """The leader's id (None: nobody leads), the replicas connected to the lease (None:
    the backend cannot tell) and, when the lease could not be read, the error's type."""
    try:
        return current_leader(engine.url), guard_replicas(engine.url), None
    except Exception as exc:
        return None, None, type(exc).__name__


def _leader_said(leader: str | None, replicas: list[str] | None, error: str | None) -> str:
    """Nobody leading with replicas connected is what `SlaguardGuardLeaderless` pages for,
    not a fleet that is down (both used to read "no guard replica is running")."""
    if error is not None:
        return f"unknown ({error})"
    if leader is not None:
        return leader
    if replicas is None:
        return "none (no replica holds the guard lease: none runs, or none is ready to write)"
    if not replicas:
        return "none (no guard replica is connected to this database)"
    many = "s" if len(replicas) > 1 else ""
    return (
        f"none: {len(replicas)} guard replica{many} connected ({', '.join(replicas)}), none "
        "holds the lease (not ready, or cannot write: each one's /readyz and /v1/status .guard "
        "say why)"
    )


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
        store = GuardStore(engine)
        st = store.load(now_s)
        simulated = store.simulated_switches_within_hour(now_s)
        incidents = incident_rows(engine, open_only=True)
        arms = arm_sla(engine, now - span, now)
    except SQLAlchemyError as exc:
        fail(f"database query failed: {failure_line(exc, engine.url, GUARD_STATEMENT_TIMEOUT_S)}")
    leader, replicas, leader_error = _leader(engine)
    database = {"url": shown_url(operator_url(engine.url)), "from": db_origin(db)}
    if as_json:
        payload = {
            "database": database,
            "mode": st.mode.label, "since_s": st.since_s,
            "since": iso_utc(datetime.fromtimestamp(st.since_s, UTC)),
            "reason": st.reason,
            "actor": st.actor, "version": st.version,
            "entered_by": None if st.entered_by is None else st.entered_by.value,
            "plan_advances": st.auto_advance,
            "switches_last_hour": st.switches_within_hour(now_s),
            "simulated_switches_last_hour": simulated, "leader": leader,
            "leader_error": leader_error, "guard_replicas": replicas,
            "open_incidents": [_iso_times(inc) for inc in incidents],
            "arms": arms.arms,
            "window_s": span.total_seconds(), "learned_vs_round_robin": _finite(arms.ratio),
            "verdict": arms.verdict,
        }  # fmt: skip
        typer.echo(json.dumps(payload, indent=2, allow_nan=False))  # strict: no Infinity
        return
    kind = "" if st.entered_by is None else f" ({st.entered_by.value})"
    plan = _plan_line(st.mode.kind, st.auto_advance, st.entered_by)
    lines = [
        f"database:     {database['url']} ({_origin_said(database['from'])})",
        f"fleet mode:   {st.mode.label} since {_utc(st.since_s)} ({_ago(now_s - st.since_s)} ago)",
        f"why:          {st.reason}{kind}",
        f"who:          {st.actor} (version {st.version})",
        f"plan:         {plan}",
        f"switches:     {_switches(st.switches_within_hour(now_s), simulated)}",
        f"guard leader: {_leader_said(leader, replicas, leader_error)}",
        f"incidents:    {len(incidents)} open",
    ]
    for inc in incidents:
        lines.append(
            f"  #{inc['id']} {inc['detector']} on {inc['subject']} ({inc['severity']}), opened "
            f"{_utc(inc['opened_at'].timestamp())}; notification {inc['notification_state']}"
        )
    lines.append(f"SLA by arm over the last {window}:")
    if not arms.arms:
        lines.append("  no decisions in the window")
    for arm in arms.arms:
        rate = arm["sla_violation_rate"]
        lines.append(
            f"  {arm['arm']:<12} {_column(arm['decisions'], 8, 'decision')} "
            f"{_column(arm['outcomes'], 8, 'outcome')} "
            f"{_column(arm['sla_violations'], 7, 'violation')}  "
            f"rate {'-' if rate is None else f'{rate:.2%}'}"
        )
    lines.append(f"  {arms.verdict}")
    # reasons, actors and subjects are data: one line each, their control characters inert
    typer.echo("\n".join(visible(line) for line in lines))


def _origin_said(origin: str) -> str:
    """Why this database: a stray `./slaguard.db` answered for an unset `$SLAGUARD_DB`."""
    if origin == "default":
        return f"the default ./{DEFAULT_SQLITE_FILE}: no --db, ${DB_ENV_VAR} unset"
    return f"from {origin}"


def _finite(ratio: float | None) -> float | None:
    """The learned / round-robin ratio as JSON has it: None when there is none (an arm
    without outcomes) or it is infinite (round-robin without violations, learned with
    some; `verdict` says `xinf` and the arms' rates tell the two apart)."""
    return ratio if ratio is not None and math.isfinite(ratio) else None


def _switches(n: int, simulated: int) -> str:
    """Between the round-robin and learned families, which the cap counts; `history`
    also lists the rollout's stage steps, and a simulated run's switches, which are not
    this fleet's (said, or the count read as wrong beside `history`)."""
    said = f"{n} policy switch{'' if n == 1 else 'es'} (learned <-> round-robin) in the last hour"
    if simulated:
        said += f" ({simulated} simulated switch{'' if simulated == 1 else 'es'} not counted)"
    return said


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


def _column(n: int, width: int, noun: str) -> str:
    """`      1 violation ` beside `     24 violations`: aligned, and not "1 violations"."""
    return f"{n:>{width}} {noun} " if n == 1 else f"{n:>{width}} {noun}s"
