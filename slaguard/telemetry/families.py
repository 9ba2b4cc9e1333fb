"""slaguard's metric families: names, help, labels, buckets, and zero-initialised series.

Every allowed label combination is created at zero up front, so `rate()` and `increase()`
see the first event and dashboards have series from the first scrape. `docs/metrics.md`
documents each family; a test keeps the two in step.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

from slaguard import __version__
from slaguard.telemetry.labels import (
    ARMS,
    CORRECTION_ACTIONS,
    DETECTORS,
    JOBS,
    MODES,
    OUTCOMES,
    PRIORITIES,
    SLACK_FAILURE_REASONS,
    TOKEN_KINDS,
    VERDICTS,
    TargetLabels,
)

DECISION_LATENCY_BUCKETS_S = (
    *(1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4),
    *(0.001, 0.002, 0.003, 0.005, 0.01, 0.025, 0.05, 0.1),
)
"""10 us .. 100 ms, with edges on the 3 ms router budget and the 50 ms decision budget."""

TTFT_BUCKETS_S = (
    *(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 1.5, 2.5),
    *(4.0, 6.0, 8.0, 12.0, 20.0, 30.0, 60.0, 120.0),
)
"""10 ms .. 120 s, with edges on the default SLA deadlines (1.5 s, 4 s, 12 s)."""

TPOT_BUCKETS_S = (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0)
"""5 ms .. 1 s per output token: H200 decode sits near 10 ms, a stalled L40S near 1 s."""

JOB_DURATION_BUCKETS_S = (0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0)
"""0.5 ms .. 30 s: the 100 ms loops must stay far left, the hourly weight update may not."""

_TARGET = ("target", "card_type", "model")


class MetricFamilies:
    """slaguard's metric families on one registry, every allowed series created at zero.

    `targets` is the target allow-list (see `fleet_target_labels`); an unknown target id is
    recorded as `target="other"`. Creating an instance disables prometheus-client's
    `_created` series process-wide: Prometheus does not use them in the text format and
    they double the series count of every counter and histogram.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        targets: Iterable[TargetLabels] = (),
        version: str = __version__,
    ) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = registry
        self._targets = {t.target: t for t in targets}
        r = registry

        self.build_info = Gauge(
            "slaguard_build_info",
            "Always 1; the version label says what runs.",
            ["version"],
            registry=r,
        )
        self.decisions = Counter(
            "slaguard_decisions_total",
            "Routing decisions by policy arm, fleet mode, outcome.",
            ["arm", "mode", "outcome"],
            registry=r,
        )
        self.decision_latency = Histogram(
            "slaguard_decision_latency_seconds",
            "Wall time of one routing decision.",
            ["arm"],
            buckets=DECISION_LATENCY_BUCKETS_S,
            registry=r,
        )
        self.requests_completed = Counter(
            "slaguard_requests_completed_total",
            "Requests finished on a target: answered, failed or cut.",
            ["arm", "priority"],
            registry=r,
        )
        self.sla_violations = Counter(
            "slaguard_sla_violations_total",
            "Finished requests that missed their deadline or failed.",
            ["arm", "priority"],
            registry=r,
        )
        self.ttft = Histogram(
            "slaguard_ttft_seconds",
            "Time to first token per target.",
            _TARGET,
            buckets=TTFT_BUCKETS_S,
            registry=r,
        )
        self.tpot = Histogram(
            "slaguard_tpot_seconds",
            "Time per output token after the first, per target.",
            _TARGET,
            buckets=TPOT_BUCKETS_S,
            registry=r,
        )
        self.tokens = Counter(
            "slaguard_tokens_total",
            "Prompt and generated tokens per target.",
            [*_TARGET, "kind"],
            registry=r,
        )
        self.target_queue_depth = Gauge(
            "slaguard_target_queue_depth",
            "Active queue depth q_h of a target.",
            _TARGET,
            registry=r,
        )
        self.target_kv_used = Gauge(
            "slaguard_target_kv_used_ratio",
            "Used share of a target's KV quota V_kv(h).",
            _TARGET,
            registry=r,
        )
        self.target_ttft_zscore = Gauge(
            "slaguard_target_ttft_p99_zscore",
            "Z-score of the target's 5-minute TTFT p99 against the fleet.",
            _TARGET,
            registry=r,
        )
        self.target_demoted = Gauge(
            "slaguard_target_demoted",
            "1 while jitter keeps the target on low-priority traffic.",
            _TARGET,
            registry=r,
        )
        self.target_spills = Counter(
            "slaguard_target_spills_total",
            "Requests spilled away from a saturated target.",
            _TARGET,
            registry=r,
        )
        self.target_demotions = Counter(
            "slaguard_target_demotions_total",
            "Times a target was demoted for jitter.",
            _TARGET,
            registry=r,
        )
        self.correction_signal = Gauge(
            "slaguard_correction_signal",
            "Global correction scalar (compared to its threshold).",
            registry=r,
        )
        self.correction_imbalance = Gauge(
            "slaguard_correction_load_imbalance_ratio",
            "Load imbalance across targets, std/mean.",
            registry=r,
        )
        self.correction_queued = Gauge(
            "slaguard_correction_queued_requests",
            "Requests queued across the fleet.",
            registry=r,
        )
        self.correction_violation = Gauge(
            "slaguard_correction_violation_ratio",
            "Recent SLA violation ratio seen by the loop.",
            registry=r,
        )
        self.correction_actions = Counter(
            "slaguard_correction_actions_total",
            "Speed-up / slow-down orders sent to targets.",
            ["action"],
            registry=r,
        )
        self.fleet_mode = Gauge(
            "slaguard_fleet_mode",
            "1 for the fleet's current routing mode, 0 for the others.",
            ["mode"],
            registry=r,
        )
        self.mode_transitions = Counter(
            "slaguard_fleet_mode_transitions_total",
            "Fleet mode changes.",
            ["from", "to"],
            registry=r,
        )
        self.rollout_stage = Gauge(
            "slaguard_rollout_stage_ratio",
            "Share of traffic the learned arm routes (0..1).",
            registry=r,
        )
        self.mode_synced_at = Gauge(
            "slaguard_fleet_mode_synced_timestamp_seconds",
            "When this replica last read the shared fleet mode (Unix time; 0: never).",
            registry=r,
        )
        self.guard_sync_errors = Counter(
            "slaguard_guard_sync_errors_total",
            "Mode syncs that could not read the shared mode or check leadership.",
            registry=r,
        )
        self.guard_leader = Gauge(
            "slaguard_guard_leader",
            "1 while this replica leads the guard (runs detectors, sends Slack), else 0.",
            registry=r,
        )
        self.arm_violation_ratio = Gauge(
            "slaguard_rollout_arm_sla_violation_ratio",
            "Smoothed SLA violation ratio per arm, as the rollout comparison sees it.",
            ["arm"],
            registry=r,
        )
        self.detector_verdicts = Counter(
            "slaguard_detector_verdicts_total",
            "Detector evaluations by verdict.",
            ["detector", "verdict"],
            registry=r,
        )
        self.detector_trips = Counter(
            "slaguard_detector_trips_total",
            "Breaker trips by detector; rollbacks and holds by an operator or Alertmanager.",
            ["detector"],
            registry=r,
        )
        self.detector_score = Gauge(
            "slaguard_detector_score",
            "Latest statistic each detector compares to its threshold.",
            ["detector"],
            registry=r,
        )
        self.detector_threshold = Gauge(
            "slaguard_detector_threshold",
            "Threshold each detector trips above.",
            ["detector"],
            registry=r,
        )
        self.audit_queue_depth = Gauge(
            "slaguard_audit_queue_depth",
            "Audit records acknowledged but not yet confirmed in the database.",
            registry=r,
        )
        self.audit_spill_bytes = Gauge(
            "slaguard_audit_spill_bytes",
            "Bytes in the audit spill journal not yet confirmed in the database.",
            registry=r,
        )
        self.audit_rows_written = Counter(
            "slaguard_audit_rows_written_total",
            "Audit rows committed to the database.",
            registry=r,
        )
        self.audit_write_errors = Counter(
            "slaguard_audit_write_errors_total",
            "Failed audit batch write attempts (each is retried).",
            registry=r,
        )
        self.audit_refused = Counter(
            "slaguard_audit_records_refused_total",
            "Audit records refused (spill journal full or not writable): decisions not audited.",
            registry=r,
        )
        self.audit_unreadable = Counter(
            "slaguard_audit_records_unreadable_total",
            "Journalled audit records skipped as torn or unreadable: acknowledged, never stored.",
            registry=r,
        )
        self.job_runs = Counter(
            "slaguard_scheduler_job_runs_total",
            "Scheduler job runs that finished (raised or not).",
            ["scheduler_job"],
            registry=r,
        )
        self.job_overruns = Counter(
            "slaguard_scheduler_job_overruns_total",
            "Job runs skipped because the previous run was still going.",
            ["scheduler_job"],
            registry=r,
        )
        self.job_failures = Counter(
            "slaguard_scheduler_job_failures_total",
            "Job runs that raised.",
            ["scheduler_job"],
            registry=r,
        )
        self.job_duration = Histogram(
            "slaguard_scheduler_job_duration_seconds",
            "Wall time of one job run.",
            ["scheduler_job"],
            buckets=JOB_DURATION_BUCKETS_S,
            registry=r,
        )
        self.slack_deliveries = Counter(
            "slaguard_slack_deliveries_total",
            "Slack messages delivered.",
            registry=r,
        )
        self.slack_failures = Counter(
            "slaguard_slack_delivery_failures_total",
            "Slack deliveries failed after the client's retries (retried later unless rejected).",
            ["reason"],
            registry=r,
        )
        self.build_info.labels(version).set(1)
        self._create_all_series()

    def _create_all_series(self) -> None:
        """Create every allowed label combination at zero."""
        for arm in ARMS:
            self.decision_latency.labels(arm)
            self.arm_violation_ratio.labels(arm)
            for mode in MODES:
                for outcome in OUTCOMES:
                    self.decisions.labels(arm, mode, outcome)
            for prio in PRIORITIES:
                self.requests_completed.labels(arm, prio)
                self.sla_violations.labels(arm, prio)
        for t in self._targets.values():
            for family in (self.ttft, self.tpot, self.target_spills, self.target_demotions):
                family.labels(*t)
            for gauge in (
                self.target_queue_depth,
                self.target_kv_used,
                self.target_ttft_zscore,
                self.target_demoted,
            ):
                gauge.labels(*t)
            for kind in TOKEN_KINDS:
                self.tokens.labels(*t, kind)
        for action in CORRECTION_ACTIONS:
            self.correction_actions.labels(action)
        for mode in MODES:
            self.fleet_mode.labels(mode)
            for to in MODES:
                if to != mode:
                    self.mode_transitions.labels(mode, to)
        for det in DETECTORS:
            self.detector_trips.labels(det)
            self.detector_score.labels(det)
            self.detector_threshold.labels(det)
            for verdict in VERDICTS:
                self.detector_verdicts.labels(det, verdict)
        for job in JOBS:
            for family in (self.job_runs, self.job_overruns, self.job_failures, self.job_duration):
                family.labels(job)
        for reason in SLACK_FAILURE_REASONS:
            self.slack_failures.labels(reason)
