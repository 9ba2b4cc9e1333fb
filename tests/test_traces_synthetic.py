"""Synthetic traces: seeded, with the arrival process and lengths they promise."""

from __future__ import annotations

import numpy as np
import pytest

from slaguard.sim.synthetic import synthetic_trace
from slaguard.sim.trace import BLOCK_TOKENS, NO_PREFIX


def test_same_seed_same_trace_other_seed_other_trace() -> None:
    a = synthetic_trace(500, 5.0, seed=7, shared_prefix_share=0.5)
    b = synthetic_trace(500, 5.0, seed=7, shared_prefix_share=0.5)
    c = synthetic_trace(500, 5.0, seed=8, shared_prefix_share=0.5)
    assert np.array_equal(a.arrival_s, b.arrival_s)
    assert np.array_equal(a.blocks, b.blocks) and np.array_equal(a.prefix_key, b.prefix_key)
    assert not np.array_equal(a.arrival_s, c.arrival_s)


def test_poisson_rate_and_lognormal_medians() -> None:
    trace = synthetic_trace(20_000, 10.0, prompt_median=1000, output_median=100, seed=1)
    assert trace.arrival_s[0] == 0.0
    assert len(trace) / trace.duration_s == pytest.approx(10.0, rel=0.03)
    gaps = np.diff(trace.arrival_s)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)
    assert float(np.median(trace.prompt_tokens)) == pytest.approx(1000, rel=0.05)
    assert float(np.median(trace.output_tokens)) == pytest.approx(100, rel=0.05)
    assert not trace.has_prefixes


@pytest.mark.parametrize("cv", [0.5, 2.0, 4.0])
def test_gamma_arrivals_have_the_requested_burstiness(cv: float) -> None:
    trace = synthetic_trace(40_000, 5.0, arrivals="gamma", cv=cv, seed=3)
    gaps = np.diff(trace.arrival_s)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.1)
    assert len(trace) / trace.duration_s == pytest.approx(5.0, rel=0.1)


def test_shared_prefixes_share_their_leading_blocks() -> None:
    trace = synthetic_trace(
        4000,
        5.0,
        shared_prefix_share=0.3,
        shared_prefixes=4,
        shared_prefix_blocks=2,
        seed=2,
        prompt_median=2048,
        prompt_sigma=0.3,
    )
    blocks = [trace.prefix_blocks(i) for i in range(len(trace))]
    assert all(
        len(b) == -(-int(p) // BLOCK_TOKENS)
        for b, p in zip(blocks, trace.prompt_tokens, strict=True)
    )
    shared = [b for b in blocks if b[0] < 8]
    assert len(shared) / len(blocks) == pytest.approx(0.3, abs=0.03)
    assert {b[:2] for b in shared if len(b) >= 2} == {(0, 1), (2, 3), (4, 5), (6, 7)}
    unique_tail = [x for b in blocks for x in b if x >= 8]
    assert len(unique_tail) == len(set(unique_tail))
    assert bool(np.all(trace.prefix_key != NO_PREFIX))


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="rate_per_s > 0"):
        synthetic_trace(10, 0.0)
    with pytest.raises(ValueError, match="shared_prefix_share"):
        synthetic_trace(10, 1.0, shared_prefix_share=1.5)
