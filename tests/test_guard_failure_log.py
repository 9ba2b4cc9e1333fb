"""A failing loop (the guard's, the telemetry scraper's) logs each distinct error once, a
reminder a minute, and its recovery: not a line per tick (the 500 ms mode sync wrote 1,199
in a ten-minute database outage)."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from pathlib import Path

import aiohttp
import pytest
from sqlalchemy.engine import URL
from test_guard_store import start_rollout
from test_replicas_runtime import make

from slaguard.audit.engine import create_audit_engine
from slaguard.audit.migrate import upgrade
from slaguard.failure_log import FailureLog
from slaguard.fleet.fleet import build_fleet
from slaguard.guard.store import GuardStore
from slaguard.scheduler.state import FleetState
from slaguard.service.local import free_port
from slaguard.service.telemetry_scraper import MetricsScraper

LOGGER = "slaguard.test.failure_log"


def messages(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]


def test_one_line_per_distinct_error_a_reminder_a_minute_and_the_recovery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    failures = FailureLog(logging.getLogger(LOGGER), "mode sync")
    t0 = 1_796_000_000.0  # 2026-11-30 00:53:20 UTC
    for k in range(240):  # two minutes of 500 ms ticks
        failures.failed("refused", t0 + 0.5 * k)
    failures.failed("timeout", t0 + 120.0)
    failures.succeeded(t0 + 121.0)
    failures.failed("refused", t0 + 200.0)
    assert messages(caplog) == [
        (logging.WARNING, "mode sync failed: refused"),
        (logging.WARNING, "mode sync still failing (121 times since 00:53:20 UTC): refused"),
        (logging.WARNING, "mode sync failed: timeout"),
        (logging.INFO, "mode sync recovered after 241 failures in 121s"),
        (logging.WARNING, "mode sync failed: refused"),
    ]


def test_a_replica_whose_database_lost_its_table_warns_once_then_recovers(
    sqlite_url: URL, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = create_audit_engine(sqlite_url)
    upgrade(engine)
    now = time.time()
    start_rollout(GuardStore(engine), at_s=now - 30)
    replica = make(engine, "a", tmp_path)
    assert replica.sync(now).error is None
    with sqlite3.connect(str(sqlite_url.database)) as conn:
        conn.execute("ALTER TABLE fleet_state RENAME TO fleet_state_away")
    caplog.set_level(logging.INFO, logger="slaguard.guard.runtime")
    reports = [replica.sync(now + 0.5 * k) for k in range(1, 21)]
    assert all(r.error for r in reports) and replica.stats.sync_errors == 20
    with sqlite3.connect(str(sqlite_url.database)) as conn:
        conn.execute("ALTER TABLE fleet_state_away RENAME TO fleet_state")
    assert replica.sync(now + 11).error is None
    logged = [r.getMessage() for r in caplog.records if r.name == "slaguard.guard.runtime"]
    assert len(logged) == 2, logged
    assert logged[0].startswith("guard mode sync failed: ")
    assert logged[1] == "guard mode sync recovered after 20 failures in 10s"
    replica.close()


def test_a_dead_backend_is_one_scrape_warning_and_a_reminder_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The scraper runs every 100 ms: 20 refused scrapes over ten simulated seconds are
    one line, and one more a minute later."""
    port = free_port()  # nothing listens there
    target = {"id": "l40s-8b", "model": "llama3.1-8b", "card": "l40s"}
    fleet = build_fleet({"targets": [target | {"url": f"http://127.0.0.1:{port}"}]})
    now = [1_796_000_000.0]
    caplog.set_level(logging.INFO, logger="slaguard.service.telemetry_scraper")

    async def scrape(times: int) -> None:
        async with aiohttp.ClientSession() as client:
            scraper = MetricsScraper(fleet, FleetState(fleet), client, lambda: now[0])
            for _ in range(times):
                await scraper.scrape_once()
                now[0] += 0.5
            now[0] += 61.0
            await scraper.scrape_once()
            assert scraper.errors == times + 1

    asyncio.run(scrape(20))
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 2, logged
    assert logged[0].startswith(f"scrape of l40s-8b failed: http://127.0.0.1:{port}/metrics: ")
    assert logged[1].startswith("scrape of l40s-8b still failing (21 times since 00:53:20 UTC)")
