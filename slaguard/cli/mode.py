"""`slaguard rollback | resume`: move the fleet mode by hand.

They act on the audit database, so they work with the service down: a change is a
compare-and-set on the shared `fleet_state` row that every replica picks up within a
second; the guard leader sends the incident message it queues. Each change records who
(`--actor`, default the OS user) and why, prints one line saying what happened and on
which database, and is
idempotent (a rollback of a fleet already on round-robin, a resume of one already on a
rollout stage or learned, says so and exits 0). This module
imports no pandas: it is what an SRE runs mid-incident, and it starts in well under a second.
"""

from __future__ import annotations

import getpass
import time
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from slaguard.audit.engine import operator_url, shown_url
from slaguard.cli.dbopen import DbOption, failure_line, open_audit_db
from slaguard.cli.errors import fail
from slaguard.guard.guard import Guard
from slaguard.guard.incident_store import IncidentStore
from slaguard.guard.manual import ManualAction, ManualOutcome, ModeBusyError, apply_manual
from slaguard.guard.modes import NOT_LOADED
from slaguard.guard.persist import EventPersister
from slaguard.guard.store import GuardStore
from slaguard.plaintext import actor_problem, visible

_T = TypeVar("_T")
GUARD_STATEMENT_TIMEOUT_S = 15.0
"""A command waiting longer on a lock (a stuck migration, a manual LOCK TABLE) fails in
one line instead of hanging without a word."""
ActorOption = typer.Option(None, "--actor", help="Who does this (default: the OS user).")


def query_or_fail(engine: Engine, run: Callable[[], _T]) -> _T:
    """`run()` on `engine`, with a database error as one `error:` line and exit 2."""
    try:
        return run()
    except SQLAlchemyError as exc:
        fail(f"database query failed: {failure_line(exc, engine.url, GUARD_STATEMENT_TIMEOUT_S)}")


def _actor(value: str | None) -> str:
    if value is not None:
        name = value.strip()
        if not name:
            fail("--actor: empty; give a name, or leave it out to use the OS user")
        problem = actor_problem(name)
        if problem is not None:
            fail(f"--actor: {problem}")
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
        said = failure_line(exc, engine.url, GUARD_STATEMENT_TIMEOUT_S)
        fail(f"database {shown_url(engine.url)}: {said}")


def _say(outcome: ManualOutcome, engine: Engine) -> None:
    """What happened, and where: mid-incident, a stray `./slaguard.db` answering for an
    unset `$SLAGUARD_DB` would otherwise look like the production fleet."""
    line = outcome.result.message
    resolved = [e for e in outcome.queued if e.state.value == "resolved"]
    if resolved:
        line += f"; incident {resolved[0].incident_id} resolved (message queued for the guard)"
    typer.echo(visible(f"{line}; database {shown_url(operator_url(engine.url))}"))


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
    _say(_run(engine, action, actor=who, reason=why), engine)


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
    """Re-enter the gray rollout (also leaves a hold); resolves the open incident.

    Only from round-robin or a hold: on a rollout stage or learned, nothing to resume."""
    stage_pct: int | None = None
    if stage is not None:
        try:
            stage_pct = int(stage)
        except ValueError:
            stage_pct = -1
        if not 0 < stage_pct <= 100:
            fail(f"--stage: {stage!r} is not a percentage in 1..100; fix: e.g. --stage 10")
    who = _actor(actor)
    why = _reason(reason, "manual resume")
    engine = open_audit_db(db, statement_timeout_s=GUARD_STATEMENT_TIMEOUT_S)
    if stage_pct is None:
        stage_pct = query_or_fail(engine, GuardStore(engine).planned_first_stage)
    _say(_run(engine, ManualAction.RESUME, actor=who, reason=why, stage_pct=stage_pct), engine)
