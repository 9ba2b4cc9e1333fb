"""Detector changes made while measuring the guard on the simulator (docs/guard-efficacy.md).

Each test pins one behaviour with a synthetic series whose answer is known: a load rise on
one model is not jitter, a tier is only shifted if it moved against its own history, a
quantile read from few samples counts its own noise, the rollout comparison judges only
during a gray stage, and a flood is counted as it arrives.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from fakes.drive import run_seconds
from fakes.synthetic import Workload, flood_stream

from slaguard.guard.config import GuardConfig, HotSpotConfig
from slaguard.guard.guard import Guard
from slaguard.guard.hot_spot import HotSpotDetector
from slaguard.guard.modes import ModeState
from slaguard.guard.robust import robust_zscores
from slaguard.guard.samples import GuardSample
from slaguard.guard.ttft_zscore import TtftZscoreDetector
from slaguard.guard.verdicts import Action, Status
from slaguard.scheduler.rollout import ROUND_ROBIN, Arm, FleetMode, ModeKind, RolloutPlan

FAULT_AT = 1200


def _verdicts(det: TtftZscoreDetector, slow: object, seconds: int, rate: float = 20.0) -> list:
    stream = Workload(rate_per_s=rate, seed=4).samples(0, seconds, slow)  # type: ignore[arg-type]
    reports = list(run_seconds(det, stream, 1, seconds, det.evaluate))
    return [(sec, v) for sec, r in reports for v in r.verdicts]


def test_a_load_rise_on_one_model_is_not_jitter() -> None:
    """All six 70B targets 5x slower (a burst of 70B traffic): scored within their model,
    none stands out, so no demotion and no fleet trip (the pooled fleet score saw 6/19)."""
    det = TtftZscoreDetector()

    def burst(s: GuardSample) -> float:
        return 5.0 if s.model_id == "llama3.1-70b" and s.at_s >= FAULT_AT else 1.0

    verdicts = _verdicts(det, burst, FAULT_AT + 300)
    assert verdicts == []
    late = det.zscores()
    assert all(late[t] < 3.5 for t in late if "70b" in t)


def test_one_jittering_target_still_stands_out_within_its_model() -> None:
    det = TtftZscoreDetector()

    def slow(s: GuardSample) -> float:
        return 4.0 if s.target_id == "a100-70b-0" and s.at_s >= FAULT_AT else 1.0

    verdicts = _verdicts(det, slow, FAULT_AT + 240)
    demotes = [(sec, v) for sec, v in verdicts if v.action is Action.DEMOTE]
    assert [v.subject for _, v in demotes] == ["target:a100-70b-0"]
    assert FAULT_AT + 30 <= demotes[0][0] <= FAULT_AT + 120
    assert not [v for _, v in verdicts if v.action is Action.TRIP]


def test_a_tier_that_only_looks_slow_because_the_rest_got_faster_does_not_trip() -> None:
    """Everything but L40S gets 3x faster: L40S is 3x the rest but 1x its own baseline."""
    det = TtftZscoreDetector()

    def faster_rest(s: GuardSample) -> float:
        return 1.0 / 3.0 if s.card_type != "l40s" and s.at_s >= FAULT_AT else 1.0

    verdicts = _verdicts(det, faster_rest, FAULT_AT + 120)
    assert [v for _, v in verdicts if v.action is Action.TRIP] == []
    tiers = det.evaluate(FAULT_AT + 120.0).evidence["tiers"]
    l40s = tiers["l40s/llama3.1-8b"]
    assert l40s["ratio_vs_rest"] >= 2.0 > l40s["tier_ratio_to_baseline"]


def test_a_noisy_read_needs_a_larger_departure() -> None:
    values = {"a": 0.0, "b": 0.05, "c": -0.05, "d": 0.02, "thin": 1.0}
    plain, _ = robust_zscores(values, 0.0, math.log1p(0.15))
    noisy, _ = robust_zscores(values, 0.0, math.log1p(0.15), {"thin": 0.4})
    assert plain["thin"] > 4.0 > 2.5 > noisy["thin"]
    assert noisy["a"] == plain["a"]


def _arm_samples(start: int, end: int, arm: Arm, miss_every: int) -> list[GuardSample]:
    return [
        GuardSample(t + 0.5, "t0", "h100", "m", t % miss_every != 0, 4.0, 0.3, arm)
        for t in range(start, end)
        for _ in range(2)
    ]


def test_rollout_comparison_judges_only_during_a_gray_stage() -> None:
    """The same window (learned arm 50 % misses, round-robin 10 %) trips in rollout(50)
    and is not judged once the fleet is on round-robin."""
    samples = sorted(
        _arm_samples(0, 300, Arm.LEARNED, 2) + _arm_samples(0, 300, Arm.ROUND_ROBIN, 10),
        key=lambda s: s.at_s,
    )
    config = GuardConfig()
    plan = RolloutPlan(baseline_s=0, stage_s=10_000)
    staged = Guard(config, plan, ModeState(FleetMode(ModeKind.ROLLOUT, 50), auto_advance=False))
    held = Guard(config, plan, ModeState(ROUND_ROBIN, auto_advance=False))
    for guard in (staged, held):
        for s in samples:
            guard.observe(s)
        guard.evaluate(300.0)
    staged_report = next(r for r in staged.last_reports if r.detector == "rollout_compare")
    held_report = next(r for r in held.last_reports if r.detector == "rollout_compare")
    assert staged_report.status is Status.ANOMALOUS and staged_report.trips
    assert held_report.status is Status.INSUFFICIENT and not held_report.trips
    assert held_report.evidence["gray_stage"] is False


def test_hot_spot_counts_arrivals_once_a_driver_feeds_them() -> None:
    """The same flood (30 % of arrivals from 300 s), each request finishing 8 s after it
    arrived: counting arrivals trips 8 s sooner than counting completions, and once
    arrivals are fed a completion is not counted a second time."""
    stream = flood_stream(seconds=420.0, flood=(300.0, 420.0), share=0.3)
    by_completion, by_arrival = HotSpotDetector(), HotSpotDetector()
    first: dict[str, float] = {}
    arrived = finished = 0
    for sec in range(1, 420):
        while arrived < len(stream) and stream[arrived].at_s <= sec:
            by_arrival.observe_arrival(stream[arrived].at_s, stream[arrived].prefix_id)
            arrived += 1
        while finished < len(stream) and stream[finished].at_s + 8.0 <= sec:
            done = replace(stream[finished], at_s=stream[finished].at_s + 8.0)
            by_completion.observe(done)
            by_arrival.observe(done)
            finished += 1
        for name, det in (("completion", by_completion), ("arrival", by_arrival)):
            if name not in first and det.evaluate(float(sec)).trips:
                first[name] = sec
    assert 300 < first["arrival"] <= 315
    assert first["completion"] - first["arrival"] == 8
    report = by_arrival.evaluate(419.0)
    assert report.evidence["counts"] == "arrivals"
    tau = HotSpotConfig().decay_tau_s
    assert report.evidence["effective_samples"] == pytest.approx(5.4 * tau, rel=0.3)
