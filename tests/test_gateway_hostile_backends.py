"""The gateway in front of a backend that misbehaves on purpose (`fakes.hostile_backend`):
a real service on 127.0.0.1, its fleet file pointing at the raw-socket backend."""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import yaml
from fakes.hostile_backend import HTML_PAGE, LONG_LINE_BYTES, HostileBackend, event
from gateway_stack import MODEL, SCRAPED
from helpers import stored_outcome

from slaguard.service.app import create_app
from slaguard.service.bootstrap import Service, build_service
from slaguard.service.config import load_config
from slaguard.service.local import ServerThread
from slaguard.service.sse_meter import MAX_LINE_BYTES, StreamMeter

FIRST_BYTE_TIMEOUT_S = 1.0
READ_TIMEOUT_S = 2.0


@dataclass
class Hostile:
    service: Service
    client: httpx.Client
    backend: HostileBackend

    def chat(self, mode: str, request_id: str, stream: bool = True) -> httpx.Response:
        body = {"model": MODEL, "messages": [{"role": "user", "content": mode}],
                "max_tokens": 4, "stream": stream}  # fmt: skip
        return self.client.post(
            "/v1/chat/completions", json=body, headers={"X-Request-Id": request_id}
        )

    def outcome(self, request_id: str) -> dict[str, Any]:
        found: dict[str, Any] = stored_outcome(self.service.engine, request_id).outcome
        return found


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    tmp = tmp_path_factory.mktemp("hostile")
    with HostileBackend() as backend:
        target = {"id": "h100-8b", "model": MODEL, "card": "h100", "url": backend.url}
        (tmp / "fleet.yaml").write_text(yaml.safe_dump({"targets": [target]}))
        config = {
            "fleet": tmp / "fleet.yaml",
            "db": str(tmp / "audit.db"),
            "notify_file": tmp / "incidents.jsonl",
            "telemetry": SCRAPED,
            "gateway": {
                "first_byte_timeout_s": FIRST_BYTE_TIMEOUT_S,
                "read_timeout_s": READ_TIMEOUT_S,
                "eject_after_failures": 0,
            },
        }
        service = build_service(load_config(None, config))
        try:
            app = create_app(service.runtime, admin_token=None, readiness=service.readiness)
            with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=60) as c:
                yield Hostile(service, c, backend)
        finally:
            service.close()


def test_a_line_without_end_holds_at_most_max_line_bytes() -> None:
    """The meter held a line until its newline came, re-copying it at every chunk: a
    backend's endless line grew the gateway's memory without bound, quadratic in CPU."""
    meter = StreamMeter(time.perf_counter())
    piece = b"x" * (16 << 10)
    tracemalloc.start()
    try:
        meter.feed(b"data: ")
        for _ in range((8 << 20) // len(piece)):  # an 8 MiB line
            meter.feed(piece)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert meter.held <= MAX_LINE_BYTES
    assert peak < 2 * MAX_LINE_BYTES, f"{peak} bytes held for one line"
    # the overlong line is skipped, whole; the events after it are read
    ok = event("hi")
    meter.feed(b'{"choices": [{"delta": {"content": "no"}}]}\n\n' + ok[:9])
    meter.feed(ok[9:])
    assert meter.events == 1 and meter.first_token_at is not None and meter.held == 0


def test_a_stream_with_a_huge_line_is_relayed_whole_and_metered(hostile: Hostile) -> None:
    r = hostile.chat("long_line", "long-line")
    assert r.status_code == 200
    assert len(r.content) == LONG_LINE_BYTES + len(b"\n\n" + event("tok") + b"data: [DONE]\n\n")
    out = hostile.outcome("long-line")
    assert out["status"] == "ok" and out["ttft_s"] is not None and out["ttft_s"] <= out["e2e_s"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_backends_429_keeps_its_retry_after(hostile: Hostile, stream: bool) -> None:
    """The backend's headers were dropped, its `Retry-After` too: OpenAI's SDKs then
    retried a shedding backend on their own short backoff instead of when it asked."""
    r = hostile.chat("too_many", f"too-many-{stream}", stream=stream)
    assert r.status_code == 429 and r.json()["error"]["message"] == "slow down"
    assert r.headers.get("retry-after") == "7"
    assert hostile.outcome(f"too-many-{stream}")["status"] == "failed"


@pytest.mark.parametrize("stream", [False, True])
def test_a_backend_answering_405_is_the_fleets_failure(hostile: Hostile, stream: bool) -> None:
    """A target url pointing at a server that takes no POST there (not an OpenAI-style
    backend, a wrong path) answered 405 to every request: recorded `client_error`, judged
    by no SLA, so no SLA figure, alert, retry or ejection ever saw the broken target."""
    r = hostile.chat("not_allowed", f"not-allowed-{stream}", stream=stream)
    assert r.status_code == 502, r.text
    assert (
        "h100-8b: HTTP 405: the backend takes no POST on this path; check its url"
        in (r.json()["error"]["message"])
    )
    out = hostile.outcome(f"not-allowed-{stream}")
    assert (out["status"], out["sla_met"]) == ("failed", False)


@pytest.mark.parametrize(
    ("stream", "why"),
    [
        (True, "no first byte within 1 s (gateway.first_byte_timeout_s)"),
        (False, "no answer within 2 s (gateway.read_timeout_s)"),
    ],
)
def test_a_backend_that_never_answers_is_named_with_the_limit_it_ran_into(
    hostile: Hostile, stream: bool, why: str
) -> None:
    """The 502, the audit note and the log said only `TimeoutError`: not which limit, nor
    which setting to look at."""
    rid = f"never-{stream}"
    began = time.monotonic()
    r = hostile.chat("never", rid, stream=stream)
    waited = time.monotonic() - began
    assert r.status_code == 502
    assert r.json()["error"]["message"] == (
        f"backend failed before answering: h100-8b: TimeoutError: {why}"
    )
    limit = FIRST_BYTE_TIMEOUT_S if stream else READ_TIMEOUT_S
    assert limit <= waited < limit + 1.5
    found = stored_outcome(hostile.service.engine, rid)
    assert found.outcome["status"] == "failed" and found.outcome["sla_met"] is False
    assert found.other["notes"] == [
        f"gateway: h100-8b failed before the first byte (TimeoutError: {why})"
    ]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "usage",
    [
        '"garbage"',
        "[1, 2]",
        '{"prompt_tokens": 3, "completion_tokens": "abc"}',
        '{"prompt_tokens": 3, "completion_tokens": -5}',
        '{"prompt_tokens": [1]}',
        '{"prompt_tokens": 3, "completion_tokens": 1e30}',
    ],
)
def test_a_backends_garbled_usage_loses_no_answer(
    hostile: Hostile, stream: bool, usage: str
) -> None:
    """A `usage` that was not counts crashed the outcome's record: a whole answer became a
    500, a whole stream was cut before its end, and the metrics and the guard never heard
    of the request. Its counts are taken for unknown instead."""
    rid = f"usage-{stream}-{hash(usage) & 0xFFFF}"
    generated = _generated(hostile)
    r = hostile.chat(f"usage {usage}", rid, stream=stream)
    assert r.status_code == 200
    expected = usage.encode()
    assert expected in r.content and (not stream or r.content.endswith(b"data: [DONE]\n\n"))
    out = hostile.outcome(rid)
    assert out["status"] == "ok" and out["sla_met"] is True
    # a stream counts its own token events when the backend's count is unreadable
    assert _generated(hostile) == generated + (1 if stream else 0)


def _generated(hostile: Hostile) -> float:
    """Generated tokens counted so far, over every target and arm."""
    registry = hostile.service.runtime.metrics.registry
    return sum(
        s.value
        for family in registry.collect()
        for s in family.samples
        if s.name == "slaguard_tokens_total" and s.labels.get("kind") == "generated"
    )


def test_a_whole_answer_that_is_no_json_object_is_the_backends_failure(hostile: Hostile) -> None:
    """A 200 carrying a proxy's HTML page was recorded `ok`, the SLA met: the figures said
    all was well while every client got a page it could not read."""
    r = hostile.chat("html", "html-page", stream=False)
    assert r.status_code == 200 and r.content == HTML_PAGE  # relayed as it came
    found = stored_outcome(hostile.service.engine, "html-page")
    assert found.outcome["status"] == "failed" and found.outcome["sla_met"] is False
    said = f"answered HTTP 200 with no JSON object (text/html, {len(HTML_PAGE)} bytes)"
    assert found.other["notes"] == [f"gateway: h100-8b {said}"]
