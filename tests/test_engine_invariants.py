"""Simulator invariants: determinism, one final status per request, physics, pinned numbers."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from helpers import fleet_of
from test_engine_support import (
    AZURE_FIXTURE,
    MOONCAKE_FIXTURE,
    SimRun,
    run_sim,
    without_wall_time,
)

from slaguard.fleet import Fleet, load_fleet
from slaguard.scheduler.explain import Decision
from slaguard.scheduler.rollout import LEARNED, ROUND_ROBIN, FleetMode
from slaguard.scheduler.weights import generation_of
from slaguard.sim.latency import LatencyModel
from slaguard.sim.observers import FixedPolicy
from slaguard.sim.replica import Replica
from slaguard.sim.results import STATUS_TEXT, OutcomeInfo, Status
from slaguard.sim.synthetic import synthetic_trace
from slaguard.sim.trace import BLOCK_TOKENS, Trace
from slaguard.sim.traces import load_trace

FAULTS = """faults:
  - {kind: jitter, target: l40s, start_s: 10, end_s: 30, factor: 3}
  - {kind: fail, target: h100-8b-0, start_s: 15, end_s: 35}
  - {kind: load_spike, start_s: 20, end_s: 30, factor: 2}
  - {kind: hot_prompt, start_s: 5, end_s: 25, share: 0.2, prompt_tokens: 3000}
"""
"""Every kind of fault except new_model (covered on its own) in one 40-second window."""


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    return load_fleet()


@pytest.fixture(scope="module")
def small_fleet() -> Fleet:
    """Two L40S cards: long prompts overflow their KV, so requests wait, get rejected, or
    are still running when the drain ends."""
    return fleet_of({"id": "l40s-8b", "model": "llama3.1-8b", "card": "l40s", "count": 2})


def _synthetic() -> Trace:
    return synthetic_trace(600, 15.0, seed=5)


def test_pinned_numbers_on_fixture_sized_runs(fleet: Fleet) -> None:
    """Any engine change that alters results must update these on purpose (speed-ups must
    not: they keep every number bit for bit)."""
    azure = run_sim(load_trace(AZURE_FIXTURE), fleet, "learned", rate_scale=4.0)
    moon = run_sim(load_trace(MOONCAKE_FIXTURE), fleet, "learned", rate_scale=2.0)
    faulty = run_sim(_synthetic(), fleet, "learned", FAULTS, seed=0)
    pinned = [
        (azure, 200, (200, 0, 0), 0, 17.942401243147998, 0.6247681307164371, 35.3, 0),
        (moon, 200, (200, 0, 0), 97, 4511.327370166995, 160.53758270260198, 320.3, 2),
        (faulty, 770, (754, 0, 16), 19, 215.50322593834113, 2.6901084112078837, 92.0, 0),
    ]
    for run, total, (ok, rejected, failed), violations, ttft_sum, p99, sim_s, wv in pinned:
        res, req = run.results, run.report["requests"]
        assert req == {"total": total, "completed": ok, "rejected": rejected, "failed": failed}
        assert int((~res.sla_met).sum()) == violations
        assert float(np.nansum(res.ttft_s)) == pytest.approx(ttft_sum, rel=1e-9)
        assert run.report["ttft_s"]["p99"] == pytest.approx(p99, rel=1e-9)
        assert res.sim_s == pytest.approx(sim_s)
        assert generation_of(run.sim.scheduler.weights.version) == wv


def test_same_seed_same_report_other_seed_other_arrivals(fleet: Fleet) -> None:
    first = run_sim(_synthetic(), fleet, "learned", FAULTS, seed=7)
    again = run_sim(_synthetic(), fleet, "learned", FAULTS, seed=7)
    other = run_sim(_synthetic(), fleet, "learned", FAULTS, seed=8)
    assert without_wall_time(first.report) == without_wall_time(again.report)
    for column in ("ttft_s", "e2e_s", "target", "status", "arm"):
        assert np.array_equal(
            getattr(first.results, column), getattr(again.results, column), equal_nan=True
        ), column
    assert first.results.mode_timeline == again.results.mode_timeline
    # the seed drives the arrival-side faults (which requests are copied or made hot)
    assert first.report["ttft_s"] != other.report["ttft_s"]
    assert first.report["requests"]["total"] == other.report["requests"]["total"] == 770


class OutcomeCounter(FixedPolicy):
    """The controller also hears every first token and outcome: counts them per request."""

    def __init__(self, mode: FleetMode = LEARNED) -> None:
        super().__init__(mode)
        self.outcomes: Counter[str] = Counter()
        self.statuses: dict[str, str] = {}
        self.first_tokens: Counter[str] = Counter()
        self.ttft: dict[str, float] = {}

    def on_first_token(self, decision: Decision, now_s: float, ttft_s: float) -> None:
        rid = decision.request.request_id
        self.first_tokens[rid] += 1
        self.ttft[rid] = ttft_s

    def on_outcome(self, decision: Decision, now_s: float, outcome: OutcomeInfo) -> None:
        rid = decision.request.request_id
        self.outcomes[rid] += 1
        self.statuses[rid] = outcome.status


def _check_invariants(run: SimRun, observer: OutcomeCounter) -> None:
    res, req, n = run.results, run.report["requests"], len(run.workload)
    final = {Status.OK, Status.FAILED, Status.REJECTED, Status.INCOMPLETE}
    assert set(np.unique(res.status).tolist()) <= {int(s) for s in final}
    assert req["completed"] + req["rejected"] + req["failed"] == req["total"] == n
    # each request's outcome is reported exactly once, with the status the arrays hold
    ids = [run.workload.request_id(i) for i in range(n)]
    assert observer.outcomes == Counter(ids)
    assert [observer.statuses[r] for r in ids] == [STATUS_TEXT[Status(s)] for s in res.status]
    ok = res.status == Status.OK
    assert np.isfinite(res.ttft_s[ok]).all() and (res.target[ok] >= 0).all()
    assert (res.e2e_s[ok] >= res.ttft_s[ok] - 1e-12).all()
    assert not res.sla_met[~ok].any(), "rejected, failed and timed-out requests violate"
    assert (res.sla_met[ok] == (res.ttft_s[ok] <= _deadlines(run)[ok])).all()
    rejected = res.status == Status.REJECTED
    assert not np.isfinite(res.ttft_s[rejected]).any()


def _deadlines(run: SimRun) -> np.ndarray:
    return np.array(run.workload.deadlines_s)[run.workload.priority_code]


def test_every_request_ends_in_exactly_one_status(fleet: Fleet) -> None:
    observer = OutcomeCounter()
    run = run_sim(_synthetic(), fleet, observer, FAULTS)
    _check_invariants(run, observer)
    assert run.report["requests"]["failed"] > 0


def test_overload_rejects_and_times_out_but_keeps_the_books(small_fleet: Fleet) -> None:
    observer = OutcomeCounter()
    trace = synthetic_trace(300, 30.0, seed=2, prompt_median=3000)
    run = run_sim(trace, small_fleet, observer, drain_s=20.0)
    _check_invariants(run, observer)
    counts = np.bincount(run.results.status, minlength=len(Status))
    assert counts[Status.OK] > 0 and counts[Status.REJECTED] > 100
    assert counts[Status.INCOMPLETE] > 0, "the drain ends with requests still running"
    assert run.report["requests"]["failed"] == counts[Status.INCOMPLETE]
    assert run.results.sim_s <= float(run.sim.arrivals[-1]) + 20.0 + 0.1


def test_a_preempted_request_keeps_its_first_token(
    small_fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Preemption throws a request's progress away and it prefills again, but its client
    already has the first token: TTFT, the learner and the observers see it once."""
    preempted: list[str] = []
    forget = Replica.forget

    def counting_forget(self: Replica, request_id: str) -> None:
        preempted.append(request_id)
        forget(self, request_id)

    monkeypatch.setattr(Replica, "forget", counting_forget)
    observer = OutcomeCounter(ROUND_ROBIN)
    trace = synthetic_trace(400, 20.0, seed=4, prompt_median=400, output_median=300)
    run = run_sim(trace, small_fleet, observer)
    _check_invariants(run, observer)
    assert len(set(preempted)) > 20, "the batcher preempted low priority for high"
    ids = [run.workload.request_id(i) for i in range(len(run.workload))]
    assert observer.first_tokens == Counter(ids)
    assert np.array_equal(run.results.ttft_s, [observer.ttft[r] for r in ids])
    assert run.report["requests"]["completed"] == 400


@pytest.mark.parametrize(
    ("trace_file", "rate_scale"), [(AZURE_FIXTURE, 8.0), (MOONCAKE_FIXTURE, 2.0), (None, 1.0)]
)
def test_no_request_gets_its_first_token_faster_than_physics(
    fleet: Fleet, trace_file: object, rate_scale: float
) -> None:
    """TTFT >= the latency model's prefill of that prompt on its target, alone, with every
    prefix block it carries already cached (the most optimistic case)."""
    trace = load_trace(trace_file) if trace_file is not None else _synthetic()
    run = run_sim(trace, fleet, "learned", rate_scale=rate_scale)
    model = LatencyModel.load()
    res = run.results
    done = np.flatnonzero(np.isfinite(res.ttft_s))
    assert len(done) == len(run.workload)
    floors = np.empty(len(done))
    for k, i in enumerate(done):
        r = run.workload.request(int(i))
        cached = len(r.prefix_blocks) * BLOCK_TOKENS
        latency = model.for_target(fleet.targets[int(res.target[i])])
        floors[k] = latency.prefill_s(r.prompt_tokens, 1, cached)
    slack = res.ttft_s[done] - floors
    assert slack.min() >= -1e-9, f"request {done[slack.argmin()]} beat physics by {-slack.min()}"
    # and the floor is tight for some: an idle target serves a request at once
    assert slack.min() < 0.05


def _one_long_prompt(generated: int) -> Trace:
    """One 100k-token prompt: about 78 s of prefill on an L40S."""
    return Trace.build("long", "<test>", [0.0], [100_000], [generated])


def test_a_pass_past_the_drain_cut_off_counts_busy_time_only_up_to_the_end() -> None:
    """Slowed 1000x, the prefill would end at about 78,048 s; the run ends at 600.1 s. The
    pass counted whole made utilisation 130x and gave a timed-out request a TTFT."""
    solo = fleet_of({"id": "solo", "model": "llama3.1-8b", "card": "l40s"})
    jitter = "faults:\n  - {kind: jitter, target: solo, start_s: 0, end_s: 1, factor: 1000}\n"
    observer = OutcomeCounter()
    run = run_sim(_one_long_prompt(10), solo, observer, jitter)
    res, target = run.results, run.report["by_target"]["solo"]
    assert res.sim_s == pytest.approx(600.1)
    assert STATUS_TEXT[Status(int(res.status[0]))] == "timeout"
    assert np.isnan(res.ttft_s[0]) and np.isnan(res.first_token_s[0])
    assert observer.first_tokens == Counter()
    assert float(res.busy_s[0]) == pytest.approx(600.1)
    assert target["utilisation"] == pytest.approx(1.0) and target["utilisation"] <= 1.0
    assert run.report["ttft_s"]["p99"] is None


def test_a_run_lasts_until_its_last_completion() -> None:
    """One output token: the request completes at the end of its prefill pass, about 78 s
    in, while the tick that started it ends at 0.1 s (utilisation was 78,048 %)."""
    solo = fleet_of({"id": "solo", "model": "llama3.1-8b", "card": "l40s"})
    run = run_sim(_one_long_prompt(1), solo)
    res = run.results
    assert res.status[0] == Status.OK
    assert 70.0 < float(res.ttft_s[0]) < 90.0
    assert res.sim_s == pytest.approx(float(res.first_token_s[0]))
    assert float(res.busy_s[0]) == pytest.approx(res.sim_s)
    assert run.report["by_target"]["solo"]["utilisation"] == pytest.approx(1.0)
