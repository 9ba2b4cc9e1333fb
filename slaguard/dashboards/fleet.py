"""Fleet overview: mode and rollout stage, traffic, decision latency, SLA and error budget."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.models import units

from slaguard.dashboards.panels import (
    BURN_RATE,
    FLEET_MODE,
    SLO_BUDGET,
    dashboard,
    gauge,
    mode_timeline,
    quantile,
    rate,
    ratio,
    single_stat,
    ts,
)

UID = "slaguard-fleet"

_VIOLATIONS = "slaguard_sla_violations_total"
_COMPLETED = "slaguard_requests_completed_total"


def _burn(window: str) -> str:
    return f"({ratio(_VIOLATIONS, _COMPLETED, '', window=window)}) / {SLO_BUDGET}"


def build() -> db.Dashboard:
    """The first dashboard an SRE opens: is the fleet routed well, and within its SLO?"""
    mode_and_rollout = [
        mode_timeline(
            "Fleet mode",
            "Which policy routes the fleet: round_robin, rollout, learned, held_round_robin.",
            FLEET_MODE,
            span=18,
        ),
        single_stat(
            "Learned share (rollout stage)",
            "Share of traffic the learned arm routes: the rollout stage (10, 50, 100 %).",
            units.PercentUnit,
            [(gauge("slaguard_rollout_stage_ratio", ""), "stage")],
        ),
    ]
    decisions = [
        ts(
            "Decisions/s by outcome",
            "Routing decisions per second: routed, spilled, degraded, no_capacity.",
            units.RequestsPerSecond,
            [(rate("slaguard_decisions_total", "outcome"), "{{outcome}}")],
        ),
        ts(
            "Decisions/s by arm and mode",
            "Which policy arm decided, in which fleet mode.",
            units.RequestsPerSecond,
            [(rate("slaguard_decisions_total", "arm, mode"), "{{arm}} in {{mode}}")],
        ),
        ts(
            "Decision latency p50 / p99",
            "Wall time per routing decision. Dashed lines: the 3 ms router budget and "
            "the 50 ms whole-decision budget.",
            units.Seconds,
            [
                (quantile(0.5, "slaguard_decision_latency_seconds", "arm"), "p50 {{arm}}"),
                (quantile(0.99, "slaguard_decision_latency_seconds", "arm"), "p99 {{arm}}"),
            ],
            thresholds=[(0.003, "orange"), (0.05, "red")],
            span=24,
        ),
    ]
    sla = [
        ts(
            "SLA violation ratio per arm",
            "Share of completed requests whose TTFT missed the priority's deadline. "
            "Dashed line: the 1 % error budget of the 99 % SLO.",
            units.PercentUnit,
            [(ratio(_VIOLATIONS, _COMPLETED, "arm"), "{{arm}}")],
            thresholds=[(SLO_BUDGET, "red")],
        ),
        ts(
            "SLA violation ratio per priority",
            "The same ratio per business priority.",
            units.PercentUnit,
            [(ratio(_VIOLATIONS, _COMPLETED, "priority"), "{{priority}}")],
            thresholds=[(SLO_BUDGET, "red")],
        ),
        ts(
            "Error-budget burn rate",
            "Violation ratio / 1 % budget over the alerting windows. Dashed lines: 6x "
            "and 14.4x, the page thresholds of the 6h/30m and 1h/5m pairs.",
            BURN_RATE,
            [(_burn(w), w) for w in ("5m", "30m", "1h", "6h", "3d")],
            thresholds=[(6, "orange"), (14.4, "red")],
            span=16,
        ),
        single_stat(
            "Error budget left (30 days)",
            "1 - (violations / completions over 30 days) / 1 % budget; negative once spent. "
            "Red below 25 %, orange below 50 %.",
            units.PercentUnit,
            [(f"1 - ({_burn('30d')})", "budget left")],
            thresholds=[(0.25, "orange"), (0.5, "green")],
            base_color="red",
            span=8,
        ),
    ]
    correction = [
        ts(
            "Correction signal and components",
            "The 500 ms global correction scalar, load imbalance (std/mean) and the "
            "violation ratio it sees.",
            units.Short,
            [
                (gauge("slaguard_correction_signal", ""), "signal"),
                (gauge("slaguard_correction_load_imbalance_ratio", ""), "imbalance"),
                (gauge("slaguard_correction_violation_ratio", ""), "violation ratio"),
            ],
            span=8,
        ),
        ts(
            "Queued requests",
            "Requests queued across the fleet, as the correction loop counts them.",
            units.Short,
            [(gauge("slaguard_correction_queued_requests", ""), "queued")],
            span=8,
        ),
        ts(
            "Correction orders/s",
            "speed_up (lower batching threshold) and slow_down orders sent to targets.",
            units.OpsPerSecond,
            [(rate("slaguard_correction_actions_total", "action"), "{{action}}")],
            span=8,
        ),
    ]
    return dashboard(
        UID,
        "slaguard / Fleet overview",
        "Fleet mode and rollout stage, decisions, decision latency against the 50 ms "
        "budget, SLA violations per arm and error-budget burn (99 % SLO).",
        [
            ("Mode and rollout", mode_and_rollout),
            ("Decisions", decisions),
            ("SLA and error budget", sla),
            ("Global correction", correction),
        ],
    )
