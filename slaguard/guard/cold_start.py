"""Cold-start drift: a young model version's TTFT and SLA outcome against the baseline.

For each model version younger than `max_age_s`, two Page-Hinkley tests run on residuals
against the baseline of established traffic (the same model's older versions when they have
enough samples, else the whole established fleet):
* TTFT: log(ttft / deadline) minus the baseline mean of the same (deadline-normalised so
  priorities mix; log so a 1.8x slowdown is a shift of ln 1.8 = 0.59);
* SLA: the miss indicator minus the baseline miss rate.
A young version that is slow from its first request has no "before" of its own, so the
test uses the baseline as the known pre-change mean rather than the stream's running mean.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from slaguard.guard.config import ColdStartConfig
from slaguard.guard.page_hinkley import PageHinkley
from slaguard.guard.samples import GuardSample
from slaguard.guard.verdicts import Action, DetectorReport, JsonDict, Severity, Status, Verdict

NAME = "cold_start"
_FLEET = "*"


@dataclass(slots=True)
class _DecayedStats:
    """Time-decayed means of log(ttft/deadline) and of SLA misses, plus a lifetime count."""

    tau_s: float
    at_s: float | None = None
    ttft_weight: float = 0.0
    ttft_sum: float = 0.0
    sla_weight: float = 0.0
    miss_sum: float = 0.0
    count: int = 0

    def add(self, at_s: float, log_ratio: float | None, missed: bool) -> None:
        if self.at_s is not None:
            factor = math.exp(-max(at_s - self.at_s, 0.0) / self.tau_s)
            self.ttft_weight *= factor
            self.ttft_sum *= factor
            self.sla_weight *= factor
            self.miss_sum *= factor
        self.at_s = at_s if self.at_s is None else max(self.at_s, at_s)
        self.count += 1
        self.sla_weight += 1.0
        self.miss_sum += float(missed)
        if log_ratio is not None:
            self.ttft_weight += 1.0
            self.ttft_sum += log_ratio

    @property
    def mean_log_ratio(self) -> float | None:
        return self.ttft_sum / self.ttft_weight if self.ttft_weight > 0 else None

    @property
    def miss_rate(self) -> float:
        return self.miss_sum / self.sla_weight if self.sla_weight > 0 else math.nan


@dataclass(slots=True)
class _Young:
    deployed_at_s: float
    ttft: PageHinkley
    sla: PageHinkley
    samples: int = 0
    residual_sum: float = 0.0
    residual_count: int = 0
    misses: int = 0
    no_baseline: int = 0
    baseline_from: str = ""
    baseline: JsonDict = field(default_factory=dict)


class ColdStartDetector:
    """Page-Hinkley per young model version, against established traffic."""

    name = NAME

    def __init__(self, config: ColdStartConfig | None = None) -> None:
        self.config = config or ColdStartConfig()
        self._deployments: dict[str, float] = {}
        self._baselines: dict[str, _DecayedStats] = {}
        self._young: dict[str, _Young] = {}

    def register_deployment(self, model_key: str, deployed_at_s: float) -> None:
        """Declare when a model version (`model` or `model@version`) was rolled out."""
        self._deployments[model_key] = deployed_at_s

    def _deployed_at(self, sample: GuardSample) -> float | None:
        known = self._deployments.get(sample.model_key)
        return known if known is not None else sample.model_deployed_at_s

    def observe(self, sample: GuardSample) -> None:
        """Young versions feed their tests; established traffic feeds the baselines."""
        c = self.config
        log_ratio = None
        if sample.has_ttft and sample.ttft_s is not None:
            log_ratio = math.log(max(sample.ttft_s, 1e-6) / sample.deadline_s)
        deployed = self._deployed_at(sample)
        if deployed is None or sample.at_s - deployed >= c.max_age_s:
            for key in (sample.model_id, _FLEET):
                stats = self._baselines.setdefault(key, _DecayedStats(c.baseline_tau_s))
                stats.add(sample.at_s, log_ratio, not sample.sla_met)
            return
        young = self._young.get(sample.model_key)
        if young is None:
            young = _Young(
                deployed,
                PageHinkley(c.ttft_delta, c.ttft_threshold, c.min_samples, reference_mean=0.0),
                PageHinkley(c.sla_delta, c.sla_threshold, c.min_samples, reference_mean=0.0),
            )
            self._young[sample.model_key] = young
        self._feed(young, sample, log_ratio)

    def _baseline_for(self, model_id: str) -> tuple[str, _DecayedStats] | None:
        """The same model's established traffic if it has enough samples, else the fleet's."""
        for key, label in ((model_id, "same model"), (_FLEET, "fleet")):
            base = self._baselines.get(key)
            if base is not None and base.count >= self.config.baseline_min_samples:
                return label, base
        return None

    def _feed(self, young: _Young, sample: GuardSample, log_ratio: float | None) -> None:
        found = self._baseline_for(sample.model_id)
        if found is None:
            young.no_baseline += 1
            return
        young.baseline_from, base = found
        young.samples += 1
        young.misses += int(not sample.sla_met)
        young.baseline = {
            "mean_log_ttft_over_deadline": base.mean_log_ratio,
            "miss_rate": base.miss_rate,
        }
        young.sla.update(float(not sample.sla_met) - base.miss_rate)
        mean = base.mean_log_ratio
        if log_ratio is not None and mean is not None:
            residual = log_ratio - mean
            young.residual_sum += residual
            young.residual_count += 1
            young.ttft.update(residual)

    def evaluate(self, now_s: float) -> DetectorReport:
        """One trip verdict per young version whose TTFT or SLA test alarms."""
        c = self.config
        for key in [k for k, y in self._young.items() if now_s - y.deployed_at_s >= c.max_age_s]:
            del self._young[key]
        judged = {k: y for k, y in self._young.items() if y.samples >= c.min_samples}
        evidence: JsonDict = {
            "young_versions": sorted(self._young),
            "judged": sorted(judged),
            "min_samples": c.min_samples,
        }
        if not judged:
            return DetectorReport(NAME, Status.INSUFFICIENT, evidence=evidence, threshold=1.0)
        verdicts = [
            self._verdict(k, y, now_s)
            for k, y in sorted(judged.items())
            if y.ttft.alarm or y.sla.alarm
        ]
        # the Page-Hinkley statistics over their thresholds: an alarm is above 1
        score = max(
            max(y.ttft.statistic / y.ttft.threshold, y.sla.statistic / y.sla.threshold)
            for y in judged.values()
        )
        status = Status.ANOMALOUS if verdicts else Status.OK
        return DetectorReport(NAME, status, tuple(verdicts), evidence, score, 1.0)

    def _verdict(self, key: str, young: _Young, now_s: float) -> Verdict:
        c = self.config
        mean_residual = young.residual_sum / young.residual_count if young.residual_count else None
        slowdown = None if mean_residual is None else round(math.exp(mean_residual), 3)
        miss_rate = young.misses / young.samples
        evidence: JsonDict = {
            "model": key,
            "age_s": round(now_s - young.deployed_at_s, 3),
            "max_age_s": c.max_age_s,
            "samples": young.samples,
            "baseline_from": young.baseline_from,
            "baseline": young.baseline,
            "ttft_slowdown_vs_baseline": slowdown,
            "miss_rate": round(miss_rate, 4),
            "ttft_ph_statistic": round(young.ttft.statistic, 3),
            "ttft_threshold": c.ttft_threshold,
            "ttft_delta": c.ttft_delta,
            "sla_ph_statistic": round(young.sla.statistic, 3),
            "sla_threshold": c.sla_threshold,
            "sla_delta": c.sla_delta,
        }
        parts = []
        ttft_shift, sla_shift = young.ttft.shift_since_minimum, young.sla.shift_since_minimum
        evidence["ttft_slowdown_since_drift"] = (
            None if ttft_shift is None else round(math.exp(ttft_shift), 3)
        )
        evidence["samples_since_drift"] = young.ttft.since_minimum
        base_miss = float(young.baseline.get("miss_rate") or 0.0)
        recent_miss = None if sla_shift is None else min(1.0, max(0.0, base_miss + sla_shift))
        evidence["miss_rate_since_drift"] = None if recent_miss is None else round(recent_miss, 4)
        evidence["sla_samples_since_drift"] = young.sla.since_minimum
        if young.ttft.alarm:
            parts.append(
                f"TTFT x{evidence['ttft_slowdown_since_drift']} over its last "
                f"{young.ttft.since_minimum} samples (x{slowdown} since deployed)"
            )
        if young.sla.alarm:
            parts.append(
                f"miss rate {recent_miss or 0.0:.1%} over its last {young.sla.since_minimum} "
                f"samples against {base_miss:.1%} ({miss_rate:.1%} since deployed)"
            )
        summary = (
            f"new model {key} ({evidence['age_s']:.0f}s old) drifted above the "
            f"{young.baseline_from} baseline: {'; '.join(parts)}"
        )
        return Verdict(
            NAME, Action.TRIP, f"model:{key}", Severity.CRITICAL, summary, now_s, evidence
        )
