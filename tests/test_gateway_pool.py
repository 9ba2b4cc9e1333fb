"""The gateway with streams in flight: clients that stopped reading must not starve the
telemetry scraper, and a stop that cuts streams is not logged as a crash."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml
from helpers import stored_outcome

from slaguard.emulator.app import create_emulator_app
from slaguard.fleet import build_fleet
from slaguard.service.app import create_app
from slaguard.service.bootstrap import Service, build_service
from slaguard.service.config import load_config
from slaguard.service.local import ServerThread

MODEL = "llama3.1-8b"
LONG_CHAT = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "hi"}],
    "max_tokens": 5_000,  # ~40 s of streaming from the emulator at speed 1
    "stream": True,
}


@contextmanager
def _one_backend_service(tmp: Path, **extra: Any) -> Iterator[tuple[Service, Any]]:
    """One emulated H100 (speed 1) behind a service that scrapes it every 100 ms."""
    target = build_fleet({"targets": [{"id": "h100", "model": MODEL, "card": "h100"}]})
    with ServerThread(create_emulator_app(target.targets[0], speedup=1.0)) as emulator:
        fleet = {
            "targets": [{"id": "h100-8b", "model": MODEL, "card": "h100", "url": emulator.url}]
        }
        (tmp / "fleet.yaml").write_text(yaml.safe_dump(fleet))
        cfg = load_config(None, {
            "fleet": tmp / "fleet.yaml", "db": str(tmp / "audit.db"),
            "telemetry": {"scrape_interval_s": 0.1, "stale_after_s": 1.0},
            "notify_file": tmp / "incidents.jsonl", **extra,
        })  # fmt: skip
        service = build_service(cfg)
        try:
            yield (
                service,
                create_app(service.runtime, admin_token=None, readiness=service.readiness),
            )
        finally:
            service.close()


def _streaming(held: httpx.Response) -> Iterator[bytes]:
    """The stream, three chunks in: it holds a backend connection. Keep the iterator:
    once it is collected, httpx closes the stream."""
    chunks = held.iter_raw()
    for _ in range(3):
        next(chunks)
    return chunks


def _fresh(client: httpx.Client) -> bool:
    rows = client.get("/v1/status").json()["targets"]
    return all(r["picture_age_s"] < 0.5 for r in rows)


def test_the_scraper_keeps_scraping_while_every_gateway_connection_is_held(
    tmp_path: Path,
) -> None:
    """The scraper shared the gateway's pool: with every connection held by a stream its
    client had stopped reading, scrapes timed out, the picture went stale and routing
    answered no_capacity until those clients left."""
    with (
        _one_backend_service(tmp_path, gateway={"max_connections": 1}) as (_, app),
        ServerThread(app) as server,
        httpx.Client(base_url=server.url, timeout=30) as c,
    ):
        with c.stream("POST", "/v1/chat/completions", json=LONG_CHAT) as held:
            assert held.status_code == 200
            streaming = _streaming(held)
            fresh = []
            watched_until = time.monotonic() + 1.5  # past stale_after_s (1 s)
            while time.monotonic() < watched_until:
                fresh.append(_fresh(c))
                time.sleep(0.1)
            assert streaming is not None  # held to here
        assert all(fresh), c.get("/v1/status").json()["targets"]


def test_a_stream_cut_by_the_stop_is_one_warning_not_an_error_traceback(
    tmp_path: Path,
) -> None:
    """Each stream the graceful-shutdown timeout cancelled was an ERROR with a traceback:
    routine deploys looked like crashes to log-based alerting."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    uvicorn_log = logging.getLogger("uvicorn")
    try:
        with _one_backend_service(tmp_path) as (service, app):
            server = ServerThread(app).start()
            server.server.config.timeout_graceful_shutdown = 0.5
            uvicorn_log.addHandler(handler)  # after uvicorn configured its logging
            c = httpx.Client(base_url=server.url, timeout=30)
            said = {"X-Request-Id": "cut-by-stop"}
            with c, c.stream("POST", "/v1/chat/completions", json=LONG_CHAT, headers=said) as held:
                streaming = _streaming(held)
                server.stop()
                assert streaming is not None
            # the stop cut it, not the client: no client cancel (judged on its first token)
            outcome = stored_outcome(service.engine, "cut-by-stop").outcome
            assert outcome["status"] == "failed", outcome
            assert service.runtime.gateway_metrics.client_cancels._value.get() == 0
    finally:
        uvicorn_log.removeHandler(handler)
    cut = [r for r in records if "cut by the stop" in r.getMessage()]
    assert len(cut) == 1 and cut[0].levelno == logging.WARNING and cut[0].exc_info is None
    assert not [r for r in records if r.levelno >= logging.ERROR]


def test_a_target_whose_backend_serves_another_model_is_retried_elsewhere(
    tmp_path: Path,
) -> None:
    """A fleet file pointing a target at a backend serving another model: ~11 % of
    requests answered 404 "model does not exist", never retried nor counted as failures."""
    qwen = build_fleet({"targets": [{"id": "q", "model": "qwen2.5-32b", "card": "h100"}]})
    right = build_fleet({"targets": [{"id": "r", "model": MODEL, "card": "h100"}]})
    with (
        ServerThread(create_emulator_app(qwen.targets[0], speedup=20.0)) as wrong_backend,
        ServerThread(create_emulator_app(right.targets[0], speedup=20.0)) as right_backend,
    ):
        fleet = {"targets": [
            {"id": "h100-8b", "model": MODEL, "card": "h100", "url": right_backend.url},
            {"id": "wrong-8b", "model": MODEL, "card": "h100", "url": wrong_backend.url},
        ]}  # fmt: skip
        (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(fleet))
        cfg = load_config(None, {
            "fleet": tmp_path / "fleet.yaml", "db": str(tmp_path / "audit.db"),
            "telemetry": {"scrape_interval_s": 0.1, "stale_after_s": 2.0},
            "notify_file": tmp_path / "incidents.jsonl",
        })  # fmt: skip
        service = build_service(cfg)
        app = create_app(service.runtime, admin_token=None, readiness=service.readiness)
        try:
            with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=30) as c:
                chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                        "max_tokens": 2}  # fmt: skip
                codes = [c.post("/v1/chat/completions", json=chat).status_code for _ in range(6)]
                metrics = c.get("/metrics").text
        finally:
            service.close()
    assert codes == [200] * 6  # round-robin sent half to the wrong backend first
    retries = re.search(r"^slaguard_gateway_retries_total\S* (\S+)$", metrics, re.M)
    assert retries is not None and float(retries.group(1)) == 3.0
