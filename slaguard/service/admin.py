"""Admin endpoints: manual mode changes and the Alertmanager webhook receiver.

Both need `Authorization: Bearer <token>` with the token from `$SLAGUARD_ADMIN_TOKEN`,
compared with `hmac.compare_digest` (constant time). Without a configured token they
answer 403 "disabled": never open. Authentication is checked before the body is read, so
an unauthenticated caller learns nothing about the payload format. Bodies are parsed here,
whatever their Content-Type, so a mistake is one 422 line naming the field.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable
from datetime import datetime
from typing import Any, TypeVar

from fastapi import APIRouter, Depends, Header, HTTPException, Request
from pydantic import BaseModel, ValidationError
from sqlalchemy.exc import SQLAlchemyError

from slaguard.audit.engine import error_line
from slaguard.guard.writes import NUL, written_out
from slaguard.plaintext import actor_problem, visible
from slaguard.service.hotpath import json_body, validation_message
from slaguard.service.modes import FiringAlert, ModeUnavailableError
from slaguard.service.schemas import (
    AlertmanagerAlert,
    AlertmanagerResponse,
    AlertmanagerWebhook,
    ErrorResponse,
    ModeRequest,
    ModeResponse,
)
from slaguard.service.views import LOOKUP_RETRY_AFTER_S, runtime_of

log = logging.getLogger(__name__)
router = APIRouter()
_Body = TypeVar("_Body", bound=BaseModel)
_T = TypeVar("_T")
"""The one character PostgreSQL text cannot hold (SQLite can: refused on both alike)."""
AUTH_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse},
    403: {"model": ErrorResponse},
    422: {"model": ErrorResponse},
    503: {"model": ErrorResponse},
}


def require_admin(
    request: Request,
    authorization: str | None = Header(default=None, description="Bearer <admin token>"),
) -> None:
    """Refuse unless the bearer token matches the configured one."""
    token = request.app.state.admin_token
    if token is None:
        raise HTTPException(
            403,
            "admin endpoints are disabled: no admin token configured; fix: set "
            "$SLAGUARD_ADMIN_TOKEN (16+ characters) in the service's environment and restart",
        )
    scheme, _, given = (authorization or "").partition(" ")
    expected = token.get_secret_value().encode()
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected):
        raise HTTPException(
            401,
            "Authorization: missing or wrong bearer token; fix: send "
            "`Authorization: Bearer $SLAGUARD_ADMIN_TOKEN`",
            headers={"WWW-Authenticate": "Bearer"},
        )


async def _parsed(request: Request, model: type[_Body]) -> _Body:
    """`model` from the body, after `require_admin` passed (FastAPI would parse a declared
    body before any dependency runs)."""
    try:
        return model.model_validate_json(await request.body())
    except ValidationError as exc:
        raise HTTPException(422, validation_message(exc.errors())) from None


@router.post(
    "/v1/mode",
    response_model=ModeResponse,
    responses=AUTH_ERRORS,
    dependencies=[Depends(require_admin)],
    summary="Roll back, hold or resume the fleet's learned policy",
    openapi_extra=json_body(ModeRequest),
)
async def mode(request: Request) -> ModeResponse:
    body = await _parsed(request, ModeRequest)
    rt = runtime_of(request)
    if NUL in body.reason:
        raise HTTPException(
            422,
            "reason: contains a NUL character (\\x00), which the audit database cannot store; "
            "fix: send the reason without it",
        )
    problem = actor_problem(body.actor)
    if problem is not None:
        raise HTTPException(422, f"actor: {problem}")
    if body.stage_pct is not None and body.action != "resume":
        raise HTTPException(422, "stage_pct: only valid with action 'resume'")
    try:
        change = await rt.modes.command(
            body.action,
            rt.clock(),
            actor=f"api:{body.actor}",
            reason=body.reason,
            stage_pct=body.stage_pct,
        )
    except ModeUnavailableError as exc:
        raise HTTPException(
            503,
            f"mode: {exc}; fix: retry when the database is back",
            {"Retry-After": str(LOOKUP_RETRY_AFTER_S)},
        ) from exc
    return ModeResponse(
        changed=change.changed,
        mode=change.mode,
        version=change.version,
        message=change.message,
        resolved_incident=change.resolved_incident,
    )


def _unix_or_none(moment: str | None) -> float | None:
    """Alertmanager's RFC 3339 time (nanoseconds cut to micro); None if absent or odd."""
    if not moment:
        return None
    try:
        return datetime.fromisoformat(moment).timestamp()
    except ValueError:
        return None


async def _or_retry_later(action: Awaitable[_T]) -> _T:
    """A mode action for Alertmanager; a database that cannot take it is a 503, which
    Alertmanager retries."""
    try:
        return await action
    except (ModeUnavailableError, SQLAlchemyError) as exc:
        # a read before the change (the fleet's last return) raises SQLAlchemyError itself:
        # it was a 500 with a traceback in the log
        problem = (
            str(exc)
            if isinstance(exc, ModeUnavailableError)
            else f"the audit database cannot be read: {error_line(exc)}"
        )
        raise HTTPException(
            503,
            f"mode: {problem}; Alertmanager will retry",
            {"Retry-After": str(LOOKUP_RETRY_AFTER_S)},
        ) from exc


def _of_this_fleet(fleet: str | None, alerts: list[AlertmanagerAlert]) -> list[AlertmanagerAlert]:
    """The alerts of `fleet` (those without a `fleet` label too): a receiver shared by two
    fleets rolled both back on either's burn alert. Others are logged, not acted on."""
    if fleet is None:
        return list(alerts)
    ours = [a for a in alerts if a.labels.get("fleet", fleet) == fleet]
    if len(ours) < len(alerts):
        named = {visible(a.labels["fleet"]) for a in alerts if "fleet" in a.labels}
        others = sorted(named - {visible(fleet)})
        log.info(
            "alertmanager webhook: %d alerts of other fleets (%s) ignored: this service acts "
            "for fleet %s (alertmanager.fleet)",
            len(alerts) - len(ours), ", ".join(others), fleet,
        )  # fmt: skip
    return ours


@router.post(
    "/v1/alertmanager",
    response_model=AlertmanagerResponse,
    responses=AUTH_ERRORS,
    dependencies=[Depends(require_admin)],
    summary="Alertmanager webhook (v4): configured firing alerts roll the fleet back",
    openapi_extra=json_body(AlertmanagerWebhook),
)
async def alertmanager(request: Request) -> AlertmanagerResponse:
    body = await _parsed(request, AlertmanagerWebhook)
    rt = runtime_of(request)
    wanted = set(rt.config.alertmanager.rollback_alerts)
    severities = set(rt.config.alertmanager.rollback_severities)
    ours = _of_this_fleet(rt.config.alertmanager.fleet, body.alerts)
    for a in body.alerts:
        # storable in PostgreSQL (its text cannot hold NUL): refusing the alert would stop a
        # critical rollback, and a 503 has Alertmanager retry it for ever
        a.labels, a.annotations = written_out(a.labels), written_out(a.annotations)
    firing = [
        FiringAlert(
            alertname=a.labels.get("alertname", ""),
            summary=a.annotations.get("summary", a.labels.get("alertname", "")),
            labels=dict(a.labels),
            annotations=dict(a.annotations),
            starts_at_s=_unix_or_none(a.startsAt),
        )
        for a in ours
        if a.status == "firing"
        and a.labels.get("alertname", "") in wanted
        and a.labels.get("severity", "") in severities
    ]
    matched = sorted({f.alertname for f in firing})
    resolved = {
        name
        for a in ours
        if a.status == "resolved" and (name := a.labels.get("alertname", "")) in wanted
    }
    if resolved and not firing:
        noted = await _or_retry_later(rt.modes.alerts_resolved(resolved, rt.clock()))
        return AlertmanagerResponse(
            received=len(body.alerts),
            matched=sorted(resolved),
            action="incident updated: alert resolved" if noted else "none",
            mode=rt.modes.current().label,
        )
    if not firing:
        log.info("alertmanager webhook: %d alerts, none configured to roll back", len(body.alerts))
        return AlertmanagerResponse(
            received=len(body.alerts), matched=[], action="none", mode=rt.modes.current().label
        )
    change = await _or_retry_later(rt.modes.alerts(firing, rt.clock()))
    return AlertmanagerResponse(
        received=len(body.alerts),
        matched=matched,
        action="rollback" if change.changed else f"none ({change.message})",
        mode=change.mode,
    )
