"""slaguard follows no redirect from a backend: the gateway re-sent the client's prompt to
whatever host a backend's 307 named and relayed that host's answer, and the scraper
would read any host's page as a target's metrics."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import aiohttp
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from slaguard.fleet.fleet import Fleet, build_fleet
from slaguard.scheduler.state import FleetState
from slaguard.service.local import ServerThread
from slaguard.service.telemetry_scraper import MetricsScraper
from slaguard.service.upstream import BackendAccess, UpstreamError, first_byte


class Elsewhere:
    """The host a redirect points at: it records what reaches it."""

    def __init__(self) -> None:
        self.hits: list[str] = []

    async def any(self, request: Request) -> Response:
        self.hits.append(f"{request.method} {request.url.path} {(await request.body())!r}")
        return PlainTextResponse("vllm:num_requests_running 0\n")


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[Elsewhere, str]]:
    """(the host redirected to, a backend that redirects every request to it)."""
    elsewhere = Elsewhere()
    routes = [Route("/{path:path}", elsewhere.any, methods=["GET", "POST"])]
    with ServerThread(Starlette(routes=routes)) as target_of_redirect:

        async def redirect(request: Request) -> Response:
            return RedirectResponse(f"{target_of_redirect.url}/internal", status_code=307)

        redirecting = [Route("/{path:path}", redirect, methods=["GET", "POST"])]
        with ServerThread(Starlette(routes=redirecting)) as backend:
            yield elsewhere, backend.url


def _fleet(url: str) -> Fleet:
    raw = {"targets": [{"id": "h100-8b", "model": "llama3.1-8b", "card": "h100", "url": url}]}
    return build_fleet(raw, "test fleet")


def test_the_gateway_does_not_follow_a_backends_redirect(
    servers: tuple[Elsewhere, str],
) -> None:
    elsewhere, backend = servers
    elsewhere.hits.clear()

    async def send() -> None:
        async with aiohttp.ClientSession() as client:
            target = _fleet(backend).targets[0]
            await first_byte(
                client, target, "/v1/chat/completions", b'{"p": 1}', BackendAccess(None)
            )

    with pytest.raises(UpstreamError, match=r"^HTTP 307 to '.*/internal': redirects are not"):
        asyncio.run(send())
    assert elsewhere.hits == []


def test_the_scraper_does_not_follow_a_backends_redirect(servers: tuple[Elsewhere, str]) -> None:
    elsewhere, backend = servers
    elsewhere.hits.clear()
    fleet = _fleet(backend)

    async def scrape() -> MetricsScraper:
        async with aiohttp.ClientSession() as client:
            scraper = MetricsScraper(fleet, FleetState(fleet), client, lambda: 0.0)
            await scraper.scrape_once()
            return scraper

    assert asyncio.run(scrape()).errors == 1
    assert elsewhere.hits == []
