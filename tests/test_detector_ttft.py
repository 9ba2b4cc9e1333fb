"""TTFT Z-score detector on synthetic series with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from fakes.drive import run_seconds
from fakes.synthetic import Workload

from slaguard.guard.config import TtftZscoreConfig
from slaguard.guard.histogram import SlidingLogHistogram
from slaguard.guard.robust import robust_center, robust_zscores
from slaguard.guard.samples import FirstToken, GuardSample
from slaguard.guard.ttft_zscore import TtftZscoreDetector
from slaguard.guard.verdicts import Action, Status

FAULT_AT = 1200


def _trips(reports: list[tuple[int, object]]) -> list[tuple[int, str]]:
    return [(sec, v.subject) for sec, r in reports for v in r.verdicts if v.action is Action.TRIP]  # type: ignore[attr-defined]


def test_histogram_quantile_is_within_relative_accuracy_and_window_expires() -> None:
    hist = SlidingLogHistogram(5.0, 60, 0.02, 1e-4, 1e4)
    values = np.random.default_rng(3).lognormal(0.0, 0.7, 6000)
    for i, v in enumerate(values):
        hist.add("t", i * 0.05, float(v))  # 300 s of samples
    hist.advance(299.0)
    exact = float(np.quantile(values, 0.99, method="lower"))
    assert hist.count("t") == 6000
    assert abs(hist.quantile("t", 0.99) / exact - 1) <= 0.021
    hist.advance(450.0)  # window = slices 31..90, i.e. samples from 155 s on
    assert hist.count("t") == (300 - 155) * 20
    hist.advance(1000.0)
    assert hist.count("t") == 0 and math.isnan(hist.quantile("t", 0.99))


def test_mad_zero_does_not_divide_by_zero() -> None:
    center = robust_center([2.0, 2.0, 2.0, 2.0], floor_rel=0.05)
    assert center.mad == 0.0 and center.scale == pytest.approx(1.4826 * 0.1)
    zs, _ = robust_zscores({"a": 2.0, "b": 2.0, "c": 2.0, "d": 3.0}, floor_rel=0.05)
    assert zs["a"] == 0.0 and zs["d"] == pytest.approx(1.0 / (1.4826 * 0.1))
    zeros, _ = robust_zscores({"a": 0.0, "b": 0.0, "c": 0.0}, floor_rel=0.05)
    assert all(math.isfinite(z) for z in zeros.values())


@pytest.mark.parametrize(("sigma", "max_demotions", "seed"), [(0.5, 0, 11), (0.9, 1, 12)])
def test_clean_series_never_trips_and_rarely_demotes(
    sigma: float, max_demotions: int, seed: int
) -> None:
    """An hour of clean traffic: no trip; with a very heavy tail at most one demotion."""
    det = TtftZscoreDetector()
    stream = Workload(sigma=sigma, seed=seed).samples(0, 3600)
    reports = list(run_seconds(det, stream, 1, 3600, det.evaluate))
    assert _trips(reports) == []
    demotions = [v for _, r in reports for v in r.verdicts if v.action is Action.DEMOTE]
    assert len(demotions) <= max_demotions
    assert reports[-1][1].status is Status.OK
    zs = det.zscores()
    assert len(zs) == 19 and all(math.isfinite(z) and z < 3.5 for z in zs.values())


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_3x_jitter_on_one_card_type_trips_within_25_evaluations(seed: int) -> None:
    det = TtftZscoreDetector()

    def slow(s: GuardSample) -> float:
        return 3.0 if s.card_type == "l40s" and s.at_s >= FAULT_AT else 1.0

    stream = Workload(seed=seed).samples(0, FAULT_AT + 120, slow)
    reports = list(run_seconds(det, stream, 1, FAULT_AT + 120, det.evaluate))
    trips = _trips(reports)
    assert trips and trips[0][0] >= FAULT_AT, "no trip before the fault"
    first = trips[0][0]
    assert first - FAULT_AT <= 25
    assert trips[0][1] == "card:l40s"
    verdict = next(v for _, r in reports for v in r.verdicts if v.at_s == first)
    assert verdict.evidence["ratio_vs_rest"] >= 1.75 and verdict.evidence["tier_min_ratio"] == 1.75
    window_z = (verdict.evidence["tier_window_s"], verdict.evidence["tier_z_threshold"])
    assert window_z in {(30.0, 4.5), (10.0, 7.0)}, "the long window's test or the short one's"
    assert verdict.evidence["z"] >= window_z[1] and verdict.evidence["z_own"] >= window_z[1]


def test_the_short_tier_window_finds_a_3x_jitter_sooner() -> None:
    """The same jitter (the L40S tier ~1.6 requests/s) with the short window on and off:
    never later, within 15 evaluations, and 12 evaluations sooner over three seeds
    (measured 15 / 13 / 11 against 19 / 13 / 19; with sigma 0.9 instead of 0.5 both take
    20-25: the short window's Z gate of 7 needs a clean step)."""

    def first_trip(config: TtftZscoreConfig, seed: int) -> int:
        det = TtftZscoreDetector(config)

        def slow(s: GuardSample) -> float:
            return 3.0 if s.card_type == "l40s" and s.at_s >= FAULT_AT else 1.0

        stream = Workload(seed=seed).samples(0, FAULT_AT + 120, slow)
        trips = _trips(list(run_seconds(det, stream, 1, FAULT_AT + 120, det.evaluate)))
        assert trips and trips[0] >= (FAULT_AT, "card:l40s")
        return trips[0][0] - FAULT_AT

    both = [first_trip(TtftZscoreConfig(), seed) for seed in (1, 2, 3)]
    long_only = [first_trip(TtftZscoreConfig(tier_fast_window_s=0), seed) for seed in (1, 2, 3)]
    assert all(b <= lo for b, lo in zip(both, long_only, strict=True)) and max(both) <= 15
    assert sum(long_only) - sum(both) >= 10


def test_a_tier_narrower_than_the_rest_is_judged_on_its_own_spread() -> None:
    """The L40S tier's TTFT spreads by sigma 0.4, the rest of the fleet's by 0.8 (in the
    simulator the L40S tier's log spread is ~0.43 against the rest's ~0.62). Its median is
    judged on its own spread, capped in the short window by the long window's (a step
    inside 10 s widens the short window's spread): over five seeds a 3x jitter trips after
    18 / 14 / 20 / 15 / 6 s, 73 in all; on the rest's spread alone (before) 20 / 14 / 20 /
    20 / 9, 83."""

    def first_trip(seed: int) -> int:
        det = TtftZscoreDetector()

        def slow(s: GuardSample) -> float:
            return 3.0 if s.card_type == "l40s" and s.at_s >= FAULT_AT else 1.0

        workload = Workload(seed=seed, sigma=0.8, sigma_by_card=(("l40s", 0.4),))
        stream = workload.samples(0, FAULT_AT + 120, slow)
        trips = _trips(list(run_seconds(det, stream, 1, FAULT_AT + 120, det.evaluate)))
        assert trips and trips[0] >= (FAULT_AT, "card:l40s")
        return trips[0][0] - FAULT_AT

    delays = [first_trip(seed) for seed in (1, 2, 3, 4, 5)]
    assert max(delays) <= 20 and sum(delays) <= 76, delays


def test_single_target_persistent_anomaly_demotes_then_restores_without_fleet_trip() -> None:
    det = TtftZscoreDetector()

    def slow(s: GuardSample) -> float:
        return 4.0 if s.target_id == "l40s-8b-2" and FAULT_AT <= s.at_s < FAULT_AT + 600 else 1.0

    stream = Workload(rate_per_s=20.0, seed=5).samples(0, FAULT_AT + 1200, slow)
    reports = list(run_seconds(det, stream, 1, FAULT_AT + 1200, det.evaluate))
    assert _trips(reports) == []
    verdicts = [(sec, v) for sec, r in reports for v in r.verdicts]
    assert [v.action for _, v in verdicts] == [Action.DEMOTE, Action.RESTORE]
    (demoted_at, demote), (restored_at, _) = verdicts
    assert demote.subject == "target:l40s-8b-2"
    assert FAULT_AT + 30 <= demoted_at <= FAULT_AT + 90
    assert (
        demote.evidence["z"] >= 3.5 and demote.evidence["p99_s"] > demote.evidence["baseline_p99_s"]
    )
    assert FAULT_AT + 600 < restored_at <= FAULT_AT + 600 + 300 + 90


def test_thin_data_never_trips() -> None:
    det = TtftZscoreDetector()

    def slow(s: GuardSample) -> float:
        return 3.0 if s.card_type == "l40s" and s.at_s >= 600 else 1.0

    stream = Workload(rate_per_s=0.05, seed=2).samples(0, 1800, slow)
    reports = list(run_seconds(det, stream, 1, 1800, det.evaluate))
    assert _trips(reports) == []
    assert {r.status for _, r in reports} == {Status.INSUFFICIENT}
    assert det.zscores() == {}


def test_missing_ttft_is_not_read_as_zero() -> None:
    det = TtftZscoreDetector(TtftZscoreConfig(min_samples=3))
    for i in range(10):
        det.observe(GuardSample(float(i), "t", "h100", "m", False, 4.0, None))
        det.observe(GuardSample(float(i), "t", "h100", "m", False, 4.0, math.nan))
    det.evaluate(10.0)
    assert det._hist.count("t") == 0  # nothing counted: no 0 s TTFT
    det.observe(GuardSample(11.0, "t", "h100", "m", True, 4.0, 0.5))
    assert det._hist.count("t") == 1


def test_a_first_token_is_counted_once_and_before_its_completion() -> None:
    det = TtftZscoreDetector(TtftZscoreConfig(min_samples=3))
    det.observe_first_token(FirstToken(5.0, "t", "h100", "m", 0.5, 300))
    assert det._hist.count("t") == 1, "counted at the first token"
    det.observe(GuardSample(9.0, "t", "h100", "m", True, 4.0, 0.5, ttft_observed=True))
    assert det._hist.count("t") == 1, "its completion does not count it again"
    det.observe(GuardSample(9.5, "t", "h100", "m", True, 4.0, 0.7))
    assert det._hist.count("t") == 2, "a completion whose first token was not seen counts"
    det.observe_first_token(FirstToken(10.0, "t", "h100", "m", math.nan))
    assert det._hist.count("t") == 2, "no measured TTFT: nothing counted"
