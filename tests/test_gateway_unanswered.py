"""Requests the gateway routed but did not answer: its error answers name the decision
the audit DB holds for them (a client that sent no `X-Request-Id` can still look it up),
and a client that leaves before the first byte stops the backends' work at once."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from gateway_stack import MODEL, GatewayStack, gateway_stack
from helpers import stored_outcome

CARDS = ("h100", "l40s")
FIRST_BYTE_TIMEOUT_S = 2.0
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


class Gateway(GatewayStack):
    def fault_all(self, path: str, body: dict[str, Any] | None = None) -> None:
        for target in self.emulators:
            self.fault(target, path, body)

    def stored(self, decision_id: str) -> Any:
        return stored_outcome(self.service.engine, decision_id)

    def stored_status(self, decision_id: str) -> str:
        return str(self.stored(decision_id).outcome["status"])


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("gateway-errors")
    config = {
        # unscraped (the tests set health themselves), and fresh for the module's run
        "telemetry": {"scrape": False, "stale_after_s": 300},
        "gateway": {"first_byte_timeout_s": FIRST_BYTE_TIMEOUT_S},
    }
    with gateway_stack(tmp, {f"{c}-8b": c for c in CARDS}, config, kind=Gateway) as gateway:
        yield gateway


@pytest.mark.parametrize("stream", [False, True])
def test_every_candidate_failing_names_its_decision(gateway: Gateway, stream: bool) -> None:
    gateway.fault_all("fail", {"mode": "refuse"})
    try:
        r = gateway.client.post("/v1/chat/completions", json={**CHAT, "stream": stream})
    finally:
        gateway.fault_all("recover")
    assert r.status_code == 502
    assert gateway.stored_status(r.headers["x-slaguard-decision-id"]) == "failed"


def test_no_capacity_names_its_decision(gateway: Gateway) -> None:
    rt = gateway.service.runtime
    for t in rt.fleet:
        rt.scheduler.state.set_healthy(t.index, False)
    try:
        r = gateway.client.post("/v1/chat/completions", json=CHAT)
    finally:
        for t in rt.fleet:
            rt.scheduler.state.set_healthy(t.index, True)
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
    assert "x-slaguard-target" not in r.headers
    assert gateway.stored_status(r.headers["x-slaguard-decision-id"]) == "rejected"


def test_a_client_leaving_a_stream_before_its_first_byte_is_recorded_when_it_leaves(
    gateway: Gateway,
) -> None:
    """It was waited for up to `first_byte_timeout_s`, then retried on a second target
    for as long again: two backends busy for a client long gone, and two upstream
    failures counted against them."""
    rt = gateway.service.runtime
    retries = rt.gateway_metrics.retries._value.get()
    body = json.dumps({**CHAT, "stream": True}).encode()
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"X-Request-Id: leaves-early\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    gateway.fault_all("slowdown", {"factor": 1000})  # no first token for seconds
    try:
        host, port = gateway.client.base_url.host, gateway.client.base_url.port
        with socket.create_connection((host, port or 80)) as conn:
            conn.sendall(head.encode() + body)
            deadline = time.monotonic() + 10.0
            while "leaves-early" not in rt.pending and time.monotonic() < deadline:
                time.sleep(0.01)
            assert "leaves-early" in rt.pending
        found = gateway.stored("leaves-early")
    finally:
        gateway.fault_all("recover")
    assert found.outcome["status"] == "cancelled"
    assert found.outcome["e2e_s"] < FIRST_BYTE_TIMEOUT_S
    assert found.outcome["sla_met"] is None  # left before the 4 s deadline: no verdict
    assert rt.gateway_metrics.retries._value.get() == retries
    assert found.other.get("notes", []) == []


def test_a_retried_stream_feeds_the_guard_the_answering_targets_own_ttft(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first target stalled to `first_byte_timeout_s` and the next one answered: the
    guard was fed the client's TTFT (the stall included) as the answering target's, so a
    stalled card could get a healthy one demoted. The stall is the stalled target's TTFT
    (at least the time waited); the client's TTFT stays the audited one."""
    rt = gateway.service.runtime
    heard: list[tuple[str, str, float | None]] = []
    first_token, on_outcome = rt.modes.on_first_token, rt.modes.on_outcome

    def hear_first(sample: Any) -> None:
        heard.append(("first", sample.target_id, sample.ttft_s))
        first_token(sample)

    def hear_outcome(sample: Any) -> None:
        heard.append(("outcome", sample.target_id, sample.ttft_s))
        on_outcome(sample)

    monkeypatch.setattr(rt.modes, "on_first_token", hear_first)
    monkeypatch.setattr(rt.modes, "on_outcome", hear_outcome)
    stalled = gateway.emulators[f"{CARDS[0]}-8b"]
    assert gateway.client.post(f"{stalled}/admin/slowdown", json={"factor": 1000}).is_success
    try:
        for n in range(6):  # until the router picks the stalled target first
            heard.clear()
            rid = f"retried-{n}"
            r = gateway.client.post(
                "/v1/chat/completions", json={**CHAT, "stream": True}, headers={"X-Request-Id": rid}
            )
            assert r.status_code == 200, r.text
            found = gateway.stored(rid)
            if any("failed before the first byte" in x for x in found.other.get("notes", [])):
                break
        else:
            raise AssertionError("the stalled target was never tried first")
    finally:
        gateway.client.post(f"{stalled}/admin/recover", json={})
    answering = r.headers["x-slaguard-target"]
    staller = next(t.id for t in rt.fleet if t.id != answering)
    assert found.outcome["ttft_s"] >= FIRST_BYTE_TIMEOUT_S  # what the client waited
    assert [(kind, target) for kind, target, _ in heard] == [
        ("first", staller), ("first", answering), ("outcome", answering)
    ]  # fmt: skip
    # the stall is the stalled target's (at least the time waited), not the answering one's
    assert heard[0][2] is not None and heard[0][2] >= FIRST_BYTE_TIMEOUT_S * 0.99
    assert all(ttft is not None and ttft < FIRST_BYTE_TIMEOUT_S / 2 for _, _, ttft in heard[1:])
