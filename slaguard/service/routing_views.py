"""The routing API's once-per-inference-request endpoints: route, then the reports that
follow the routing (feedback, first token) and the targets' telemetry pushes."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import ValidationError
from sqlalchemy.exc import SQLAlchemyError

from slaguard.audit.records import OutcomeRecord
from slaguard.service.hotpath import (
    DirectRoute,
    error_response,
    invalid,
    json_body,
    json_response,
    query_flag,
)
from slaguard.service.pending import Pending, sla_met
from slaguard.service.request_checks import FieldError, NeverFitsError
from slaguard.service.runtime import ServiceRuntime
from slaguard.service.schemas import (
    ErrorResponse,
    FeedbackRequest,
    FeedbackResponse,
    FirstTokenRequest,
    FirstTokenResponse,
    RouteRequest,
    RouteResponse,
    TelemetryRequest,
    TelemetryResponse,
)
from slaguard.service.views import ERRORS, LOOKUP_ERRORS, NotFoundError, lookup_failed, runtime_of

hot = APIRouter(route_class=DirectRoute)
"""The once-per-inference-request endpoints (see `hotpath`)."""
LATE_OUTCOMES_KEPT = 100_000
"""How many late outcomes (for decisions evicted from memory) are remembered as taken."""
EXPLANATION_WAIT_S = 2.0
"""How long a repeated `?explain=1` waits for the audit writer to store the explanation."""
FEEDBACK_ERRORS: dict[int | str, dict[str, Any]] = {**LOOKUP_ERRORS, 409: {"model": ErrorResponse}}


class NoTimingsError(ValueError):
    """An `ok` feedback with neither `ttft_s` nor `e2e_s` (and no `/v1/first-token` before
    it): there is nothing to judge its SLA on, so it is answered 422 and not recorded (it
    was recorded as a violation, inflating the violation rate)."""

    def __init__(self, decision_id: str) -> None:
        super().__init__(
            f"ttft_s: a status 'ok' feedback for decision {decision_id!r} needs ttft_s or "
            "e2e_s (neither was sent, nor a /v1/first-token before it), so its SLA cannot "
            "be judged; nothing was recorded; fix: send ttft_s (the first token's time) or "
            "e2e_s (the whole answer's), or the status the request ended with if it did "
            "not succeed"
        )


def _untimed(body: FeedbackRequest, first_ttft_s: float | None = None) -> bool:
    """Whether an `ok` feedback has no time to judge its SLA on."""
    return (
        body.status == "ok" and body.ttft_s is None and body.e2e_s is None and first_ttft_s is None
    )


class RoutedNowhereError(ValueError):
    """Feedback or a first token for a `no_capacity` decision: answered as 409."""

    def __init__(self, decision_id: str, what: str = "feedback") -> None:
        super().__init__(
            f"decision_id: decision {decision_id!r} was no_capacity (routed to no target), so "
            f"it has no {'outcome' if what == 'feedback' else 'first token'} to report; fix: "
            f"send {what} only for a decision with a target (route the request again for one)"
        )


def route_body(
    rt: ServiceRuntime, entry: Pending, explanation: dict[str, Any] | None, explain_it: bool
) -> dict[str, Any]:
    """The `/v1/route` answer for a decision (`explanation` only with `explain_it`)."""
    target = None if entry.target_index is None else rt.fleet.targets[entry.target_index]
    targets = rt.fleet.targets
    body: dict[str, Any] = {
        "decision_id": entry.decision_id,
        "target": None if target is None else target.id,
        "url": None if target is None else target.url,
        "served_model": entry.served_model,
        "outcome": entry.outcome.value,
        "arm": entry.arm.value,
        "mode": entry.mode,
        "alternatives": [targets[i].id for i in entry.alternatives],
    }
    if explain_it:
        body["explanation"] = explanation
    return body


async def stored_explanation(rt: ServiceRuntime, decision_id: str) -> dict[str, Any] | None:
    """A repeated request id's explanation, from the audit DB (memory keeps only what
    feedback needs); polls until the writer has stored it, None past the deadline or
    while the database cannot be read (the decision itself is still the answer)."""
    if rt.store is None:
        return None
    deadline = time.monotonic() + EXPLANATION_WAIT_S
    while True:
        try:
            found = await asyncio.to_thread(rt.store.find_explanation, decision_id)
        except SQLAlchemyError:  # the outage is the writer's and /readyz's to report
            return None
        if found is not None or time.monotonic() >= deadline:
            return found
        await asyncio.sleep(0.05)


EXPLAIN_PARAMETER: dict[str, Any] = {
    "name": "explain",
    "in": "query",
    "required": False,
    "schema": {"type": "boolean", "default": False},
    "description": "include the explanation",
}


@hot.post(
    "/v1/route",
    response_model=RouteResponse,
    responses=ERRORS,
    summary="Choose a target for one request",
    openapi_extra=json_body(RouteRequest, EXPLAIN_PARAMETER),
)
async def route(request: Request) -> Response:
    try:
        body = RouteRequest.model_validate_json(await request.body())
    except ValidationError as exc:
        return invalid(exc)
    try:
        explain_it = query_flag(request, "explain")
    except ValidationError as exc:
        return invalid(exc, "explain")
    rt = runtime_of(request)
    entry = None if body.request_id is None else rt.pending.get(body.request_id)
    if entry is not None:
        found = await stored_explanation(rt, entry.decision_id) if explain_it else None
        return json_response(route_body(rt, entry, found, explain_it))
    try:
        rt.checks.model(body.model)
        priority = rt.checks.priority(body.priority)
        rt.checks.served(body.model, priority)
    except FieldError as exc:
        return error_response(422, str(exc))
    req = rt.request(
        model=body.model,
        prompt_tokens=body.prompt_tokens,
        max_new_tokens=body.max_new_tokens,
        priority=priority,
        deadline_s=body.deadline_s,
        request_id=body.request_id,
        prefix_id=body.prefix_id or body.prompt_hash,
    )
    try:
        routed = rt.decide(req)
    except NeverFitsError as exc:
        field = "max_new_tokens" if body.max_new_tokens > body.prompt_tokens else "prompt_tokens"
        return error_response(
            422,
            f"{field}: prompt_tokens + max_new_tokens is {body.prompt_tokens} + "
            f"{body.max_new_tokens} = {exc.tokens}, {exc.over}; fix: send at most {exc.limit} "
            "tokens in all (retrying cannot help)",
        )
    explanation = routed.decision.explanation.to_dict() if explain_it else None
    return json_response(route_body(rt, routed.entry, explanation, explain_it))


@hot.post(
    "/v1/feedback",
    response_model=FeedbackResponse,
    responses=FEEDBACK_ERRORS,
    summary="Report how a routed request went",
    openapi_extra=json_body(FeedbackRequest),
)
async def feedback(request: Request) -> Response:
    try:
        body = FeedbackRequest.model_validate_json(await request.body())
    except ValidationError as exc:
        return invalid(exc)
    rt = runtime_of(request)
    entry = rt.pending.get(body.decision_id)
    if entry is None:
        try:
            return json_response(await _feedback_from_db(rt, body))
        except NotFoundError as exc:
            return error_response(404, str(exc))
        except RoutedNowhereError as exc:
            return error_response(409, str(exc))
        except NoTimingsError as exc:
            return error_response(422, str(exc))
        except SQLAlchemyError as exc:  # not recorded: the client must send it again
            return lookup_failed(body.decision_id, exc)
    if entry.target_index is None:
        return error_response(409, str(RoutedNowhereError(body.decision_id)))
    if not entry.done and _untimed(body, entry.first_ttft_s):
        return error_response(422, str(NoTimingsError(body.decision_id)))
    done = rt.finish(
        entry,
        body.status,
        ttft_s=body.ttft_s,
        tpot_s=body.tpot_s,
        e2e_s=body.e2e_s,
        prompt_tokens=body.prompt_tokens,
        completion_tokens=body.completion_tokens,
    )
    return json_response(
        {
            "decision_id": body.decision_id,
            "recorded": done.recorded,
            "duplicate": done.duplicate,
            "sla_met": done.sla_met,
        }
    )


@hot.post(
    "/v1/first-token",
    response_model=FirstTokenResponse,
    responses={**ERRORS, 409: {"model": ErrorResponse}},
    summary="Report a routed request's first token while its answer still streams",
    openapi_extra=json_body(FirstTokenRequest),
)
async def first_token(request: Request) -> Response:
    """For clients that route with `/v1/route` and stream the answer themselves: the TTFT
    detectors hear the TTFT now, not a decode later with `/v1/feedback` (which then does
    not count it again)."""
    try:
        body = FirstTokenRequest.model_validate_json(await request.body())
    except ValidationError as exc:
        return invalid(exc)
    rt = runtime_of(request)
    entry = rt.pending.get(body.decision_id)
    if entry is None:
        known = await _known_outside_memory(rt, body.decision_id)
        if known is False:
            return error_response(409, str(RoutedNowhereError(body.decision_id, "first-token")))
        if known:
            # Routed before a restart or evicted: its TTFT reaches the audit line with its
            # /v1/feedback; a 404 told a client following the protocol it had erred.
            return json_response({"decision_id": body.decision_id, "fed": False})
        return error_response(
            404,
            f"decision_id: no decision {body.decision_id!r} awaiting its first token; fix: "
            "send the decision_id that POST /v1/route returned, before its /v1/feedback",
        )
    if entry.target_index is None:
        return error_response(409, str(RoutedNowhereError(body.decision_id, "first-token")))
    fed = rt.first_token(entry, body.ttft_s)
    return json_response({"decision_id": body.decision_id, "fed": fed})


async def _known_outside_memory(rt: ServiceRuntime, decision_id: str) -> bool | None:
    """Whether a decision no longer held in memory is stored (or was just judged late)
    with a target: True; stored as no_capacity: False; unknown: None."""
    if decision_id in rt.late_outcomes:
        return True
    if rt.store is None:
        return None
    try:
        found = await asyncio.to_thread(rt.store.find_decision, decision_id)
    except SQLAlchemyError:  # cannot tell: the TTFT still comes with the feedback
        return True
    return None if found is None else found.routed


async def _feedback_from_db(rt: ServiceRuntime, body: FeedbackRequest) -> dict[str, Any]:
    """A decision no longer held in memory: its outcome goes to the audit line only."""
    answer = {"decision_id": body.decision_id, "recorded": False, "duplicate": True}
    if body.decision_id in rt.late_outcomes:
        return {**answer, "sla_met": rt.late_outcomes[body.decision_id]}
    found = None
    if rt.store is not None:
        found = await asyncio.to_thread(rt.store.find_decision, body.decision_id)
    if found is None:
        raise NotFoundError(
            f"decision_id: no decision {body.decision_id!r}; fix: send the decision_id "
            "that POST /v1/route returned"
        )
    if not found.routed:
        raise RoutedNowhereError(body.decision_id)
    if found.has_outcome:
        return {**answer, "sla_met": found.sla_met}
    if _untimed(body):  # a first token of an evicted decision is not kept (`fed: false`)
        raise NoTimingsError(body.decision_id)
    ok = sla_met(body.status, body.ttft_s, body.e2e_s, found.deadline_s)
    rt.late_outcomes[body.decision_id] = ok
    if len(rt.late_outcomes) > LATE_OUTCOMES_KEPT:
        rt.late_outcomes.popitem(last=False)
    if rt.writer is not None:
        rt.writer.enqueue(
            OutcomeRecord(
                body.decision_id, rt.clock(), body.ttft_s, body.tpot_s, body.e2e_s, body.status, ok
            )
        )
    return {**answer, "recorded": True, "duplicate": False, "sla_met": ok}


@hot.post(
    "/v1/telemetry",
    response_model=TelemetryResponse,
    responses=ERRORS,
    summary="Push one target's hardware picture",
    openapi_extra=json_body(TelemetryRequest),
)
async def telemetry(request: Request) -> Response:
    """On the hot path like the other pushes: the body is JSON whatever its content type,
    and an unreadable one is a 422 naming the field."""
    try:
        body = TelemetryRequest.model_validate_json(await request.body())
    except ValidationError as exc:
        return invalid(exc)
    rt = runtime_of(request)
    try:
        target = rt.fleet.target(body.target)
    except KeyError:
        return error_response(422, f"target: unknown target {body.target!r}")
    kv = body.kv_used_gb
    if body.kv_used_ratio is not None:
        kv = body.kv_used_ratio * target.kv_budget_gb
    state = rt.scheduler.state
    now_s = rt.clock()
    state.refresh(
        target.index,
        now_s,
        kv_used_gb=kv,
        queue_depth=body.queue_depth,
        memory_used_gb=body.memory_used_gb,
    )
    healthy = rt.ejections.health(target.index, body.healthy, now_s)  # ejected: stays out
    if healthy is not None:
        state.set_healthy(target.index, healthy)
    return json_response({"target": target.id, "accepted": True})
