"""Every fault kind changes the simulate report the way it should, against a fault-free run.

One synthetic 80-second trace (1,200 requests at 15/s, Azure-like lengths) on the default
fleet. Target-side faults run under round-robin, whose placement does not react to
latency, so the fault's own effect is measured; routing-side effects (fail, hot_prompt)
run under the learned policy too.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import fleet_of
from test_engine_support import SimRun, run_sim

from slaguard.fleet import Fleet, load_fleet
from slaguard.scheduler.config import SchedulerConfig
from slaguard.sim.results import Status
from slaguard.sim.synthetic import synthetic_trace
from slaguard.sim.trace import Trace

START, END = 20.0, 60.0


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    return load_fleet()


@pytest.fixture(scope="module")
def trace() -> Trace:
    return synthetic_trace(1200, 15.0, seed=3)


@pytest.fixture(scope="module")
def base_rr(trace: Trace, fleet: Fleet) -> SimRun:
    return run_sim(trace, fleet, "round-robin")


@pytest.fixture(scope="module")
def base_learned(trace: Trace, fleet: Fleet) -> SimRun:
    return run_sim(trace, fleet, "learned")


def _arrived(run: SimRun, lo: float, hi: float) -> np.ndarray:
    return (run.results.arrival_s >= lo) & (run.results.arrival_s < hi)


def _on(run: SimRun, fleet: Fleet, target_id: str) -> np.ndarray:
    return run.results.target == fleet.target(target_id).index


def test_jitter_on_a_card_type_raises_that_card_types_ttft_p99(
    trace: Trace, fleet: Fleet, base_rr: SimRun
) -> None:
    faults = (
        f"faults:\n - {{kind: jitter, target: l40s, start_s: {START}, end_s: {END}, factor: 3}}"
    )
    run = run_sim(trace, fleet, "round-robin", faults)
    before, after = base_rr.report["by_card_type"], run.report["by_card_type"]
    assert after["l40s"]["ttft_p99_s"] > 2.0 * before["l40s"]["ttft_p99_s"]
    for card in ("h100", "h200", "a100", "ascend910b"):
        assert after[card]["ttft_p99_s"] == pytest.approx(before[card]["ttft_p99_s"], rel=0.1)
    # only while the window lasts: L40S requests that arrived before it are untouched
    early = _arrived(run, 0, START - 5) & np.isin(
        run.results.target, [t.index for t in fleet if t.card.id == "l40s"]
    )
    assert np.array_equal(run.results.ttft_s[early], base_rr.results.ttft_s[early])


def test_jitter_on_one_target_raises_that_targets_ttft_p99(
    trace: Trace, fleet: Fleet, base_rr: SimRun
) -> None:
    faults = "faults:\n - {kind: jitter, target: h100-8b-0, start_s: 20, end_s: 60, factor: 3}"
    run = run_sim(trace, fleet, "round-robin", faults)
    before, after = base_rr.report["by_target"], run.report["by_target"]
    assert after["h100-8b-0"]["ttft_p99_s"] > 1.5 * before["h100-8b-0"]["ttft_p99_s"]
    assert after["h100-8b-1"]["ttft_p99_s"] == pytest.approx(
        before["h100-8b-1"]["ttft_p99_s"], rel=0.1
    )
    # the in-window TTFT of the jittered target's requests rises by about the factor
    window = _arrived(run, START, END) & _on(run, fleet, "h100-8b-0")
    ratio = np.median(run.results.ttft_s[window]) / np.median(base_rr.results.ttft_s[window])
    assert 2.0 < ratio < 4.0


def test_fault_windows_are_trace_seconds_at_any_rate_scale(trace: Trace, fleet: Fleet) -> None:
    """At rate scale 2 the trace's [20, 60) s window is simulated [10, 30) s."""
    faults = "faults:\n - {kind: jitter, target: l40s, start_s: 20, end_s: 60, factor: 3}"
    base = run_sim(trace, fleet, "round-robin", rate_scale=2.0)
    run = run_sim(trace, fleet, "round-robin", faults, rate_scale=2.0)
    l40s = np.isin(run.results.target, [t.index for t in fleet if t.card.id == "l40s"])
    before = l40s & _arrived(run, 0, 9.5)
    during = l40s & _arrived(run, 10.5, 29.5)
    assert np.array_equal(run.results.ttft_s[before], base.results.ttft_s[before])
    slower = np.median(run.results.ttft_s[during]) / np.median(base.results.ttft_s[during])
    assert slower > 2.0


@pytest.mark.parametrize("policy", ["round-robin", "learned"])
def test_fail_moves_traffic_and_fails_what_was_in_flight(
    trace: Trace, fleet: Fleet, policy: str, base_rr: SimRun, base_learned: SimRun
) -> None:
    base = base_rr if policy == "round-robin" else base_learned
    faults = "faults:\n - {kind: fail, target: h100-8b-0, start_s: 20, end_s: 60}"
    run = run_sim(trace, fleet, policy, faults)
    res, failed_target = run.results, _on(run, fleet, "h100-8b-0")
    stale_s = SchedulerConfig().router.stale_after_s or 0.0
    # routed to it while the fleet still believed it alive (<= stale period): those fail
    assert (res.status[_arrived(run, START, END) & failed_target] == Status.FAILED).all()
    after_stale = _arrived(run, START + stale_s + 0.1, END)
    assert (after_stale & failed_target).sum() == 0
    failed = res.status == Status.FAILED
    assert run.report["requests"]["failed"] == failed.sum() > 0
    assert (res.arrival_s[failed] < START + stale_s + 0.1).all()
    assert failed_target[failed].all()
    in_flight = failed & (res.arrival_s < START)
    assert in_flight.sum() > 0, "requests running on the target when it died fail"
    assert run.report["requests"]["rejected"] == 0
    # its traffic moves to the other llama3.1-8b targets, and comes back after the window
    moved = after_stale & (res.status == Status.OK)
    assert moved.sum() == _arrived(base, START + stale_s + 0.1, END).sum()
    assert (_arrived(run, END + 1, np.inf) & failed_target).sum() > 0


def test_hot_prompt_raises_the_top_prefix_share_and_its_home_targets_work(
    trace: Trace, fleet: Fleet, base_learned: SimRun
) -> None:
    """The home gets >= 1.5x the prompt tokens; its TTFT need not rise, since copies reuse
    the cached prompt from the first one's first token."""
    faults = (
        "faults:\n - {kind: hot_prompt, start_s: 20, end_s: 60, share: 0.3, prompt_tokens: 6000}"
    )
    run = run_sim(trace, fleet, "learned", faults)
    keys = run.workload.trace.prefix_key
    window = _arrived(run, START, END)
    assert not (base_learned.workload.trace.prefix_key >= 0).any()
    values, counts = np.unique(keys[window & (keys >= 0)], return_counts=True)
    hot = keys == values[counts.argmax()]
    assert 0.22 < hot[window].mean() < 0.38  # share 0.3 of the window's arrivals
    assert (run.workload.trace.prompt_tokens[hot] == 6000).all()
    # prefix affinity concentrates the hot prompt on its home target
    per_target = np.bincount(run.results.target[hot], minlength=len(fleet))
    home = int(per_target.argmax())
    assert per_target[home] > 0.25 * hot.sum()
    routed_tokens = [
        int(
            r.workload.trace.prompt_tokens[
                _arrived(r, START, END) & (r.results.target == home)
            ].sum()
        )
        for r in (base_learned, run)
    ]
    assert routed_tokens[1] > 1.5 * routed_tokens[0]


def test_a_prompt_is_reusable_from_its_first_token_not_from_its_end() -> None:
    """Copies of a long prompt arriving while the first still decodes reuse its prefix
    (vLLM and SGLang cache computed blocks): ~0.015 s TTFT instead of a full ~0.32 s
    prefill each, which is what they paid when blocks were cached at the request's end."""
    one = fleet_of({"id": "h100-8b", "model": "llama3.1-8b", "card": "h100"})
    blocks = list(range(100, 112))  # 12 blocks of 512 tokens: the whole 6,144-token prompt
    flood = Trace.build("flood", "test", [0.0, 1.0, 2.0, 3.0], [6144] * 4, [400] * 4,
                        [blocks] * 4)  # fmt: skip
    run = run_sim(flood, one, "learned")
    res = run.results
    ttft = res.ttft_s
    assert res.first_token_s[0] < 1.0 < res.arrival_s[0] + res.e2e_s[0]  # first still runs
    assert ttft[0] > 0.25
    assert (ttft[1:] < ttft[0] / 10).all()


def test_new_model_raises_that_models_ttft_from_start(
    trace: Trace, fleet: Fleet, base_rr: SimRun
) -> None:
    faults = "faults:\n - {kind: new_model, model: llama3.1-70b, start_s: 30, latency_factor: 1.8}"
    run = run_sim(trace, fleet, "round-robin", faults)
    wl = run.workload
    big = wl.model_code == wl.model_ids.index("llama3.1-70b")
    before = big & _arrived(run, 0, 25)
    after = big & _arrived(run, 30, np.inf)
    assert np.array_equal(run.results.ttft_s[before], base_rr.results.ttft_s[before])
    ratio = np.median(run.results.ttft_s[after]) / np.median(base_rr.results.ttft_s[after])
    assert ratio > 1.6
    small_after = ~big & _arrived(run, 30, np.inf)
    assert np.median(run.results.ttft_s[small_after]) == pytest.approx(
        np.median(base_rr.results.ttft_s[small_after]), rel=0.1
    )


def test_load_spike_raises_arrivals_and_ttft_in_the_window(
    trace: Trace, fleet: Fleet, base_rr: SimRun
) -> None:
    faults = "faults:\n - {kind: load_spike, start_s: 20, end_s: 50, factor: 2.5}"
    run = run_sim(trace, fleet, "round-robin", faults)
    n_before, n_after = _arrived(base_rr, 20, 50).sum(), _arrived(run, 20, 50).sum()
    assert n_after == n_before + round(1.5 * n_before)
    assert run.report["requests"]["total"] == len(trace) + round(1.5 * n_before)
    assert _arrived(run, 0, 20).sum() == _arrived(base_rr, 0, 20).sum()
    early = _arrived(run, 0, 15)
    assert np.array_equal(
        run.results.ttft_s[early], base_rr.results.ttft_s[_arrived(base_rr, 0, 15)]
    )
    assert run.ttft_p99(_arrived(run, 20, 50)) > 3.0 * base_rr.ttft_p99(_arrived(base_rr, 20, 50))
    assert run.report["ttft_s"]["p99"] > base_rr.report["ttft_s"]["p99"]
