"""Hot-spot flood detector: one prompt prefix taking a large share of recent traffic.

Keys are full prefix identities (see `samples.prefix_identity`): a system prompt shared
by every request (Mooncake's block 0) is part of every key, so it never looks hot by itself.

A flood is an arrival phenomenon: a driver that sees requests arrive feeds them with
`observe_arrival` (the routing decision), and from then on finished requests are not
counted again. Counting completions instead (the fallback) lags the flood by the requests'
latency and under-counts it when its requests queue or time out.
"""

from __future__ import annotations

from slaguard.guard.config import HotSpotConfig
from slaguard.guard.samples import GuardSample
from slaguard.guard.space_saving import DecayedSpaceSaving
from slaguard.guard.verdicts import Action, DetectorReport, JsonDict, Severity, Status, Verdict

NAME = "hot_spot"


class HotSpotDetector:
    """Decayed Space-Saving over prefix identity; trips on one prefix's guaranteed share."""

    name = NAME

    def __init__(self, config: HotSpotConfig | None = None) -> None:
        self.config = config or HotSpotConfig()
        self._sketch = DecayedSpaceSaving(self.config.counters, self.config.decay_tau_s)
        self._sees_arrivals = False

    def observe_arrival(self, at_s: float, prefix_id: str | None) -> None:
        """Count one arriving request's prefix (in time order); requests without one still
        count in the total."""
        self._sees_arrivals = True
        if prefix_id is None:
            self._sketch.add_untracked(at_s)
        else:
            self._sketch.add(prefix_id, at_s)

    def observe(self, sample: GuardSample) -> None:
        """Count a finished request, unless arrivals are fed (the fallback)."""
        if self._sees_arrivals:
            return
        if sample.prefix_id is None:
            self._sketch.add_untracked(sample.at_s)
        else:
            self._sketch.add(sample.prefix_id, sample.at_s)

    def evaluate(self, now_s: float) -> DetectorReport:
        """Trip when the top prefix's guaranteed share reaches `trip_share`."""
        c = self.config
        total = self._sketch.total(now_s)
        evidence: JsonDict = {
            "effective_samples": round(total, 2),
            "min_effective_samples": c.min_effective_samples,
            "trip_share": c.trip_share,
            "decay_tau_s": c.decay_tau_s,
            "counters": c.counters,
            "counts": "arrivals" if self._sees_arrivals else "completions",
        }
        if total < c.min_effective_samples:
            return DetectorReport(
                NAME, Status.INSUFFICIENT, evidence=evidence, threshold=c.trip_share
            )
        top = self._sketch.top(now_s, 3)
        top_share = top[0].lower_bound / total if top else 0.0
        evidence["top_prefixes"] = [
            {
                "prefix": h.item[:80],
                "share_lower_bound": round(h.lower_bound / total, 4),
                "share_upper_bound": round(h.count / total, 4),
            }
            for h in top
        ]
        if not top or top_share < c.trip_share:
            return DetectorReport(
                NAME, Status.OK, evidence=evidence, score=top_share, threshold=c.trip_share
            )
        hot = top[0]
        share = hot.lower_bound / total
        summary = (
            f"prefix {hot.item[:40]} has at least {share:.0%} of recent traffic "
            f"(>= {c.trip_share:.0%}, {total:.0f} effective requests)"
        )
        verdict = Verdict(
            NAME,
            Action.TRIP,
            f"prefix:{hot.item[:80]}",
            Severity.CRITICAL,
            summary,
            now_s,
            evidence | {"share": round(share, 4)},
        )
        return DetectorReport(NAME, Status.ANOMALOUS, (verdict,), evidence, share, c.trip_share)
