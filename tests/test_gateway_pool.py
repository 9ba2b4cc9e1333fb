"""Streams whose clients stopped reading must not starve the telemetry scraper."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import httpx
import yaml

from slaguard.emulator.app import create_emulator_app
from slaguard.fleet import build_fleet
from slaguard.service.app import create_app
from slaguard.service.bootstrap import build_service
from slaguard.service.config import load_config
from slaguard.service.local import ServerThread

MODEL = "llama3.1-8b"


def _fresh(client: httpx.Client) -> bool:
    rows = client.get("/v1/status").json()["targets"]
    return all(r["picture_age_s"] < 0.5 for r in rows)


def test_the_scraper_keeps_scraping_while_every_gateway_connection_is_held(
    tmp_path: Path,
) -> None:
    """The scraper shared the gateway's pool: with every connection held by a stream its
    client had stopped reading, scrapes timed out, the picture went stale and routing
    answered no_capacity until those clients left."""
    target = build_fleet({"targets": [{"id": "h100", "model": MODEL, "card": "h100"}]})
    with ServerThread(create_emulator_app(target.targets[0], speedup=1.0)) as emulator:
        fleet = {
            "targets": [{"id": "h100-8b", "model": MODEL, "card": "h100", "url": emulator.url}]
        }
        (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(fleet))
        cfg = load_config(None, {
            "fleet": tmp_path / "fleet.yaml", "db": str(tmp_path / "audit.db"),
            "telemetry": {"scrape_interval_s": 0.1, "stale_after_s": 1.0},
            "gateway": {"max_connections": 1}, "notify_file": tmp_path / "incidents.jsonl",
        })  # fmt: skip
        service = build_service(cfg)
        app = create_app(service.runtime, admin_token=None, readiness=service.readiness)
        try:
            with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=30) as c:
                chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                        "max_tokens": 5_000, "stream": True}  # fmt: skip
                with c.stream("POST", "/v1/chat/completions", json=chat) as held:
                    assert held.status_code == 200
                    chunks = held.iter_raw()
                    for _ in range(3):  # the stream now holds the pool's one connection
                        next(chunks)
                    fresh = []
                    watched_until = time.monotonic() + 1.5  # past stale_after_s (1 s)
                    while time.monotonic() < watched_until:
                        fresh.append(_fresh(c))
                        time.sleep(0.1)
                assert all(fresh), c.get("/v1/status").json()["targets"]
        finally:
            service.close()


def test_a_stream_cut_by_the_stop_is_one_warning_not_an_error_traceback(
    tmp_path: Path,
) -> None:
    """Each stream the graceful-shutdown timeout cancelled was an ERROR with a traceback:
    routine deploys looked like crashes to log-based alerting."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    uvicorn_log = logging.getLogger("uvicorn")
    target = build_fleet({"targets": [{"id": "h100", "model": MODEL, "card": "h100"}]})
    try:
        with ServerThread(create_emulator_app(target.targets[0], speedup=1.0)) as emulator:
            fleet = {
                "targets": [{"id": "h100-8b", "model": MODEL, "card": "h100", "url": emulator.url}]
            }
            (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(fleet))
            cfg = load_config(None, {
                "fleet": tmp_path / "fleet.yaml", "db": str(tmp_path / "audit.db"),
                "telemetry": {"scrape_interval_s": 0.1, "stale_after_s": 1.0},
                "notify_file": tmp_path / "incidents.jsonl",
            })  # fmt: skip
            service = build_service(cfg)
            app = create_app(service.runtime, admin_token=None, readiness=service.readiness)
            server = ServerThread(app).start()
            server.server.config.timeout_graceful_shutdown = 0.5
            uvicorn_log.addHandler(handler)  # after uvicorn configured its logging
            chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                    "max_tokens": 5_000, "stream": True}  # fmt: skip
            c = httpx.Client(base_url=server.url, timeout=30)
            with c, c.stream("POST", "/v1/chat/completions", json=chat) as held:
                chunks = held.iter_raw()
                for _ in range(3):  # the answer streams from the backend
                    next(chunks)
                server.stop()
            service.close()
    finally:
        uvicorn_log.removeHandler(handler)
    cut = [r for r in records if "cut by the stop" in r.getMessage()]
    assert len(cut) == 1 and cut[0].levelno == logging.WARNING and cut[0].exc_info is None
    assert not [r for r in records if r.levelno >= logging.ERROR]
