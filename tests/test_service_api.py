"""The routing API on a real uvicorn server (127.0.0.1, free port), a real SQLite audit DB.

Time is a settable clock handed to the service, so staleness is tested by moving the clock,
not by sleeping. The audit writer is real: decisions are polled for in the database.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from service_helpers import Clock, build_test_service
from sqlalchemy import text

from slaguard.audit.service import UnknownRequestError, explain
from slaguard.service.app import create_app
from slaguard.service.bootstrap import Service, build_service
from slaguard.service.config import load_config
from slaguard.service.local import ServerThread
from slaguard.service.loops import ServiceLoops
from slaguard.telemetry.labels import JOBS

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Running:
    service: Service
    server: ServerThread
    client: httpx.Client
    clock: Clock

    def push_all(self) -> None:
        for t in self.service.runtime.fleet:
            r = self.client.post("/v1/telemetry", json={"target": t.id, "queue_depth": 0})
            assert r.status_code == 200, r.text


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    tmp = tmp_path_factory.mktemp("api")
    clock = Clock(time.time())
    service = build_test_service(tmp, clock)
    app = create_app(service.runtime, admin_token=None, readiness=service.readiness)
    with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=10) as client:
        yield Running(service, server, client, clock)
    service.close()


def poll(fn: Any, timeout_s: float = 10.0) -> Any:
    """Call `fn` until it returns something truthy, or fail at the deadline."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("condition not met before the deadline")


def stored_outcome(api: Running, decision_id: str) -> dict[str, Any] | None:
    """The decision's stored outcome, None while the writer has not stored both yet."""
    try:
        return explain(api.service.engine, decision_id).outcome
    except UnknownRequestError:
        return None


def test_health_ready_and_metrics(api: Running) -> None:
    assert api.client.get("/healthz").json() == {"status": "ok"}
    ready = api.client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["targets"] == 4
    text = api.client.get("/metrics").text
    assert "slaguard_decisions_total" in text and "slaguard_gateway_retries_total" in text


def test_route_records_the_decision_with_its_explanation(api: Running) -> None:
    api.push_all()
    body = {"model": "llama3.1-8b", "prompt_tokens": 900, "max_new_tokens": 100}
    r = api.client.post("/v1/route?explain=1", json={**body, "priority": "high"})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["target"] in {"h100-8b", "l40s-8b-0", "l40s-8b-1"}
    assert out["outcome"] == "routed" and out["mode"] == "round_robin"
    assert out["arm"] == "round_robin"
    assert {c["target"] for c in out["explanation"]["candidates"]} == {
        "h100-8b",
        "l40s-8b-0",
        "l40s-8b-1",
    }
    assert out["target"] not in out["alternatives"] and len(out["alternatives"]) == 2
    url = f"/v1/decisions/{out['decision_id']}"
    poll(lambda: api.client.get(url).status_code == 200)
    stored = api.client.get(url).json()
    assert stored["decision"]["target_id"] == out["target"]
    assert stored["decision"]["priority"] == "high"
    assert len(stored["candidates"]) == 3
    # the same request id again is answered from memory, not decided twice
    rid = {"request_id": "fixed-id-1", **body}
    first = api.client.post("/v1/route", json=rid).json()
    again = api.client.post("/v1/route", json=rid).json()
    assert first == again and first["decision_id"] == "fixed-id-1"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"model": "llama3.1-8b", "prompt_tokens": -1, "max_new_tokens": 10}, "prompt_tokens"),
        ({"model": "llama3.1-8b", "prompt_tokens": 1, "max_new_tokens": -5}, "max_new_tokens"),
        ({"model": "gpt-9", "prompt_tokens": 1, "max_new_tokens": 1}, "model"),
        # in the catalogue, served by no target: answered no_capacity, to be retried for ever
        (
            {"model": "qwen2.5-32b", "prompt_tokens": 1, "max_new_tokens": 1},
            "model: model 'qwen2.5-32b' is not served by this fleet",
        ),
        (
            {"model": "llama3.1-8b", "prompt_tokens": 1, "max_new_tokens": 1, "priority": "vip"},
            "priority",
        ),
        ({"model": "llama3.1-8b", "prompt_tokens": "many", "max_new_tokens": 1}, "prompt_tokens"),
        # pydantic's lax mode read these as 100 and 1
        ({"model": "llama3.1-8b", "prompt_tokens": "100", "max_new_tokens": 1}, "prompt_tokens"),
        ({"model": "llama3.1-8b", "prompt_tokens": 1, "max_new_tokens": True}, "max_new_tokens"),
        (
            {"model": "llama3.1-8b", "prompt_tokens": 1, "max_new_tokens": 1, "deadline_s": 0},
            "deadline_s",
        ),
        ({"model": "llama3.1-8b", "prompt_tokens": 1}, "max_new_tokens"),
        ({"model": "llama3.1-8b", "prompt_tokens": 1, "max_new_tokens": 1, "colour": 1}, "colour"),
        (
            {"model": "llama3.1-8b", "prompt_tokens": 1, "max_new_tokens": 1, "request_id": "a b"},
            "request_id",
        ),
        # a NUL in the prefix reached the hot-spot detector's trip, which PostgreSQL refused
        (
            {"model": "llama3.1-8b", "prompt_tokens": 1, "max_new_tokens": 1, "prefix_id": "p\x00"},
            "prefix_id: contains a control character (\\x00 at position 1); fix: ",
        ),
        (
            {"model": "llama3.1-8b", "prompt_tokens": 1, "max_new_tokens": 1, "prompt_hash": "\n"},
            "prompt_hash: contains a control character (\\n at position 0); fix: ",
        ),
    ],
)
def test_bad_route_input_names_the_field_and_records_nothing(
    api: Running, body: dict[str, Any], field: str
) -> None:
    before = len(api.service.runtime.pending)
    r = api.client.post("/v1/route", json=body)
    assert r.status_code == 422
    assert r.json()["error"].startswith(field), r.json()
    assert len(api.service.runtime.pending) == before


def test_malformed_json_is_a_422(api: Running) -> None:
    r = api.client.post(
        "/v1/route", content=b'{"model": ', headers={"content-type": "application/json"}
    )
    assert r.status_code == 422 and "JSON" in r.json()["error"]


def test_stale_picture_is_treated_as_saturated(api: Running) -> None:
    api.push_all()
    api.clock.now += 5.0  # every picture is now 5 s old: stale (> 1 s)
    r = api.client.post(
        "/v1/route?explain=1",
        json={"model": "llama3.1-8b", "prompt_tokens": 100, "max_new_tokens": 10},
    )
    out = r.json()
    assert out["outcome"] == "no_capacity" and out["target"] is None
    reasons = {x["reason"] for x in out["explanation"]["rejected"]}
    assert reasons == {"stale hardware picture: treated as saturated"}
    api.client.post("/v1/telemetry", json={"target": "l40s-8b-1", "queue_depth": 3})
    for _ in range(3):
        out = api.client.post(
            "/v1/route?explain=1",
            json={"model": "llama3.1-8b", "prompt_tokens": 100, "max_new_tokens": 10},
        ).json()
        assert out["target"] == "l40s-8b-1"
        assert len(out["explanation"]["rejected"]) == 2
    status = api.client.get("/v1/status").json()
    ages = {t["target"]: t["picture_age_s"] for t in status["targets"]}
    assert ages["l40s-8b-1"] == 0.0 and ages["h100-8b"] >= 5.0


def test_feedback_unknown_duplicate_and_recorded(api: Running) -> None:
    api.push_all()
    missing = api.client.post("/v1/feedback", json={"decision_id": "never-routed", "ttft_s": 1})
    assert missing.status_code == 404 and "decision_id" in missing.json()["error"]
    out = api.client.post(
        "/v1/route", json={"model": "llama3.1-8b", "prompt_tokens": 10, "max_new_tokens": 5}
    ).json()
    fb = {"decision_id": out["decision_id"], "ttft_s": 0.5, "tpot_s": 0.02, "e2e_s": 0.6}
    first = api.client.post("/v1/feedback", json=fb).json()
    assert first == {
        "decision_id": out["decision_id"],
        "recorded": True,
        "duplicate": False,
        "sla_met": True,
    }
    second = api.client.post("/v1/feedback", json={**fb, "ttft_s": 99}).json()
    assert second["duplicate"] is True and second["recorded"] is False
    assert second["sla_met"] is True

    outcome = poll(lambda: stored_outcome(api, out["decision_id"]))
    assert outcome["ttft_s"] == 0.5 and outcome["sla_met"] is True
    bad = api.client.post("/v1/feedback", json={"decision_id": "x", "ttft_s": -1})
    assert bad.status_code == 422 and bad.json()["error"].startswith("ttft_s")


def _evicted_decision(api: Running) -> dict[str, Any]:
    """A routed decision, stored, then dropped from the service's memory."""
    api.push_all()
    out: dict[str, Any] = api.client.post(
        "/v1/route", json={"model": "llama3.1-8b", "prompt_tokens": 10, "max_new_tokens": 5}
    ).json()
    poll(lambda: api.client.get(f"/v1/decisions/{out['decision_id']}").status_code == 200)
    api.service.runtime.pending.pop(out["decision_id"])
    return out


def test_feedback_for_a_decision_only_in_the_database(api: Running) -> None:
    out = _evicted_decision(api)
    r = api.client.post("/v1/feedback", json={"decision_id": out["decision_id"], "ttft_s": 9.0})
    assert r.json() == {
        "decision_id": out["decision_id"],
        "recorded": True,
        "duplicate": False,
        "sla_met": False,
    }
    # A repeat sent before the writer stored the first is a duplicate too (it answered
    # recorded while the database dropped it).
    again = api.client.post("/v1/feedback", json={"decision_id": out["decision_id"]}).json()
    assert again == {**r.json(), "recorded": False, "duplicate": True}
    assert poll(lambda: stored_outcome(api, out["decision_id"]))["ttft_s"] == 9.0
    later = api.client.post("/v1/feedback", json={"decision_id": out["decision_id"]}).json()
    assert later["duplicate"] is True


def test_first_token_of_a_decision_only_in_the_database_is_not_an_error(api: Running) -> None:
    """Routed before a restart (or evicted): the client did nothing wrong, so no 404; the
    guard's window has moved on, so the TTFT is not fed (it comes with the feedback)."""
    out = _evicted_decision(api)
    body = {"decision_id": out["decision_id"], "ttft_s": 0.4}
    r = api.client.post("/v1/first-token", json=body)
    assert (r.status_code, r.json()) == (200, {"decision_id": out["decision_id"], "fed": False})
    fb = api.client.post("/v1/feedback", json={**body, "e2e_s": 1.0}).json()
    assert fb["recorded"] is True
    again = api.client.post("/v1/first-token", json=body)
    assert (again.status_code, again.json()["fed"]) == (200, False)


def test_an_evicted_decision_while_the_database_fails_is_a_503_then_recorded(
    api: Running,
) -> None:
    """The lookup raised through to a 500 "internal error": the client could not tell
    that its outcome was not recorded and should be sent again."""
    out = _evicted_decision(api)
    body = {"decision_id": out["decision_id"], "ttft_s": 0.4, "e2e_s": 1.0}
    with api.service.engine.begin() as conn:
        conn.execute(text("ALTER TABLE decisions RENAME TO decisions_away"))
    try:
        fb = api.client.post("/v1/feedback", json=body)
        assert fb.status_code == 503 and fb.headers["retry-after"] == "5", fb.text
        assert fb.json()["error"].startswith(f"decision_id: cannot look {out['decision_id']!r}")
        first = api.client.post(
            "/v1/first-token", json={"decision_id": out["decision_id"], "ttft_s": 0.4}
        )
        assert (first.status_code, first.json()["fed"]) == (200, False)
    finally:
        with api.service.engine.begin() as conn:
            conn.execute(text("ALTER TABLE decisions_away RENAME TO decisions"))
    again = api.client.post("/v1/feedback", json=body)
    assert again.status_code == 200 and again.json()["recorded"] is True


def test_a_whole_answer_of_an_evicted_decision_is_judged_on_its_end(api: Running) -> None:
    """No TTFT, a quick end: met, as `finish` judges it (the evicted path said missed)."""
    out = _evicted_decision(api)
    r = api.client.post("/v1/feedback", json={"decision_id": out["decision_id"], "e2e_s": 0.5})
    assert r.json()["recorded"] is True and r.json()["sla_met"] is True


def test_telemetry_push_updates_the_picture(api: Running) -> None:
    r = api.client.post(
        "/v1/telemetry",
        json={"target": "h100-8b", "kv_used_ratio": 0.5, "queue_depth": 7, "healthy": False},
    )
    assert r.status_code == 200
    rows = {t["target"]: t for t in api.client.get("/v1/status").json()["targets"]}
    assert rows["h100-8b"]["queue_depth"] == 7 and rows["h100-8b"]["kv_used_ratio"] == 0.5
    assert rows["h100-8b"]["healthy"] is False
    assert rows["h100-8b"]["jitter_z"] is None, "not scored: no measured 0"
    api.client.post("/v1/telemetry", json={"target": "h100-8b", "healthy": True})
    unknown = api.client.post("/v1/telemetry", json={"target": "nope", "queue_depth": 1})
    assert unknown.status_code == 422 and unknown.json()["error"].startswith("target")
    neg = api.client.post("/v1/telemetry", json={"target": "h100-8b", "queue_depth": -1})
    assert neg.status_code == 422 and neg.json()["error"].startswith("queue_depth")


def test_unknown_decision_lookup_is_404(api: Running) -> None:
    r = api.client.get("/v1/decisions/no-such-decision")
    assert r.status_code == 404 and "no stored decision" in r.json()["error"]


def test_admin_endpoints_are_disabled_without_a_token(api: Running) -> None:
    for path, body in (
        ("/v1/mode", {"action": "rollback", "reason": "test"}),
        ("/v1/alertmanager", {"version": "4", "status": "firing", "alerts": []}),
    ):
        r = api.client.post(path, json=body, headers={"Authorization": "Bearer anything-long"})
        assert r.status_code == 403 and "disabled" in r.json()["error"]


def test_every_scheduler_job_an_alert_or_label_names_is_one_the_service_runs(
    api: Running,
) -> None:
    """`batching_tick` was allowed as a label and watched by SlaguardSchedulerJobStalled,
    but no job ran under that name: the alert fired on every healthy instance."""
    runs = set(ServiceLoops(api.service.runtime).jobs())
    assert set(JOBS) == runs
    rules = yaml.safe_load((ROOT / "alerts" / "slaguard-ops.yml").read_text())
    stalled = next(
        r
        for g in rules["groups"]
        for r in g["rules"]
        if r.get("alert") == "SlaguardSchedulerJobStalled"
    )
    found = re.search(r'scheduler_job=~"([^"]+)"', stalled["expr"])
    assert found is not None
    watched = set(found.group(1).split("|"))
    assert watched == runs - {"weight_update"}  # the hourly job has no rate to lose


def test_a_priority_no_target_serves_the_model_at_is_a_422(tmp_path: Path) -> None:
    """It was admitted and answered no_capacity (a 503 with Retry-After from the gateway)
    for ever. The 70b, with no target of its own, is served at the priorities its
    degrade model's targets take."""
    (tmp_path / "fleet.yaml").write_text(
        yaml.safe_dump(
            {"targets": [{"id": "h100-8b", "model": "llama3.1-8b", "card": "h100",
                          "priorities": ["high", "normal"]}]}
        )
    )  # fmt: skip
    cfg = load_config(
        None,
        {"fleet": tmp_path / "fleet.yaml", "db": str(tmp_path / "audit.db"),
         "telemetry": {"scrape": False}},
    )  # fmt: skip
    service = build_service(cfg)
    app = create_app(service.runtime, admin_token=None, readiness=service.readiness)
    try:
        with ServerThread(app) as server, httpx.Client(base_url=server.url) as c:
            c.post("/v1/telemetry", json={"target": "h100-8b", "queue_depth": 0})
            for model in ("llama3.1-8b", "llama3.1-70b"):
                body = {"model": model, "prompt_tokens": 10, "max_new_tokens": 5}
                low = c.post("/v1/route", json={**body, "priority": "low"})
                assert low.status_code == 422, low.text
                assert low.json()["error"] == (
                    f"priority: no target serves {model} at priority 'low'; use one of "
                    "['high', 'normal']"
                )
                high = c.post("/v1/route", json={**body, "priority": "high"}).json()
                assert high["target"] == "h100-8b", high
            gateway = c.post(
                "/v1/completions",
                json={"model": "llama3.1-8b", "prompt": "hi", "max_tokens": 2},
                headers={"X-Slaguard-Priority": "low"},
            )
            assert gateway.status_code == 422
            error = gateway.json()["error"]
            assert error["message"].startswith("X-Slaguard-Priority: no target serves")
            assert error["param"] == "X-Slaguard-Priority"
    finally:
        service.close()
