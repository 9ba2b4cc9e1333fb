"""The sections of the `slaguard serve` config file besides `guard:` (which is
`guard/config.py`'s): where the hardware picture comes from, the gateway, the rollout plan,
which alerts roll back, and the loops' periods. Loaded and explained by `config.py`."""

from __future__ import annotations

import difflib
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from slaguard.fleet.validation import Number, Whole
from slaguard.guard.config import Flag

ALERT_SEVERITIES = ("critical", "warning")
"""The `severity` labels of slaguard's alerts (alerts/*.yml)."""
SLAGUARD_ALERTS = frozenset(
    {
        "SlaguardAuditBacklog",
        "SlaguardAuditRecordsRefused",
        "SlaguardAuditRecordsUnreadable",
        "SlaguardAuditSpillGrowing",
        "SlaguardAuditWriteErrors",
        "SlaguardBackendFailing",
        "SlaguardColdStartDrift",
        "SlaguardDecisionLatencyHigh",
        "SlaguardDown",
        "SlaguardFleetSwitchedToRoundRobin",
        "SlaguardGuardLeaderless",
        "SlaguardHeldInRoundRobinTooLong",
        "SlaguardHotSpotFlood",
        "SlaguardMetricsAbsent",
        "SlaguardModeSyncFailing",
        "SlaguardRolloutArmLosing",
        "SlaguardSLAErrorBudgetBurn",
        "SlaguardSchedulerJobFailing",
        "SlaguardSchedulerJobOverrunning",
        "SlaguardSchedulerJobStalled",
        "SlaguardSlackDeliveryFailing",
        "SlaguardTargetTTFTAnomaly",
    }
)
"""The alert names of alerts/slaguard-*.yml (a test holds the two together). Other
Alertmanager alerts may be listed in `rollback_alerts` with severities of their own."""


WEIGHTS_S_MAX = 2_592_000
"""30 days: a longer refit period (1e12 s) passed the config and then crashed serve's
start with an OverflowError when the scheduler built the job's interval."""


class _Section(BaseModel):
    """As strict as `guard:`: `Flag`s true or false, `Whole` counts as written, `Number`s
    finite (refused as such before a bound: `.nan` is not "less than or equal to 60") and
    never true/false."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class TelemetryConfig(_Section):
    """Where the hardware picture comes from and when it counts as stale."""

    scrape: Flag = Field(default=True, description="pull each target's vLLM-style /metrics")
    scrape_interval_s: Number = Field(default=0.25, gt=0, le=10)
    scrape_timeout_s: Number = Field(default=0.5, gt=0, le=10)
    stale_after_s: Number = Field(
        default=1.0, gt=0, le=300, description="older picture: target treated as saturated"
    )

    @model_validator(mode="after")
    def _stale_after_a_scrape(self) -> TelemetryConfig:
        """A picture that goes stale before the next scrape leaves every target saturated."""
        if self.scrape and self.stale_after_s <= self.scrape_interval_s:
            raise ValueError(
                f"stale_after_s {self.stale_after_s} is not above scrape_interval_s "
                f"{self.scrape_interval_s}: every picture would go stale before the next "
                "scrape and every target be treated as saturated; fix: raise stale_after_s "
                "(default 1.0) or lower scrape_interval_s"
            )
        return self


class GatewayConfig(_Section):
    """The OpenAI-compatible proxy."""

    enabled: Flag = True
    connect_timeout_s: Number = Field(default=1.0, gt=0, le=60)
    first_byte_timeout_s: Number = Field(default=30.0, gt=0, le=600)
    read_timeout_s: Number = Field(default=60.0, gt=0, le=3600)
    chars_per_token: Number = Field(
        default=4.0, gt=0, le=64, description="prompt token estimate when none is given"
    )
    default_max_tokens: Whole = Field(default=256, ge=1, le=1_000_000)
    default_priority: Literal["high", "normal", "low"] = "normal"
    max_connections: Whole = Field(default=512, ge=1, le=100_000)
    eject_after_failures: Whole = Field(
        default=5,
        ge=0,
        le=1_000_000,
        description="failures in a row before the first byte that eject a target; 0: never",
    )
    eject_s: Number = Field(
        default=30.0, gt=0, le=86_400, description="an ejected target gets no request this long"
    )


class RolloutConfig(_Section):
    """The cold-start plan: round-robin baseline, then the learned share per stage."""

    baseline_s: Number = Field(default=86_400.0, ge=0)
    stage_s: Number = Field(default=86_400.0, gt=0)
    stages_pct: tuple[Whole, ...] = (10, 50, 100)

    @field_validator("stages_pct")
    @classmethod
    def _stages_valid(cls, stages: tuple[int, ...]) -> tuple[int, ...]:
        example = "e.g. [10, 50, 100]"
        if not stages:
            raise ValueError(f"empty; fix: list the learned share per stage, {example}")
        for pct in stages:
            if not 0 < pct <= 100:
                raise ValueError(
                    f"{list(stages)}: {pct} is not a percentage in (0, 100]; fix: "
                    f"give each stage's learned share as a percentage, {example}"
                )
        if list(stages) != sorted(stages):
            raise ValueError(
                f"{list(stages)} is not increasing; fix: list the stages in the "
                f"order they run, e.g. {sorted(stages)}"
            )
        return stages


class AlertmanagerConfig(_Section):
    """Which firing alerts roll the fleet back to round-robin."""

    rollback_alerts: tuple[str, ...] = Field(
        default=("SlaguardSLAErrorBudgetBurn",),
        description="the pages that roll back; SlaguardRolloutArmLosing is a warning that "
        "the guard did not act, for a human",
    )
    rollback_severities: tuple[str, ...] = Field(
        default=("critical",), description="only alerts with one of these `severity` labels act"
    )
    fleet: str | None = Field(
        default=None,
        min_length=1,
        description="only alerts whose `fleet` label is this one (or that have none) act: one "
        "Alertmanager receiver shared by several fleets; unset, every fleet's alerts act",
    )

    @field_validator("rollback_alerts")
    @classmethod
    def _no_misspelt_own_alert(cls, alerts: tuple[str, ...]) -> tuple[str, ...]:
        """A misspelt slaguard alert (`SlaguardSLAErrorBudgetBrn`) was taken as another
        Alertmanager alert: none has that name, so the burn page silently rolled nothing
        back. A `Slaguard...` name, or one close to ours, must be one of ours."""
        lowered = {name.lower(): name for name in SLAGUARD_ALERTS}
        for name in alerts:
            if name in SLAGUARD_ALERTS:
                continue
            near = difflib.get_close_matches(name.lower(), lowered, n=1, cutoff=0.85)
            if not near and not name.lower().startswith("slaguard"):
                continue
            hint = f" (did you mean {lowered[near[0]]!r}?)" if near else ""
            raise ValueError(
                f"{name!r} is not one of slaguard's alerts (alerts/*.yml), so no alert would "
                f"roll back under that name; fix: write the alert's name as its rule does{hint}"
            )
        return alerts

    @field_validator("rollback_severities")
    @classmethod
    def _known_severities(
        cls, severities: tuple[str, ...], info: ValidationInfo
    ) -> tuple[str, ...]:
        """A severity no slaguard alert has (`urgent`, `critcal`) silently turned rollback
        off; checked only when every rollback alert is slaguard's own, since another
        Alertmanager alert (`VllmReplicasDown`) may carry any severity (`page`)."""
        alerts = info.data.get("rollback_alerts")
        if alerts is None or not set(alerts) <= SLAGUARD_ALERTS:
            return severities
        for severity in severities:
            if severity not in ALERT_SEVERITIES:
                near = difflib.get_close_matches(severity, ALERT_SEVERITIES, n=1)
                hint = f" (did you mean {near[0]!r}?)" if near else ""
                raise ValueError(
                    f"{severity!r} is not a severity slaguard's alerts have, so no alert would "
                    f"roll back; fix: use {' or '.join(ALERT_SEVERITIES)}{hint}"
                )
        return severities


class LoopsConfig(_Section):
    """Periods of the background jobs (the scheduler's own tick/period come from its config)."""

    detectors_s: Number = Field(default=1.0, gt=0, le=60)
    weights_s: Number = Field(
        default=3600.0,
        gt=0,
        le=WEIGHTS_S_MAX,
        description="learned-weight refit period; bounded: APScheduler overflowed on 1e12",
    )
