"""Guard and incidents: detector verdicts and trips, mode transitions, the rollout A/B view."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.models import units

from slaguard.dashboards.panels import (
    DATASOURCE,
    SEL,
    dashboard,
    mode_timeline,
    rate,
    single_stat,
    ts,
)

UID = "slaguard-guard"

_VERDICTS = "slaguard_detector_verdicts_total"
_ANOMALOUS = f'{SEL}, verdict="anomalous"'
_ANOMALOUS_SHARE = f"{rate(_VERDICTS, 'detector', _ANOMALOUS)} / {rate(_VERDICTS, 'detector')}"
_ARM_RATIO = "slaguard_rollout_arm_sla_violation_ratio"
MODE_TRANSITIONS = (
    "sum by (from, to) (increase(slaguard_fleet_mode_transitions_total"
    f"{{{SEL}}}[$__rate_interval])) > 0"
)
DETECTOR_TRIPS = (
    f"sum by (detector) (increase(slaguard_detector_trips_total{{{SEL}}}[$__rate_interval])) > 0"
)


def _increase(metric: str, by: str) -> str:
    return f"sum by ({by}) (increase({metric}{{{SEL}}}[$__rate_interval]))"


def build() -> db.Dashboard:
    """What did the guard see, what did it do, and when?"""
    return (
        dashboard(
            UID,
            "slaguard / Guard and incidents",
            "Detector verdicts and trips with the numbers they compared, fleet mode "
            "transitions (also as annotations) and the rollout A/B comparison.",
        )
        .annotation(
            db.AnnotationQuery()
            .name("Mode transitions")
            .datasource(DATASOURCE)
            .enable(True)
            .icon_color("red")
            .expr(MODE_TRANSITIONS)
        )
        .annotation(
            db.AnnotationQuery()
            .name("Detector trips")
            .datasource(DATASOURCE)
            .enable(True)
            .icon_color("orange")
            .expr(DETECTOR_TRIPS)
        )
        .with_row(db.Row("Fleet mode"))
        .with_panel(
            mode_timeline(
                "Fleet mode",
                "Which policy routes the fleet; switches are also drawn as red annotations.",
                (f"max by (mode) (slaguard_fleet_mode{{{SEL}}})", "{{mode}}"),
            )
        )
        .with_panel(
            ts(
                "Mode transitions",
                "Fleet mode changes within each interval, by from and to.",
                units.Short,
                [
                    (
                        _increase("slaguard_fleet_mode_transitions_total", "from, to"),
                        "{{from}} -> {{to}}",
                    )
                ],
                bars=True,
                span=18,
            )
        )
        .with_panel(
            single_stat(
                "Trips in range",
                "Detector trips over the dashboard's time range.",
                units.Short,
                [(f"sum(increase(slaguard_detector_trips_total{{{SEL}}}[$__range]))", "trips")],
                thresholds=[(1, "orange")],
            )
        )
        .with_row(db.Row("Detectors"))
        .with_panel(
            ts(
                "Detector trips",
                "Trips (ok -> trip edges that acted) per detector within each interval.",
                units.Short,
                [(_increase("slaguard_detector_trips_total", "detector"), "{{detector}}")],
                bars=True,
            )
        )
        .with_panel(
            ts(
                "Anomalous verdict share",
                "Share of each detector's evaluations that were anomalous. Dashed line: "
                "50 %, where the hot-spot and cold-start alerts start.",
                units.PercentUnit,
                [(_ANOMALOUS_SHARE, "{{detector}}")],
                thresholds=[(0.5, "red")],
            )
        )
        .with_panel(
            ts(
                "Detector score vs threshold",
                "The statistic each detector compared and the threshold it trips above.",
                units.Short,
                [
                    (f"max by (detector) (slaguard_detector_score{{{SEL}}})", "{{detector}} score"),
                    (
                        f"max by (detector) (slaguard_detector_threshold{{{SEL}}})",
                        "{{detector}} threshold",
                    ),
                ],
            )
        )
        .with_panel(
            ts(
                "Verdicts/s",
                "Detector evaluations per second by verdict; insufficient means too little "
                "data to judge (never a trip).",
                units.OpsPerSecond,
                [(rate(_VERDICTS, "detector, verdict"), "{{detector}} {{verdict}}")],
            )
        )
        .with_row(db.Row("Rollout A/B"))
        .with_panel(
            ts(
                "SLA violation ratio per arm (guard's view)",
                "The smoothed per-arm ratios the rollout comparison acts on.",
                units.PercentUnit,
                [(f"max by (arm) ({_ARM_RATIO}{{{SEL}}})", "{{arm}}")],
            )
        )
        .with_panel(
            ts(
                "Learned / round-robin violation ratio",
                "Rollback rule: learned > round-robin x 1.05 (dashed line).",
                units.Short,
                [
                    (
                        f'max({_ARM_RATIO}{{{SEL}, arm="learned"}}) / '
                        f'max({_ARM_RATIO}{{{SEL}, arm="round_robin"}})',
                        "learned / round_robin",
                    )
                ],
                thresholds=[(1.05, "red")],
            )
        )
    )
