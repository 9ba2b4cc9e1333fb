"""The demo's load generator against a real emulated backend: at the end it waits for the
answers in flight, and the ones still running after the bound are cut off, not errors."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from slaguard.emulator.app import create_emulator_app
from slaguard.emulator.loadgen import LoadGenerator
from slaguard.fleet import build_fleet
from slaguard.service.local import ServerThread
from slaguard.sim.trace import Trace

MODEL = "llama3.1-8b"
TRACE = Trace.build("four", "test", [0.0, 0.05, 0.1, 0.15], [200] * 4, [8] * 4)


@pytest.fixture(scope="module")
def emu() -> Iterator[str]:
    target = build_fleet({"targets": [{"id": "h100-8b", "model": MODEL, "card": "h100"}]})
    with ServerThread(create_emulator_app(target.targets[0])) as server:
        yield server.url


def _run(url: str, drain_s: float) -> LoadGenerator:
    gen = LoadGenerator(url, TRACE, model=MODEL, speedup=1.0)
    asyncio.run(gen.run(1.0, drain_s))
    return gen


def test_answers_in_flight_finish_before_the_generator_returns(emu: str) -> None:
    gen = _run(emu, drain_s=30.0)
    st = gen.stats
    assert (st.sent, st.ok, st.errors, st.cut_off, gen.in_flight) == (4, 4, 0, 0, 0)
    assert not gen.sending


def test_requests_still_running_after_the_drain_are_cut_off_not_errors(emu: str) -> None:
    # 1000x slower: a 200-token prefill takes tens of seconds, far beyond the 0.5 s drain
    assert httpx.post(f"{emu}/admin/slowdown", json={"factor": 1000}).status_code == 200
    try:
        gen = _run(emu, drain_s=0.5)
    finally:
        httpx.post(f"{emu}/admin/recover")
    st = gen.stats
    assert (st.sent, st.ok, st.errors, st.cut_off, gen.in_flight) == (4, 0, 0, 4, 0)
