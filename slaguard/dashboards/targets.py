"""Targets: TTFT per target and card type, jitter Z-score, queues, KV, demotions, spills."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.models import units

from slaguard.dashboards.panels import (
    TARGET_SEL,
    TOKENS_PER_SECOND,
    dashboard,
    quantile,
    rate,
    single_stat,
    ts,
)

UID = "slaguard-targets"

_TTFT = "slaguard_ttft_seconds"


def _gauge(metric: str) -> str:
    return f"max by (target) ({metric}{{{TARGET_SEL}}})"


def build() -> db.Dashboard:
    """Where in the heterogeneous fleet is it slow, full, or jittery?"""
    return (
        dashboard(
            UID,
            "slaguard / Targets",
            "Per target and card type: TTFT p99, jitter Z-score, queue depth, KV use, "
            "demotions and spills.",
            per_target=True,
        )
        .with_row(db.Row("Latency"))
        .with_panel(
            ts(
                "TTFT p99 per target",
                "Time to first token, 99th percentile. Dashed lines: the default deadlines "
                "of high (1.5 s) and normal (4 s) priority.",
                units.Seconds,
                [
                    (
                        quantile(0.99, _TTFT, "target, card_type", TARGET_SEL),
                        "{{target}} ({{card_type}})",
                    )
                ],
                thresholds=[(1.5, "orange"), (4.0, "red")],
            )
        )
        .with_panel(
            ts(
                "TTFT p99 per card type",
                "The same percentile per hardware tier.",
                units.Seconds,
                [(quantile(0.99, _TTFT, "card_type", TARGET_SEL), "{{card_type}}")],
                thresholds=[(1.5, "orange"), (4.0, "red")],
            )
        )
        .with_panel(
            ts(
                "TPOT p50 per card type",
                "Time per output token after the first (decode speed), median.",
                units.Seconds,
                [
                    (
                        quantile(0.5, "slaguard_tpot_seconds", "card_type", TARGET_SEL),
                        "{{card_type}}",
                    )
                ],
            )
        )
        .with_panel(
            ts(
                "TTFT p99 Z-score",
                "Robust Z-score of each target's 5-minute TTFT p99 against its peers. "
                "Dashed line: 3.5, where the alert and the demotion start.",
                units.Short,
                [(_gauge("slaguard_target_ttft_p99_zscore"), "{{target}}")],
                thresholds=[(3.5, "red")],
            )
        )
        .with_row(db.Row("Load and memory"))
        .with_panel(
            ts(
                "Queue depth",
                "Active queue depth q_h per target.",
                units.Short,
                [(_gauge("slaguard_target_queue_depth"), "{{target}}")],
            )
        )
        .with_panel(
            ts(
                "KV cache used",
                "Used share of each target's KV quota. Spillover probing stops near 90 %.",
                units.PercentUnit,
                [(_gauge("slaguard_target_kv_used_ratio"), "{{target}}")],
                thresholds=[(0.9, "red")],
            )
        )
        .with_panel(
            ts(
                "Tokens/s per card type",
                "Prompt and generated tokens per second.",
                TOKENS_PER_SECOND,
                [
                    (
                        rate("slaguard_tokens_total", "card_type, kind", TARGET_SEL),
                        "{{card_type}} {{kind}}",
                    )
                ],
            )
        )
        .with_panel(
            ts(
                "Spills/s",
                "Requests spilled away from a saturated target (they lose prefix reuse).",
                units.RequestsPerSecond,
                [(rate("slaguard_target_spills_total", "target", TARGET_SEL), "{{target}}")],
            )
        )
        .with_row(db.Row("Demotions"))
        .with_panel(
            single_stat(
                "Demoted targets now",
                "Targets held on low-priority / fallback traffic for jitter.",
                units.Short,
                [(f"sum({_gauge('slaguard_target_demoted')})", "demoted")],
                thresholds=[(1, "orange")],
                span=8,
            )
        )
        .with_panel(
            ts(
                "Demotions",
                "Demotions per target within each interval.",
                units.Short,
                [
                    (
                        f"sum by (target) (increase(slaguard_target_demotions_total{{{TARGET_SEL}}}"
                        "[$__rate_interval]))",
                        "{{target}}",
                    )
                ],
                bars=True,
                span=16,
            )
        )
    )
