"""slaguard's credentials for the backends: `$SLAGUARD_BACKEND_API_KEY` goes as a bearer
token on every request the gateway and the scraper send. Without it a backend behind
vLLM's `--api-key` or an authenticating proxy answered 401, relayed to the client as its
own mistake, and nothing told the operator."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest
import yaml
from pydantic import SecretStr
from typer.testing import CliRunner

from slaguard.cli.main import app as cli
from slaguard.emulator.app import create_emulator_app
from slaguard.fleet import build_fleet
from slaguard.scheduler.state import FleetState
from slaguard.service.app import create_app
from slaguard.service.bootstrap import build_service
from slaguard.service.config import ServiceConfigError, load_config
from slaguard.service.credentials import backend_api_key
from slaguard.service.local import ServerThread
from slaguard.service.telemetry_scraper import MetricsScraper
from slaguard.service.upstream import BackendAccess

KEY = "sk-backend-0123456789abcdef"
MODEL = "llama3.1-8b"
TARGET = "h100-8b"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


@dataclass
class KeyedBackend:
    """An ASGI wrapper answering 401 to a request without `Authorization: Bearer KEY`, as
    an authenticating proxy does; it records each request's path and header."""

    inner: Any
    seen: list[tuple[str, str | None]] = field(default_factory=list)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.inner(scope, receive, send)
        headers = dict(scope["headers"])
        auth = headers.get(b"authorization")
        said = None if auth is None else auth.decode("latin-1")
        self.seen.append((scope["path"], said))
        if said == f"Bearer {KEY}":
            return await self.inner(scope, receive, send)
        body = b'{"error": "Unauthorized"}'
        await send({"type": "http.response.start", "status": 401, "headers": []})
        await send({"type": "http.response.body", "body": body})
        return None


@pytest.fixture(scope="module")
def backend() -> Iterator[tuple[KeyedBackend, str]]:
    target = build_fleet({"targets": [{"id": "h100", "model": MODEL, "card": "h100"}]})
    keyed = KeyedBackend(create_emulator_app(target.targets[0], speedup=4.0))
    with ServerThread(keyed) as server:
        yield keyed, server.url


def _gateway(tmp: Path, url: str, key: SecretStr | None, *, scrape: bool) -> tuple[Any, Any]:
    fleet = {"targets": [{"id": TARGET, "model": MODEL, "card": "h100", "url": url}]}
    (tmp / "fleet.yaml").write_text(yaml.safe_dump(fleet))
    cfg = load_config(None, {
        "fleet": tmp / "fleet.yaml", "db": str(tmp / "audit.db"),
        "telemetry": {"scrape": scrape, "scrape_interval_s": 0.1, "stale_after_s": 2.0},
        "notify_file": tmp / "incidents.jsonl",
    })  # fmt: skip
    service = build_service(cfg)
    app = create_app(
        service.runtime, admin_token=None, backend_key=key, readiness=service.readiness
    )
    return service, app


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records]


def test_with_the_key_every_backend_request_carries_it(
    backend: tuple[KeyedBackend, str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    keyed, url = backend
    keyed.seen.clear()
    caplog.set_level(logging.INFO)
    service, app = _gateway(tmp_path, url, SecretStr(KEY), scrape=True)
    try:
        with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=30) as c:
            answers = [
                c.post("/v1/chat/completions", json={**CHAT, "stream": stream})
                for stream in (False, True, False)
            ]
            status = c.get("/v1/status")
    finally:
        service.close()
    assert [a.status_code for a in answers] == [200, 200, 200], [a.text for a in answers]
    assert status.status_code == 200 and status.json()["targets"][0]["picture_age_s"] < 2.0
    completions = [s for s in keyed.seen if s[0] == "/v1/chat/completions"]
    scrapes = [s for s in keyed.seen if s[0] == "/metrics"]
    assert len(completions) == 3 and len(scrapes) >= 1
    assert {auth for _, auth in keyed.seen} == {f"Bearer {KEY}"}
    assert KEY not in status.text
    assert not [line for line in _said(caplog) if KEY in line]


def test_without_the_key_the_401_is_relayed_and_warned_once_per_target(
    backend: tuple[KeyedBackend, str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    keyed, url = backend
    keyed.seen.clear()
    service, app = _gateway(tmp_path, url, None, scrape=False)
    try:
        with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=30) as c:
            answers = [c.post("/v1/chat/completions", json=CHAT) for _ in range(3)]
    finally:
        service.close()
    assert [(a.status_code, a.json()) for a in answers] == [(401, {"error": "Unauthorized"})] * 3
    assert [auth for _, auth in keyed.seen] == [None, None, None]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    refused = [line for line in warned if "refused slaguard's credentials" in line]
    assert refused == [
        f"gateway: target {TARGET} answered HTTP 401: the backend refused slaguard's "
        "credentials (none sent); the client got the backend's answer; fix: set "
        "$SLAGUARD_BACKEND_API_KEY (or $SLAGUARD_BACKEND_API_KEY_FILE) to the backends' API key"
    ], warned


def test_a_wrong_key_is_warned_without_the_key(
    backend: tuple[KeyedBackend, str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    keyed, url = backend
    wrong = "sk-wrong-key-never-print-me"
    service, app = _gateway(tmp_path, url, SecretStr(wrong), scrape=False)
    try:
        with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=30) as c:
            answer = c.post("/v1/chat/completions", json=CHAT)
            status = c.get("/v1/status")
    finally:
        service.close()
    assert answer.status_code == 401 and keyed.seen[-1] == (
        "/v1/chat/completions",
        f"Bearer {wrong}",
    )
    refused = [line for line in _said(caplog) if "refused slaguard's credentials" in line]
    assert refused == [
        f"gateway: target {TARGET} answered HTTP 401: the backend refused slaguard's "
        "credentials ($SLAGUARD_BACKEND_API_KEY); the client got the backend's answer; fix: "
        "set it to the API key the backend expects"
    ]
    assert not [line for line in _said(caplog) if wrong in line]
    assert wrong not in answer.text and wrong not in status.text


def test_a_refusing_backend_is_warned_again_after_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    access = BackendAccess(None)
    for now_s, target in [(0.0, "a"), (1.0, "b"), (30.0, "a"), (59.9, "b"), (60.0, "a")]:
        access.refused(target, 403, now_s)
    assert [r.getMessage()[:42] for r in caplog.records] == [
        "gateway: target a answered HTTP 403: the b",
        "gateway: target b answered HTTP 403: the b",
        "gateway: target a answered HTTP 403: the b",
    ]


def test_the_scraper_sends_the_key_and_names_the_variable_when_refused(
    backend: tuple[KeyedBackend, str], caplog: pytest.LogCaptureFixture
) -> None:
    keyed, url = backend
    fleet = build_fleet(
        {"targets": [{"id": TARGET, "model": MODEL, "card": "h100", "url": url}]}, "test fleet"
    )

    async def scrape(key: SecretStr | None) -> MetricsScraper:
        async with aiohttp.ClientSession() as client:
            scraper = MetricsScraper(
                fleet, FleetState(fleet), client, lambda: 0.0, headers=BackendAccess(key).auth
            )
            await scraper.scrape_once()
        return scraper

    keyed.seen.clear()
    assert asyncio.run(scrape(SecretStr(KEY))).errors == 0
    assert asyncio.run(scrape(None)).errors == 1
    assert keyed.seen == [("/metrics", f"Bearer {KEY}"), ("/metrics", None)]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == [
        f"scrape of {TARGET} failed: {url}/metrics: ScrapeError: HTTP 401: the backend "
        "refused slaguard's credentials (none sent); fix: set $SLAGUARD_BACKEND_API_KEY (or "
        "$SLAGUARD_BACKEND_API_KEY_FILE) to the backends' API key"
    ]


@pytest.mark.parametrize("blank", ["", "  "])
def test_a_blank_key_or_an_empty_key_file_is_refused(blank: str, tmp_path: Path) -> None:
    cases: list[tuple[dict[str, str], str]] = [
        (
            {"SLAGUARD_BACKEND_API_KEY": blank},
            "SLAGUARD_BACKEND_API_KEY: set but blank; fix: set the API key the backends "
            "expect, or unset it to send the backends no credentials",
        ),
        (
            {"SLAGUARD_BACKEND_API_KEY_FILE": blank},
            "SLAGUARD_BACKEND_API_KEY_FILE: set but blank; fix: name the file holding the key, "
            "or unset it to send the backends no credentials",
        ),
    ]
    (tmp_path / "key").write_text(blank + "\n")
    cases.append((
        {"SLAGUARD_BACKEND_API_KEY_FILE": str(tmp_path / "key")},
        f"SLAGUARD_BACKEND_API_KEY_FILE: {tmp_path / 'key'} is empty; fix: write the key in it",
    ))  # fmt: skip
    for env, line in cases:
        with pytest.raises(ServiceConfigError) as info:
            backend_api_key(env)
        assert str(info.value) == line


def test_the_key_comes_from_the_variable_else_its_file(tmp_path: Path) -> None:
    (tmp_path / "key").write_text(f"{KEY}\n")
    from_file = backend_api_key({"SLAGUARD_BACKEND_API_KEY_FILE": str(tmp_path / "key")})
    assert from_file is not None and from_file.get_secret_value() == KEY
    short = backend_api_key({"SLAGUARD_BACKEND_API_KEY": "k1"})  # the backends' choice
    assert short is not None and short.get_secret_value() == "k1"
    assert backend_api_key({}) is None
    (tmp_path / "two").write_text(f"{KEY}\nsecond line\n")
    with pytest.raises(ServiceConfigError) as info:
        backend_api_key({"SLAGUARD_BACKEND_API_KEY_FILE": str(tmp_path / "two")})
    assert KEY not in str(info.value)
    assert str(info.value).startswith(
        "SLAGUARD_BACKEND_API_KEY: the key must be printable ASCII (no spaces); fix: use"
    )


def test_serve_refuses_a_blank_key_in_one_line(tmp_path: Path) -> None:
    db = tmp_path / "audit.db"
    env = {"SLAGUARD_BACKEND_API_KEY": " "}
    result = CliRunner().invoke(cli, ["serve", "--db", str(db), "--port", "0"], env=env)
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr == (
        "error: SLAGUARD_BACKEND_API_KEY: set but blank; fix: set the API key the backends "
        "expect, or unset it to send the backends no credentials\n"
    )
    assert not db.exists()
