"""Targets: TTFT per target and card type, jitter Z-score, queues, KV, demotions, spills."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.models import units

from slaguard.dashboards.panels import (
    SEL,
    TARGET_SEL,
    TOKENS_PER_SECOND,
    dashboard,
    gauge,
    increase,
    quantile,
    rate,
    single_stat,
    ts,
)

UID = "slaguard-targets"

_TTFT = "slaguard_ttft_seconds"
_DEADLINES = [(1.5, "orange"), (4.0, "red")]
"""Default TTFT deadlines of high and normal priority."""


def _per_target(metric: str) -> str:
    return gauge(metric, "target", TARGET_SEL)


def build() -> db.Dashboard:
    """Where in the heterogeneous fleet is it slow, full, or jittery?"""
    latency = [
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
            thresholds=_DEADLINES,
        ),
        ts(
            "TTFT p99 per card type",
            "The same percentile per hardware tier.",
            units.Seconds,
            [(quantile(0.99, _TTFT, "card_type", TARGET_SEL), "{{card_type}}")],
            thresholds=_DEADLINES,
        ),
        ts(
            "TPOT p50 per card type",
            "Time per output token after the first (decode speed), median.",
            units.Seconds,
            [(quantile(0.5, "slaguard_tpot_seconds", "card_type", TARGET_SEL), "{{card_type}}")],
        ),
        ts(
            "TTFT p99 Z-score",
            "Robust Z-score of each target's 5-minute TTFT p99 against its peers; a gap "
            "while the guard has too few requests to score a target (often a demoted one: "
            "see Demoted targets now). Dashed line: 3.5, where the alert and the demotion "
            "start.",
            units.Short,
            [(_per_target("slaguard_target_ttft_p99_zscore"), "{{target}}")],
            thresholds=[(3.5, "red")],
        ),
    ]
    load = [
        ts(
            "Queue depth",
            "Active queue depth q_h per target.",
            units.Short,
            [(_per_target("slaguard_target_queue_depth"), "{{target}}")],
        ),
        ts(
            "KV cache used",
            "Used share of each target's KV quota. Spillover probing stops near 90 %.",
            units.PercentUnit,
            [(_per_target("slaguard_target_kv_used_ratio"), "{{target}}")],
            thresholds=[(0.9, "red")],
        ),
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
        ),
        ts(
            "Spills/s",
            "Requests spilled away from a saturated target (they lose prefix reuse).",
            units.RequestsPerSecond,
            [(rate("slaguard_target_spills_total", "target", TARGET_SEL), "{{target}}")],
        ),
    ]
    demotions = [
        single_stat(
            "Demoted targets now",
            "Targets held on low-priority / fallback traffic for jitter.",
            units.Short,
            [(f"sum({_per_target('slaguard_target_demoted')})", "demoted")],
            thresholds=[(1, "orange")],
            span=8,
        ),
        ts(
            "Demotions",
            "Demotions per target within each interval.",
            units.Short,
            [(increase("slaguard_target_demotions_total", "target", TARGET_SEL), "{{target}}")],
            bars=True,
            span=16,
        ),
    ]
    # The gateway's counters carry no card_type: $card_type does not filter them.
    gateway_sel = f'{SEL}, target=~"$target"'
    gateway = [
        ts(
            "Backend failures/s per target",
            "Gateway attempts that failed, by the target that failed and when: before the "
            "first byte (retried once on the next-best target) or after it (the stream is "
            "cut). Only requests slaguard's gateway proxies; not filtered by card type.",
            units.RequestsPerSecond,
            [
                (
                    rate("slaguard_gateway_upstream_failures_total", "target, stage", gateway_sel),
                    "{{target}} {{stage}}",
                )
            ],
        ),
        ts(
            "Gateway retries, client errors and cancels/s",
            "Requests re-sent to the next-best target, requests a backend refused as the "
            "client's mistake (a 4xx such as 400: relayed, judged by no SLA), and requests "
            "whose client left before the end of the answer (judged on the first token).",
            units.RequestsPerSecond,
            [
                (rate("slaguard_gateway_retries_total", ""), "retries"),
                (rate("slaguard_gateway_client_errors_total", ""), "client errors"),
                (rate("slaguard_gateway_client_cancels_total", ""), "client cancels"),
            ],
        ),
        ts(
            "Ejections",
            "Targets the gateway marked unhealthy for gateway.eject_s after "
            "gateway.eject_after_failures consecutive failures before the first byte (a "
            "backend refusing every request while its /metrics answers), within each interval.",
            units.Short,
            [(increase("slaguard_gateway_ejections_total", "target", gateway_sel), "{{target}}")],
            bars=True,
            span=24,
        ),
    ]
    return dashboard(
        UID,
        "slaguard / Targets",
        "Per target and card type: TTFT p99, jitter Z-score, queue depth, KV use, "
        "demotions and spills; the gateway's backend failures, retries, client errors, cancels and "
        "ejections.",
        [
            ("Latency", latency),
            ("Load and memory", load),
            ("Demotions", demotions),
            ("Gateway", gateway),
        ],
        per_target=True,
    )
