"""The telemetry scraper's failure lines say what went wrong: a backend that accepts the
connection and never answers was logged as `TimeoutError: ` with nothing after it."""

from __future__ import annotations

import asyncio
import logging
import socket

import aiohttp
import pytest

from slaguard.fleet.fleet import build_fleet
from slaguard.scheduler.state import FleetState
from slaguard.service.telemetry_scraper import MetricsScraper


async def _scrape_a_silent_backend(listener: socket.socket) -> MetricsScraper:
    port = listener.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    raw = {"targets": [{"id": "l40s-8b", "model": "llama3.1-8b", "card": "l40s", "url": url}]}
    fleet = build_fleet(raw, "test fleet")
    async with aiohttp.ClientSession() as client:
        scraper = MetricsScraper(fleet, FleetState(fleet), client, lambda: 0.0, timeout_s=0.2)
        await scraper.scrape_once()
    return scraper


def test_a_scrape_timeout_names_the_limit(caplog: pytest.LogCaptureFixture) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:  # accepts, never answers
        scraper = asyncio.run(_scrape_a_silent_backend(listener))
    assert scraper.errors == 1
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 1 and said[0].endswith(
        "/metrics: TimeoutError: no answer within 0.2 s (telemetry.scrape_timeout_s)"
    ), said
