"""Guard and incidents: detector verdicts and trips, mode transitions, the rollout A/B view."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.models import units

from slaguard.dashboards.panels import (
    FLEET_MODE,
    SEL,
    Annotation,
    dashboard,
    gauge,
    increase,
    increase_once,
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
_TRANSITIONS = "slaguard_fleet_mode_transitions_total"
_TRIPS = "slaguard_detector_trips_total"
_COMPARE = f'{SEL}, detector="rollout_compare"'


def build() -> db.Dashboard:
    """What did the guard see, what did it do, and when?"""
    fleet_mode = [
        mode_timeline(
            "Fleet mode",
            "Which policy routes the fleet; switches are also drawn as red annotations.",
            FLEET_MODE,
        ),
        ts(
            "Mode transitions",
            "Fleet mode changes within each interval, by from and to (every replica "
            "counts each change: the max across instances, not the sum).",
            units.Short,
            [(increase_once(_TRANSITIONS, "from, to"), "{{from}} -> {{to}}")],
            bars=True,
            span=18,
        ),
        single_stat(
            "Trips in range",
            "Detector trips over the dashboard's time range.",
            units.Short,
            [(increase(_TRIPS, "", window="$__range"), "trips")],
            thresholds=[(1, "orange")],
        ),
    ]
    detectors = [
        ts(
            "Detector trips",
            "Breaker trips per detector, and rollbacks and holds (manual, alertmanager), within "
            "each interval.",
            units.Short,
            [(increase(_TRIPS, "detector"), "{{detector}}")],
            bars=True,
        ),
        ts(
            "Anomalous verdict share",
            "Share of each detector's evaluations that were anomalous. Dashed line: "
            "50 %, where the hot-spot and cold-start alerts start.",
            units.PercentUnit,
            [(_ANOMALOUS_SHARE, "{{detector}}")],
            thresholds=[(0.5, "red")],
        ),
        ts(
            "Detector score vs threshold",
            "The statistic each detector compared and the threshold it trips above.",
            units.Short,
            [
                (gauge("slaguard_detector_score", "detector"), "{{detector}} score"),
                (gauge("slaguard_detector_threshold", "detector"), "{{detector}} threshold"),
            ],
        ),
        ts(
            "Verdicts/s",
            "Detector evaluations per second by verdict; insufficient means too little "
            "data to judge (never a trip).",
            units.OpsPerSecond,
            [(rate(_VERDICTS, "detector, verdict"), "{{detector}} {{verdict}}")],
        ),
    ]
    rollout = [
        ts(
            "SLA violation ratio per arm (guard's view)",
            "The smoothed per-arm ratios the rollout comparison acts on.",
            units.PercentUnit,
            [(gauge(_ARM_RATIO, "arm"), "{{arm}}")],
        ),
        ts(
            "Rollout comparison: score vs threshold",
            "The number the guard compares: the learned arm's violation ratio over "
            "round-robin's in the comparison window. A gap while an arm has too few "
            "requests there (200 by default) or neither missed; +Inf when only learned "
            "missed. Above the threshold the guard rolls back once the excess is also "
            "significant.",
            units.Short,
            [
                (gauge("slaguard_detector_score", "", _COMPARE), "learned / round_robin"),
                (gauge("slaguard_detector_threshold", "", _COMPARE), "threshold"),
            ],
        ),
    ]
    return dashboard(
        UID,
        "slaguard / Guard and incidents",
        "Detector verdicts and trips with the numbers they compared, fleet mode "
        "transitions (also as annotations) and the rollout A/B comparison.",
        [("Fleet mode", fleet_mode), ("Detectors", detectors), ("Rollout A/B", rollout)],
        annotations=[
            Annotation(
                "Mode transitions",
                "red",
                f"{increase_once(_TRANSITIONS, 'from, to')} > 0",
                title="{{from}} -> {{to}}",
                text="Fleet mode changed from {{from}} to {{to}}.",
                tag_keys=("from", "to"),
            ),
            Annotation(
                "Detector trips",
                "orange",
                f"{increase(_TRIPS, 'detector')} > 0",
                title="{{detector}} tripped",
                text="Breaker trip by {{detector}} (manual, alertmanager: a rollback or hold); "
                "slaguard history has the numbers.",
                tag_keys=("detector",),
            ),
        ],
    )
