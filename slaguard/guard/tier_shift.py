"""Card-tier shift: a whole tier's recent TTFT against its own history and the rest of the fleet.

Per-target p99 over five minutes is what the router's jitter term needs, but at a few
requests per second per target it reacts slowly to a tier-wide fault and is noisy. Here
every measured TTFT is divided by its own target's baseline (a slow geometric mean, so a
tier serving a 70B and an 8B model pools comparable numbers), and each tier's median ratio
over a short window (default 30 s) is compared with the median ratio of the rest of the
fleet over the same window (so fleet-wide load moves both and cancels).

A tier trips when its median is at least `tier_min_ratio` times the rest's (effect size)
and the difference of the log medians is at least `tier_z_threshold` standard errors
(SE of a median = 1.2533 x sigma / sqrt(n); sigma from the rest of the fleet's
interquartile range, which has many more samples than one tier, floored at
ln(1 + `mad_floor_rel`)): thin or heavy-tailed data needs a larger shift before it counts.
"""

from __future__ import annotations

import math

import numpy as np

from slaguard.guard.baseline import LogBaseline
from slaguard.guard.config import TtftZscoreConfig
from slaguard.guard.histogram import SlidingLogHistogram
from slaguard.guard.robust import log_floor
from slaguard.guard.verdicts import Action, JsonDict, Severity, Verdict

_FLEET = "*"
_IQR_TO_SIGMA = 1.349
_MEDIAN_SE = 1.2533


class TierShift:
    """Short-window median of baseline-normalised TTFT per card type vs the rest of the fleet."""

    def __init__(self, config: TtftZscoreConfig, detector: str) -> None:
        self.config = config
        self.detector = detector
        c = config
        self._hist = SlidingLogHistogram(
            c.slice_s, c.tier_slice_count, c.relative_accuracy, c.min_ttft_s, c.max_ttft_s
        )
        self._target_baselines: dict[str, LogBaseline] = {}
        self._tripped: set[str] = set()

    def observe(self, target_id: str, card_type: str, at_s: float, ttft_s: float) -> None:
        """Normalise one measured TTFT by its target's baseline, then fold it in."""
        c = self.config
        baseline = self._target_baselines.get(target_id)
        if baseline is None:
            baseline = LogBaseline(c.baseline_tau_s, c.baseline_max_freeze_s)
            self._target_baselines[target_id] = baseline
        ratio = baseline.ratio(ttft_s)
        if ratio is not None and baseline.count >= c.min_samples:
            self._hist.add(card_type, at_s, ratio)
            self._hist.add(_FLEET, at_s, ratio)
        baseline.update(at_s, ttft_s, anomalous=card_type in self._tripped)

    def _log_quantile(self, counts: np.ndarray, q: float) -> float:
        return math.log(self._hist.quantile_of(counts, q))

    def evaluate(self, now_s: float) -> tuple[list[Verdict], JsonDict]:
        """Trip verdicts for tiers that shifted, and the evidence of every judged tier."""
        c = self.config
        self._hist.advance(now_s)
        fleet = self._hist.counts(_FLEET)
        tiers: JsonDict = {}
        tripped: set[str] = set()
        for card in self._hist.tracked_keys():
            if card == _FLEET:
                continue
            mine = self._hist.counts(card)
            rest = fleet - mine
            n_mine, n_rest = int(mine.sum()), int(rest.sum())
            if min(n_mine, n_rest) < c.tier_min_samples:
                continue
            m_tier, m_rest = self._log_quantile(mine, 0.5), self._log_quantile(rest, 0.5)
            iqr = self._log_quantile(rest, 0.75) - self._log_quantile(rest, 0.25)
            sigma = max(iqr / _IQR_TO_SIGMA, log_floor(c.mad_floor_rel))
            se = _MEDIAN_SE * sigma * math.sqrt(1 / n_mine + 1 / n_rest)
            ratio, z = math.exp(m_tier - m_rest), (m_tier - m_rest) / se
            tiers[card] = {
                "ratio_vs_rest": round(ratio, 4),
                "tier_ratio_to_baseline": round(math.exp(m_tier), 4),
                "rest_ratio_to_baseline": round(math.exp(m_rest), 4),
                "z": round(z, 3),
                "samples": n_mine,
                "rest_samples": n_rest,
            }
            if ratio >= c.tier_min_ratio and z >= c.tier_z_threshold:
                tripped.add(card)
        self._tripped = tripped
        evidence: JsonDict = {
            "tiers": tiers,
            "tier_window_s": c.tier_window_s,
            "tier_min_samples": c.tier_min_samples,
            "tier_z_threshold": c.tier_z_threshold,
            "tier_min_ratio": c.tier_min_ratio,
        }
        return [self._verdict(card, now_s, evidence) for card in sorted(tripped)], evidence

    def _verdict(self, card: str, now_s: float, evidence: JsonDict) -> Verdict:
        c = self.config
        tier = evidence["tiers"][card]
        summary = (
            f"card tier {card}: median TTFT over the last {c.tier_window_s:g}s is "
            f"{tier['ratio_vs_rest']:.2f}x the rest of the fleet's, each relative to its target's "
            f"baseline (>= {c.tier_min_ratio}), Z {tier['z']:.1f} >= {c.tier_z_threshold}"
        )
        detail = {"card_type": card, **tier} | {k: v for k, v in evidence.items() if k != "tiers"}
        return Verdict(
            self.detector, Action.TRIP, f"card:{card}", Severity.CRITICAL, summary, now_s, detail
        )
