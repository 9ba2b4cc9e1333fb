"""A backend that refuses every request before the first byte is ejected for a while.

Found in an on-call drill: a backend answering every request with HTTP 503, its /metrics
still answering (so the scraper kept it healthy), looked idle to the router, which kept
sending it its share of traffic; each such request paid a failed attempt and a retry, and
a refusal gives the guard no TTFT, so it was never demoted. Now after
`gateway.eject_after_failures` consecutive failures before the first byte the target is
unhealthy for `gateway.eject_s`, whatever its pictures say."""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from pathlib import Path

import httpx
import pytest
from gateway_stack import MODEL, SCRAPED, GatewayStack, gateway_stack
from helpers import wait_for

CARDS = {"h100": "h100", "l40s": "l40s"}
BAD, GOOD = "l40s", "h100"
EJECT_S = 30.0


class ShiftedClock:
    """Wall time moved forward by `shift_s`: the service's clock, set by the test."""

    def __init__(self) -> None:
        self.shift_s = 0.0

    def __call__(self) -> float:
        return time.time() + self.shift_s


class Stack(GatewayStack):
    def count(self, name: str, **labels: str) -> float:
        got = self.sample(name, **labels)
        assert got is not None, f"{name}{labels} exists from the start"
        return got

    def failures(self, target: str) -> float:
        name = "slaguard_gateway_upstream_failures_total"
        return self.count(name, stage="before_first_byte", target=target)

    def ejections(self, target: str) -> float:
        return self.count("slaguard_gateway_ejections_total", target=target)

    def retries(self) -> float:
        return self.count("slaguard_gateway_retries_total")

    def healthy(self, target: str) -> bool:
        return self.rt.scheduler.state.picture(self.rt.fleet.target(target).index).healthy

    def chat(self) -> httpx.Response:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        r = self.client.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        return r

    def fresh(self) -> None:
        """Wait for a picture of every target taken at the service's present time."""
        since = self.rt.clock()
        rows = self.rt.scheduler.state
        wait_for(
            "fresh pictures",
            lambda: all(rows.picture(t.index).refreshed_at_s >= since for t in self.rt.fleet),
        )

    def fail_until(self, target: str, failures: float) -> None:
        """Send requests (round-robin: every other one goes to `target`) until `target`
        has failed `failures` times before the first byte; each is answered by a retry."""
        for _ in range(4 * int(failures)):
            if self.failures(target) >= failures:
                break
            self.chat()
        assert self.failures(target) == failures


def _stack(tmp: Path, clock: ShiftedClock, **gateway: float) -> AbstractContextManager[Stack]:
    config = {"telemetry": SCRAPED, "gateway": gateway}
    return gateway_stack(tmp, CARDS, config, kind=Stack, clock=clock)


def test_a_refusing_target_is_ejected_for_its_window_then_eligible_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ShiftedClock()
    with _stack(tmp_path, clock) as stack:
        stack.fresh()
        stack.fault(BAD, "fail", {"mode": "refuse"})
        stack.fail_until(BAD, 4)
        assert stack.healthy(BAD) and stack.ejections(BAD) == 0
        stack.fail_until(BAD, 5)
        assert not stack.healthy(BAD) and stack.ejections(BAD) == 1
        ejected = [m for m in caplog.messages if "ejected" in m]
        assert ejected == [
            f"gateway: target {BAD} ejected for 30 s after 5 consecutive failures before "
            "the first byte (last: HTTP 503); no request goes to it until then"
        ]
        retries = stack.retries()
        answered = [stack.chat().headers["x-slaguard-target"] for _ in range(10)]
        assert answered == [GOOD] * 10
        assert stack.failures(BAD) == 5 and stack.retries() == retries
        # neither the scraper nor a pushed picture marks it healthy within the window
        scraper = stack.app.state.scraper
        rounds = scraper.rounds
        wait_for("two more scrapes", lambda: scraper.rounds >= rounds + 2)
        pushed = stack.client.post("/v1/telemetry", json={"target": BAD, "healthy": True})
        assert pushed.status_code == 200
        assert not stack.healthy(BAD)
        rows = stack.client.get("/v1/status").json()["targets"]
        assert [r["healthy"] for r in rows if r["target"] == BAD] == [False]
        clock.shift_s += EJECT_S
        stack.fresh()
        assert stack.healthy(BAD)
        # eligible again: still refusing, it is tried again and ejected again
        stack.fail_until(BAD, 10)
        assert not stack.healthy(BAD) and stack.ejections(BAD) == 2
        assert stack.ejections(GOOD) == 0


def test_an_answer_in_between_resets_the_count(tmp_path: Path) -> None:
    with _stack(tmp_path, ShiftedClock()) as stack:
        stack.fresh()
        stack.fault(BAD, "fail", {"mode": "refuse"})
        stack.fail_until(BAD, 4)
        stack.fault(BAD, "recover")
        answered = [stack.chat().headers["x-slaguard-target"] for _ in range(2)]
        assert BAD in answered
        stack.fault(BAD, "fail", {"mode": "refuse"})
        stack.fail_until(BAD, 8)
        assert stack.healthy(BAD) and stack.ejections(BAD) == 0
        stack.fail_until(BAD, 9)
        assert not stack.healthy(BAD) and stack.ejections(BAD) == 1


def test_no_ejection_when_turned_off(tmp_path: Path) -> None:
    with _stack(tmp_path, ShiftedClock(), eject_after_failures=0) as stack:
        stack.fresh()
        stack.fault(BAD, "fail", {"mode": "refuse"})
        retries = stack.retries()
        stack.fail_until(BAD, 8)
        assert stack.healthy(BAD) and stack.ejections(BAD) == 0
        assert stack.retries() == retries + 8
