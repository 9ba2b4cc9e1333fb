"""TTFT Z-score detector: per-target p99 over 5 minutes, robust-scored two ways.

* Peer score: the target's p99 against the other targets of the same card type serving the
  same model (a 70B tensor-parallel group and an 8B replica on one card type are not
  comparable), median/MAD, only for groups of at least `min_peers`.
* Fleet score: the target's p99 relative to its own slow baseline (once that baseline is
  a window old), against the same ratio of the other targets serving the same model (the
  whole fleet for a model with fewer than `min_peers` targets). Raw p99s of a
  heterogeneous fleet differ by design (an L40S is slower than an H200); their *change* is
  comparable, so a target that jitters stands out while a load rise on a model (which
  lifts all of its targets) does not.

Both are scored on logs (latency noise is multiplicative; see `robust`). The larger of
the two is the target's Z-score (what the router's jitter term consumes). A
target anomalous for `demote_after_s` is demoted; many anomalous targets at once, or a
whole card tier that shifted (see `tier_shift`), trip the fleet.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np

from slaguard.guard.baseline import LogBaseline
from slaguard.guard.config import TtftZscoreConfig
from slaguard.guard.histogram import SlidingLogHistogram
from slaguard.guard.robust import log_floor, robust_zscores, sigma_from_iqr
from slaguard.guard.samples import FirstToken, GuardSample
from slaguard.guard.tier_shift import TierTest, tier_statistic
from slaguard.guard.verdicts import Action, DetectorReport, JsonDict, Severity, Status, Verdict

NAME = "ttft_zscore"
_NORMAL = NormalDist()


@dataclass(slots=True)
class _TargetState:
    card_type: str
    model_id: str
    baseline: LogBaseline
    anomalous_since_s: float | None = None
    normal_since_s: float | None = None
    demoted: bool = False


@dataclass(frozen=True, slots=True)
class _Score:
    p99_s: float
    samples: int
    z: float
    peer_z: float | None
    fleet_z: float | None
    ratio: float | None
    extra: JsonDict = field(default_factory=dict)

    def evidence(self, target: str, state: _TargetState) -> JsonDict:
        def rounded(x: float | None, digits: int = 3) -> float | None:
            return None if x is None else round(x, digits)

        return {
            "target": target,
            "card_type": state.card_type,
            "model": state.model_id,
            "p99_s": round(self.p99_s, 6),
            "baseline_p99_s": rounded(state.baseline.value, 6),
            "samples": self.samples,
            "z": round(self.z, 3),
            "peer_z": rounded(self.peer_z),
            "fleet_z": rounded(self.fleet_z),
            "ratio_to_baseline": rounded(self.ratio, 4),
        }


class TtftZscoreDetector:
    """Feeds per-target TTFT into sliding histograms; scores, demotes and trips."""

    name = NAME

    def __init__(self, config: TtftZscoreConfig | None = None) -> None:
        self.config = config or TtftZscoreConfig()
        c = self.config
        self._hist = SlidingLogHistogram(
            c.slice_s, c.slice_count, c.relative_accuracy, c.min_ttft_s, c.max_ttft_s
        )
        self._tier_test = TierTest(c, NAME)
        self._targets: dict[str, _TargetState] = {}
        self._zscores: dict[str, float] = {}
        self._inherited: set[str] = set()
        """Targets a previous leader had demoted and this detector has not seen yet."""

    def observe(self, sample: GuardSample) -> None:
        """Record one TTFT; samples without a measured TTFT are skipped, never read as 0,
        and so are TTFTs already fed at the first token (`ttft_observed`)."""
        if sample.has_ttft and sample.ttft_s is not None and not sample.ttft_observed:
            self.observe_first_token(
                FirstToken(
                    sample.at_s, sample.target_id, sample.card_type, sample.model_id,
                    sample.ttft_s, sample.prompt_tokens,
                )
            )  # fmt: skip
        else:
            self._target(sample.target_id, sample.card_type, sample.model_id)

    def observe_first_token(self, first: FirstToken) -> None:
        """Record one TTFT when its first token arrives (see `FirstToken`); NaN is skipped."""
        if math.isnan(first.ttft_s):
            return
        self._target(first.target_id, first.card_type, first.model_id)
        ttft = max(first.ttft_s, self.config.min_ttft_s)
        self._hist.add(first.target_id, first.at_s, ttft)
        statistic = tier_statistic(ttft, first.prompt_tokens, self.config.tier_prompt_floor_tokens)
        self._tier_test.observe(
            first.target_id, first.card_type, first.model_id, first.at_s, statistic,
            first.prompt_tokens, first.at_s - ttft,
        )  # fmt: skip

    def observe_handed(
        self, at_s: float, card_type: str, model_id: str, prompt_tokens: int
    ) -> None:
        """One request routed to a target of (card type, model), at its routing decision:
        its prompt tokens count as work handed to that tier (the tier test's load excuse)."""
        self._tier_test.observe_handed(card_type, model_id, at_s, prompt_tokens)

    def restart_handed(self) -> None:
        """The handed work's baselines start again (see `Guard.restart_handed_work`)."""
        self._tier_test.restart_handed()

    def _target(self, target_id: str, card_type: str, model_id: str) -> None:
        if target_id not in self._targets:
            baseline = LogBaseline(self.config.baseline_tau_s, self.config.baseline_max_freeze_s)
            demoted = target_id in self._inherited
            self._inherited.discard(target_id)
            self._targets[target_id] = _TargetState(card_type, model_id, baseline, demoted=demoted)

    def inherit_demotions(self, targets: Iterable[str]) -> None:
        """A new leader starts with the previous one's demotions: each holds until this
        detector's own scores restore it (`restore_after_s` of normal TTFT), so a slow
        target does not get full traffic back while the new leader's windows fill."""
        for target in targets:
            state = self._targets.get(target)
            if state is None:
                self._inherited.add(target)
            else:
                state.demoted = True

    def rebaseline(self) -> None:
        """Forget every per-target baseline: the fleet's routing policy changed, which moves
        load between targets by design, so yesterday's per-target normal no longer holds.
        The change score waits until a new baseline is a window old; the peer score (no
        baseline) keeps judging; the tier test waits for `min_samples` per target."""
        c = self.config
        for state in self._targets.values():
            state.baseline = LogBaseline(c.baseline_tau_s, c.baseline_max_freeze_s)
        self._tier_test.rebaseline()

    def zscores(self) -> dict[str, float]:
        """Latest Z-score per scored target (targets with thin data are absent, not 0)."""
        return dict(self._zscores)

    def demoted(self) -> set[str]:
        """Targets currently demoted."""
        return {t for t, s in self._targets.items() if s.demoted} | self._inherited

    def evaluate(self, now_s: float) -> DetectorReport:
        """Score every target with enough data; return demotions, restorations and trips."""
        c = self.config
        self._hist.advance(now_s)
        p99s: dict[str, float] = {}
        counts: dict[str, int] = {}
        noise: dict[str, float] = {}
        spreads: list[float] = []
        for target in self._targets:
            n = self._hist.count(target)
            if n >= c.min_samples:
                # at least `min_tail_samples` above the quantile: one slow request is not a tail
                q = min(c.quantile, 1.0 - c.min_tail_samples / n)
                p99s[target] = self._hist.quantile(target, q)
                counts[target] = n
                noise[target] = self._read_noise_factor(q, n)
                spreads.append(self._log_spread(target))
        tier_verdicts, tier_evidence = self._tier_test.evaluate(now_s)
        gate: JsonDict = {
            "scored_targets": len(p99s),
            "min_scored_targets": c.min_scored_targets,
            "min_samples": c.min_samples,
            "window_s": c.window_s,
        } | tier_evidence
        if len(p99s) < c.min_scored_targets:
            self._zscores = {}
            status = Status.ANOMALOUS if tier_verdicts else Status.INSUFFICIENT
            return DetectorReport(
                NAME, status, tuple(tier_verdicts), evidence=gate, threshold=c.z_threshold
            )
        sigma = float(np.median(spreads)) if spreads else 0.0
        scores = self._score(now_s, p99s, counts, {t: f * sigma for t, f in noise.items()})
        self._zscores = {t: s.z for t, s in scores.items()}
        verdicts = self._target_verdicts(now_s, scores)
        verdicts += self._fleet_trip(now_s, scores)
        verdicts += tier_verdicts
        for target, p99 in p99s.items():
            score = scores.get(target)
            anomalous = score is not None and score.z >= c.z_threshold
            self._targets[target].baseline.update(now_s, p99, anomalous)
        trips = any(v.action is Action.TRIP for v in verdicts)
        status = Status.ANOMALOUS if trips else Status.OK
        top = max(self._zscores.values(), default=None)  # the highest per-target Z
        return DetectorReport(NAME, status, tuple(verdicts), gate, top, c.z_threshold)

    def _log_spread(self, target: str) -> float:
        """Sigma of log TTFT from the target's interquartile range."""
        lo, hi = self._hist.quantile(target, 0.25), self._hist.quantile(target, 0.75)
        return sigma_from_iqr(math.log(hi / lo))

    @staticmethod
    def _read_noise_factor(q: float, n: int) -> float:
        """Standard error of log(quantile q) read from n samples, in units of the log
        sigma (normal approximation): 0.12 at n = 1,000 and q = 0.99, 0.29 at n = 40
        (where the read is the 92.5th percentile). The sigma is the median over scored
        targets, not the target's own: a degrading target's own spread widens."""
        return math.sqrt(q * (1.0 - q) / n) / _NORMAL.pdf(_NORMAL.inv_cdf(q))

    def _score(
        self,
        now_s: float,
        p99s: dict[str, float],
        counts: dict[str, int],
        noise: dict[str, float],
    ) -> dict[str, _Score]:
        c = self.config
        peers = self._peer_groups(p99s)
        peer_z: dict[str, float] = {}
        floor = log_floor(c.mad_floor_rel)
        for by_card in peers.values():
            for members in by_card.values():
                if len(members) >= c.min_peers:
                    logs = {t: math.log(p99s[t]) for t in members}
                    peer_z.update(robust_zscores(logs, 0.0, floor, noise)[0])
        ratios = {
            t: r
            for t, p99 in p99s.items()
            if self._targets[t].baseline.age_s(now_s) >= c.window_s
            and (r := self._targets[t].baseline.ratio(p99)) is not None
        }
        fleet_z = self._change_scores(peers, ratios, floor, noise)
        scores: dict[str, _Score] = {}
        for target, p99 in p99s.items():
            pz, fz = peer_z.get(target), fleet_z.get(target)
            candidates = [z for z in (pz, fz) if z is not None]
            if candidates:
                scores[target] = _Score(
                    p99, counts[target], max(candidates), pz, fz, ratios.get(target)
                )
        return scores

    def _peer_groups(self, targets: Iterable[str]) -> dict[str, dict[str, list[str]]]:
        """The scored targets by model, then by card type: the peer score compares within a
        (model, card type) group, the change score within a model."""
        groups: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
        for target in targets:
            st = self._targets[target]
            groups[st.model_id][st.card_type].append(target)
        return groups

    def _change_scores(
        self,
        peers: dict[str, dict[str, list[str]]],
        ratios: dict[str, float],
        floor: float,
        noise: dict[str, float],
    ) -> dict[str, float]:
        """Robust Z of log(p99 / baseline) among the targets serving the same model.

        Each model has its own traffic and capacity: a burst of 70B requests lifts every 70B
        target's p99 while the 8B targets stay put, which is load, not jitter. A model served
        by fewer than `min_peers` scored targets is compared with the whole fleet instead.
        """
        c = self.config
        logs = {t: math.log(r) for t, r in ratios.items()}
        scores: dict[str, float] = {}
        for by_card in peers.values():
            members = {t: logs[t] for group in by_card.values() for t in group if t in logs}
            if len(members) >= c.min_peers:
                scores.update(robust_zscores(members, 0.0, floor, noise)[0])
        if len(scores) < len(logs) and len(logs) >= c.min_scored_targets:
            pooled = robust_zscores(logs, 0.0, floor, noise)[0]
            scores.update({t: z for t, z in pooled.items() if t not in scores})
        return scores

    def _target_verdicts(self, now_s: float, scores: dict[str, _Score]) -> list[Verdict]:
        c = self.config
        verdicts: list[Verdict] = []
        for target, score in scores.items():
            st = self._targets[target]
            if score.z >= c.z_threshold:
                st.normal_since_s = None
                if st.anomalous_since_s is None:
                    st.anomalous_since_s = now_s
                lasted = now_s - st.anomalous_since_s
                if not st.demoted and lasted >= c.demote_after_s:
                    st.demoted = True
                    verdicts.append(self._verdict(Action.DEMOTE, target, score, now_s, lasted))
            else:
                st.anomalous_since_s = None
                if st.normal_since_s is None:
                    st.normal_since_s = now_s
                lasted = now_s - st.normal_since_s
                if st.demoted and lasted >= c.restore_after_s:
                    st.demoted = False
                    verdicts.append(self._verdict(Action.RESTORE, target, score, now_s, lasted))
        return verdicts

    def _verdict(
        self, action: Action, target: str, score: _Score, now_s: float, lasted: float
    ) -> Verdict:
        c = self.config
        demote = action is Action.DEMOTE
        evidence = score.evidence(target, self._targets[target]) | {
            "z_threshold": c.z_threshold,
            "for_s": round(lasted, 3),
            "required_s": c.demote_after_s if demote else c.restore_after_s,
        }
        if demote:
            summary = (
                f"{target}: TTFT p99 {score.p99_s:.3f}s, Z {score.z:.1f} >= {c.z_threshold} "
                f"for {lasted:.0f}s; demoted"
            )
        else:
            summary = (
                f"{target}: TTFT p99 normal again (Z {score.z:.1f}) for {lasted:.0f}s; restored"
            )
        return Verdict(NAME, action, f"target:{target}", Severity.WARNING, summary, now_s, evidence)

    def _fleet_trip(self, now_s: float, scores: dict[str, _Score]) -> list[Verdict]:
        c = self.config
        anomalous = sorted(t for t, s in scores.items() if s.z >= c.z_threshold)
        needed = max(c.min_trip_targets, math.ceil(c.fleet_trip_share * len(scores)))
        if len(anomalous) < needed:
            return []
        share = len(anomalous) / len(scores)
        evidence: JsonDict = {
            "anomalous_targets": [scores[t].evidence(t, self._targets[t]) for t in anomalous],
            "scored_targets": len(scores),
            "anomalous_share": round(share, 4),
            "fleet_trip_share": c.fleet_trip_share,
            "needed": needed,
            "z_threshold": c.z_threshold,
        }
        summary = (
            f"{len(anomalous)}/{len(scores)} targets have anomalous TTFT p99 "
            f"(>= {needed} needed, Z >= {c.z_threshold})"
        )
        return [Verdict(NAME, Action.TRIP, "fleet", Severity.CRITICAL, summary, now_s, evidence)]
