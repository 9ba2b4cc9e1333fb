"""The read side of the routing API (status, stored decisions, health, metrics) and what
every view module shares: the runtime, the error responses, the 404 and 503 answers."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fastapi import APIRouter, Path, Request, Response
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy.exc import SQLAlchemyError

from slaguard.audit.engine import error_line
from slaguard.audit.service import UnknownRequestError, explain
from slaguard.service.hotpath import DirectRoute, JsonBytes, encode_json, error_response
from slaguard.service.runtime import ServiceRuntime
from slaguard.service.schemas import ID_PATTERN, ErrorResponse
from slaguard.telemetry.metrics import render_snapshot

router = APIRouter()
hot = APIRouter(route_class=DirectRoute)
"""`/healthz` on the hot path (`hotpath`): probes and load balancers call it often."""
ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorResponse},
    422: {"model": ErrorResponse},
}
LOOKUP_ERRORS: dict[int | str, dict[str, Any]] = {**ERRORS, 503: {"model": ErrorResponse}}
LOOKUP_RETRY_AFTER_S = 5


def runtime_of(request: Request) -> ServiceRuntime:
    """The runtime the app was built with."""
    rt: ServiceRuntime = request.app.state.runtime
    return rt


class NotFoundError(LookupError):
    """Answered as 404 with the message."""


def lookup_failed(decision_id: str, exc: SQLAlchemyError) -> Response:
    """A 503 to retry: the audit database cannot answer a lookup now (down, locked, slow)."""
    return error_response(
        503,
        f"decision_id: cannot look {decision_id!r} up in the audit database "
        f"({error_line(exc)}); retry",
        {"Retry-After": str(LOOKUP_RETRY_AFTER_S)},
    )


@router.get("/v1/status", summary="Fleet mode, weights, audit backlog and per-target picture")
async def status(request: Request) -> dict[str, Any]:
    return runtime_of(request).status()


@router.get(
    "/v1/decisions/{decision_id}",
    responses=LOOKUP_ERRORS,
    summary="A stored decision with its explanation and outcome",
)
async def decision(
    request: Request,
    decision_id: str = Path(pattern=ID_PATTERN, description="the decision id (request id)"),
) -> Response:
    rt = runtime_of(request)
    if rt.engine is None:
        raise NotFoundError("no audit database configured; decisions are not stored")
    try:
        found = await asyncio.to_thread(explain, rt.engine, decision_id)
    except UnknownRequestError:
        hint = (
            " yet (the audit writer stores it within a second)" if decision_id in rt.pending else ""
        )
        raise NotFoundError(f"decision_id: no stored decision {decision_id!r}{hint}") from None
    except SQLAlchemyError as exc:
        return lookup_failed(decision_id, exc)
    body = {
        "decision": found.decision,
        "outcome": found.outcome,
        "weights": found.weights,
        "candidates": json.loads(found.candidates.to_json(orient="records")),
        "rejected": json.loads(found.rejected.to_json(orient="records")),
        "other": found.other,
    }
    return JSONResponse(jsonable_encoder(body))


_HEALTHY = encode_json({"status": "ok"})


@hot.get("/healthz", response_model=dict[str, str], summary="Liveness: the process answers")
async def healthz(request: Request) -> Response:
    """On the hot path too: probes and load balancers call it often, and it is the
    benchmark's floor (the HTTP stack alone)."""
    return JsonBytes(_HEALTHY)


@router.get("/readyz", responses={503: {"model": ErrorResponse}}, summary="Readiness")
async def readyz(request: Request) -> JSONResponse:
    rt = runtime_of(request)
    if rt.ready_problem is not None:
        return JSONResponse({"error": f"not ready: {rt.ready_problem}"}, status_code=503)
    return JSONResponse({"status": "ready", "fleet": rt.fleet.name, "targets": len(rt.fleet)})


@router.get("/metrics", response_class=PlainTextResponse, summary="Prometheus metrics")
async def metrics(request: Request) -> Response:
    text = render_snapshot(runtime_of(request).metrics.registry)
    return Response(text, media_type=CONTENT_TYPE_LATEST)
