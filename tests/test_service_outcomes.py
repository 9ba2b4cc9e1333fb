"""Outcomes through the routing API: what `/v1/first-token` and `/v1/feedback` record.

A real service on 127.0.0.1 (uvicorn, SQLite audit DB, real audit writer), time from a
settable clock; stored outcomes are polled for in the database.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from helpers import wait_for
from service_helpers import Clock, build_test_service

from slaguard.audit.service import UnknownRequestError, explain
from slaguard.service.app import create_app
from slaguard.service.bootstrap import Service
from slaguard.service.local import ServerThread

SMALL = {"model": "llama3.1-8b", "prompt_tokens": 50, "max_new_tokens": 10}


@dataclass
class Api:
    service: Service
    client: httpx.Client
    clock: Clock

    def post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        return self.client.post(path, json=body)

    def routed(self, request_id: str, **extra: Any) -> dict[str, Any]:
        """A routed decision (every target's picture pushed fresh first)."""
        for t in self.service.runtime.fleet:
            self.post("/v1/telemetry", {"target": t.id, "queue_depth": 0})
        r = self.post("/v1/route", {**SMALL, "request_id": request_id, **extra})
        assert r.status_code == 200, r.text
        out: dict[str, Any] = r.json()
        return out

    def no_capacity(self, request_id: str) -> dict[str, Any]:
        """A decision that went to no target: every picture is stale by then."""
        self.clock.now += 5.0
        out: dict[str, Any] = self.post("/v1/route", {**SMALL, "request_id": request_id}).json()
        assert out["outcome"] == "no_capacity", out
        return out

    def flushed(self) -> None:
        """Every record acknowledged so far is in the database."""
        writer = self.service.runtime.writer
        assert writer is not None and writer.wait_flushed(10.0)

    def outcome(self, decision_id: str) -> dict[str, Any]:
        def stored() -> dict[str, Any] | None:
            try:
                return explain(self.service.engine, decision_id).outcome
            except UnknownRequestError:
                return None

        found: dict[str, Any] = wait_for(f"the outcome of {decision_id}", stored)
        return found


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    clock = Clock(time.time())
    service = build_test_service(tmp_path_factory.mktemp("outcomes"), clock)
    app = create_app(service.runtime, admin_token=None, readiness=service.readiness)
    with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=10) as client:
        yield Api(service, client, clock)
    service.close()


def test_the_first_token_ttft_judges_a_feedback_without_one(api: Api) -> None:
    """The TTFT sent with /v1/first-token was dropped: the SLA was judged on e2e (6 s,
    past the 4 s TTFT deadline) though the first token came at 0.5 s."""
    api.routed("ft-kept")
    fed = api.post("/v1/first-token", {"decision_id": "ft-kept", "ttft_s": 0.5})
    assert fed.json()["fed"] is True
    r = api.post("/v1/feedback", {"decision_id": "ft-kept", "status": "ok", "e2e_s": 6})
    assert r.json()["sla_met"] is True
    stored = api.outcome("ft-kept")
    assert (stored["ttft_s"], stored["sla_met"]) == (0.5, True)


def test_the_feedback_ttft_wins_over_the_first_token_one(api: Api) -> None:
    api.routed("ft-overridden")
    api.post("/v1/first-token", {"decision_id": "ft-overridden", "ttft_s": 0.5})
    r = api.post("/v1/feedback", {"decision_id": "ft-overridden", "ttft_s": 9.0, "e2e_s": 10})
    assert r.json()["sla_met"] is False
    assert api.outcome("ft-overridden")["ttft_s"] == 9.0


@pytest.mark.parametrize("evicted", [False, True], ids=["in-memory", "from-the-database"])
def test_feedback_for_a_decision_routed_nowhere_is_refused(api: Api, evicted: bool) -> None:
    """It was taken (`status: ok` with latencies: recorded, SLA met) and counted in
    `audit summary` as a served request; after a restart the same, from the database."""
    decision_id = f"nowhere-{evicted}"
    api.no_capacity(decision_id)
    if evicted:
        api.flushed()
        api.service.runtime.pending.pop(decision_id)
    first = api.post("/v1/first-token", {"decision_id": decision_id, "ttft_s": 0.2})
    assert first.status_code == 409, first.text  # it was 200 `fed: false`
    assert "was no_capacity" in first.json()["error"] and "send first-token only" in first.text
    body = {"decision_id": decision_id, "status": "ok", "ttft_s": 0.2, "e2e_s": 1.0}
    r = api.post("/v1/feedback", body)
    assert r.status_code == 409, r.text
    assert r.json()["error"].startswith(f"decision_id: decision {decision_id!r} was no_capacity")
    api.flushed()
    assert explain(api.service.engine, decision_id).outcome is None


def test_a_duplicate_after_a_restart_answers_the_stored_verdict(api: Api) -> None:
    """It answered `sla_met: null` though the stored outcome said the SLA was met."""
    api.routed("dup-stored")
    body = {"decision_id": "dup-stored", "ttft_s": 0.5, "e2e_s": 1.0}
    assert api.post("/v1/feedback", body).json()["sla_met"] is True
    api.flushed()
    api.service.runtime.pending.pop("dup-stored")  # as after a restart
    again = api.post("/v1/feedback", {**body, "ttft_s": 99.0}).json()
    assert again == {
        "decision_id": "dup-stored",
        "recorded": False,
        "duplicate": True,
        "sla_met": True,
    }


@pytest.mark.parametrize(
    ("tokens", "field"),
    [((200_000, 10), "prompt_tokens"), ((10, 9_000_000), "max_new_tokens")],
)
def test_a_route_no_target_could_ever_take_is_a_422(
    api: Api, tokens: tuple[int, int], field: str
) -> None:
    """It was a 200 no_capacity (retried as a capacity problem) and audited, where the
    gateway answered the same request 422: retrying cannot help. The counts were given
    exactly: the line said "~N tokens" and no limit to keep under."""
    api.routed("warm-up")  # every picture fresh: only the size can refuse it
    rt = api.service.runtime
    pending, decisions = len(rt.pending), _decisions(api)
    request_id = f"never-{field}"
    body = {**SMALL, "prompt_tokens": tokens[0], "max_new_tokens": tokens[1]}
    r = api.post("/v1/route", {**body, "request_id": request_id})
    assert r.status_code == 422, r.text
    total = sum(tokens)
    assert r.json()["error"] == (
        f"{field}: prompt_tokens + max_new_tokens is {tokens[0]} + {tokens[1]} = {total}, "
        "above 131072, the most any llama3.1-8b target takes (its context window); fix: send "
        "at most 131072 tokens in all (retrying cannot help)"
    )
    assert decisions > 0 and (len(rt.pending), _decisions(api)) == (pending, decisions)
    api.flushed()
    with pytest.raises(UnknownRequestError):
        explain(api.service.engine, request_id)


def _decisions(api: Api) -> float:
    """Routing decisions counted in the metrics."""
    return sum(
        sample.value
        for metric in api.service.runtime.metrics.registry.collect()
        if metric.name == "slaguard_decisions"
        for sample in metric.samples
        if sample.name == "slaguard_decisions_total"
    )


@pytest.mark.parametrize("evicted", [False, True], ids=["in-memory", "from-the-database"])
def test_an_ok_feedback_without_any_time_is_a_422_recording_nothing(
    api: Api, evicted: bool
) -> None:
    """`{"status": "ok"}` with no `ttft_s`, no `e2e_s` and no first token before it was
    recorded as an SLA violation, fed to the learner and the guard: a client omitting its
    timings inflated the violation rate."""
    decision_id = f"untimed-{evicted}"
    api.routed(decision_id)
    rt = api.service.runtime
    if evicted:
        api.flushed()
        rt.pending.pop(decision_id)
    finished, violated = rt.finished_count, rt.violated_count
    r = api.post("/v1/feedback", {"decision_id": decision_id, "status": "ok"})
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error.startswith("ttft_s: ") and "e2e_s" in error and "fix: send ttft_s" in error
    assert (rt.finished_count, rt.violated_count) == (finished, violated)
    assert decision_id not in rt.late_outcomes
    api.flushed()
    assert explain(api.service.engine, decision_id).outcome is None
    # Nothing was taken: the same feedback with its time is recorded, judged on it.
    body = {"decision_id": decision_id, "status": "ok", "e2e_s": 1.0}
    again = api.post("/v1/feedback", body).json()
    assert (again["recorded"], again["duplicate"], again["sla_met"]) == (True, False, True)
    assert api.outcome(decision_id)["sla_met"] is True


def test_an_ok_feedback_without_time_after_a_first_token_is_judged_on_it(api: Api) -> None:
    api.routed("untimed-after-first-token")
    api.post("/v1/first-token", {"decision_id": "untimed-after-first-token", "ttft_s": 0.5})
    r = api.post("/v1/feedback", {"decision_id": "untimed-after-first-token", "status": "ok"})
    assert r.status_code == 200 and r.json()["sla_met"] is True, r.text


@pytest.mark.parametrize("status", ["failed", "rejected", "timeout"])
def test_a_failed_feedback_without_any_time_is_recorded(api: Api, status: str) -> None:
    """A request that did not succeed missed its SLA whatever its times: still taken."""
    decision_id = f"untimed-{status}"
    api.routed(decision_id)
    r = api.post("/v1/feedback", {"decision_id": decision_id, "status": status})
    assert r.status_code == 200, r.text
    assert (r.json()["recorded"], r.json()["sla_met"]) == (True, False)
    assert api.outcome(decision_id)["status"] == status


@pytest.mark.parametrize("evicted", [False, True], ids=["in-memory", "from-the-database"])
def test_a_client_error_is_judged_by_no_sla_and_a_repeat_is_a_duplicate(
    api: Api, evicted: bool
) -> None:
    """A backend's refusal of the request itself (status `client_error`) was no status
    at all (422), so callers reported it `rejected`: an SLA miss blamed on the card, fed
    to the learner and the guard. Stored with `sla_met` null, a repeat found in the
    database was taken for a decision without an outcome and recorded again."""
    decision_id = f"client-error-{evicted}"
    api.routed(decision_id)
    rt = api.service.runtime
    if evicted:
        api.flushed()
        rt.pending.pop(decision_id)
    finished, violated, learning = (
        rt.finished_count,
        rt.violated_count,
        rt.scheduler.learner.pending,
    )
    body = {"decision_id": decision_id, "status": "client_error"}
    first = api.post("/v1/feedback", body).json()
    assert (first["recorded"], first["duplicate"], first["sla_met"]) == (True, False, None)
    assert rt.violated_count == violated and rt.scheduler.learner.pending == learning
    assert rt.finished_count == finished  # not in the correction's violation rate
    stored = api.outcome(decision_id)
    assert (stored["status"], stored["sla_met"]) == ("client_error", None)
    rt.pending.pop(decision_id, None)
    rt.late_outcomes.pop(decision_id, None)  # as after a restart: only the database knows
    again = api.post("/v1/feedback", {**body, "status": "ok", "ttft_s": 0.1}).json()
    assert (again["recorded"], again["duplicate"], again["sla_met"]) == (False, True, None)


@pytest.mark.parametrize(
    ("times", "expected"),
    [
        ({"ttft_s": 0.5, "e2e_s": 9.0}, True),  # stopped after a first token in time
        ({"ttft_s": 5.0, "e2e_s": 6.0}, False),  # after one past the 4 s deadline
        ({"e2e_s": 1.0}, None),  # left before the deadline, no first token: unjudged
        ({"e2e_s": 5.0}, False),  # gave up waiting past the deadline: the card's miss
    ],
    ids=["timely-first-token", "late-first-token", "left-early", "gave-up"],
)
@pytest.mark.parametrize("evicted", [False, True], ids=["in-memory", "from-the-database"])
def test_a_cancelled_feedback_is_judged_on_what_came_before_the_client_left(
    api: Api, times: dict[str, float], expected: bool | None, evicted: bool
) -> None:
    """A client that stopped the answer could only report it `failed`: an SLA miss."""
    decision_id = f"cancelled-{len(times)}-{times.get('ttft_s')}-{times['e2e_s']}-{evicted}"
    api.routed(decision_id)
    rt = api.service.runtime
    if evicted:
        api.flushed()
        rt.pending.pop(decision_id)
    finished, violated = rt.finished_count, rt.violated_count
    r = api.post("/v1/feedback", {"decision_id": decision_id, "status": "cancelled", **times})
    assert r.status_code == 200, r.text
    assert (r.json()["recorded"], r.json()["sla_met"]) == (True, expected)
    stored = api.outcome(decision_id)
    assert (stored["status"], stored["sla_met"]) == ("cancelled", expected)
    if not evicted:  # the correction's counts are of the requests this replica finished
        assert rt.finished_count == finished + (expected is not None)
        assert rt.violated_count == violated + (expected is False)
