"""Detector, breaker and guard settings: pydantic models whose defaults are documented.

Every default is explained in docs/guard.md; the numbers here are the single source.
Counts are whole numbers as written and flags true/false (YAML's `trip_after: true` was
K = 1, `auto_return: "yes"` was true); the other numbers are finite and never true/false.
"""

from __future__ import annotations

import math
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from slaguard.fleet.validation import Number, Whole
from slaguard.scheduler.rollout import ROLLBACK_RATIO

Flag = Annotated[bool, Field(strict=True)]
"""true or false as written: `"yes"` or 1 is no flag (the serve config's environment
variables, text by nature, are read as the field's type first: `service/config.py`)."""

MAX_SLICES = 2_000
"""Slices in one sliding window (`window_s / slice_s`): each target holds a histogram per
slice, so a window of 1e9 s (or 5 s sliced in milliseconds) ran out of memory at the first
sample. 2,000 is a day in 45 s slices; the defaults use 60."""


class _Strict(BaseModel):
    # every number a finite `Number`: `window_s: .inf` crashed the start (OverflowError),
    # `cooldown_s: .inf` never ended
    model_config = ConfigDict(extra="forbid", frozen=True)


def _slices(window_s: float, slice_s: float, names: str) -> int:
    """The slices of a window; more than `MAX_SLICES` is refused, naming `names`."""
    ratio = window_s / slice_s  # 1e300 / 1e-10 is inf: no ceil of it
    if not ratio <= MAX_SLICES:
        raise ValueError(
            f"{names} make {ratio:.3g} slices, above {MAX_SLICES} (the window is kept slice "
            "by slice, in memory); fix: raise the slice or shorten the window"
        )
    return math.ceil(ratio)


class TtftZscoreConfig(_Strict):
    """Per-target TTFT p99 over a sliding window, robust-scored against peers and fleet."""

    window_s: Number = Field(default=300.0, gt=0)
    slice_s: Number = Field(default=5.0, gt=0)
    quantile: Number = Field(default=0.99, gt=0, lt=1)
    min_tail_samples: Whole = Field(default=3, ge=0)
    relative_accuracy: Number = Field(default=0.02, gt=0, lt=0.5)
    min_ttft_s: Number = Field(default=1e-4, gt=0)
    max_ttft_s: Number = Field(default=1e4, gt=0)
    min_samples: Whole = Field(default=30, ge=1)
    min_peers: Whole = Field(default=3, ge=3)
    min_scored_targets: Whole = Field(default=3, ge=3)
    z_threshold: Number = Field(default=3.5, gt=0)
    mad_floor_rel: Number = Field(default=0.15, gt=0)
    baseline_tau_s: Number = Field(default=1800.0, gt=0)
    baseline_max_freeze_s: Number = Field(default=1800.0, gt=0)
    demote_after_s: Number = Field(default=30.0, ge=0)
    restore_after_s: Number = Field(default=60.0, ge=0)
    fleet_trip_share: Number = Field(default=0.3, gt=0, le=1)
    min_trip_targets: Whole = Field(default=3, ge=2)
    tier_window_s: Number = Field(default=30.0, gt=0)
    tier_min_samples: Whole = Field(default=40, ge=5)
    tier_min_targets: Whole = Field(default=2, ge=1)
    tier_z_threshold: Number = Field(default=4.5, gt=0)
    tier_min_ratio: Number = Field(default=1.75, gt=1)
    tier_prompt_floor_tokens: Whole = Field(default=256, ge=1)
    tier_max_load_ratio: Number = Field(default=1.25, gt=1)
    tier_fast_window_s: Number = Field(default=10.0, ge=0)
    tier_fast_slice_s: Number = Field(default=2.5, gt=0)
    tier_fast_min_samples: Whole = Field(default=12, ge=5)
    tier_fast_z_threshold: Number = Field(default=7.0, gt=0)

    @model_validator(mode="after")
    def _slices_fit(self) -> TtftZscoreConfig:
        if self.slice_s > min(self.window_s, self.tier_window_s):
            raise ValueError(
                f"slice_s {self.slice_s} is above window_s {self.window_s} or tier_window_s "
                f"{self.tier_window_s}; fix: lower slice_s (default 5) or lengthen the window"
            )
        if self.min_ttft_s >= self.max_ttft_s:
            raise ValueError(
                f"min_ttft_s {self.min_ttft_s} is not below max_ttft_s {self.max_ttft_s}; "
                "fix: lower min_ttft_s (default 1e-4) or raise max_ttft_s (default 1e4)"
            )
        if self.tier_fast_window_s and self.tier_fast_slice_s > self.tier_fast_window_s:
            raise ValueError(
                f"tier_fast_slice_s {self.tier_fast_slice_s} is above tier_fast_window_s "
                f"{self.tier_fast_window_s}; fix: lower tier_fast_slice_s (default 2.5)"
            )
        _slices(self.window_s, self.slice_s, "window_s / slice_s")
        _slices(self.tier_window_s, self.slice_s, "tier_window_s / slice_s")
        if self.tier_fast_window_s:
            _slices(
                self.tier_fast_window_s,
                self.tier_fast_slice_s,
                "tier_fast_window_s / tier_fast_slice_s",
            )
        return self

    @property
    def slice_count(self) -> int:
        """Number of time slices in the ring."""
        return math.ceil(self.window_s / self.slice_s)

    @property
    def tier_slice_count(self) -> int:
        """Number of time slices in the tier (short) window."""
        return math.ceil(self.tier_window_s / self.slice_s)

    def fast_tier(self) -> TtftZscoreConfig | None:
        """The tier test's second, short window (None when `tier_fast_window_s` is 0): the
        same test on the last few seconds, with fewer samples and a stricter Z."""
        if not self.tier_fast_window_s:
            return None
        return self.model_copy(
            update={
                "slice_s": self.tier_fast_slice_s,
                "tier_window_s": self.tier_fast_window_s,
                "tier_min_samples": self.tier_fast_min_samples,
                "tier_z_threshold": self.tier_fast_z_threshold,
            }
        )


class HotSpotConfig(_Strict):
    """Space-Saving heavy hitters over full prefix identity with time-decayed counts."""

    counters: Whole = Field(default=64, ge=2)
    decay_tau_s: Number = Field(default=8.0, gt=0)
    trip_share: Number = Field(default=0.2, gt=0, le=1)
    min_effective_samples: Number = Field(default=24.0, gt=0)


class ColdStartConfig(_Strict):
    """Page-Hinkley on a young model's log(TTFT/deadline) and SLA misses vs the baseline."""

    max_age_s: Number = Field(default=300.0, gt=0)
    ttft_delta: Number = Field(default=0.35, ge=0)
    ttft_threshold: Number = Field(default=25.0, gt=0)
    sla_delta: Number = Field(default=0.05, ge=0)
    sla_threshold: Number = Field(default=10.0, gt=0)
    min_samples: Whole = Field(default=30, ge=1)
    baseline_min_samples: Whole = Field(default=200, ge=1)
    baseline_tau_s: Number = Field(default=1800.0, gt=0)


class RolloutCompareConfig(_Strict):
    """Learned vs round-robin SLA violation rates during the gray stages."""

    window_s: Number = Field(default=600.0, gt=0)
    slice_s: Number = Field(default=10.0, gt=0)
    min_samples_per_arm: Whole = Field(default=200, ge=1)
    ratio: Number = Field(default=ROLLBACK_RATIO, ge=1)
    z_margin: Number = Field(default=1.645, ge=0)

    @model_validator(mode="after")
    def _slices_fit(self) -> RolloutCompareConfig:
        _slices(self.window_s, self.slice_s, "window_s / slice_s")
        return self


class BreakerConfig(_Strict):
    """Hysteresis and flapping limits for the fleet breaker."""

    trip_after: Whole = Field(default=3, ge=1)
    clear_after: Whole = Field(default=30, ge=1)
    cooldown_s: Number = Field(default=300.0, ge=0)
    max_switches_per_hour: Whole = Field(default=4, ge=2)
    auto_return: Flag = False


class GuardConfig(_Strict):
    """Everything the guard needs. `evaluation_interval_s` is the simulator's evaluation
    period; `slaguard serve` evaluates every `loops.detectors_s` and refuses this key."""

    evaluation_interval_s: Number = Field(default=1.0, gt=0)
    ttft_zscore: TtftZscoreConfig = Field(default_factory=TtftZscoreConfig)
    hot_spot: HotSpotConfig = Field(default_factory=HotSpotConfig)
    cold_start: ColdStartConfig = Field(default_factory=ColdStartConfig)
    rollout_compare: RolloutCompareConfig = Field(default_factory=RolloutCompareConfig)
    breaker: BreakerConfig = Field(default_factory=BreakerConfig)


class ServeGuardConfig(GuardConfig):
    """`guard:` as serve takes it: the detectors run every `loops.detectors_s`, so the
    simulator's `evaluation_interval_s` was accepted and ignored while the breaker's K and
    M, which count evaluations, were tuned by the wrong knob."""

    @field_validator("evaluation_interval_s")
    @classmethod
    def _serve_has_its_own(cls, value: float) -> float:
        raise ValueError(
            f"serve does not read it (got {value:g}): it evaluates the guard every "
            "loops.detectors_s (default 1.0), and this key is the simulator's; fix: remove "
            "it and set loops.detectors_s"
        )
