"""A backend refusing a request as the client's mistake (HTTP 400, e.g. over the model's
context by the backend's own tokenizer) is relayed and audited but judged by no SLA:
it was no card's slowness, so neither the SLA figures, the learner nor the guard count
it (a caller reporting one through `/v1/feedback`: tests/test_service_outcomes.py)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml
from helpers import stored_outcome

from slaguard.emulator.app import CHARS_PER_TOKEN, create_emulator_app
from slaguard.fleet import build_fleet
from slaguard.service.app import create_app
from slaguard.service.bootstrap import Service, build_service
from slaguard.service.config import load_config
from slaguard.service.gateway import status_of_code
from slaguard.service.local import ServerThread
from slaguard.service.loops import ViolationWindow
from slaguard.service.runtime import ServiceRuntime

MODEL = "llama3.1-8b"
CONTEXT = 131_072
GATEWAY_CHARS_PER_TOKEN = 64.0  # the gateway's estimate is 16x short of the backend's count
LONG = "a" * int(CONTEXT * CHARS_PER_TOKEN * 1.2)  # over the context at the backend only


@dataclass
class Stack:
    service: Service
    client: httpx.Client

    @property
    def rt(self) -> ServiceRuntime:
        return self.service.runtime

    def sample(self, name: str, **labels: str) -> float:
        value = self.rt.metrics.registry.get_sample_value(name, labels)
        return value or 0.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp: Path = tmp_path_factory.mktemp("gateway-client-errors")
    target = build_fleet({"targets": [{"id": "h100", "model": MODEL, "card": "h100"}]})
    emulator = ServerThread(create_emulator_app(target.targets[0], speedup=4.0)).start()
    fleet = {"targets": [{"id": "h100", "model": MODEL, "card": "h100", "url": emulator.url}]}
    (tmp / "fleet.yaml").write_text(yaml.safe_dump(fleet))
    cfg = load_config(None, {
        "fleet": tmp / "fleet.yaml", "db": str(tmp / "audit.db"),
        # scraped: without, every picture is stale a second after the start (a 503)
        "telemetry": {"scrape_interval_s": 0.1, "stale_after_s": 2.0},
        "notify_file": tmp / "incidents.jsonl",
        "gateway": {"chars_per_token": GATEWAY_CHARS_PER_TOKEN},
    })  # fmt: skip
    service = build_service(cfg)
    app = create_app(service.runtime, admin_token=None, readiness=service.readiness)
    try:
        with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=60) as c:
            yield Stack(service, c)
    finally:
        service.close()
        emulator.stop()


@pytest.mark.parametrize("stream", [False, True])
def test_a_backends_400_is_relayed_audited_and_judged_by_no_sla(stack: Stack, stream: bool) -> None:
    rt = stack.rt
    finished, violated = rt.finished_count, rt.violated_count
    learner_pending = rt.scheduler.learner.pending
    completed = stack.sample("slaguard_requests_completed_total", arm="learned", priority="normal")
    client_errors = stack.sample("slaguard_gateway_client_errors_total")
    body = {"model": MODEL, "messages": [{"role": "user", "content": LONG}], "max_tokens": 4}
    r = stack.client.post("/v1/chat/completions", json={**body, "stream": stream})
    assert r.status_code == 400, r.text
    assert "maximum context length is 131072 tokens" in r.text  # the backend's own words
    row = stored_outcome(rt.engine, r.headers["x-slaguard-decision-id"])
    assert row.outcome["status"] == "client_error"
    assert row.outcome["sla_met"] is None
    assert (rt.finished_count, rt.violated_count) == (finished, violated)
    assert rt.scheduler.learner.pending == learner_pending
    after = stack.sample("slaguard_requests_completed_total", arm="learned", priority="normal")
    assert after == completed  # not in the SLA ratio's denominator either
    assert stack.sample("slaguard_gateway_client_errors_total") == client_errors + 1
    assert rt.scheduler.state.picture(0).queue_depth == 0


def test_only_the_requests_own_refusals_are_client_errors() -> None:
    """Credentials refused, a backend timeout or load shedding are the fleet's misses."""
    got = {code: status_of_code(code) for code in (200, 400, 401, 403, 408, 413, 422, 429)}
    assert got == {
        200: "ok", 400: "client_error", 401: "failed", 403: "failed",
        408: "failed", 413: "client_error", 422: "client_error", 429: "failed",
    }  # fmt: skip


def test_a_client_error_leaves_the_corrections_violation_rate_alone(stack: Stack) -> None:
    """The global correction's SLA violation rate (violated / finished over its period)
    counted a client error as a finished request met: a client sending prompts over the
    context diluted the fleet's misses and the correction eased off."""
    rt = stack.rt
    window = ViolationWindow(rate=0.4)
    before = window.step(rt.finished_count, rt.violated_count)  # the earlier tests' requests
    assert before > 0.1
    body = {"model": MODEL, "messages": [{"role": "user", "content": LONG}], "max_tokens": 4}
    for _ in range(3):
        r = stack.client.post("/v1/chat/completions", json=body)
        assert r.status_code == 400, r.text
    assert window.step(rt.finished_count, rt.violated_count) == pytest.approx(before)
