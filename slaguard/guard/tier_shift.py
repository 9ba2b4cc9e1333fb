"""Card-tier shift: a whole tier's recent TTFT against its own history and the other tiers.

Per-target p99 over five minutes is what the router's jitter term needs, but at a few
requests per second per target it reacts slowly to a tier-wide fault and is noisy. Here
every measured TTFT is divided by its own target's baseline (a slow geometric mean, so a
tier serving a 70B and an 8B model pools comparable numbers), and a tier's statistic is the
median of those ratios over a short window (default 30 s). A tier trips when that median
is at least `tier_min_ratio` (an effect-size floor against small wobbles) and its robust
Z-score against the other tiers is at least `z_threshold` (so fleet-wide load is ignored).
"""

from __future__ import annotations

from slaguard.guard.baseline import LogBaseline
from slaguard.guard.config import TtftZscoreConfig
from slaguard.guard.histogram import SlidingLogHistogram
from slaguard.guard.robust import robust_zscores
from slaguard.guard.verdicts import Action, JsonDict, Severity, Verdict


class TierShift:
    """Short-window median of baseline-normalised TTFT per card type."""

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
        baseline.update(at_s, ttft_s, anomalous=card_type in self._tripped)

    def evaluate(self, now_s: float) -> tuple[list[Verdict], JsonDict]:
        """Trip verdicts for tiers that shifted, and the evidence of every tier."""
        c = self.config
        self._hist.advance(now_s)
        ratios = {
            card: self._hist.quantile(card, c.tier_quantile)
            for card in self._hist.tracked_keys()
            if self._hist.count(card) >= c.tier_min_samples
        }
        zscores: dict[str, float] = {}
        if len(ratios) >= c.tier_min_tiers:
            zscores = robust_zscores(ratios, c.mad_floor_rel)[0]
        self._tripped = {
            card
            for card, z in zscores.items()
            if z >= c.z_threshold and ratios[card] >= c.tier_min_ratio
        }
        evidence: JsonDict = {
            "tiers": {
                card: {
                    "ratio_to_baseline": round(ratios[card], 4),
                    "z": None if card not in zscores else round(zscores[card], 3),
                    "samples": self._hist.count(card),
                }
                for card in sorted(ratios)
            },
            "tier_window_s": c.tier_window_s,
            "tier_quantile": c.tier_quantile,
            "tier_min_samples": c.tier_min_samples,
            "tier_min_tiers": c.tier_min_tiers,
            "z_threshold": c.z_threshold,
            "tier_min_ratio": c.tier_min_ratio,
        }
        return [self._verdict(card, now_s, evidence) for card in sorted(self._tripped)], evidence

    def _verdict(self, card: str, now_s: float, evidence: JsonDict) -> Verdict:
        c = self.config
        tier = evidence["tiers"][card]
        summary = (
            f"card tier {card}: recent TTFT is {tier['ratio_to_baseline']:.2f}x its baseline "
            f"(q{c.tier_quantile:g} over {c.tier_window_s:g}s, >= {c.tier_min_ratio}), "
            f"Z {tier['z']:.1f} >= {c.z_threshold} against the other tiers"
        )
        detail = {"card_type": card, **tier} | {k: v for k, v in evidence.items() if k != "tiers"}
        return Verdict(
            self.detector, Action.TRIP, f"card:{card}", Severity.CRITICAL, summary, now_s, detail
        )
