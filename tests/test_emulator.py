"""The backend emulator on a real server: pacing, continuous batching, metrics, faults."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest
from helpers import wait_for

from slaguard.emulator.app import create_emulator_app
from slaguard.fleet import Target, build_fleet
from slaguard.service.local import ServerThread
from slaguard.service.telemetry_scraper import BackendPicture, parse_vllm_metrics
from slaguard.sim.latency import LatencyModel

MODEL = "llama3.1-8b"


def _target(card: str = "l40s") -> Target:
    return build_fleet({"targets": [{"id": f"{card}-8b", "model": MODEL, "card": card}]}).targets[0]


_APP = create_emulator_app(_target())


@pytest.fixture(scope="module")
def emu() -> Iterator[str]:
    with ServerThread(_APP) as server:
        yield server.url


def _chat(chars: int, max_tokens: int, stream: bool = True) -> dict[str, object]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": "x" * chars}],
        "max_tokens": max_tokens,
        "stream": stream,
        "stream_options": {"include_usage": True},
    }


async def _ttft(client: httpx.AsyncClient, url: str, chars: int, tokens: int) -> float:
    started = time.perf_counter()
    async with client.stream("POST", f"{url}/v1/chat/completions", json=_chat(chars, tokens)) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if '"content":"tok' in line:
                return time.perf_counter() - started
    raise AssertionError("no token")


async def _ttft_then_drain(client: httpx.AsyncClient, url: str, chars: int, tokens: int) -> float:
    """TTFT, then read the stream to its end so the request stays active meanwhile."""
    started = time.perf_counter()
    first: float | None = None
    async with client.stream("POST", f"{url}/v1/chat/completions", json=_chat(chars, tokens)) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if first is None and '"content":"tok' in line:
                first = time.perf_counter() - started
    assert first is not None, "no token"
    return first


def test_stream_is_paced_by_the_latency_model(emu: str) -> None:
    lat = LatencyModel.load().for_target(_target())
    expected_first = lat.prefill_s(1001)
    expected_step = lat.decode_step_s(1, 1010)
    started = time.perf_counter()
    with httpx.Client(timeout=30) as c:
        r = c.post(f"{emu}/v1/chat/completions", json=_chat(4000, 20))
    took = time.perf_counter() - started
    events = [x for x in r.text.split("\n\n") if x.startswith("data: {")]
    assert len(events) == 21  # 20 tokens + the usage event
    assert r.text.endswith("data: [DONE]\n\n")
    assert '"completion_tokens": 20' in events[-1] and '"prompt_tokens": 1001' in events[-1]
    want = expected_first + 19 * expected_step
    assert want * 0.9 < took < want * 1.6 + 0.1, (took, want)


def test_whole_answer_and_unknown_model(emu: str) -> None:
    with httpx.Client(timeout=30) as c:
        r = c.post(f"{emu}/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 3})
        assert r.json()["usage"]["completion_tokens"] == 3
        assert r.json()["choices"][0]["text"] == "tok tok tok "
        assert (
            c.post(f"{emu}/v1/completions", json={"model": "x", "prompt": "a"}).status_code == 404
        )
        assert c.get(f"{emu}/v1/models").json()["data"][0]["id"] == MODEL


def test_continuous_batching_prefills_together_and_reports_load(emu: str) -> None:
    async def run() -> tuple[list[float], float, BackendPicture]:
        async with httpx.AsyncClient(timeout=60) as c:
            single = await _ttft_then_drain(c, emu, 400, 2)  # finished before the eight
            # long generations: all eight are still decoding while /metrics is polled,
            # however slowly a loaded machine sends them
            tasks = [asyncio.create_task(_ttft_then_drain(c, emu, 400, 400)) for _ in range(8)]
            deadline = time.monotonic() + 20.0
            picture = parse_vllm_metrics((await c.get(f"{emu}/metrics")).text)
            while picture.running < 8 and time.monotonic() < deadline:
                picture = parse_vllm_metrics((await c.get(f"{emu}/metrics")).text)
            ttfts = await asyncio.gather(*tasks)
            return ttfts, single, picture

    ttfts, single, picture = asyncio.run(run())
    lat = LatencyModel.load().for_target(_target())
    # eight prompts prefilled in one or two passes, not eight sequential ones
    assert max(ttfts) < 3 * lat.prefill_many_s([(101, 0)] * 8) + 0.05
    assert max(ttfts) < 8 * single
    assert picture.queue_depth == 8
    assert picture.kv_usage_ratio == pytest.approx(8 * (101 + 400) / 199_127, rel=0.01)


def test_fault_switches(emu: str) -> None:
    async def run() -> None:
        async with httpx.AsyncClient(timeout=30) as c:
            base = await _ttft(c, emu, 8000, 2)
            r = await c.post(f"{emu}/admin/slowdown", json={"factor": 5})
            assert r.json()["slowdown"] == 5
            slow = await _ttft(c, emu, 8000, 2)
            assert 3.5 * base < slow < 7 * base, (base, slow)
            await c.post(f"{emu}/admin/fail", json={"mode": "refuse"})
            refused = await c.post(f"{emu}/v1/chat/completions", json=_chat(10, 2))
            assert refused.status_code == 503
            await c.post(f"{emu}/admin/fail", json={"mode": "break"})
            got: list[str] = []
            with pytest.raises(httpx.RemoteProtocolError):
                async with c.stream("POST", f"{emu}/v1/chat/completions", json=_chat(10, 5)) as s:
                    async for line in s.aiter_lines():
                        got.append(line)
            assert sum('"content":"tok' in x for x in got) == 1
            assert (await c.post(f"{emu}/admin/recover")).json()["fail"] == "none"
            ok = await c.post(f"{emu}/v1/chat/completions", json=_chat(10, 2, stream=False))
            assert ok.status_code == 200
            bad = await c.post(f"{emu}/admin/slowdown", json={"factor": -1})
            assert bad.status_code == 422

    asyncio.run(run())


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"prompt": 12}, "prompt must be"),
        ({"prompt": None}, "prompt must be"),
        ({"messages": "hi"}, "messages must be"),
        ({"prompt": "hi", "max_tokens": 10**8}, "maximum context length is 131072 tokens"),
    ],
)
def test_malformed_requests_are_the_clients_mistake(
    emu: str, body: dict[str, object], error: str
) -> None:
    r = httpx.post(f"{emu}/v1/completions", json={"model": MODEL, **body}, timeout=30)
    assert r.status_code == 400 and error in r.json()["detail"], r.text
    assert not _APP.state.engine.running and not _APP.state.engine.waiting


def test_a_client_leaving_a_whole_answer_frees_its_place(emu: str) -> None:
    body = {"model": MODEL, "prompt": "hi", "max_tokens": 20_000}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{emu}/v1/completions", json=body, timeout=0.5)
    engine = _APP.state.engine
    wait_for("the abandoned request to leave the batch", lambda: not engine.running, 5.0)
    assert engine.kv_reserved == 0


def test_fault_switches_take_json_whatever_the_content_type(emu: str) -> None:
    """`curl -XPOST :PORT/admin/fail -d '{"mode":"refuse"}'`, as docs/service.md shows it,
    sends a form content type: it got a 422 "Input should be a valid dictionary"."""
    form = {"content-type": "application/x-www-form-urlencoded"}
    try:
        r = httpx.post(f"{emu}/admin/fail", content=b'{"mode":"refuse"}', headers=form)
        assert (r.status_code, r.json()["fail"]) == (200, "refuse"), r.text
        r = httpx.post(f"{emu}/admin/slowdown", content=b'{"factor":2}', headers=form)
        assert (r.status_code, r.json()["slowdown"]) == (200, 2), r.text
        bad = httpx.post(f"{emu}/admin/fail", content=b'{"mode":"melt"}', headers=form)
        assert bad.status_code == 422 and bad.json()["detail"].startswith("mode: "), bad.text
    finally:
        httpx.post(f"{emu}/admin/recover")
