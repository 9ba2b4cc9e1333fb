"""Label allow-lists: every label value slaguard exposes comes from a fixed, short set.

Unknown values collapse to `other`, so a bug or a hostile caller can never create an
unbounded number of series.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from slaguard.fleet import Fleet, Priority
from slaguard.scheduler.rollout import Arm, ModeKind

OTHER = "other"
"""The value every label falls back to when it is not on its allow-list."""


@dataclass(frozen=True, slots=True)
class AllowList:
    """The permitted values of one label, in a stable order."""

    label: str
    values: tuple[str, ...]

    def clean(self, value: str) -> str:
        """`value` if it is allowed, otherwise `other`."""
        return value if value in self.values else OTHER

    def __iter__(self) -> Iterator[str]:
        return iter(self.values)


def allow_list(label: str, values: Iterable[str]) -> AllowList:
    """An allow-list keeping the first occurrence order of `values`."""
    return AllowList(label, tuple(dict.fromkeys(str(v) for v in values)))


ARMS = allow_list("arm", (a.value for a in Arm))
MODES = allow_list("mode", (m.value for m in ModeKind))
PRIORITIES = allow_list("priority", (p.value for p in Priority))
OUTCOMES = allow_list("outcome", ("routed", "no_capacity", "degraded", "spilled"))
DETECTORS = allow_list(
    "detector",
    ("ttft_zscore", "hot_spot", "cold_start", "rollout_compare", "alertmanager", "manual"),
)
VERDICTS = allow_list("verdict", ("ok", "anomalous", "insufficient"))
# Not `job`: Prometheus owns that label (the scrape job) and would rename ours to
# `exported_job`, breaking every query on it.
JOBS = allow_list(
    "scheduler_job",
    (
        "hardware_refresh",
        "global_correction",
        "mode_sync",
        "detectors",
        "weight_update",
    ),
)
CORRECTION_ACTIONS = allow_list("action", ("speed_up", "slow_down"))
TOKEN_KINDS = allow_list("kind", ("prompt", "generated"))
SLACK_FAILURE_REASONS = allow_list(
    "reason", ("ratelimited", "server_error", "connection", "rejected")
)


def slack_failure_reason(status_code: int | None) -> str:
    """The `reason` label for a Slack delivery given up on, from its HTTP status."""
    if status_code is None:
        return "connection"
    if status_code == 429:
        return "ratelimited"
    return "server_error" if status_code >= 500 else "rejected"


class TargetLabels(NamedTuple):
    """The label values of one routing target (card type and model follow from the id)."""

    target: str
    card_type: str
    model: str


UNKNOWN_TARGET = TargetLabels(OTHER, OTHER, OTHER)


def fleet_target_labels(fleet: Fleet) -> tuple[TargetLabels, ...]:
    """The target allow-list of a fleet: one entry per routing target."""
    return tuple(TargetLabels(t.id, t.card.id, t.model.id) for t in fleet.targets)
