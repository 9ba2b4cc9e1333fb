"""The gateway end to end: real emulators and a real service on 127.0.0.1.

Covers pass-through streaming with TTFT measured and fed back, the retry-before-first-byte
rule (and never after it), failures of every candidate, bad input, no capacity, and the
`/metrics` scraper keeping the router's picture fresh.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from gateway_stack import MODEL, SCRAPED, GatewayStack, gateway_stack
from helpers import stored_outcome, wait_for

from slaguard.audit.service import UnknownRequestError, explain

CARDS = ("h100", "l40s", "a100")


class Stack(GatewayStack):
    def retries(self) -> float:
        return self.service.runtime.gateway_metrics.retries._value.get()

    def outcome(self, decision_id: str, timeout_s: float = 10.0) -> Any:
        return stored_outcome(self.service.engine, decision_id, timeout_s)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    config = {"telemetry": SCRAPED}
    cards = {f"{c}-8b": c for c in CARDS}
    with gateway_stack(tmp_path_factory.mktemp("gateway"), cards, config, kind=Stack) as stack:
        yield stack


def _chat(tokens: int = 4, stream: bool = True, text: str = "hello there") -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": tokens,
        "stream": stream,
        "stream_options": {"include_usage": True},
    }


def test_scraper_keeps_the_picture_fresh(stack: Stack) -> None:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        rows = stack.client.get("/v1/status").json()["targets"]
        if all(r["picture_age_s"] < 0.5 for r in rows):
            return
        time.sleep(0.05)
    raise AssertionError(f"pictures not refreshed: {rows}")


def test_a_scraped_backend_cannot_be_pushed_out_of_routing(stack: Stack) -> None:
    """Two unauthenticated `healthy: false` pushes drained the whole fleet until someone
    pushed it back, while the scraper read every backend fine."""
    for target in stack.emulators:
        r = stack.client.post("/v1/telemetry", json={"target": target, "healthy": False})
        assert r.status_code == 200
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        rows = stack.client.get("/v1/status").json()["targets"]
        if all(r["healthy"] for r in rows):
            break
        time.sleep(0.05)
    assert all(r["healthy"] for r in rows), rows
    body = {"model": MODEL, "prompt_tokens": 10, "max_new_tokens": 4}
    routed = stack.client.post("/v1/route", json=body)
    assert routed.json()["target"] is not None


def test_stream_passes_through_and_is_measured(stack: Stack) -> None:
    r = stack.client.post("/v1/chat/completions", json=_chat(6), headers={"X-Request-Id": "gw-1"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["x-slaguard-decision-id"] == "gw-1"
    events = [e for e in r.text.split("\n\n") if e.startswith("data: {")]
    assert len(events) == 7 and r.text.endswith("data: [DONE]\n\n")
    found = stack.outcome("gw-1")
    out = found.outcome
    assert out["status"] == "ok" and out["sla_met"] is True
    assert 0 < out["ttft_s"] < out["e2e_s"] and out["tpot_s"] > 0
    assert found.decision["target_id"] == r.headers["x-slaguard-target"]
    metrics = stack.client.get("/metrics").text
    target = r.headers["x-slaguard-target"]
    line = next(x for x in metrics.splitlines() if x.startswith("slaguard_ttft_seconds_count{"))
    assert line.endswith("1.0") or target not in line
    dup = stack.client.post("/v1/chat/completions", json=_chat(), headers={"X-Request-Id": "gw-1"})
    assert dup.status_code == 409 and dup.json()["error"]["message"].startswith("X-Request-Id")


def _metric_total(stack: Stack, name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels`."""
    registry = stack.service.runtime.metrics.registry
    return sum(
        s.value
        for family in registry.collect()
        for s in family.samples
        if s.name == name and labels.items() <= s.labels.items()
    )


def test_whole_answer_is_returned_unchanged(stack: Stack) -> None:
    completed = _metric_total(stack, "slaguard_requests_completed_total")
    generated = _metric_total(stack, "slaguard_tokens_total", kind="generated")
    r = stack.client.post("/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 3})
    assert r.status_code == 200
    assert r.json()["usage"]["completion_tokens"] == 3 and r.json()["object"] == "text_completion"
    out = stack.outcome(r.headers["x-slaguard-decision-id"]).outcome
    assert out["ttft_s"] is None and out["e2e_s"] > 0 and out["status"] == "ok"
    # Counted in the SLA ratio's denominator and the token counters like a streamed one.
    assert _metric_total(stack, "slaguard_requests_completed_total") == completed + 1
    assert _metric_total(stack, "slaguard_tokens_total", kind="generated") == generated + 3


def test_client_leaving_a_whole_answer_is_recorded_cancelled(stack: Stack) -> None:
    violations = _metric_total(stack, "slaguard_sla_violations_total")
    started = time.monotonic()
    body = {"model": MODEL, "prompt": "hi", "max_tokens": 3000}
    client = httpx.Client(base_url=str(stack.client.base_url), timeout=0.5)
    with client, pytest.raises(httpx.ReadTimeout):
        client.post("/v1/completions", json=body, headers={"X-Request-Id": "left-2"})
    left_after = time.monotonic() - started
    out = stack.outcome("left-2").outcome
    # Recorded when the client left, not when the 3,000-token answer would have ended.
    assert out["status"] == "cancelled" and out["e2e_s"] < left_after + 1.0
    # It left 0.5 s in, before its 4 s deadline and any token: nobody can say, no miss.
    assert out["sla_met"] is None
    assert _metric_total(stack, "slaguard_sla_violations_total") == violations


def test_failure_before_the_first_byte_is_retried_once(stack: Stack) -> None:
    stack.fault("l40s-8b", "fail", {"mode": "refuse"})
    try:
        before = stack.retries()
        served = []
        for i in range(3):  # round-robin: one of the three lands on the refusing target
            r = stack.client.post(
                "/v1/chat/completions", json=_chat(), headers={"X-Request-Id": f"retry-{i}"}
            )
            assert r.status_code == 200, r.text
            served.append(r.headers["x-slaguard-target"])
        assert "l40s-8b" not in served
        assert stack.retries() == before + 1
        notes = [
            n
            for i in range(3)
            for n in stack.outcome(f"retry-{i}").other.get("notes", [])
            if "before the first byte" in n
        ]
        assert len(notes) == 1 and notes[0].startswith("gateway: l40s-8b failed")
    finally:
        stack.fault("l40s-8b", "recover")


def test_failure_after_the_first_byte_is_never_retried(stack: Stack) -> None:
    stack.fault("a100-8b", "fail", {"mode": "break"})
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    uvicorn_log = logging.getLogger("uvicorn")
    uvicorn_log.addHandler(handler)
    try:
        before = stack.retries()
        broken = 0
        for i in range(3):
            with stack.client.stream(
                "POST", "/v1/chat/completions", json=_chat(5), headers={"X-Request-Id": f"brk-{i}"}
            ) as r:
                target = r.headers["x-slaguard-target"]
                cut = False
                try:
                    body = b"".join(r.iter_raw())
                except httpx.RemoteProtocolError:
                    cut = True
            if target == "a100-8b":
                broken += 1
                # The client's connection is cut, not ended as if the answer were whole.
                assert cut
                out = stack.outcome(f"brk-{i}").outcome
                assert out["status"] == "failed" and out["ttft_s"] is not None
            else:
                assert not cut and body.endswith(b"data: [DONE]\n\n")
        assert broken == 1 and stack.retries() == before
        # the gateway's WARNING says it; uvicorn's ERROR "returned without completing
        # response" on top of it looked like a crash to log-based alerting (the emulated
        # backend's own ERROR for the break it makes is not the gateway's)
        errors = [r.getMessage() for r in records if r.levelno >= logging.ERROR]
        assert [e for e in errors if "without completing response" in e] == []
        assert errors == ["Exception in ASGI application\n"]
    finally:
        uvicorn_log.removeHandler(handler)
        stack.fault("a100-8b", "recover")


def test_every_candidate_failing_is_a_502(stack: Stack) -> None:
    for t in stack.emulators:
        stack.fault(t, "fail", {"mode": "refuse"})
    try:
        r = stack.client.post("/v1/chat/completions", json=_chat())
        assert r.status_code == 502
        assert r.json()["error"]["message"].count("HTTP 503") == 2  # the chosen one, one retry
    finally:
        for t in stack.emulators:
            stack.fault(t, "recover")


@pytest.mark.parametrize(
    ("body", "headers", "field"),
    [
        ({**_chat(), "model": "gpt-9"}, {}, "model"),
        ({"model": MODEL}, {}, "messages"),
        ({**_chat(), "max_tokens": 0}, {}, "max_tokens"),
        ({**_chat(), "max_tokens": "5"}, {}, "max_tokens"),
        (_chat(), {"X-Slaguard-Priority": "vip"}, "X-Slaguard-Priority"),
        # header names as documented in every error (the lower-case ones came through)
        (_chat(), {"x-slaguard-deadline-s": "-1"}, "X-Slaguard-Deadline-S: "),
        (_chat(), {"X-Request-Id": "a b"}, "X-Request-Id: "),
        (_chat(), {"X-Slaguard-Prefix-Id": ""}, "X-Slaguard-Prefix-Id: "),
        (_chat(), {"X-Slaguard-Prefix-Id": "a\tb"}, "X-Slaguard-Prefix-Id: contains a control"),
    ],
)
def test_bad_gateway_input(
    stack: Stack, body: dict[str, Any], headers: dict[str, str], field: str
) -> None:
    r = stack.client.post("/v1/chat/completions", json=body, headers=headers)
    assert r.status_code == 422 and r.json()["error"]["message"].startswith(field), r.json()


def test_no_capacity_is_a_503(stack: Stack, tmp_path: Path) -> None:
    rt = stack.service.runtime
    scraper = stack.app.state.scraper
    scraped, scraper.targets = scraper.targets, []  # a scrape would set them healthy again
    started = scraper.rounds  # a round already under way still scrapes the old list
    deadline = time.monotonic() + 10.0
    while scraper.rounds == started and time.monotonic() < deadline:
        time.sleep(0.01)  # rounds run one after the other: the next one starts empty
    assert scraper.rounds > started
    for t in rt.fleet:
        rt.scheduler.state.set_healthy(t.index, False)
    try:
        r = stack.client.post("/v1/chat/completions", json=_chat())
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert "no capacity" in r.json()["error"]["message"]
    finally:
        scraper.targets = scraped
        for t in rt.fleet:
            rt.scheduler.state.set_healthy(t.index, True)


def test_client_leaving_mid_stream_is_recorded_cancelled(stack: Stack) -> None:
    started = time.monotonic()
    with stack.client.stream(
        "POST", "/v1/chat/completions", json=_chat(3000), headers={"X-Request-Id": "left-1"}
    ) as r:
        assert r.status_code == 200
        first = next(r.iter_raw())
        assert first.startswith(b"data: ")
    left_after = time.monotonic() - started
    out = stack.outcome("left-1").outcome
    assert out["status"] == "cancelled" and out["ttft_s"] is not None
    assert out["sla_met"] is (out["ttft_s"] <= 4.0)  # judged on its first token
    # The relay stopped when the client left, not when the 3,000-token answer ended.
    assert out["e2e_s"] < left_after + 1.0
    assert stack.service.runtime.pending["left-1"].done


def test_the_guard_hears_the_first_token_while_the_answer_streams(stack: Stack) -> None:
    """The TTFT detectors get a streamed answer's TTFT at its first token (a slow card's
    answers end several times later than they start), and its completion does not count
    it a second time."""
    replica = stack.service.runtime.modes.replica  # type: ignore[attr-defined]
    counts = replica.guard.ttft._hist.count
    queued = replica.stats.evaluations + 2  # what earlier tests queued is drained by then
    wait_for("earlier samples drained", lambda: replica.stats.evaluations >= queued)
    before = {t.id: counts(t.id) for t in stack.service.runtime.fleet}
    for emulator in stack.emulators:
        stack.fault(emulator, "slowdown", {"factor": 100})
    try:
        with stack.client.stream(
            "POST", "/v1/chat/completions", json=_chat(3000), headers={"X-Request-Id": "first-1"}
        ) as r:
            target = r.headers["x-slaguard-target"]
            chunks = r.iter_raw()  # kept: a dropped iterator closes the stream
            assert next(chunks).startswith(b"data: ")
            wait_for("the TTFT in the detector", lambda: counts(target) > before[target])
            assert counts(target) == before[target] + 1
            assert not stack.service.runtime.pending["first-1"].done, "still streaming"
    finally:
        for emulator in stack.emulators:
            stack.fault(emulator, "recover")
    assert stack.outcome("first-1").outcome["ttft_s"] is not None
    evaluations = replica.stats.evaluations
    wait_for("two more evaluations", lambda: replica.stats.evaluations >= evaluations + 2)
    assert counts(target) == before[target] + 1, "the completion did not count it again"


def test_long_and_token_id_prompts_pass_and_an_impossible_one_is_a_422(stack: Stack) -> None:
    """A completions prompt over 10,000 characters and a token-id prompt were 422s; a
    prompt past every target's context was a 503 with Retry-After (retried for ever) and
    counted as an SLA miss."""
    long_prompt = {"model": MODEL, "prompt": "hello " * 8000, "max_tokens": 4}
    assert stack.client.post("/v1/completions", json=long_prompt).status_code == 200
    ids = {"model": MODEL, "prompt": [1, 2, 3, 4, 5], "max_tokens": 4}
    sent = stack.client.post("/v1/completions", json=ids, headers={"X-Request-Id": "ids-1"})
    assert sent.status_code == 200
    assert stack.outcome("ids-1").decision["prompt_tokens"] == 5, "ids counted as they are"
    text = {"model": MODEL, "prompt": "12345678", "max_tokens": 4}
    sent = stack.client.post("/v1/completions", json=text, headers={"X-Request-Id": "text-1"})
    assert stack.outcome("text-1").decision["prompt_tokens"] == 2, "8 characters at 4 a token"
    completed = stack.service.runtime.finished_count
    too_long = _chat(4, text="x" * 600_000)
    r = stack.client.post("/v1/chat/completions", json=too_long, headers={"X-Request-Id": "nf-1"})
    assert r.status_code == 422 and "retry-after" not in r.headers
    assert r.json()["error"]["message"] == (
        "messages: the prompt (~150000 tokens at 4 characters a token) and 4 new tokens make "
        "~150004, above 131072, the most any llama3.1-8b target takes (its context window); "
        "fix: send a shorter one or fewer max_tokens"
    )
    assert stack.service.runtime.finished_count == completed
    # refused as a client error: no anonymous no_capacity row in the audit either
    writer = stack.service.runtime.writer
    assert writer is not None and writer.wait_flushed(10.0)
    with pytest.raises(UnknownRequestError):
        explain(stack.service.engine, "nf-1")
