"""Both real traces replay end to end; Mooncake's shared prefixes make first tokens sooner."""

from __future__ import annotations

import numpy as np
import pytest
from test_engine_support import AZURE_FIXTURE, MOONCAKE_FIXTURE, SimRun, run_sim
from test_traces import require_full

from slaguard.fleet import Fleet, load_fleet
from slaguard.scheduler.rollout import RolloutPlan
from slaguard.sim import paths
from slaguard.sim.observers import RolloutController
from slaguard.sim.results import Status
from slaguard.sim.trace import Trace
from slaguard.sim.traces import load_trace


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    return load_fleet()


def _check_complete(run: SimRun, trace: Trace) -> None:
    report = run.report
    assert report["trace"]["requests"] == report["requests"]["total"] == len(trace)
    assert report["trace"]["duration_s"] == pytest.approx(trace.duration_s)
    assert report["requests"]["completed"] == len(trace)
    assert (run.results.status == Status.OK).all()
    assert run.results.sim_s > trace.duration_s
    served = sum(v["requests"] for v in report["by_card_type"].values())
    assert served == len(trace)


@pytest.mark.parametrize("policy", ["round-robin", "learned"])
def test_azure_excerpt_replays_end_to_end(fleet: Fleet, policy: str) -> None:
    trace = load_trace(AZURE_FIXTURE)
    run = run_sim(trace, fleet, policy)
    _check_complete(run, trace)
    arm = "round_robin" if policy == "round-robin" else "learned"
    assert run.report["sla"]["by_arm"][arm]["requests"] == len(trace)
    # light load (about 5 requests/s on 19 targets): every first token well inside 1.5 s
    assert run.report["sla"]["violation_rate"] == 0.0
    assert run.report["ttft_s"]["p99"] < 1.5


def test_azure_excerpt_under_the_rollout_plan_splits_arms(fleet: Fleet) -> None:
    trace = load_trace(AZURE_FIXTURE)
    plan = RolloutPlan(baseline_s=10.0, stage_s=5.0)
    run = run_sim(trace, fleet, RolloutController(plan))
    _check_complete(run, trace)
    by_arm = run.report["sla"]["by_arm"]
    assert by_arm["round_robin"]["requests"] + by_arm["learned"]["requests"] == len(trace)
    learned = run.results.arm == 1
    assert not learned[run.results.arrival_s < 10.0].any()
    assert learned[run.results.arrival_s >= 25.0].all()


@pytest.mark.parametrize("policy", ["round-robin", "learned"])
def test_mooncake_excerpt_replays_end_to_end(fleet: Fleet, policy: str) -> None:
    trace = load_trace(MOONCAKE_FIXTURE)
    run = run_sim(trace, fleet, policy)
    _check_complete(run, trace)
    # long prompts (median 8.9k tokens, up to 121k) take seconds of prefill even alone
    assert 0.2 < run.report["sla"]["violation_rate"] < 0.6


def _strip_prefixes(trace: Trace) -> Trace:
    columns = (trace.arrival_s, trace.prompt_tokens, trace.output_tokens)
    return Trace.build(trace.name, trace.source, *columns, None, trace.row_id)


def _reuses_more_than_the_system_prefix(trace: Trace) -> np.ndarray:
    """Requests whose first two blocks an earlier request already carried."""
    seen: set[tuple[int, ...]] = set()
    out = np.zeros(len(trace), dtype=bool)
    for i in range(len(trace)):
        head = trace.prefix_blocks(i)[:2]
        out[i] = len(head) == 2 and head in seen
        seen.add(head)
    return out


def test_mooncake_prefix_reuse_lowers_ttft(fleet: Fleet) -> None:
    """Same requests, same arrivals, same lengths: only the prefix blocks differ. Slowed
    down to 0.2x so queueing does not hide the prefill saved."""
    trace = load_trace(MOONCAKE_FIXTURE)
    with_prefix = run_sim(trace, fleet, "learned", rate_scale=0.2)
    stripped = run_sim(_strip_prefixes(trace), fleet, "learned", rate_scale=0.2)
    a, b = with_prefix.results, stripped.results
    assert np.mean(a.ttft_s) < np.mean(b.ttft_s)
    assert np.median(a.ttft_s) < np.median(b.ttft_s)
    assert a.busy_s.sum() < b.busy_s.sum(), "cached blocks are not computed again"
    returning = _reuses_more_than_the_system_prefix(trace)
    assert returning.sum() >= 5
    assert np.mean(a.ttft_s[returning]) < 0.95 * np.mean(b.ttft_s[returning])
    assert with_prefix.report["sla"]["violation_rate"] < stripped.report["sla"]["violation_rate"]


def test_first_five_minutes_of_both_full_traces(fleet: Fleet) -> None:
    """The one test on the full files (a few seconds); the whole hours run in bench/."""
    azure = load_trace(require_full(paths.default_trace_path())).between(0.0, 300.0)
    run = run_sim(azure, fleet, "learned")
    assert len(azure) == 1445
    _check_complete(run, azure)
    assert run.report["sla"]["violation_rate"] < 0.01
    mooncake = load_trace(require_full(paths.mooncake_trace_path())).between(0.0, 300.0)
    run = run_sim(mooncake, fleet, "learned")
    requests = run.report["requests"]
    assert requests["total"] == len(mooncake) == 918
    assert requests["completed"] > 0.95 * len(mooncake)
    assert requests["completed"] + requests["rejected"] + requests["failed"] == len(mooncake)
