"""The per-request endpoints without FastAPI's router and dependency injection.

Profiled on `/v1/route`, FastAPI's own pipeline (its middleware, matching the path against
every route twice, dependency solving, the pydantic body and response-model round trips)
cost about as much CPU as the routing decision and its audit record together. The
endpoints that run once per inference request are therefore `DirectRoute`s: they take the
Starlette `Request`, validate the raw body with the same pydantic model
(`model_validate_json`: same bounds, same field-naming messages) and return a finished
`Response`, errors included. `HotPathMiddleware` sends an exact method + path match
straight to them; every other request goes through FastAPI as before. The routes stay in
FastAPI's table, so `/openapi.json` publishes their bodies (`json_body`) and another
method on the same path still gets a 405.

The dispatch happens in `HotPathApp.__call__`, before FastAPI's own middleware stack
(ServerErrorMiddleware, its exception-telemetry and body-limit wrappers: ~10 us per
request, none of which does anything for these endpoints), so an endpoint's unexpected
exception is answered here with a 500 `{"error": "internal error"}` and re-raised for
the server to log, as ServerErrorMiddleware does.

The OpenAI-compatible gateway's paths (`openai_paths`) answer their errors in OpenAI's
shape (`openai_error`): their clients are OpenAI SDKs, which read `error.message`.
"""

from __future__ import annotations

import asyncio
from collections.abc import (
    AsyncGenerator,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec
from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, TypeAdapter, ValidationError
from starlette.types import Receive, Scope, Send

from slaguard.service.shutdown_log import announce_cut

_T = TypeVar("_T")

Endpoint = Callable[[Request], Coroutine[Any, Any, Response]]
encode_json = msgspec.json.Encoder().encode
_FLAG: TypeAdapter[bool] = TypeAdapter(bool)


class DirectRoute(APIRoute):
    """An APIRoute whose endpoint takes the `Request` and returns the `Response` itself."""

    def get_route_handler(self) -> Endpoint:
        endpoint: Endpoint = self.endpoint
        return endpoint


class HotPathApp(FastAPI):
    """FastAPI, but an exact (method, path) match in `hot_endpoints` goes straight to its
    `DirectRoute` endpoint; anything else (and the lifespan) goes through FastAPI. The
    errors it answers itself on `openai_paths` are in OpenAI's shape."""

    def __init__(
        self,
        *,
        hot_endpoints: Mapping[tuple[str, str], Endpoint],
        openai_paths: Iterable[str] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.hot_endpoints = dict(hot_endpoints)
        self.openai_paths = frozenset(openai_paths)

    def error(
        self,
        path: str,
        status: int,
        message: str,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        """`path`'s error body: OpenAI's on the gateway's paths, slaguard's elsewhere
        (`param`: the field `message` names, for OpenAI's)."""
        if path in self.openai_paths:
            return openai_error(status, message, param, headers)
        return error_response(status, message, headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if _declared_length(scope) > MAX_BODY_BYTES:
                await self.error(scope["path"], 413, TOO_LARGE)(scope, receive, send)
                return
            endpoint = self.hot_endpoints.get((scope["method"], scope["path"]))
            if endpoint is not None:
                scope["app"] = self
                try:
                    body = await read_body(receive)
                except BodyTooLarge:
                    await self.error(scope["path"], 413, TOO_LARGE)(scope, receive, send)
                    return
                if body is None:
                    return  # the client left before its body arrived: nobody to answer
                try:
                    response = await endpoint(ReadRequest(scope, receive, body))
                except Exception:
                    await self.error(scope["path"], 500, "internal error")(scope, receive, send)
                    raise
                await response(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


MAX_BODY_BYTES = 8 << 20
"""Larger bodies get a 413: a 100 MB JSON body took 3.4 GB and stalled routing for
seconds (the longest prompt any target takes is well under 1 MB of text)."""
TOO_LARGE = f"body: over {MAX_BODY_BYTES >> 20} MiB; send a smaller request"


class BodyTooLarge(Exception):
    """A request body (sent in chunks) passed `MAX_BODY_BYTES`."""


def _declared_length(scope: Scope) -> int:
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value) if value.isdigit() else 0
    return 0


async def read_body(receive: Receive) -> bytes | None:
    """The whole request body straight from the server (None: the client disconnected;
    `BodyTooLarge` past `MAX_BODY_BYTES`); Starlette's `Request.body()` goes through an
    async generator per request."""
    message = await receive()
    if message["type"] != "http.request":
        return None
    if not message.get("more_body", False):
        body: bytes = message.get("body", b"")
        return body
    chunks = [message.get("body", b"")]
    size = len(chunks[0])
    while message.get("more_body", False):
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        if size > MAX_BODY_BYTES:
            raise BodyTooLarge
    return b"".join(chunks)


class ReadRequest(Request):
    """A `Request` whose body `HotPathApp` has already read."""

    def __init__(self, scope: Scope, receive: Receive, body: bytes) -> None:
        super().__init__(scope, receive)
        self._read = body

    async def body(self) -> bytes:
        return self._read


class JsonBytes(Response):
    """A JSON answer already encoded: its two headers built directly (Starlette's
    `init_headers` looks each one up per response)."""

    media_type = "application/json"

    def __init__(
        self, content: bytes, status_code: int = 200, headers: Mapping[str, str] | None = None
    ) -> None:
        self.body = content
        self.status_code = status_code
        self.background = None
        self.raw_headers = [
            (b"content-length", str(len(content)).encode()),
            (b"content-type", b"application/json"),
            *(
                (k.lower().encode("latin-1"), v.encode("latin-1"))
                for k, v in (headers or {}).items()
            ),
        ]


async def unless_client_leaves(request: Request, work: Awaitable[_T]) -> _T | None:
    """`work`'s result, or None as soon as the client disconnects (`work` is cancelled).
    For what comes before a response starts (a stream's first byte, an answer sent
    whole), which Starlette does not cancel when its client leaves: the work nobody waits
    for is abandoned. `request`'s body must have been read."""

    async def client_left() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    working = asyncio.ensure_future(work)
    watching = asyncio.ensure_future(client_left())
    try:
        await asyncio.wait((working, watching), return_when=asyncio.FIRST_COMPLETED)
    finally:
        watching.cancel()
        if not working.done():
            working.cancel()
    return working.result() if working.done() and not working.cancelled() else None


class StreamCut(Exception):
    """Raised by a relayed stream whose source broke: the client's answer is cut (the
    connection closed without the final chunk), so it cannot mistake it for a whole one."""


@dataclass(slots=True)
class ClientLeft:
    """Set by `RelayResponse` when the client's disconnect cancelled the stream: the relay
    then records the client's choice (`cancelled`), where a cancellation of another kind
    (the service's stop, its grace period passed) is the answer failing."""

    left: bool = False


class RelayResponse(Response):
    """A streamed answer without Starlette's StreamingResponse task group.

    StreamingResponse runs the stream and a disconnect listener as two anyio tasks in a
    task group, and only sends its headers once the stream task has been scheduled. This
    sends headers and chunks from the request's own task; one plain asyncio task waits
    for the client's disconnect and cancels it, telling the relay so (`ClientLeft`), and
    a cancellation of its own is absorbed here. The chunks' generator is started before
    anything is sent and closed at the end whatever happened, so its own cleanup (the
    outcome record) always runs. A `StreamCut` from the chunks ends the response without
    its final chunk."""

    def __init__(
        self,
        chunks: AsyncGenerator[bytes, None],
        status_code: int,
        headers: Mapping[str, str],
        media_type: str,
        client: ClientLeft | None = None,
    ) -> None:
        self.chunks = chunks
        self.client = ClientLeft() if client is None else client
        self.status_code = status_code
        self.media_type = media_type
        self.background = None
        self.init_headers(headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        task = asyncio.current_task()
        assert task is not None
        state = {"streaming": True, "disconnected": False}

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            if state["streaming"]:
                state["disconnected"] = self.client.left = True
                task.cancel()

        watcher = asyncio.get_running_loop().create_task(watch())
        try:
            first = await anext(self.chunks, b"")
            await send(
                {
                    "type": "http.response.start",
                    "status": self.status_code,
                    "headers": self.raw_headers,
                }
            )
            if first:
                await send({"type": "http.response.body", "body": first, "more_body": True})
            async for chunk in self.chunks:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except StreamCut:
            announce_cut()
            return
        except asyncio.CancelledError:
            if not state["disconnected"] or task.uncancel() > 0:
                raise
        finally:
            state["streaming"] = False
            watcher.cancel()
            await self.chunks.aclose()


def direct_endpoints(routers: Iterable[APIRouter]) -> dict[tuple[str, str], Endpoint]:
    """Every `DirectRoute` of `routers`, keyed by (method, path)."""
    return {
        (method, route.path): route.endpoint
        for router in routers
        for route in router.routes
        if isinstance(route, DirectRoute)
        for method in route.methods or ()
    }


def json_body(model: type[BaseModel], *parameters: dict[str, Any]) -> dict[str, Any]:
    """`openapi_extra` publishing `model` as the JSON request body (and query/header
    `parameters`), for an endpoint that parses its body itself."""
    schema = model.model_json_schema()
    definitions = schema.pop("$defs", {})
    extra: dict[str, Any] = {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": _inline(schema, definitions)}},
        }
    }
    if parameters:
        extra["parameters"] = list(parameters)
    return extra


def _inline(schema: Any, definitions: Mapping[str, Any]) -> Any:
    """`schema` with its `#/$defs/...` references replaced by the definitions (the
    OpenAPI document has no `$defs` of its own to point them at)."""
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return _inline(definitions[ref.removeprefix("#/$defs/")], definitions)
        return {key: _inline(value, definitions) for key, value in schema.items()}
    if isinstance(schema, list):
        return [_inline(value, definitions) for value in schema]
    return schema


def json_response(body: object, status: int = 200) -> Response:
    """A JSON answer encoded with msgspec (no pydantic response-model round trip)."""
    return JsonBytes(encode_json(body), status)


def error_response(status: int, message: str, headers: Mapping[str, str] | None = None) -> Response:
    """The service's error body, `{"error": "<field>: <problem>"}`."""
    return JsonBytes(encode_json({"error": message}), status, headers)


def openai_error(
    status: int,
    message: str,
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """The gateway's error body as OpenAI (and vLLM) answer one, where OpenAI's SDKs read
    it: `{"error": {"message", "type", "param", "code"}}`. `type` as OpenAI answers:
    `invalid_request_error` for the client's mistake, `server_error` for ours; `param`
    is the field `message` names."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    error = {"message": message, "type": kind, "param": param, "code": None}
    return JsonBytes(encode_json({"error": error}), status, headers)


def _where(loc: Sequence[Any]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:] or parts
    return ".".join(parts) or "body"


def validation_field(errors: Sequence[Mapping[str, Any]]) -> str | None:
    """The field the first problem names (None: the body as a whole, e.g. not JSON)."""
    where = _where(errors[0].get("loc", ())) if errors else "body"
    return None if where == "body" else where


def validation_message(errors: Sequence[Mapping[str, Any]]) -> str:
    """One line for the first problem, naming the field."""
    if not errors:
        return "body: invalid request"
    err = errors[0]
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    return f"{_where(err.get('loc', ()))}: {err.get('msg', 'invalid')}{more}"


def invalid(exc: ValidationError, prefix: str = "") -> Response:
    """422 naming the first invalid field (`prefix` names what was validated: a query
    parameter validated on its own has an empty location)."""
    errors = exc.errors()
    if prefix:
        errors = [{**e, "loc": (prefix, *e["loc"])} for e in errors]
    return error_response(422, validation_message(errors))


def openai_invalid(exc: ValidationError) -> Response:
    """`invalid` in OpenAI's shape, the field it names as `param`."""
    errors = exc.errors()
    return openai_error(422, validation_message(errors), validation_field(errors))


def query_flag(request: Request, name: str) -> bool:
    """A boolean query parameter (`1`, `true`, `yes`, `on` ...; absent: False); raises
    ValidationError on anything else."""
    if not request.scope["query_string"]:
        return False
    raw = request.query_params.get(name)
    return False if raw is None else _FLAG.validate_python(raw)
