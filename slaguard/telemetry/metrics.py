"""The metrics API the rest of slaguard calls: typed helpers over `MetricFamilies`.

The service, the simulator and each test pass their own `CollectorRegistry`, so nothing
leaks through the process-global default registry. Label values go through allow-lists
(`slaguard.telemetry.labels`): an unknown value is recorded as `other`.
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

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
)


class SlaguardMetrics(MetricFamilies):
    """All slaguard metrics on one registry, with one helper per thing that happens."""

    def target_labels(self, target_id: str) -> TargetLabels:
        """The label values for `target_id`, or all-`other` for an unknown target."""
        return self._targets.get(target_id, UNKNOWN_TARGET)

    # Router hot path.

    def observe_decision(self, arm: str, mode: str, outcome: str, latency_s: float) -> None:
        """One routing decision and how long it took."""
        arm = ARMS.clean(arm)
        self.decisions.labels(arm, MODES.clean(mode), OUTCOMES.clean(outcome)).inc()
        self.decision_latency.labels(arm).observe(latency_s)

    def observe_completion(
        self,
        target_id: str,
        arm: str,
        priority: str,
        ttft_s: float,
        *,
        violated: bool,
        tpot_s: float | None = None,
        prompt_tokens: int = 0,
        generated_tokens: int = 0,
    ) -> None:
        """A request's first token (and, once known, its decode speed and token counts)."""
        t = self.target_labels(target_id)
        arm, priority = ARMS.clean(arm), PRIORITIES.clean(priority)
        self.requests_completed.labels(arm, priority).inc()
        if violated:
            self.sla_violations.labels(arm, priority).inc()
        self.ttft.labels(*t).observe(ttft_s)
        if tpot_s is not None:
            self.tpot.labels(*t).observe(tpot_s)
        if prompt_tokens:
            self.tokens.labels(*t, "prompt").inc(prompt_tokens)
        if generated_tokens:
            self.tokens.labels(*t, "generated").inc(generated_tokens)

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
        """The per-target gauges, refreshed together every hardware tick."""
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

    def count_trip(self, detector: str) -> None:
        """A detector tripped and acted (switched the fleet, demoted, paged)."""
        self.detector_trips.labels(DETECTORS.clean(detector)).inc()

    # Audit writer, scheduler, Slack.

    def set_audit_backlog(self, *, queue_depth: int, spill_bytes: int) -> None:
        """Rows waiting in memory and bytes waiting on disk."""
        self.audit_queue_depth.set(queue_depth)
        self.audit_spill_bytes.set(spill_bytes)

    def count_audit_rows(self, rows: int) -> None:
        """Rows committed by one audit batch."""
        self.audit_rows_written.inc(rows)

    def count_audit_write_error(self) -> None:
        """One failed audit batch write."""
        self.audit_write_errors.inc()

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


def render_snapshot(registry: CollectorRegistry) -> str:
    """The registry in Prometheus text exposition format (what `/metrics` serves)."""
    return generate_latest(registry).decode("utf-8")


def write_snapshot(registry: CollectorRegistry, path: Path) -> None:
    """Write a final snapshot of `registry` (the simulator's export) to `path`."""
    path.write_text(render_snapshot(registry), encoding="utf-8")
