"""A client that leaves before the end of its answer (a chat UI's "stop generating") is
`cancelled`: the client chose to stop, so it is judged on what the card did before that.
With a first token, by its TTFT as an `ok` request; without one, a miss only when the
client had already waited past its deadline, else judged by no SLA. Real emulators and a
real service on 127.0.0.1 (the API's `/v1/feedback` side: tests/test_service_outcomes.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from gateway_stack import MODEL, SCRAPED, GatewayStack, gateway_stack
from helpers import stored_outcome, wait_for

from slaguard.service.pending import sla_met

TARGET = "h100-8b"


class Stack(GatewayStack):
    def count(self, name: str, **labels: str) -> float:
        return self.sample(name, **labels) or 0.0

    def figures(self) -> dict[str, float]:
        """Everything a client leaving may or may not move."""
        rt = self.rt
        return {
            "cancels": self.count("slaguard_gateway_client_cancels_total"),
            "completed": self.count("slaguard_requests_completed_total", arm="learned",
                                    priority="normal"),
            "violations": self.count("slaguard_sla_violations_total", arm="learned",
                                     priority="normal"),
            "upstream_failures": sum(
                self.count("slaguard_gateway_upstream_failures_total", stage=s, target=TARGET)
                for s in ("before_first_byte", "after_first_byte")
            ),
            "finished": rt.finished_count,
            "violated": rt.violated_count,
            "learned": rt.scheduler.learner.pending,
        }  # fmt: skip


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    config = {
        "telemetry": SCRAPED,
        "rollout": {"baseline_s": 0, "stages_pct": [100]},  # every request on the learned arm
    }
    with gateway_stack(
        tmp_path_factory.mktemp("gateway-cancels"), {TARGET: "h100"}, config, kind=Stack
    ) as s:
        wait_for("the learned arm", lambda: s.rt.modes.state().mode.label == "rollout(100)")
        yield s


@pytest.fixture
def heard(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """What the guard is fed (first tokens, finished samples), passed on as usual."""
    rt, got = stack.rt, []
    first_token, on_outcome = rt.modes.on_first_token, rt.modes.on_outcome

    def hear_first(sample: Any) -> None:
        got.append(("first", sample))
        first_token(sample)

    def hear_outcome(sample: Any) -> None:
        got.append(("outcome", sample))
        on_outcome(sample)

    monkeypatch.setattr(rt.modes, "on_first_token", hear_first)
    monkeypatch.setattr(rt.modes, "on_outcome", hear_outcome)
    return got


def _moved(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in before if after[k] != before[k]}


def _leave_stream(stack: Stack, rid: str, deadline_s: float) -> None:
    """Read the first event of a 3,000-token stream, then hang up."""
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3000}
    headers = {"X-Request-Id": rid, "X-Slaguard-Deadline-S": str(deadline_s)}
    with stack.client.stream(
        "POST", "/v1/chat/completions", json={**chat, "stream": True}, headers=headers
    ) as r:
        assert r.status_code == 200
        assert next(r.iter_raw()).startswith(b"data: ")


def _leave_whole(stack: Stack, rid: str, deadline_s: float, leave_after_s: float) -> None:
    """Ask for a 3,000-token whole answer and hang up after `leave_after_s`."""
    body = {"model": MODEL, "prompt": "hi", "max_tokens": 3000}
    headers = {"X-Request-Id": rid, "X-Slaguard-Deadline-S": str(deadline_s)}
    client = httpx.Client(base_url=str(stack.client.base_url), timeout=leave_after_s)
    with client, pytest.raises(httpx.ReadTimeout):
        client.post("/v1/completions", json=body, headers=headers)


def test_stopping_a_stream_after_a_timely_first_token_is_no_sla_miss(
    stack: Stack, heard: list[tuple[str, Any]]
) -> None:
    """It was recorded `failed`, an SLA miss: every "stop generating" burned the card's
    error budget and taught the learner and the guard that the card had missed."""
    before = stack.figures()
    _leave_stream(stack, "stopped-1", deadline_s=30.0)
    out = stored_outcome(stack.rt.engine, "stopped-1").outcome
    assert (out["status"], out["sla_met"]) == ("cancelled", True)
    assert 0 < out["ttft_s"] < 30.0
    assert _moved(before, stack.figures()) == {
        "cancels": 1, "completed": 1, "finished": 1, "learned": 1
    }  # fmt: skip
    kinds = [(kind, getattr(s, "sla_met", None)) for kind, s in heard]
    assert kinds == [("first", None), ("outcome", True)]
    assert heard[0][1].ttft_s == pytest.approx(out["ttft_s"], rel=0.01)


def test_stopping_a_stream_after_a_late_first_token_is_the_cards_miss(
    stack: Stack, heard: list[tuple[str, Any]]
) -> None:
    before = stack.figures()
    _leave_stream(stack, "stopped-late", deadline_s=0.0001)
    out = stored_outcome(stack.rt.engine, "stopped-late").outcome
    assert (out["status"], out["sla_met"]) == ("cancelled", False)
    assert out["ttft_s"] > 0.0001
    assert _moved(before, stack.figures()) == {
        "cancels": 1, "completed": 1, "violations": 1, "finished": 1, "violated": 1,
        "learned": 1,
    }  # fmt: skip
    assert [(kind, getattr(s, "sla_met", None)) for kind, s in heard][-1] == ("outcome", False)


def test_leaving_a_whole_answer_before_the_deadline_is_judged_by_no_sla(
    stack: Stack, heard: list[tuple[str, Any]]
) -> None:
    before = stack.figures()
    _leave_whole(stack, "left-early", deadline_s=60.0, leave_after_s=0.3)
    out = stored_outcome(stack.rt.engine, "left-early").outcome
    assert (out["status"], out["sla_met"]) == ("cancelled", None)
    assert 0.3 <= out["e2e_s"] < 60.0 and out["ttft_s"] is None
    assert _moved(before, stack.figures()) == {"cancels": 1}
    assert heard == []
    assert stack.rt.scheduler.state.picture(0).queue_depth == 0


def test_leaving_a_whole_answer_past_the_deadline_is_the_cards_miss(
    stack: Stack, heard: list[tuple[str, Any]]
) -> None:
    """The user gave up on a slow card: a miss, and the time waited reaches the TTFT
    detectors as a TTFT of at least that (as a first-byte timeout's stall does)."""
    before = stack.figures()
    _leave_whole(stack, "gave-up", deadline_s=0.2, leave_after_s=0.5)
    out = stored_outcome(stack.rt.engine, "gave-up").outcome
    assert (out["status"], out["sla_met"]) == ("cancelled", False)
    # past the deadline as the service measured it (from the request's arrival, a little
    # after the client's clock started: 0.4998 s of the client's 0.5 s in one CI run)
    assert out["e2e_s"] > 0.2 and out["ttft_s"] is None
    assert _moved(before, stack.figures()) == {
        "cancels": 1, "completed": 1, "violations": 1, "finished": 1, "violated": 1,
        "learned": 1,
    }  # fmt: skip
    assert [kind for kind, _ in heard] == ["first", "outcome"]
    waited = heard[0][1].ttft_s
    assert 0.2 < waited <= out["e2e_s"]
    assert heard[1][1].sla_met is False and heard[1][1].ttft_s is None


@pytest.mark.parametrize(
    ("ttft_s", "e2e_s", "expected"),
    [
        (0.5, 9.0, True),  # a first token in time: met, however long the client stayed
        (2.5, 3.0, False),  # a first token past the deadline
        (None, 1.0, None),  # left before the deadline without one: nobody can say
        (None, 2.0, None),  # at the deadline itself: not yet past it
        (None, 2.5, False),  # gave up on a card past the deadline
        (None, None, None),  # no time reported at all
    ],
)
def test_the_sla_judgement_of_a_cancelled_request(
    ttft_s: float | None, e2e_s: float | None, expected: bool | None
) -> None:
    assert sla_met("cancelled", ttft_s, e2e_s, 2.0) is expected
