"""Monitoring line: Prometheus metrics on an explicit registry, and their exposition."""

from slaguard.telemetry.labels import (
    OTHER,
    AllowList,
    TargetLabels,
    fleet_target_labels,
    slack_failure_reason,
)
from slaguard.telemetry.metrics import SlaguardMetrics, render_snapshot

__all__ = [
    "OTHER",
    "AllowList",
    "SlaguardMetrics",
    "TargetLabels",
    "fleet_target_labels",
    "render_snapshot",
    "slack_failure_reason",
]
