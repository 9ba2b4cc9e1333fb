"""OpenAI-compatible gateway: route, forward, stream back unchanged, measure, feed back.

`POST /v1/chat/completions` and `POST /v1/completions` are routed like `/v1/route` (the
business metadata comes from headers: `X-Slaguard-Priority`, `X-Slaguard-Deadline-S`,
`X-Request-Id`, `X-Slaguard-Prefix-Id`; the prompt size is estimated at
`gateway.chars_per_token` characters per token), then the body is forwarded unchanged to
the chosen backend (only `model` is rewritten when the router degraded the request).

Retry rule: if the backend fails *before the first byte of the answer body* (connection
refused, timeout, HTTP 5xx, a 404: the model was checked against the fleet, so the
backend serves another one, or a 405: no OpenAI-style server there), the request is sent
once more to the next-best eligible target, and the decision's explanation records it.
After the first byte nothing is retried:
the client already holds part of an answer. A target failing `gateway.eject_after_failures`
times in a row is ejected for a while (`ejection`). Backend 4xx answers pass through unchanged:
a 401, 403, 408 or 429 is the fleet's failure (`gateway_outcome`; a 401 or 403, about
slaguard's credentials, is also logged by `upstream`), any other the client's mistake,
a `client_error` no SLA judges. Of the backend's headers only `Content-Type` and
`Retry-After` are relayed. The errors slaguard answers itself are in OpenAI's shape
(`hotpath.openai_error`). TTFT is measured at the first SSE event carrying a token;
TPOT = (end - first token) / (completion tokens - 1), with the token count from the
backend's `usage` when it sends one.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import time
from collections.abc import AsyncGenerator, Mapping
from typing import Any

import aiohttp
from fastapi import APIRouter, Request, Response
from pydantic import ValidationError

from slaguard.audit.records import RequestStatus
from slaguard.service.gateway_outcome import finish_whole
from slaguard.service.gateway_schemas import (
    HEADER_NAMES,
    HEADER_PARAMETERS,
    ChatCompletionRequest,
    CompletionRequest,
    GatewayHeaders,
    OpenAIErrorResponse,
    prompt_text,
    prompt_token_ids,
)
from slaguard.service.hotpath import (
    ClientLeft,
    DirectRoute,
    RelayResponse,
    StreamCut,
    json_body,
    openai_error,
    openai_invalid,
    unless_client_leaves,
)
from slaguard.service.pending import Pending, Routed
from slaguard.service.request_checks import FieldError, NeverFitsError
from slaguard.service.runtime import ServiceRuntime
from slaguard.service.sse_meter import StreamMeter, usage_count
from slaguard.service.upstream import BackendAccess, Upstream, UpstreamError, first_byte, why_failed
from slaguard.service.views import runtime_of

log = logging.getLogger(__name__)
router = APIRouter(route_class=DirectRoute)  # once per inference request: see `hotpath`
_ERRORS: dict[int | str, dict[str, Any]] = {
    c: {"model": OpenAIErrorResponse} for c in (409, 413, 422, 502, 503)
}

DECISION_HEADER = "x-slaguard-decision-id"  # on every answer to a routed request, errors too


class Refused(Exception):
    """A request the gateway answers itself with an error (`status`; `param`: the field
    the message names)."""

    def __init__(
        self,
        status: int,
        message: str,
        headers: Mapping[str, str] | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.headers, self.param = status, message, headers, param


@router.post(
    "/v1/chat/completions",
    responses=_ERRORS,
    summary="OpenAI chat completions",
    openapi_extra=json_body(ChatCompletionRequest, *HEADER_PARAMETERS),
)
async def chat_completions(request: Request) -> Response:
    return await _gateway(request, "/v1/chat/completions", ChatCompletionRequest)


@router.post(
    "/v1/completions",
    responses=_ERRORS,
    summary="OpenAI completions",
    openapi_extra=json_body(CompletionRequest, *HEADER_PARAMETERS),
)
async def completions(request: Request) -> Response:
    return await _gateway(request, "/v1/completions", CompletionRequest)


async def _gateway(
    request: Request, path: str, model: type[ChatCompletionRequest | CompletionRequest]
) -> Response:
    """Validate body and headers, then proxy; every refusal is an error response."""
    try:
        body = model.model_validate_json(await request.body())
        headers = request.headers
        meta = GatewayHeaders.model_validate(
            {name: v for name in HEADER_NAMES if (v := headers.get(name)) is not None}
        )
    except ValidationError as exc:
        return openai_invalid(exc)
    try:
        return await _proxy(request, path, body, meta)
    except FieldError as exc:
        return openai_error(422, str(exc), exc.field)
    except Refused as exc:
        return openai_error(exc.status, exc.message, exc.param, exc.headers)


async def _proxy(
    request: Request,
    path: str,
    body: ChatCompletionRequest | CompletionRequest,
    meta: GatewayHeaders,
) -> Response:
    rt = runtime_of(request)
    g = rt.config.gateway
    rt.checks.model(body.model)
    priority = rt.checks.priority(meta.priority or g.default_priority, "X-Slaguard-Priority")
    rt.checks.served(body.model, priority, "X-Slaguard-Priority")
    request_id = meta.request_id
    if request_id is not None and request_id in rt.pending:
        used = f"X-Request-Id: {request_id!r} was already used; send a new id"
        raise Refused(409, used, param="X-Request-Id")
    if isinstance(body, CompletionRequest):
        max_new = body.max_tokens
    else:
        max_new = body.max_completion_tokens or body.max_tokens
    text, ids = prompt_text(body), prompt_token_ids(body)
    key = text.encode() if not ids else json.dumps(body.prompt).encode()  # type: ignore[union-attr]
    prefix = meta.prefix_id or hashlib.blake2b(key, digest_size=8).hexdigest()
    req = rt.request(
        model=body.model,
        prompt_tokens=math.ceil(len(text) / g.chars_per_token) + ids,
        max_new_tokens=max_new or g.default_max_tokens,
        priority=priority,
        deadline_s=meta.deadline_s,
        request_id=request_id,
        prefix_id=prefix,
    )
    started = time.perf_counter()
    try:
        routed = rt.decide(req, record=False)
    except NeverFitsError as exc:  # a client error: no SLA miss, no audit record
        where = "prompt" if isinstance(body, CompletionRequest) else "messages"
        about = "~" if text else ""  # token ids are counted, text is estimated
        estimate = f" at {g.chars_per_token:g} characters a token" if text else ""
        raise FieldError(
            where,
            f"the prompt ({about}{req.prompt_tokens} tokens{estimate}) and {req.max_new_tokens} "
            f"new tokens make {about}{exc.tokens}, {exc.over}; fix: send a shorter one or "
            "fewer max_tokens",
        ) from None
    decide_s = time.perf_counter() - started
    entry = routed.entry
    if entry.target_index is None:
        rt.record_decision(routed, decide_s)
        rt.finish(entry, "rejected", ttft_s=None, tpot_s=None, e2e_s=None)
        notes = "; ".join(routed.decision.explanation.notes) or "no eligible target"
        again = {"Retry-After": "1", DECISION_HEADER: entry.decision_id}
        raise Refused(503, f"no capacity for {body.model}: {notes}", again)
    raw = await request.body()
    if entry.served_model != body.model:
        doc = json.loads(raw)
        doc["model"] = entry.served_model
        raw = json.dumps(doc).encode()
    opening = _open_upstream(request, rt, routed, path, raw, body.stream)
    found = await unless_client_leaves(request, opening)
    meter = StreamMeter(started)
    if found is None:
        return _client_left(rt, routed, decide_s, meter)
    up = found
    resp = up.response
    out_headers = {
        DECISION_HEADER: entry.decision_id,
        "x-slaguard-target": rt.fleet.targets[entry.target_index].id,
    }
    retry_after = resp.headers.get("retry-after", "")
    if retry_after.isascii() and retry_after.isprintable() and retry_after:
        out_headers["retry-after"] = retry_after  # a 429's: when the backend takes more
    media = resp.headers.get("content-type", "application/json")
    if not body.stream or resp.status >= 400:
        return await _whole(request, rt, routed, decide_s, meter, up, out_headers, media)
    client = ClientLeft()
    return RelayResponse(
        _relay(rt, routed, decide_s, meter, up, client), resp.status, out_headers, media, client
    )


async def _whole(
    request: Request,
    rt: ServiceRuntime,
    routed: Routed,
    decide_s: float,
    meter: StreamMeter,
    up: Upstream,
    headers: dict[str, str],
    media: str,
) -> Response:
    """A non-streamed answer (or an error status), read whole and passed on."""
    entry = routed.entry
    try:
        content = await unless_client_leaves(request, _read_whole(up))
    except aiohttp.ClientError as exc:
        rt.gateway_metrics.upstream_failures.labels("after_first_byte", _target_id(rt, entry)).inc()
        rt.record_decision(routed, decide_s)
        rt.finish(entry, "failed", ttft_s=None, tpot_s=None, e2e_s=meter.since_start())
        raise Refused(502, f"backend broke while answering: {exc}", headers) from exc
    finally:
        up.response.release()
    if content is None:
        return _client_left(rt, routed, decide_s, meter)
    finish_whole(rt, routed, decide_s, meter.since_start(), up.response.status, content, media)
    return Response(content, up.response.status, headers, media_type=media)


def _target_id(rt: ServiceRuntime, entry: Pending) -> str:
    """The target an answer came from (a gateway entry always has one)."""
    assert entry.target_index is not None
    return rt.fleet.targets[entry.target_index].id


def _client_left(
    rt: ServiceRuntime, routed: Routed, decide_s: float, meter: StreamMeter
) -> Response:
    """The client left before the answer came (a whole one, or a stream's first byte):
    `cancelled`, its choice, no backend failure; the answer (status 499, nginx's) goes to
    nobody."""
    rt.gateway_metrics.client_cancels.inc()
    rt.record_decision(routed, decide_s)
    rt.finish(routed.entry, "cancelled", ttft_s=None, tpot_s=None, e2e_s=meter.since_start())
    return Response(b"", 499)


async def _read_whole(up: Upstream) -> bytes:
    return up.first + b"".join([chunk async for chunk in up.rest])


async def _open_upstream(
    request: Request, rt: ServiceRuntime, routed: Routed, path: str, raw: bytes, stream: bool
) -> Upstream:
    """Send to the chosen target; once more to the next-best one if it fails first."""
    client: aiohttp.ClientSession = request.app.state.http
    access: BackendAccess = request.app.state.backend_access
    gm = rt.gateway_metrics
    targets = rt.fleet.targets
    entry = routed.entry
    assert entry.target_index is not None
    order = [entry.target_index, *entry.alternatives[:1]]
    g = rt.config.gateway
    failures: list[str] = []
    for attempt, index in enumerate(order):
        target = targets[index]
        if attempt:
            gm.retries.inc()
            rt.scheduler.state.add_queue(entry.target_index, -1)
            rt.scheduler.state.add_queue(index, 1)
            entry.target_index = index
        began = time.monotonic()
        try:
            async with asyncio.timeout(g.first_byte_timeout_s if stream else g.read_timeout_s):
                up = await first_byte(client, target, path, raw, access)
            rt.ejections.answered(index)
            return up
        except (UpstreamError, aiohttp.ClientError, TimeoutError) as exc:
            waited_s = time.monotonic() - began
            entry.not_served_s += waited_s
            gm.upstream_failures.labels("before_first_byte", target.id).inc()
            # a stream's first byte is its first token: a stall is a TTFT of at least that
            rt.attempt_failed(entry, waited_s if stream and isinstance(exc, TimeoutError) else None)
            why = why_failed(exc, stream, g)
            rt.ejections.failed(index, why, rt.clock())
            retried = attempt + 1 < len(order)
            request.app.state.attempt_failures.failed(target.id, why, retried, began + waited_s)
            failures.append(f"{target.id}: {why}")
            routed.decision.explanation.notes.append(
                f"gateway: {target.id} failed before the first byte ({why})"
                + ("; retried on the next-best target" if retried else "")
            )
    rt.record_decision(routed, 0.0)
    rt.finish(entry, "failed", ttft_s=None, tpot_s=None, e2e_s=None)
    said = {DECISION_HEADER: entry.decision_id}
    raise Refused(502, "backend failed before answering: " + "; ".join(failures), said)


def _meter(rt: ServiceRuntime, entry: Pending, meter: StreamMeter, chunk: bytes) -> None:
    """Meter a chunk; the first token's TTFT goes to the guard as soon as it is seen."""
    meter.feed(chunk)
    if meter.first_token_at is not None and entry.first_ttft_s is None:
        rt.first_token(entry, meter.first_token_at - meter.started)


async def _relay(
    rt: ServiceRuntime,
    routed: Routed,
    decide_s: float,
    meter: StreamMeter,
    up: Upstream,
    client: ClientLeft,
) -> AsyncGenerator[bytes, None]:
    """Pass the backend's bytes through unchanged, metering them; never retry. The
    decision's audit record is enqueued once the first bytes went out: it is off the
    first token's path."""
    status: RequestStatus = "ok"
    recorded = False
    try:
        if up.first:
            _meter(rt, routed.entry, meter, up.first)
            yield up.first
        rt.record_decision(routed, decide_s)
        recorded = True
        async for chunk in up.rest:
            _meter(rt, routed.entry, meter, chunk)
            yield chunk
    except aiohttp.ClientError as exc:
        status = "failed"
        target = _target_id(rt, routed.entry)
        rt.gateway_metrics.upstream_failures.labels("after_first_byte", target).inc()
        log.warning(
            "gateway: %s: stream from %s broke after the first byte (%s); the client's "
            "answer is cut",
            routed.entry.decision_id,
            target,
            str(exc) or type(exc).__name__,
        )
        raise StreamCut from exc
    except (asyncio.CancelledError, GeneratorExit):
        # The client left (or its connection broke) before the end of the answer: its
        # choice (a "stop generating"), judged on the first token it got, if any. Cut by
        # the service's stop instead (its grace period passed), the answer failed.
        if client.left:
            status = "cancelled"
            rt.gateway_metrics.client_cancels.inc()
        else:
            status = "failed"
        raise
    finally:
        up.response.release()
        if not recorded:
            rt.record_decision(routed, decide_s)
        end = time.perf_counter()
        ttft = None if meter.first_token_at is None else meter.first_token_at - meter.started
        tokens = usage_count(meter.usage, "completion_tokens") or meter.events
        tpot = None
        if ttft is not None and tokens > 1:
            tpot = (end - meter.first_token_at) / (tokens - 1)  # type: ignore[operator]
        rt.finish(
            routed.entry,
            status,
            ttft_s=ttft,
            tpot_s=tpot,
            e2e_s=end - meter.started,
            prompt_tokens=usage_count(meter.usage, "prompt_tokens"),
            completion_tokens=tokens,
        )
