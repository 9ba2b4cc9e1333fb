"""The service's per-request path: the endpoints that skip FastAPI's router keep its
contract, pending decisions stay out of the garbage collector's way, ids are unique, the
SSE meter and the scraper's line filter read what they should.

A real service (real SQLite audit DB, real uvicorn on 127.0.0.1) answers over HTTP.
"""

from __future__ import annotations

import asyncio
import gc
import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from fastapi import Request, Response
from pydantic import SecretStr

from slaguard.fleet import Priority
from slaguard.service.app import create_app
from slaguard.service.bootstrap import Service, build_service
from slaguard.service.config import load_config
from slaguard.service.hotpath import MAX_BODY_BYTES, HotPathApp
from slaguard.service.local import ServerThread
from slaguard.service.sse_meter import StreamMeter
from slaguard.service.telemetry_scraper import ScrapeError, parse_vllm_metrics

FLEET = {
    "name": "hotpath-test",
    "targets": [
        {"id": "h100-8b", "model": "llama3.1-8b", "card": "h100"},
        {"id": "l40s-8b", "model": "llama3.1-8b", "card": "l40s", "count": 2},
    ],
}
ROUTE = {"model": "llama3.1-8b", "prompt_tokens": 500, "max_new_tokens": 50}


def _service(tmp: Path) -> Service:
    (tmp / "fleet.yaml").write_text(yaml.safe_dump(FLEET))
    cfg = load_config(
        None,
        {
            "fleet": tmp / "fleet.yaml",
            "db": str(tmp / "audit.db"),
            "telemetry": {"scrape": False, "stale_after_s": 300},
            "notify_file": tmp / "incidents.jsonl",
        },
    )
    return build_service(cfg)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, httpx.Client]]:
    service = _service(tmp_path_factory.mktemp("hotpath"))
    app = create_app(service.runtime, admin_token=None, readiness=service.readiness)
    with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=10) as client:
        for t in service.runtime.fleet:
            client.post("/v1/telemetry", json={"target": t.id, "queue_depth": 0})
        yield service, client
    service.close()


def test_other_methods_on_hot_paths_still_get_405(served: tuple[Service, httpx.Client]) -> None:
    _, client = served
    for path in ("/v1/route", "/v1/feedback", "/v1/chat/completions"):
        r = client.get(path)
        assert r.status_code == 405, (path, r.status_code, r.text)


def test_healthz_answers_on_the_hot_path(served: tuple[Service, httpx.Client]) -> None:
    _, client = served
    r = client.get("/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    assert r.headers["content-type"] == "application/json"
    assert client.post("/healthz").status_code == 405


def test_a_body_arriving_in_many_pieces_is_read_whole(served: tuple[Service, httpx.Client]) -> None:
    _, client = served
    body = json.dumps(ROUTE).encode()
    padded = body[:-1] + b" " * 1_000_000 + b"}"  # ~1 MB: many socket reads
    r = client.post("/v1/route", content=padded, headers={"content-type": "application/json"})
    assert r.status_code == 200 and r.json()["target"] is not None


def test_a_body_past_the_limit_is_a_413_and_routing_goes_on(
    served: tuple[Service, httpx.Client],
) -> None:
    """A 100 MB body took 3.4 GB of memory and stalled routing for seconds before its 422."""
    _, client = served
    body = json.dumps(ROUTE).encode()
    big = body[:-1] + b" " * (MAX_BODY_BYTES + 1) + b"}"

    def pieces() -> Iterator[bytes]:  # chunked: no content-length to refuse it by
        for at in range(0, len(big), 1 << 20):
            yield big[at : at + (1 << 20)]

    for path in ("/v1/route", "/v1/feedback", "/v1/telemetry"):
        r = client.post(path, content=big, headers={"content-type": "application/json"})
        assert r.status_code == 413 and "MiB" in r.json()["error"], (path, r.text)
    r = client.post("/v1/route", content=pieces(), headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert client.post("/v1/route", json=ROUTE).json()["target"] is not None


def test_unexpected_error_in_a_hot_endpoint_is_a_json_500() -> None:
    async def broken(request: Request) -> Response:
        raise RuntimeError("boom")

    endpoints = {("GET", "/broken"): broken, ("GET", "/v1/broken"): broken}
    app = HotPathApp(hot_endpoints=endpoints, openai_paths=["/v1/broken"])
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)

    async def call(path: str) -> httpx.Response:
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await client.get(path)

    r = asyncio.run(call("/broken"))
    assert r.status_code == 500 and r.json() == {"error": "internal error"}
    r = asyncio.run(call("/v1/broken"))  # an OpenAI-compatible path: OpenAI's shape
    assert r.status_code == 500 and r.json() == {
        "error": {"message": "internal error", "type": "server_error", "param": None, "code": None}
    }


def test_bad_explain_flag_names_the_parameter(served: tuple[Service, httpx.Client]) -> None:
    service, client = served
    before = len(service.runtime.pending)
    r = client.post("/v1/route?explain=maybe", json=ROUTE)
    assert r.status_code == 422 and r.json()["error"].startswith("explain:"), r.json()
    assert len(service.runtime.pending) == before
    for flag, present in (("1", True), ("true", True), ("0", False), ("off", False)):
        out = client.post(f"/v1/route?explain={flag}", json=ROUTE).json()
        assert (out.get("explanation") is not None) is present, (flag, out)


def test_not_json_and_not_an_object_are_422(served: tuple[Service, httpx.Client]) -> None:
    _, client = served
    for path in ("/v1/route", "/v1/feedback", "/v1/chat/completions", "/v1/telemetry"):
        for raw in (b"\xff\xfe", b"[1, 2]", b""):
            r = client.post(path, content=raw, headers={"content-type": "application/json"})
            assert r.status_code == 422 and r.json()["error"], (path, raw, r.text)


def test_a_telemetry_push_is_json_whatever_its_content_type(
    served: tuple[Service, httpx.Client],
) -> None:
    """It alone went through FastAPI's body parsing: `curl -d` (form content type) was a
    422 about a dictionary, invalid UTF-8 a 400 naming no field."""
    _, client = served
    body = json.dumps({"target": "h100-8b", "queue_depth": 0}).encode()
    r = client.post("/v1/telemetry", content=body, headers={"content-type": "text/plain"})
    assert r.status_code == 200 and r.json() == {"target": "h100-8b", "accepted": True}
    unknown = client.post("/v1/telemetry", json={"target": "nope", "queue_depth": 0})
    assert unknown.status_code == 422 and unknown.json()["error"].startswith("target: ")


def test_openapi_publishes_the_hot_bodies(served: tuple[Service, httpx.Client]) -> None:
    _, client = served
    doc = client.get("/openapi.json").json()
    assert "#/$defs" not in str(doc)

    def body_fields(path: str) -> set[str]:
        body = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]
        return set(body["schema"]["properties"])

    assert {"model", "prompt_tokens", "max_new_tokens", "request_id"} <= body_fields("/v1/route")
    assert {"decision_id", "status", "ttft_s"} <= body_fields("/v1/feedback")
    assert {"model", "messages", "stream"} <= body_fields("/v1/chat/completions")
    route_params = {p["name"] for p in doc["paths"]["/v1/route"]["post"]["parameters"]}
    assert route_params == {"explain"}
    chat = doc["paths"]["/v1/chat/completions"]["post"]
    assert {p["name"] for p in chat["parameters"]} == {
        "X-Slaguard-Priority",
        "X-Slaguard-Deadline-S",
        "X-Request-Id",
        "X-Slaguard-Prefix-Id",
    }
    items = chat["requestBody"]["content"]["application/json"]["schema"]["properties"]
    assert items["messages"]["items"]["required"] == ["role"]  # the nested model, inlined
    ok = doc["paths"]["/v1/route"]["post"]["responses"]["200"]["content"]["application/json"]
    assert ok["schema"]["$ref"].endswith("/RouteResponse")


def test_repeated_request_id_with_explain_answers_the_stored_explanation(
    served: tuple[Service, httpx.Client],
) -> None:
    _, client = served
    body = {**ROUTE, "request_id": "hot-repeat-1"}
    first = client.post("/v1/route?explain=1", json=body).json()
    again = client.post("/v1/route?explain=1", json=body).json()
    assert first["explanation"]["candidates"] and again == first
    plain = client.post("/v1/route", json=body).json()
    assert "explanation" not in plain
    assert plain == {k: v for k, v in first.items() if k != "explanation"}


def test_pending_decisions_are_invisible_to_the_garbage_collector(tmp_path: Path) -> None:
    service = _service(tmp_path)
    try:
        rt = service.runtime
        for t in rt.fleet:
            rt.scheduler.state.refresh(t.index, rt.clock(), queue_depth=0)

        def decide(n: int) -> None:
            for _ in range(n):
                req = rt.request(
                    model="llama3.1-8b",
                    prompt_tokens=100,
                    max_new_tokens=10,
                    priority=Priority.NORMAL,
                    deadline_s=None,
                    request_id=None,
                    prefix_id=None,
                )
                rt.decide(req, record=False)

        decide(200)
        gc.collect()
        before = len(gc.get_objects())
        decide(5000)
        gc.collect()
        grown = len(gc.get_objects()) - before
        assert len(rt.pending) == 5200
        # The scheduler's Decision would be 5 tracked objects each (25,000 here).
        assert grown < 500, grown
        assert not any(gc.is_tracked(e) for e in list(rt.pending.values())[-100:])
    finally:
        service.close()


def test_decision_ids_are_unique_within_and_across_runtimes(tmp_path: Path) -> None:
    ids: set[str] = set()
    for run in ("a", "b"):
        (tmp_path / run).mkdir()
        service = _service(tmp_path / run)
        try:
            for _ in range(2000):
                ids.add(service.runtime.new_decision_id())
        finally:
            service.close()
    assert len(ids) == 4000
    assert all(len(i) == 48 and int(i, 16) >= 0 for i in ids)


def test_learned_arm_feedback_reaches_the_learner(tmp_path: Path) -> None:
    """The pending entry keeps the chosen components: feedback of a learned-arm decision
    feeds the learner (a failure too), a round-robin one does not."""
    service = _service(tmp_path)
    token = "t" * 32
    app = create_app(service.runtime, admin_token=SecretStr(token), readiness=service.readiness)
    auth = {"Authorization": f"Bearer {token}"}
    try:
        with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=10) as c:
            for t in service.runtime.fleet:
                c.post("/v1/telemetry", json={"target": t.id, "queue_depth": 0})
            learner = service.runtime.scheduler.learner
            rr = c.post("/v1/route", json=ROUTE).json()
            assert rr["arm"] == "round_robin"
            c.post("/v1/feedback", json={"decision_id": rr["decision_id"], "ttft_s": 0.1})
            assert learner.pending == 0
            r = c.post(
                "/v1/mode",
                json={"action": "resume", "reason": "test", "stage_pct": 100},
                headers=auth,
            )
            assert r.status_code == 200, r.text
            ids = []
            for _ in range(5):
                out = c.post("/v1/route", json=ROUTE).json()
                assert out["arm"] == "learned" and out["target"] is not None, out
                ids.append(out["decision_id"])
            for i, decision_id in enumerate(ids):
                fb = {"decision_id": decision_id, "ttft_s": 0.2}
                if i == 0:
                    fb = {"decision_id": decision_id, "status": "failed"}
                assert c.post("/v1/feedback", json=fb).json()["recorded"] is True
            assert learner.pending == 5
    finally:
        service.close()


def _sse(*events: str) -> bytes:
    return b"".join(b"data: " + e.encode() + b"\n\n" for e in events)


def test_stream_meter_counts_tokens_usage_and_skips_what_it_cannot_read() -> None:
    meter = StreamMeter(time.perf_counter())
    chunks = _sse(
        '{"choices":[{"delta":{"role":"assistant"}}]}',
        '{"choices":[{"delta":{"content":"Hel"}}]}',
        "not json",
        '{"choices":[{"delta":{"content":"lo"}}],"usage":"garbage"}',
        '{"choices":null}',
        '{"choices":[{"index":0,"text":"!","logprobs":null}]}',
        '{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}',
        "[DONE]",
    )
    # split mid-line: the meter keeps the tail until the rest arrives
    for i in range(0, len(chunks), 37):
        meter.feed(chunks[i : i + 37])
    assert meter.events == 2  # "Hel" and "!" (the "lo" event has an unreadable usage)
    assert meter.first_token_at is not None and meter.first_token_at >= meter.started
    assert meter.usage == {"prompt_tokens": 7, "completion_tokens": 3}


VLLM_PAGE = """\
# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="a"} 3.0
vllm:num_requests_running{model_name="b"} 2.0
# HELP vllm:num_requests_running_total A longer name sharing the prefix.
# TYPE vllm:num_requests_running_total counter
vllm:num_requests_running_total{model_name="a"} 999.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="a"} 4.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="a"} 0.25
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
{buckets}vllm:time_to_first_token_seconds_sum{{model_name="a"}} 12.5
vllm:time_to_first_token_seconds_count{{model_name="a"}} 40.0
"""


def _page() -> str:
    buckets = "".join(
        f'vllm:time_to_first_token_seconds_bucket{{le="{le}",model_name="a"}} {i}.0\n'
        for i, le in enumerate(("0.01", "0.1", "1.0", "+Inf"))
    )
    return VLLM_PAGE.replace("{buckets}", buckets).replace("{{", "{").replace("}}", "}")


def test_scraper_reads_only_its_three_families_summed_over_label_sets() -> None:
    picture = parse_vllm_metrics(_page())
    assert (picture.running, picture.waiting, picture.kv_usage_ratio) == (5.0, 4.0, 0.25)
    assert picture.queue_depth == 9.0
    without_waiting = "\n".join(ln for ln in _page().splitlines() if "waiting" not in ln)
    with pytest.raises(ScrapeError, match="vllm:num_requests_waiting missing"):
        parse_vllm_metrics(without_waiting)
