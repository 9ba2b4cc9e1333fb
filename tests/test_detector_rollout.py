"""Rollout comparison: the 1.05 rule, a minimum-sample gate and a statistical margin."""

from __future__ import annotations

import pytest

from slaguard.guard.config import RolloutCompareConfig
from slaguard.guard.rollout_compare import RolloutCompareDetector, excess_z
from slaguard.guard.samples import GuardSample
from slaguard.guard.verdicts import Status
from slaguard.scheduler.rollout import Arm


def _feed(det: RolloutCompareDetector, arm: Arm, n: int, misses: int, start_s: float = 0.0) -> None:
    for i in range(n):
        det.observe(
            GuardSample(start_s + i * 0.1, "t", "h100", "m", i >= misses, 4.0, 1.0, arm=arm)
        )


def _detector(learned: tuple[int, int], rr: tuple[int, int]) -> RolloutCompareDetector:
    det = RolloutCompareDetector()
    _feed(det, Arm.LEARNED, *learned)
    _feed(det, Arm.ROUND_ROBIN, *rr)
    return det


def test_learned_clearly_worse_trips_with_the_numbers_in_evidence() -> None:
    report = _detector((2000, 200), (2000, 100)).evaluate(200.0)
    assert report.status is Status.ANOMALOUS
    verdict = report.verdicts[0]
    assert verdict.subject == "arm:learned"
    ev = verdict.evidence
    assert ev["learned"]["violation_rate"] == 0.1 and ev["round_robin"]["violation_rate"] == 0.05
    assert ev["ratio"] == 1.05 and ev["excess_z"] > 1.645 and ev["min_samples_per_arm"] == 200


def test_below_minimum_samples_per_arm_never_judges() -> None:
    report = _detector((199, 199), (2000, 0)).evaluate(200.0)
    assert report.status is Status.INSUFFICIENT and report.verdicts == ()


def test_thin_data_fluke_above_1_05_does_not_trip() -> None:
    # 8/200 vs 5/200 is 1.6x the round-robin rate, but well within noise
    report = _detector((200, 8), (200, 5)).evaluate(30.0)
    assert report.status is Status.OK
    assert report.evidence["excess_z"] < 1.645


def test_within_the_1_05_ratio_does_not_trip_even_on_huge_samples() -> None:
    report = _detector((100_000, 5_200), (100_000, 5_000)).evaluate(10_000.0)
    assert report.status is Status.OK  # 5.2 % <= 5.0 % x 1.05


def test_margin_zero_falls_back_to_the_documents_plain_rule() -> None:
    det = RolloutCompareDetector(RolloutCompareConfig(z_margin=0.0))
    _feed(det, Arm.LEARNED, 200, 8)
    _feed(det, Arm.ROUND_ROBIN, 200, 5)
    assert det.evaluate(30.0).status is Status.ANOMALOUS


def test_old_samples_leave_the_window() -> None:
    det = _detector((2000, 400), (2000, 100))
    assert det.evaluate(200.0).status is Status.ANOMALOUS
    assert det.evaluate(200.0 + 600.0 + 10.0).status is Status.INSUFFICIENT


def test_excess_z_is_finite_at_zero_and_full_rates() -> None:
    assert excess_z(0, 300, 0, 300, 1.05) == 0.0
    assert excess_z(300, 300, 0, 300, 1.05) > 10
    assert excess_z(0, 300, 300, 300, 1.05) == pytest.approx(
        -excess_z(300, 300, 0, 300, 1.05) * 1.05, rel=0.01
    )


def test_the_arms_are_compared_over_the_same_time() -> None:
    """After a resume the window held 5 minutes of round-robin-only traffic (1 % misses);
    a fault then hit both arms alike (68 %) and the learned arm was blamed."""
    det = RolloutCompareDetector()
    for i in range(6000):  # 300 s on round-robin alone, the held period
        det.observe(GuardSample(i * 0.05, "t", "h100", "m", i % 100 != 0, 4.0, 1.0,
                                arm=Arm.ROUND_ROBIN))  # fmt: skip
    for i in range(1200):  # 60 s of the gray stage, both arms, both 68 % missed
        arm = Arm.LEARNED if i % 2 else Arm.ROUND_ROBIN
        det.observe(GuardSample(300.0 + i * 0.05, "t", "h100", "m", i % 25 >= 17, 4.0, 1.0,
                                arm=arm))  # fmt: skip
    report = det.evaluate(360.0)
    assert report.status is Status.OK, report.evidence
    assert report.evidence["round_robin"]["requests"] == 600
    assert report.score == pytest.approx(1.0, abs=0.05)
