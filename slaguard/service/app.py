"""The ASGI app factory: every dependency is passed in, nothing is read from globals.

`create_app(runtime, ...)` wires the routers, the hot-path dispatch (`hotpath`), the
error format (every 4xx is `{"error": "<field>: <problem>; fix: ..."}`, but OpenAI's
`{"error": {"message": ..., "param": ...}}` on the gateway's paths) and a lifespan
that starts the background loops, the metrics scraper and the gateway's HTTP client, and
stops them on shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import SecretStr
from starlette.exceptions import HTTPException as StarletteHTTPException

from slaguard import __version__
from slaguard.service import admin, gateway, gateway_models, routing_views, views
from slaguard.service.hotpath import (
    HotPathApp,
    direct_endpoints,
    validation_field,
    validation_message,
)
from slaguard.service.loops import ServiceLoops
from slaguard.service.request_checks import FieldError
from slaguard.service.runtime import ServiceRuntime
from slaguard.service.shutdown_log import quiet_shutdown_cancellations
from slaguard.service.telemetry_scraper import MetricsScraper
from slaguard.service.upstream import AttemptFailures, BackendAccess

log = logging.getLogger(__name__)


def tune_for_latency() -> None:
    """Process settings for an event loop that answers in milliseconds (called at start).

    Everything built so far (modules, fleet, routes: ~175k objects) lives as long as the
    process: frozen out of the collector's view, a full collection takes ~0 ms instead of
    ~150 ms on the 2-core box. (A shorter GIL switch interval was tried against the audit
    writer thread's hold on the GIL: at 400 decisions/s it made p99 and CPU per request
    worse, with more GIL hand-offs between the threads, so the default 5 ms stays.)"""
    gc.freeze()


def scraper_client(runtime: ServiceRuntime) -> aiohttp.ClientSession:
    """The scraper's own small pool: sharing the gateway's, streams whose clients stopped
    reading held every connection and the scrapes timed out, the picture went stale and
    all routing answered no_capacity."""
    t = runtime.config.telemetry
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=max(4, len(runtime.fleet.targets)), limit_per_host=2),
        timeout=aiohttp.ClientTimeout(total=t.scrape_timeout_s),
        auto_decompress=False,
    )


def gateway_client(runtime: ServiceRuntime) -> aiohttp.ClientSession:
    """The pooled client the gateway forwards with.

    aiohttp rather than httpx: a streamed request through httpx cost ~1.3 ms of the event
    loop's CPU on the 2-core box, through aiohttp ~0.4 ms. Bodies pass through as they
    arrive (no content decoding); connect and per-read timeouts as configured."""
    g = runtime.config.gateway
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=g.max_connections, limit_per_host=0),
        timeout=aiohttp.ClientTimeout(
            total=None, sock_connect=g.connect_timeout_s, sock_read=g.read_timeout_s
        ),
        auto_decompress=False,
    )


def create_app(
    runtime: ServiceRuntime,
    *,
    admin_token: SecretStr | None,
    backend_key: SecretStr | None = None,
    client: aiohttp.ClientSession | None = None,
    run_loops: bool = True,
    readiness: Callable[[], Awaitable[None]] | None = None,
    on_shutdown: Callable[[], None] | None = None,
) -> HotPathApp:
    """The service app. `backend_key` goes to every backend as a bearer token
    (`upstream`); `client` overrides the forwarding and the scraping aiohttp sessions (the
    caller then closes it); `run_loops=False` leaves the background jobs off;
    `on_shutdown` runs last when the server stops (uvicorn re-raises SIGTERM and SIGINT
    once it has stopped, so code after `uvicorn.run` never runs on a signal)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        http = client or gateway_client(runtime)
        app.state.http = http
        loops = ServiceLoops(runtime, readiness=readiness)
        app.state.loops = loops
        if readiness is not None:
            await readiness()
        scrape_task: asyncio.Task[None] | None = None
        scrape_http: aiohttp.ClientSession | None = None
        if run_loops:
            loops.start()
            tcfg = runtime.config.telemetry
            if tcfg.scrape:
                scrape_http = client or scraper_client(runtime)
                scraper = MetricsScraper(
                    runtime.fleet,
                    runtime.scheduler.state,
                    scrape_http,
                    runtime.clock,
                    timeout_s=tcfg.scrape_timeout_s,
                    headers=access.auth,
                    ejections=runtime.ejections,
                )
                app.state.scraper = scraper
                scrape_task = asyncio.create_task(scraper.run(tcfg.scrape_interval_s))
        tune_for_latency()
        quiet_shutdown_cancellations()
        try:
            yield
        finally:
            loops.stop()
            if scrape_task is not None:
                scrape_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await scrape_task
            if client is None:
                await http.close()
                if scrape_http is not None:
                    await scrape_http.close()
            if on_shutdown is not None:
                await asyncio.to_thread(on_shutdown)

    hot = [routing_views.hot, views.hot]
    plain = [views.router, admin.router]
    openai: list[APIRouter] = []
    if runtime.config.gateway.enabled:
        hot.append(gateway.router)
        plain.append(gateway_models.router)
        openai = [gateway.router, gateway_models.router]
    app = HotPathApp(
        hot_endpoints=direct_endpoints(hot),
        openai_paths=[r.path for o in openai for r in o.routes if isinstance(r, APIRoute)],
        title="slaguard",
        version=__version__,
        description="Routing API and OpenAI-compatible gateway of the slaguard SLA guard.",
        lifespan=lifespan,
        # slaguard's telemetry is its Prometheus registry; FastAPI's OpenTelemetry hooks
        # only cost time on every request.
        telemetry={"tracing": False, "metrics": False, "logs": False, "operation_spans": False},
    )
    app.state.runtime = runtime
    app.state.admin_token = admin_token
    app.state.backend_access = access = BackendAccess(backend_key)
    app.state.attempt_failures = AttemptFailures()
    for router in (*hot, *plain):
        app.include_router(router)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        errors = exc.errors()
        path = request.scope["path"]
        return app.error(path, 422, validation_message(errors), validation_field(errors))

    @app.exception_handler(FieldError)
    async def _field(request: Request, exc: FieldError) -> Response:
        return app.error(request.scope["path"], 422, str(exc), exc.field)

    @app.exception_handler(views.NotFoundError)
    async def _missing(request: Request, exc: views.NotFoundError) -> Response:
        return app.error(request.scope["path"], 404, str(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        return app.error(request.scope["path"], exc.status_code, str(exc.detail), None, exc.headers)

    return app
