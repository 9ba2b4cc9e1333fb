"""A real service with its gateway in front of real emulated backends on 127.0.0.1: the
stack the gateway tests share (one emulator per target, a SQLite audit DB, incidents to
a file)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import yaml
from fastapi import FastAPI

from slaguard.emulator.app import create_emulator_app
from slaguard.fleet import build_fleet
from slaguard.service.app import create_app
from slaguard.service.bootstrap import Service, build_service
from slaguard.service.config import load_config
from slaguard.service.local import ServerThread
from slaguard.service.runtime import ServiceRuntime

MODEL = "llama3.1-8b"
SCRAPED = {"scrape_interval_s": 0.1, "stale_after_s": 2.0}
"""Telemetry that keeps every picture fresh (unscraped, each goes stale after a second)."""
_S = TypeVar("_S", bound="GatewayStack")


@dataclass
class GatewayStack:
    service: Service
    client: httpx.Client
    emulators: dict[str, str]
    """Target id -> its emulator's URL."""
    app: FastAPI

    @property
    def rt(self) -> ServiceRuntime:
        return self.service.runtime

    def fault(self, target: str, path: str, body: dict[str, Any] | None = None) -> None:
        """`POST /admin/<path>` on one target's emulator (`slowdown`, `fail`, `recover`)."""
        r = self.client.post(f"{self.emulators[target]}/admin/{path}", json=body or {})
        assert r.status_code == 200, r.text

    def sample(self, name: str, **labels: str) -> float | None:
        """A sample of the service's registry (None: no such series)."""
        return self.rt.metrics.registry.get_sample_value(name, labels)


@contextmanager
def gateway_stack(
    tmp: Path,
    cards: Mapping[str, str],
    config: Mapping[str, Any] | None = None,
    *,
    model: str = MODEL,
    speedup: float = 4.0,
    kind: type[_S] = GatewayStack,  # type: ignore[assignment]
    clock: Callable[[], float] = time.time,
) -> Iterator[_S]:
    """`cards`: target id -> card type, one emulated replica of `model` each; `config`:
    serve settings on top of the fleet, the database and the notify file; `kind`: a
    subclass carrying a test file's own helpers; `clock`: the service's."""
    with ExitStack() as stack:
        urls = {}
        for target_id, card in cards.items():
            spec = {"id": target_id, "model": model, "card": card}
            target = build_fleet({"targets": [spec]}).targets[0]
            server = ServerThread(create_emulator_app(target, speedup=speedup)).start()
            stack.callback(server.stop)
            urls[target_id] = server.url
        fleet = [{"id": t, "model": model, "card": c, "url": urls[t]} for t, c in cards.items()]
        (tmp / "fleet.yaml").write_text(yaml.safe_dump({"targets": fleet}))
        base = {"fleet": tmp / "fleet.yaml", "db": str(tmp / "audit.db"),
                "notify_file": tmp / "incidents.jsonl"}  # fmt: skip
        service = build_service(load_config(None, {**base, **(config or {})}), clock=clock)
        stack.callback(service.close)
        app = create_app(service.runtime, admin_token=None, readiness=service.readiness)
        server = stack.enter_context(ServerThread(app))
        client = stack.enter_context(httpx.Client(base_url=server.url, timeout=30))
        yield kind(service, client, urls, app)
