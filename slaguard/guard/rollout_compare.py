"""Rollout comparison: the learned arm's SLA violation rate against round-robin's.

The document's rule is `learned > round-robin x 1.05` (`should_roll_back`). On thin data
that rule fires on flukes, so two guards come first: at least `min_samples_per_arm` in
the window for each arm, and a one-sided two-proportion test of
H0: p_learned <= ratio x p_rr that must reach `z_margin` (default 1.645, 95 % one-sided).
The test's standard error uses rates smoothed by half a count (Jeffreys), so 0 or 100 %
rates never give a zero variance.
"""

from __future__ import annotations

import math

from slaguard.guard.config import RolloutCompareConfig
from slaguard.guard.samples import GuardSample
from slaguard.guard.verdicts import Action, DetectorReport, JsonDict, Severity, Status, Verdict
from slaguard.scheduler.rollout import Arm, should_roll_back

NAME = "rollout_compare"
_ARMS = (Arm.LEARNED, Arm.ROUND_ROBIN)


class _SlidingArmCounts:
    """Requests and SLA misses per arm over the last `slice_count` slices, counted only in
    slices where both arms ran: the arms are compared over the same time. After a resume
    the window still held minutes of round-robin-only traffic from the held period, so a
    fault that hit both arms alike read as the learned arm's (25 % against 5.4 %, where
    the same minute gave 91 % against 68 %)."""

    def __init__(self, slice_s: float, slice_count: int) -> None:
        self.slice_s = slice_s
        self.slice_count = slice_count
        self._slices: dict[int, dict[Arm, list[int]]] = {}

    def add(self, at_s: float, arm: Arm, missed: bool) -> None:
        slice_id = int(at_s // self.slice_s)
        counts = self._slices.setdefault(slice_id, {a: [0, 0] for a in _ARMS})[arm]
        counts[0] += 1
        counts[1] += int(missed)

    def totals(self, now_s: float) -> dict[Arm, tuple[int, int]]:
        newest = int(now_s // self.slice_s)
        for slice_id in [s for s in self._slices if s <= newest - self.slice_count]:
            del self._slices[slice_id]
        paired = [s for s in self._slices.values() if all(s[arm][0] for arm in _ARMS)]
        return {
            arm: (sum(s[arm][0] for s in paired), sum(s[arm][1] for s in paired)) for arm in _ARMS
        }


def excess_z(misses_l: int, n_l: int, misses_rr: int, n_rr: int, ratio: float) -> float:
    """Z of `p_learned - ratio x p_rr` (> 0 means learned is worse than the rule allows)."""
    p_l, p_rr = misses_l / n_l, misses_rr / n_rr
    s_l, s_rr = (misses_l + 0.5) / (n_l + 1), (misses_rr + 0.5) / (n_rr + 1)
    se = math.sqrt(s_l * (1 - s_l) / n_l + ratio**2 * s_rr * (1 - s_rr) / n_rr)
    return (p_l - ratio * p_rr) / se


class RolloutCompareDetector:
    """Windowed A/B violation rates; trips when the learned arm is significantly worse."""

    name = NAME

    def __init__(self, config: RolloutCompareConfig | None = None) -> None:
        self.config = config or RolloutCompareConfig()
        self.restart()

    def restart(self) -> None:
        """Forget every count: a gray stage entered from round-robin is a new comparison
        (what the window still holds is the episode that ended in round-robin)."""
        c = self.config
        self._counts = _SlidingArmCounts(c.slice_s, math.ceil(c.window_s / c.slice_s))

    def observe(self, sample: GuardSample) -> None:
        """Count the request's SLA outcome for its arm (samples without an arm are skipped)."""
        if sample.arm is not None:
            self._counts.add(sample.at_s, sample.arm, not sample.sla_met)

    def evaluate(self, now_s: float) -> DetectorReport:
        """Compare the arms over the window once both have enough samples."""
        c = self.config
        totals = self._counts.totals(now_s)
        (n_l, miss_l), (n_rr, miss_rr) = totals[Arm.LEARNED], totals[Arm.ROUND_ROBIN]
        evidence: JsonDict = {
            "learned": {"requests": n_l, "violations": miss_l},
            "round_robin": {"requests": n_rr, "violations": miss_rr},
            "min_samples_per_arm": c.min_samples_per_arm,
            "ratio": c.ratio,
            "z_margin": c.z_margin,
            "window_s": c.window_s,
        }
        if min(n_l, n_rr) < c.min_samples_per_arm:
            return DetectorReport(NAME, Status.INSUFFICIENT, evidence=evidence, threshold=c.ratio)
        rate_l, rate_rr = miss_l / n_l, miss_rr / n_rr
        ratio = rate_l / rate_rr if rate_rr > 0 else (math.inf if rate_l > 0 else None)
        z = excess_z(miss_l, n_l, miss_rr, n_rr, c.ratio)
        evidence["learned"]["violation_rate"] = round(rate_l, 5)
        evidence["round_robin"]["violation_rate"] = round(rate_rr, 5)
        evidence["excess_z"] = round(z, 3)
        if not (should_roll_back(rate_l, rate_rr, c.ratio) and z >= c.z_margin):
            return DetectorReport(NAME, Status.OK, (), evidence, ratio, c.ratio)
        summary = (
            f"learned arm violates the SLA at {rate_l:.2%} vs round-robin {rate_rr:.2%} "
            f"(> x{c.ratio}, excess Z {z:.2f} >= {c.z_margin}; {n_l} vs {n_rr} requests)"
        )
        verdict = Verdict(
            NAME, Action.TRIP, "arm:learned", Severity.CRITICAL, summary, now_s, evidence
        )
        return DetectorReport(NAME, Status.ANOMALOUS, (verdict,), evidence, ratio, c.ratio)
