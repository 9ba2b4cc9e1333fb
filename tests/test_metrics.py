"""SlaguardMetrics: own registry, naming rules, allow-lists, and what the helpers record."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from slaguard.fleet import Priority, load_fleet
from slaguard.scheduler.rollout import HELD_ROUND_ROBIN, LEARNED, ROUND_ROBIN, Arm, FleetMode
from slaguard.scheduler.rollout import ModeKind as Mode
from slaguard.telemetry import SlaguardMetrics, fleet_target_labels, render_snapshot
from slaguard.telemetry.families import (
    DECISION_LATENCY_BUCKETS_S,
    TPOT_BUCKETS_S,
    TTFT_BUCKETS_S,
)
from slaguard.telemetry.labels import (
    ARMS,
    MODES,
    PRIORITIES,
    SLACK_FAILURE_REASONS,
    TargetLabels,
    slack_failure_reason,
)


@pytest.fixture(scope="module")
def fleet_targets() -> tuple[TargetLabels, ...]:
    return fleet_target_labels(load_fleet())


@pytest.fixture
def metrics(fleet_targets: tuple[TargetLabels, ...]) -> SlaguardMetrics:
    return SlaguardMetrics(CollectorRegistry(), targets=fleet_targets)


def value(m: SlaguardMetrics, name: str, **labels: str) -> float:
    got = m.registry.get_sample_value(name, labels)
    assert got is not None, f"no sample {name}{labels}"
    return got


def sample_count(m: SlaguardMetrics) -> int:
    return sum(len(f.samples) for f in m.registry.collect())


def test_each_instance_owns_its_registry_and_leaves_the_default_alone(
    fleet_targets: tuple[TargetLabels, ...],
) -> None:
    before = {f.name for f in REGISTRY.collect()}
    a = SlaguardMetrics(CollectorRegistry(), targets=fleet_targets)
    b = SlaguardMetrics(CollectorRegistry(), targets=fleet_targets)
    a.observe_decision("learned", "rollout", "routed", 0.0004)
    assert (
        value(a, "slaguard_decisions_total", arm="learned", mode="rollout", outcome="routed") == 1
    )
    assert (
        value(b, "slaguard_decisions_total", arm="learned", mode="rollout", outcome="routed") == 0
    )
    assert {f.name for f in REGISTRY.collect()} == before


def test_names_follow_prometheus_conventions(metrics: SlaguardMetrics) -> None:
    families = list(text_string_to_metric_families(render_snapshot(metrics.registry)))
    assert len(families) == 42
    for fam in families:
        assert fam.name.startswith("slaguard_"), fam.name
        assert "_ms" not in fam.name and not fam.name.endswith("_created"), fam.name
        if fam.type == "counter":
            assert all(s.name == f"{fam.name}_total" for s in fam.samples), fam.name
        else:
            assert not fam.name.endswith("_total"), fam.name
        if fam.type == "histogram":
            assert fam.name.endswith("_seconds"), fam.name
        labels = {k for s in fam.samples for k in s.labels}
        assert not labels & {"job", "instance", "request_id", "fleet"}, (fam.name, labels)


def test_buckets_span_what_they_measure() -> None:
    assert (DECISION_LATENCY_BUCKETS_S[0], DECISION_LATENCY_BUCKETS_S[-1]) == (1e-5, 0.1)
    assert {0.003, 0.05} <= set(DECISION_LATENCY_BUCKETS_S)
    assert (TTFT_BUCKETS_S[0], TTFT_BUCKETS_S[-1]) == (0.01, 120.0)
    assert {1.5, 4.0, 12.0} <= set(TTFT_BUCKETS_S)
    assert (TPOT_BUCKETS_S[0], TPOT_BUCKETS_S[-1]) == (0.005, 1.0)
    for buckets in (DECISION_LATENCY_BUCKETS_S, TTFT_BUCKETS_S, TPOT_BUCKETS_S):
        assert list(buckets) == sorted(set(buckets))


def test_allow_lists_match_the_domain_enums() -> None:
    assert ARMS.values == tuple(a.value for a in Arm)
    assert MODES.values == tuple(m.value for m in Mode)
    assert PRIORITIES.values == tuple(p.value for p in Priority)


def test_every_allowed_series_exists_at_zero_before_any_event(metrics: SlaguardMetrics) -> None:
    assert value(metrics, "slaguard_build_info", version="0.1.0") == 1
    assert value(metrics, "slaguard_sla_violations_total", arm="learned", priority="high") == 0
    assert (
        value(
            metrics,
            "slaguard_fleet_mode_transitions_total",
            **{"from": "rollout", "to": "held_round_robin"},
        )
        == 0
    )
    assert value(metrics, "slaguard_detector_trips_total", detector="hot_spot") == 0
    assert (
        value(metrics, "slaguard_scheduler_job_overruns_total", scheduler_job="global_correction")
        == 0
    )
    ttft = {"target": "mlu-8b", "card_type": "mlu370", "model": "llama3.1-8b"}
    assert value(metrics, "slaguard_ttft_seconds_count", **ttft) == 0
    assert value(metrics, "slaguard_ttft_seconds_bucket", le="120.0", **ttft) == 0


def test_unknown_label_values_collapse_to_other(metrics: SlaguardMetrics) -> None:
    metrics.observe_decision("learned", "rollout", "routed", 0.001)
    before = sample_count(metrics)
    for i in range(500):
        metrics.observe_decision(f"arm-{i}", f"mode-{i}", f"outcome-{i}", 0.001)
        metrics.observe_completion(f"req-{i}", f"arm-{i}", "urgent", 0.5, violated=True)
        metrics.record_verdict(f"det-{i}", "maybe", 1.0, 2.0)
        metrics.observe_job(f"job-{i}", 0.01)
    other = {"arm": "other", "mode": "other", "outcome": "other"}
    assert value(metrics, "slaguard_decisions_total", **other) == 500
    assert value(metrics, "slaguard_sla_violations_total", arm="other", priority="other") == 500
    other_target = {"target": "other", "card_type": "other", "model": "other"}
    assert value(metrics, "slaguard_ttft_seconds_count", **other_target) == 500
    # One `other` series per family (histograms: its buckets, sum and count), not 500.
    assert sample_count(metrics) - before < 120


def test_observe_decision_lands_in_the_right_latency_bucket(metrics: SlaguardMetrics) -> None:
    metrics.observe_decision("learned", "rollout", "spilled", 0.004)
    metrics.observe_decision("learned", "rollout", "routed", 0.00002)
    assert (
        value(metrics, "slaguard_decisions_total", arm="learned", mode="rollout", outcome="spilled")
        == 1
    )
    bucket = "slaguard_decision_latency_seconds_bucket"
    assert value(metrics, bucket, arm="learned", le="2.5e-05") == 1
    assert value(metrics, bucket, arm="learned", le="0.003") == 1
    assert value(metrics, bucket, arm="learned", le="0.005") == 2
    assert value(metrics, "slaguard_decision_latency_seconds_sum", arm="learned") == pytest.approx(
        0.00402
    )


def test_observe_completion_counts_sla_outcomes_per_arm_and_priority(
    metrics: SlaguardMetrics,
) -> None:
    t = {"target": "h100-70b-0", "card_type": "h100", "model": "llama3.1-70b"}
    metrics.observe_completion(
        "h100-70b-0",
        "round_robin",
        "high",
        1.2,
        violated=False,
        tpot_s=0.02,
        prompt_tokens=4000,
        generated_tokens=250,
    )
    metrics.observe_completion("h100-70b-0", "round_robin", "high", 1.9, violated=True)
    rr_high = {"arm": "round_robin", "priority": "high"}
    assert value(metrics, "slaguard_requests_completed_total", **rr_high) == 2
    assert value(metrics, "slaguard_sla_violations_total", **rr_high) == 1
    assert value(metrics, "slaguard_ttft_seconds_bucket", le="1.5", **t) == 1
    assert value(metrics, "slaguard_ttft_seconds_bucket", le="2.5", **t) == 2
    assert value(metrics, "slaguard_tpot_seconds_count", **t) == 1
    assert value(metrics, "slaguard_tokens_total", kind="prompt", **t) == 4000
    assert value(metrics, "slaguard_tokens_total", kind="generated", **t) == 250


def test_fleet_mode_is_an_enum_gauge_and_changes_count_transitions(
    metrics: SlaguardMetrics,
) -> None:
    def modes() -> dict[str, float]:
        return {m: value(metrics, "slaguard_fleet_mode", mode=m) for m in MODES}

    def moved(a: str, b: str) -> float:
        return value(metrics, "slaguard_fleet_mode_transitions_total", **{"from": a, "to": b})

    metrics.set_fleet_mode(ROUND_ROBIN)
    assert modes() == {"round_robin": 1, "rollout": 0, "learned": 0, "held_round_robin": 0}
    metrics.set_fleet_mode(FleetMode(Mode.ROLLOUT, 10))
    assert value(metrics, "slaguard_rollout_stage_ratio") == pytest.approx(0.1)
    metrics.set_fleet_mode(FleetMode(Mode.ROLLOUT, 50))  # a stage change is not a mode change
    metrics.set_fleet_mode(HELD_ROUND_ROBIN)
    metrics.set_fleet_mode(HELD_ROUND_ROBIN)
    assert modes() == {"round_robin": 0, "rollout": 0, "learned": 0, "held_round_robin": 1}
    assert moved("round_robin", "rollout") == 1
    assert moved("rollout", "held_round_robin") == 1
    assert moved("rollout", "learned") == 0
    assert value(metrics, "slaguard_rollout_stage_ratio") == 0
    metrics.set_fleet_mode(LEARNED)
    assert value(metrics, "slaguard_rollout_stage_ratio") == 1


def test_first_published_mode_is_not_a_transition(metrics: SlaguardMetrics) -> None:
    metrics.set_fleet_mode(LEARNED)
    total = sum(
        s.value
        for f in metrics.registry.collect()
        if f.name == "slaguard_fleet_mode_transitions"
        for s in f.samples
    )
    assert total == 0


def test_guard_target_audit_scheduler_and_slack_helpers(metrics: SlaguardMetrics) -> None:
    t = {"target": "l40s-8b-3", "card_type": "l40s", "model": "llama3.1-8b"}
    metrics.set_target_state(
        "l40s-8b-3", queue_depth=17, kv_used_ratio=0.93, ttft_p99_zscore=4.2, demoted=True
    )
    metrics.count_spill("l40s-8b-3")
    metrics.count_demotion("l40s-8b-3")
    metrics.record_verdict("hot_spot", "anomalous", 0.61, 0.2)
    metrics.count_trip("hot_spot")
    metrics.set_correction(
        signal=1.7, load_imbalance_ratio=0.8, queued_requests=340, violation_ratio=0.03
    )
    metrics.count_correction_action("speed_up", targets=3)
    metrics.set_arm_violation_ratio("learned", 0.021)
    metrics.set_audit_backlog(queue_depth=1200, spill_bytes=65536)
    metrics.count_audit_rows(500)
    metrics.count_audit_write_error("database is locked")
    metrics.count_audit_refused(3)
    metrics.observe_job("hardware_refresh", 0.2, failed=True)
    metrics.count_job_overrun("hardware_refresh")
    metrics.count_slack_delivery()
    metrics.count_slack_failure("ratelimited")
    assert value(metrics, "slaguard_target_queue_depth", **t) == 17
    assert value(metrics, "slaguard_target_kv_used_ratio", **t) == pytest.approx(0.93)
    assert value(metrics, "slaguard_target_ttft_p99_zscore", **t) == pytest.approx(4.2)
    assert value(metrics, "slaguard_target_demoted", **t) == 1
    assert value(metrics, "slaguard_target_spills_total", **t) == 1
    assert value(metrics, "slaguard_target_demotions_total", **t) == 1
    hot = {"detector": "hot_spot"}
    assert value(metrics, "slaguard_detector_verdicts_total", verdict="anomalous", **hot) == 1
    assert value(metrics, "slaguard_detector_score", **hot) == pytest.approx(0.61)
    assert value(metrics, "slaguard_detector_threshold", **hot) == pytest.approx(0.2)
    assert value(metrics, "slaguard_detector_trips_total", **hot) == 1
    assert value(metrics, "slaguard_correction_signal") == pytest.approx(1.7)
    assert value(metrics, "slaguard_correction_queued_requests") == 340
    assert value(metrics, "slaguard_correction_actions_total", action="speed_up") == 3
    assert value(metrics, "slaguard_rollout_arm_sla_violation_ratio", arm="learned") == 0.021
    assert value(metrics, "slaguard_audit_queue_depth") == 1200
    assert value(metrics, "slaguard_audit_spill_bytes") == 65536
    assert value(metrics, "slaguard_audit_rows_written_total") == 500
    assert value(metrics, "slaguard_audit_write_errors_total") == 1
    assert value(metrics, "slaguard_audit_records_refused_total") == 3
    job = {"scheduler_job": "hardware_refresh"}
    assert value(metrics, "slaguard_scheduler_job_runs_total", **job) == 1
    assert value(metrics, "slaguard_scheduler_job_failures_total", **job) == 1
    assert value(metrics, "slaguard_scheduler_job_overruns_total", **job) == 1
    assert value(metrics, "slaguard_scheduler_job_duration_seconds_bucket", le="0.25", **job) == 1
    assert value(metrics, "slaguard_slack_deliveries_total") == 1
    assert value(metrics, "slaguard_slack_delivery_failures_total", reason="ratelimited") == 1


def test_slack_failure_reason_maps_http_statuses_onto_the_allow_list() -> None:
    reasons = [slack_failure_reason(s) for s in (None, 429, 500, 503, 400, 403, 404)]
    assert reasons == ["connection", "ratelimited", "server_error", "server_error",
                       "rejected", "rejected", "rejected"]  # fmt: skip
    assert set(reasons) == set(SLACK_FAILURE_REASONS.values)
