"""A gateway attempt that fails before the first byte is that target's failure: the
learner learns it against the target the learned router chose, the guard hears a stall
as a TTFT of at least the time waited, and the failure is counted per target. Before,
a retry answered by the next target was learned with the first target's score
components, and a stalled target gave the guard nothing, so it was never demoted and
every request routed to it waited `first_byte_timeout_s` before its retry."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from gateway_stack import MODEL, SCRAPED, GatewayStack, gateway_stack
from helpers import stored_outcome, wait_for

from slaguard.service.upstream import AttemptFailures

CARDS = ("h100", "l40s")
FIRST_BYTE_TIMEOUT_S = 1.0


class Stack(GatewayStack):
    def failures(self, target: str) -> float:
        got = self.sample(
            "slaguard_gateway_upstream_failures_total", stage="before_first_byte", target=target
        )
        assert got is not None, "every target's series exists from the start"
        return got

    def chat(self, request_id: str, stream: bool = True) -> httpx.Response:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 3, "stream": stream}  # fmt: skip
        return self.client.post(
            "/v1/chat/completions", json=body, headers={"X-Request-Id": request_id}
        )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    config = {
        "telemetry": SCRAPED,
        "gateway": {"first_byte_timeout_s": FIRST_BYTE_TIMEOUT_S},
        "rollout": {"baseline_s": 0, "stages_pct": [100]},  # every request on the learned arm
    }
    tmp = tmp_path_factory.mktemp("gateway-attempts")
    with gateway_stack(tmp, {card: card for card in CARDS}, config, kind=Stack) as stack:
        wait_for("the learned arm", lambda: stack.rt.modes.state().mode.label == "rollout(100)")
        yield stack


def test_a_stalled_target_is_learned_as_failed_and_heard_as_slow(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    rt = stack.rt
    probe = stack.chat("probe")
    assert probe.status_code == 200, probe.text
    chosen = probe.headers["x-slaguard-target"]  # where the router goes now
    other = next(c for c in CARDS if c != chosen)
    replica = rt.modes.replica  # type: ignore[attr-defined]
    hist = replica.guard.ttft._hist
    queued = replica.stats.evaluations + 2  # the probe's samples are drained by then
    wait_for("earlier samples drained", lambda: replica.stats.evaluations >= queued)
    heard = hist.count(chosen)
    learner = rt.scheduler.learner
    pending, loss = learner.pending, learner._loss_sum
    failures = stack.failures(chosen)
    stack.fault(chosen, "slowdown", {"factor": 1000})  # no first byte for seconds
    try:
        r = stack.chat("stalled")
    finally:
        stack.fault(chosen, "recover")
    assert r.status_code == 200, r.text
    assert r.headers["x-slaguard-target"] == other
    assert stack.failures(chosen) == failures + 1
    # One sample, the chosen target's failure (the worst loss, 1.0); the answer of a
    # target the router did not score is not learned against its components.
    assert learner.pending == pending + 1
    assert learner._loss_sum - loss == pytest.approx(1.0)
    wait_for("the stall in the detector", lambda: hist.count(chosen) > heard)
    assert hist.count(chosen) == heard + 1
    assert hist.quantile(chosen, 1.0) >= FIRST_BYTE_TIMEOUT_S * 0.9  # a bucket's lower edge
    warned = [m for m in caplog.messages if m.startswith(f"gateway: target {chosen} failed")]
    assert warned == [
        f"gateway: target {chosen} failed before the first byte (TimeoutError: no first byte "
        "within 1 s (gateway.first_byte_timeout_s)); retried on the next-best target"
    ]
    outcome = stored_outcome(rt.engine, r.headers["x-slaguard-decision-id"]).outcome
    assert outcome["status"] == "ok" and outcome["ttft_s"] > FIRST_BYTE_TIMEOUT_S


def test_a_refusing_target_gives_no_ttft_and_every_failed_target_is_counted(
    stack: Stack,
) -> None:
    """A refused connection says nothing of the target's speed (its TTFT is not its
    ~1 ms refusal); with both refusing, each target's failure is counted and the learner
    takes one failure, the first target's, not one per attempt."""
    rt = stack.rt
    replica = rt.modes.replica  # type: ignore[attr-defined]
    hist = replica.guard.ttft._hist
    heard = {c: hist.count(c) for c in CARDS}
    failures = {c: stack.failures(c) for c in CARDS}
    learner = rt.scheduler.learner
    pending = learner.pending
    for card in CARDS:
        stack.fault(card, "fail", {"mode": "refuse"})
    try:
        r = stack.chat("refused", stream=False)
    finally:
        for card in CARDS:
            stack.fault(card, "recover")
    assert r.status_code == 502, r.text
    assert {c: stack.failures(c) - failures[c] for c in CARDS} == {c: 1 for c in CARDS}
    assert learner.pending == pending + 1
    evaluations = replica.stats.evaluations
    wait_for("two more evaluations", lambda: replica.stats.evaluations >= evaluations + 2)
    assert {c: hist.count(c) for c in CARDS} == heard


def test_attempt_failures_are_warned_once_a_minute_per_target_with_their_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Nothing in the log said which backend failed or why: the retry hid it."""
    warnings = AttemptFailures()
    for at_s in (0.0, 10.0, 20.0):
        warnings.failed("h100", "HTTP 503", True, at_s)
    warnings.failed("l40s", "TimeoutError", False, 30.0)
    warnings.failed("h100", "HTTP 502", True, 61.0)
    assert caplog.messages == [
        "gateway: target h100 failed before the first byte (HTTP 503); retried on the "
        "next-best target",
        "gateway: target l40s failed before the first byte (TimeoutError); no target left "
        "to retry on",
        "gateway: target h100 failed before the first byte (HTTP 502); retried on the "
        "next-best target; 3 failures of it since the last such line",
    ]
