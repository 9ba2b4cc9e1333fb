"""Arrival-side faults applied to traces: load spikes and hot prompts, seeded."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from slaguard.sim.arrival_faults import apply_arrival_faults, hot_prompt_blocks
from slaguard.sim.faults import parse_faults
from slaguard.sim.synthetic import synthetic_trace
from slaguard.sim.trace import NO_PREFIX, Trace
from slaguard.sim.traces import load_trace

FIXTURES = Path(__file__).parent / "fixtures"


def _in(trace: Trace, start: float, end: float) -> np.ndarray:  # type: ignore[type-arg]
    return (trace.arrival_s >= start) & (trace.arrival_s < end)


def _top_prefix_share(trace: Trace) -> float:
    keys = trace.prefix_key[trace.prefix_key != NO_PREFIX]
    if len(keys) == 0:
        return 0.0
    return float(np.unique(keys, return_counts=True)[1].max() / len(trace))


@pytest.fixture(scope="module")
def base() -> Trace:
    return synthetic_trace(6000, 10.0, seed=5)


def test_load_spike_multiplies_arrivals_in_the_window_only(base: Trace) -> None:
    spike = parse_faults("faults:\n  - {kind: load_spike, start_s: 100, end_s: 300, factor: 2.5}\n")
    out = apply_arrival_faults(base, spike, seed=1)
    inside = int(_in(base, 100, 300).sum())
    assert int(_in(out, 100, 300).sum()) == inside + round(1.5 * inside)
    assert np.array_equal(out.arrival_s[~_in(out, 100, 300)], base.arrival_s[~_in(base, 100, 300)])
    assert len(np.unique(out.row_id)) == len(out)
    assert bool(np.all(np.diff(out.arrival_s) >= 0))
    copies = out.row_id >= len(base)
    assert set(out.prompt_tokens[copies].tolist()) <= set(
        base.prompt_tokens[_in(base, 100, 300)].tolist()
    )
    again = apply_arrival_faults(base, spike, seed=1)
    other = apply_arrival_faults(base, spike, seed=2)
    assert np.array_equal(out.arrival_s, again.arrival_s)
    assert not np.array_equal(out.arrival_s, other.arrival_s)


def test_load_spike_below_one_thins_arrivals(base: Trace) -> None:
    lull = parse_faults("faults:\n  - {kind: load_spike, start_s: 0, end_s: 400, factor: 0.25}\n")
    out = apply_arrival_faults(base, lull, seed=0)
    inside = int(_in(base, 0, 400).sum())
    assert int(_in(out, 0, 400).sum()) == pytest.approx(0.25 * inside, rel=0.12)
    assert int((~_in(out, 0, 400)).sum()) == int((~_in(base, 0, 400)).sum())


def test_hot_prompt_replaces_a_share_with_one_identical_prompt(base: Trace) -> None:
    hot = parse_faults(
        "faults:\n  - {kind: hot_prompt, start_s: 60, end_s: 90, share: 0.3, prompt_tokens: 6000}\n"
    )
    out = apply_arrival_faults(base, hot, seed=3)
    assert len(out) == len(base) and np.array_equal(out.row_id, base.row_id)
    window = np.flatnonzero(_in(out, 60, 90))
    hot_rows = [i for i in window if out.prefix_key[i] != NO_PREFIX]
    assert len(hot_rows) / len(window) == pytest.approx(0.3, abs=0.06)
    assert {out.prefix_blocks(i) for i in hot_rows} == {tuple(hot_prompt_blocks(0, 6000))}
    assert len(hot_prompt_blocks(0, 6000)) == 12
    assert set(out.prompt_tokens[hot_rows].tolist()) == {6000}
    assert np.array_equal(out.output_tokens, base.output_tokens)
    outside = ~_in(out, 60, 90)
    assert bool(np.all(out.prefix_key[outside] == NO_PREFIX))
    assert np.array_equal(out.prompt_tokens[outside], base.prompt_tokens[outside])


def test_hot_prompt_raises_the_top_prefix_share_on_mooncake() -> None:
    trace = load_trace(FIXTURES / "mooncake_conv_200.jsonl")
    end = float(trace.arrival_s[-1]) + 1
    hot = parse_faults(
        f"faults:\n  - {{kind: hot_prompt, start_s: 0, end_s: {end}, share: 0.5,"
        " prompt_tokens: 3000, output_tokens: 7}\n"
    )
    out = apply_arrival_faults(trace, hot, seed=0)
    assert _top_prefix_share(trace) == pytest.approx(1 / 200)
    assert _top_prefix_share(out) == pytest.approx(0.5, abs=0.08)
    hot_rows = out.prefix_key == out.prefix_key[np.argmax(out.prompt_tokens == 3000)]
    assert set(out.output_tokens[hot_rows].tolist()) == {7}
    untouched = np.flatnonzero(~hot_rows)
    assert all(out.prefix_blocks(i) == trace.prefix_blocks(i) for i in untouched)


def test_spike_then_hot_prompt_apply_in_file_order(base: Trace) -> None:
    both = parse_faults(
        "faults:\n"
        "  - {kind: load_spike, start_s: 0, end_s: 50, factor: 2}\n"
        "  - {kind: hot_prompt, start_s: 0, end_s: 50, share: 1.0, prompt_tokens: 100}\n"
        "  - {kind: jitter, target: x, start_s: 0, end_s: 50, factor: 2}\n"
    )
    out = apply_arrival_faults(base, both, seed=0)
    window = _in(out, 0, 50)
    assert int(window.sum()) == 2 * int(_in(base, 0, 50).sum())
    assert len(set(out.prefix_key[window].tolist())) == 1
    assert set(out.prompt_tokens[window].tolist()) == {100}
