"""The metrics API the rest of slaguard calls: typed helpers over `MetricFamilies`.

The service, the simulator and each test pass their own `CollectorRegistry`, so nothing
leaks through the process-global default registry. Label values go through allow-lists
(`slaguard.telemetry.labels`): an unknown value is recorded as `other`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from slaguard import __version__
from slaguard.fleet import Fleet
from slaguard.scheduler.rollout import FleetMode
from slaguard.telemetry.families import MetricFamilies
from slaguard.telemetry.labels import (
    ARMS,
    CORRECTION_ACTIONS,
    DETECTORS,
    JOBS,
    MODES,
    OUTCOMES,
    PRIORITIES,
    SLACK_FAILURE_REASONS,
    UNKNOWN_TARGET,
    VERDICTS,
    TargetLabels,
    fleet_target_labels,
    slack_failure_reason,
)


class _Completion(NamedTuple):
    """The labelled children one completed request touches."""

    completed: Counter
    violations: Counter
    ttft: Histogram
    tpot: Histogram
    prompt_tokens: Counter
    generated_tokens: Counter


class SlaguardMetrics(MetricFamilies):
    """All slaguard metrics on one registry, with one helper per thing that happens.

    Thread-safe for the counters and histograms (prometheus-client locks them);
    `set_fleet_mode` keeps the last published mode and expects one caller (the mode sync).
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        targets: Iterable[TargetLabels] = (),
        version: str = __version__,
    ) -> None:
        super().__init__(registry, targets=targets, version=version)
        self._decision_children: dict[tuple[str, str, str], tuple[Counter, Histogram]] = {}
        self._completion_children: dict[tuple[str, str, str], _Completion] = {}
        self._mode: str | None = None
        self.clear_leader_gauges()
        for t in self._targets.values():
            self.target_ttft_zscore.labels(*t).set(math.nan)

    @classmethod
    def for_fleet(cls, registry: CollectorRegistry, fleet: Fleet) -> SlaguardMetrics:
        """Metrics whose target allow-list is `fleet`'s targets."""
        return cls(registry, targets=fleet_target_labels(fleet))

    def target_labels(self, target_id: str) -> TargetLabels:
        """The label values for `target_id`, or all-`other` for an unknown target."""
        return self._targets.get(target_id, UNKNOWN_TARGET)

    # Router hot path: labelled children are cached per allowed label combination (the
    # cache cannot grow past the allow-lists), which halves the cost of a call.

    def observe_decision(self, arm: str, mode: str, outcome: str, latency_s: float) -> None:
        """One routing decision and how long it took."""
        key = (arm, mode, outcome)
        children = self._decision_children.get(key)
        if children is None:
            clean = (ARMS.clean(arm), MODES.clean(mode), OUTCOMES.clean(outcome))
            children = (self.decisions.labels(*clean), self.decision_latency.labels(clean[0]))
            if clean == key:
                self._decision_children[key] = children
        children[0].inc()
        children[1].observe(latency_s)

    def observe_completion(
        self,
        target_id: str,
        arm: str,
        priority: str,
        ttft_s: float | None,
        *,
        violated: bool,
        tpot_s: float | None = None,
        prompt_tokens: int = 0,
        generated_tokens: int = 0,
    ) -> None:
        """A finished request: counted (and judged) whether or not a first token was seen,
        so failed and non-streamed requests burn the error budget too; TTFT and decode speed
        are observed when known."""
        key = (target_id, arm, priority)
        c = self._completion_children.get(key)
        if c is None:
            c = self._completion_children_for(*key)
        c.completed.inc()
        if violated:
            c.violations.inc()
        if ttft_s is not None:
            c.ttft.observe(ttft_s)
        if tpot_s is not None:
            c.tpot.observe(tpot_s)
        if prompt_tokens:
            c.prompt_tokens.inc(prompt_tokens)
        if generated_tokens:
            c.generated_tokens.inc(generated_tokens)

    def _completion_children_for(self, target_id: str, arm: str, priority: str) -> _Completion:
        t = self.target_labels(target_id)
        clean_arm, clean_priority = ARMS.clean(arm), PRIORITIES.clean(priority)
        children = _Completion(
            self.requests_completed.labels(clean_arm, clean_priority),
            self.sla_violations.labels(clean_arm, clean_priority),
            self.ttft.labels(*t),
            self.tpot.labels(*t),
            self.tokens.labels(*t, "prompt"),
            self.tokens.labels(*t, "generated"),
        )
        if (t.target, clean_arm, clean_priority) == (target_id, arm, priority):
            self._completion_children[(target_id, arm, priority)] = children
        return children

    # Per-target state (hardware refresh, batching, KV budget, jitter).

    def set_target_state(
        self,
        target_id: str,
        *,
        queue_depth: int,
        kv_used_ratio: float,
        ttft_p99_zscore: float,
        demoted: bool,
    ) -> None:
        """The per-target gauges, refreshed together every hardware tick; NaN as
        `ttft_p99_zscore` for a target the guard has not scored (never a made-up 0)."""
        t = self.target_labels(target_id)
        self.target_queue_depth.labels(*t).set(queue_depth)
        self.target_kv_used.labels(*t).set(kv_used_ratio)
        self.target_ttft_zscore.labels(*t).set(ttft_p99_zscore)
        self.target_demoted.labels(*t).set(1 if demoted else 0)

    def count_spill(self, target_id: str) -> None:
        """A request that could not stay on `target_id` and spilled elsewhere."""
        self.target_spills.labels(*self.target_labels(target_id)).inc()

    def count_demotion(self, target_id: str) -> None:
        """`target_id` was demoted to low-priority traffic for jitter."""
        self.target_demotions.labels(*self.target_labels(target_id)).inc()

    # Global correction, fleet mode, rollout.

    def set_correction(
        self,
        *,
        signal: float,
        load_imbalance_ratio: float,
        queued_requests: int,
        violation_ratio: float,
    ) -> None:
        """The global correction scalar and its three components."""
        self.correction_signal.set(signal)
        self.correction_imbalance.set(load_imbalance_ratio)
        self.correction_queued.set(queued_requests)
        self.correction_violation.set(violation_ratio)

    def count_correction_action(self, action: str, targets: int = 1) -> None:
        """`speed_up` or `slow_down` orders sent to `targets` targets."""
        self.correction_actions.labels(CORRECTION_ACTIONS.clean(action)).inc(targets)

    def set_fleet_mode(self, mode: FleetMode) -> None:
        """Publish the fleet mode; a change from the last published mode counts a transition."""
        current = mode.kind.value
        if self._mode is not None and self._mode != current:
            self.mode_transitions.labels(self._mode, current).inc()
        self._mode = current
        for m in MODES:
            self.fleet_mode.labels(m).set(1 if m == current else 0)
        self.rollout_stage.set(mode.learned_share)

    def record_mode_sync(self, *, at_s: float, ok: bool, leader: bool) -> None:
        """One mode sync: when the shared mode was last read, its failures, leadership."""
        if ok:
            self.mode_synced_at.set(at_s)
        else:
            self.guard_sync_errors.inc()
        self.guard_leader.set(1 if leader else 0)

    def set_arm_violation_ratio(self, arm: str, ratio: float) -> None:
        """The smoothed per-arm SLA violation ratio the rollout comparison acts on."""
        self.arm_violation_ratio.labels(ARMS.clean(arm)).set(ratio)

    # Guard.

    def record_verdict(self, detector: str, verdict: str, score: float, threshold: float) -> None:
        """One detector evaluation: its verdict and which number it compared to which limit.

        Pass NaN as `score` when the detector had too little data: never a made-up 0.
        """
        detector = DETECTORS.clean(detector)
        self.detector_verdicts.labels(detector, VERDICTS.clean(verdict)).inc()
        self.detector_score.labels(detector).set(score)
        self.detector_threshold.labels(detector).set(threshold)

    def clear_leader_gauges(self) -> None:
        """NaN in what only the guard leader publishes (detector scores and thresholds,
        per-arm violation ratios), on followers and once leadership is lost: a follower's 0,
        or an ex-leader's last value, won the dashboards' `max` across instances."""
        for detector in DETECTORS:
            self.detector_score.labels(detector).set(math.nan)
            self.detector_threshold.labels(detector).set(math.nan)
        for arm in ARMS:
            self.arm_violation_ratio.labels(arm).set(math.nan)

    def count_trip(self, detector: str) -> None:
        """The breaker tripped on this detector, or an operator or Alertmanager rolled back."""
        self.detector_trips.labels(DETECTORS.clean(detector)).inc()

    # Audit writer, scheduler, Slack.

    def set_audit_backlog(self, *, queue_depth: int, spill_bytes: int) -> None:
        """Records not yet confirmed in the database, and the spill journal's bytes."""
        self.audit_queue_depth.set(queue_depth)
        self.audit_spill_bytes.set(spill_bytes)

    def count_audit_rows(self, rows: int) -> None:
        """Rows committed by one audit batch."""
        self.audit_rows_written.inc(rows)

    def count_audit_write_error(self, detail: str = "") -> None:
        """One failed audit batch write; fits the writer's `on_write_error` callback.

        `detail` (the error text) is not a label: it belongs in the log, not in a series.
        """
        self.audit_write_errors.inc()

    def count_audit_refused(self, records: int = 1) -> None:
        """Records the writer refused (spill journal full): decisions that go unaudited."""
        self.audit_refused.inc(records)

    def count_audit_unreadable(self, records: int) -> None:
        """Journal records the writer could not read back (torn by a crash, damaged, or of
        an unknown format): acknowledged decisions the database will never hold."""
        self.audit_unreadable.inc(records)

    def observe_job(self, job: str, duration_s: float, *, failed: bool = False) -> None:
        """One scheduler job run (APScheduler does not count these itself)."""
        job = JOBS.clean(job)
        self.job_runs.labels(job).inc()
        self.job_duration.labels(job).observe(duration_s)
        if failed:
            self.job_failures.labels(job).inc()

    def count_job_overrun(self, job: str) -> None:
        """A run skipped because the previous one still ran (max_instances reached)."""
        self.job_overruns.labels(JOBS.clean(job)).inc()

    def count_slack_delivery(self) -> None:
        """A Slack message accepted by Slack."""
        self.slack_deliveries.inc()

    def count_slack_failure(self, reason: str) -> None:
        """A Slack message given up on; `reason` in ratelimited/server_error/connection/rejected."""
        self.slack_failures.labels(SLACK_FAILURE_REASONS.clean(reason)).inc()

    def count_slack_results(self, results: Iterable[DeliveryOutcome]) -> None:
        """Count one `GuardReplica.deliver` round (the database outbox): successes and failures."""
        for result in results:
            if result.ok:
                self.count_slack_delivery()
            else:
                self.count_slack_failure(slack_failure_reason(result.status_code))


class DeliveryOutcome(Protocol):
    """What the metrics need from a notifier's delivery result."""

    @property
    def ok(self) -> bool: ...

    @property
    def status_code(self) -> int | None: ...


def render_snapshot(registry: CollectorRegistry) -> str:
    """The registry in Prometheus text exposition format (what `/metrics` serves)."""
    return generate_latest(registry).decode("utf-8")
