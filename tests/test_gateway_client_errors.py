"""A backend refusing a request as the client's mistake (HTTP 400, e.g. over the model's
context by the backend's own tokenizer) is relayed and audited but judged by no SLA:
it was no card's slowness, so neither the SLA figures, the learner nor the guard count
it (a caller reporting one through `/v1/feedback`: tests/test_service_outcomes.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from gateway_stack import MODEL, SCRAPED, GatewayStack, gateway_stack
from helpers import stored_outcome

from slaguard.emulator.app import CHARS_PER_TOKEN
from slaguard.service.gateway_outcome import status_of_code
from slaguard.service.loops import ViolationWindow

CONTEXT = 131_072
GATEWAY_CHARS_PER_TOKEN = 64.0  # the gateway's estimate is 16x short of the backend's count
LONG = "a" * int(CONTEXT * CHARS_PER_TOKEN * 1.2)  # over the context at the backend only


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayStack]:
    config = {"telemetry": SCRAPED, "gateway": {"chars_per_token": GATEWAY_CHARS_PER_TOKEN}}
    with gateway_stack(
        tmp_path_factory.mktemp("gateway-client-errors"), {"h100": "h100"}, config
    ) as s:
        yield s


@pytest.mark.parametrize("stream", [False, True])
def test_a_backends_400_is_relayed_audited_and_judged_by_no_sla(
    stack: GatewayStack, stream: bool
) -> None:
    rt = stack.rt
    finished, violated = rt.finished_count, rt.violated_count
    learner_pending = rt.scheduler.learner.pending
    completed = _count(stack, "slaguard_requests_completed_total", arm="learned", priority="normal")
    client_errors = _count(stack, "slaguard_gateway_client_errors_total")
    body = {"model": MODEL, "messages": [{"role": "user", "content": LONG}], "max_tokens": 4}
    r = stack.client.post("/v1/chat/completions", json={**body, "stream": stream})
    assert r.status_code == 400, r.text
    assert "maximum context length is 131072 tokens" in r.text  # the backend's own words
    row = stored_outcome(rt.engine, r.headers["x-slaguard-decision-id"])
    assert row.outcome["status"] == "client_error"
    assert row.outcome["sla_met"] is None
    assert (rt.finished_count, rt.violated_count) == (finished, violated)
    assert rt.scheduler.learner.pending == learner_pending
    after = _count(stack, "slaguard_requests_completed_total", arm="learned", priority="normal")
    assert after == completed  # not in the SLA ratio's denominator either
    assert _count(stack, "slaguard_gateway_client_errors_total") == client_errors + 1
    assert rt.scheduler.state.picture(0).queue_depth == 0


def test_only_the_requests_own_refusals_are_client_errors() -> None:
    """Credentials refused, a backend timeout or load shedding are the fleet's misses."""
    got = {code: status_of_code(code) for code in (200, 400, 401, 403, 408, 413, 422, 429)}
    assert got == {
        200: "ok", 400: "client_error", 401: "failed", 403: "failed",
        408: "failed", 413: "client_error", 422: "client_error", 429: "failed",
    }  # fmt: skip


def test_a_client_error_leaves_the_corrections_violation_rate_alone(stack: GatewayStack) -> None:
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


def _count(stack: GatewayStack, name: str, **labels: str) -> float:
    return stack.sample(name, **labels) or 0.0
