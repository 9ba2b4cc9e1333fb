"""Scheduler tuning, validated once at start; every default is the document's number."""

from __future__ import annotations

import hashlib
import json

from pydantic import BaseModel, ConfigDict, Field, model_validator

from slaguard.fleet.request import Priority

COMPONENTS: tuple[str, ...] = ("compute", "interconnect", "memory", "load", "jitter")
"""Router score components, in the order of every weight vector and component row."""


class GenerationWeights(BaseModel):
    """How much a hardware generation's compute density and interconnect count (Corollary 1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    compute: float = Field(default=1.0, ge=0, le=2)
    interconnect: float = Field(default=1.0, ge=0, le=2)


def _default_generations() -> dict[str, GenerationWeights]:
    return {
        "hopper": GenerationWeights(compute=1.0, interconnect=1.0),
        "ampere": GenerationWeights(compute=0.9, interconnect=0.9),
        "ada": GenerationWeights(compute=0.9, interconnect=1.0),
        "ascend": GenerationWeights(compute=0.8, interconnect=0.9),
        "cambricon": GenerationWeights(compute=0.7, interconnect=0.9),
    }


class RouterConfig(BaseModel):
    """Router knobs (section 1 of the reference scheduler)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    initial_weights: tuple[float, float, float, float, float] = (0.15, 0.05, 0.2, 0.45, 0.15)
    generations: dict[str, GenerationWeights] = Field(default_factory=_default_generations)
    long_prompt_tokens: int = Field(default=8192, gt=0, description="prefill intensity = 1 here")
    jitter_z_cap: float = Field(default=3.5, gt=0, description="Z at which the jitter term is 0")
    demote_z: float = Field(default=3.0, gt=0)
    load_slots_per_unit: float = Field(default=8.0, gt=0, description="queue per unit of speed")
    stale_after_s: float | None = Field(default=1.0, gt=0, description="10 missed refreshes")
    affinity_margin: float = Field(default=0.1, ge=0, le=1)
    mfu_prefill: float = Field(default=0.4, gt=0, le=1, description="for the TTFT estimate")

    @model_validator(mode="after")
    def _weights_on_simplex(self) -> RouterConfig:
        w = self.initial_weights
        if any(x < 0 for x in w) or abs(sum(w) - 1.0) > 1e-6:
            raise ValueError("initial_weights must be >= 0 and sum to 1")
        return self


class SpillConfig(BaseModel):
    """Cross-device spillover tiers by the destination's relative free KV ratio (Corollary 2)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    all_free_ratio: float = Field(default=0.5, description="at or above: any request may spill")
    half_free_ratio: float = Field(default=0.3, description="at or above: 50 % may probe")
    half_share: float = Field(default=0.5, ge=0, le=1)
    high_only_below: float = Field(default=0.1, description="below: only priority=high")
    timeout_s: float = Field(default=2.0, gt=0, description="refuse a spill slower than this")
    transfer_gbps_cap: float = Field(default=64.0, gt=0, description="PCIe Gen5 x16")


class BucketConfig(BaseModel):
    """One prompt-length bucket's batching threshold and preemption rule (Corollary 3)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_batch: int = Field(gt=0)
    preempt: bool
    preempt_min_rank_gap: int = Field(default=1, ge=1, le=2)


def _default_buckets() -> dict[str, BucketConfig]:
    return {
        "short": BucketConfig(max_batch=48, preempt=True, preempt_min_rank_gap=1),
        "medium": BucketConfig(max_batch=16, preempt=True, preempt_min_rank_gap=2),
        "long": BucketConfig(max_batch=2, preempt=False),
    }


class BatchingConfig(BaseModel):
    """Per-target continuous batching: 100 ms tick, buckets < 2K, 2K-32K, > 32K tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tick_s: float = Field(default=0.1, gt=0)
    short_below_tokens: int = 2048
    long_above_tokens: int = 32768
    buckets: dict[str, BucketConfig] = Field(default_factory=_default_buckets)
    refill_immediately: bool = True


class CorrectionConfig(BaseModel):
    """Global correction loop (section 4): 500 ms, about 5x the per-card tick."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    period_s: float = Field(default=0.5, gt=0)
    imbalance_weight: float = 0.5
    queued_weight: float = 0.2
    violation_weight: float = 0.3
    queued_norm: float = Field(default=200.0, gt=0, description="queued requests that count as 1")
    threshold: float = Field(default=0.25, ge=0)
    band: float = Field(default=0.25, ge=0, description="relative load band around the mean")
    step: float = Field(default=0.25, gt=0, description="threshold factor change per signal")
    min_factor: float = Field(default=0.5, gt=0)
    max_factor: float = Field(default=2.0, gt=0)
    ttl_s: float = Field(default=5.0, gt=0, description="factors decay to 1 without a signal")


class LearningConfig(BaseModel):
    """Online exponentiated-gradient weight updates with smoothing (section 5)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    update_period_s: float = Field(default=3600.0, gt=0)
    learning_rate: float = Field(default=0.5, gt=0)
    smoothing: float = Field(default=0.7, ge=0, lt=1, description="EMA factor on gradients")
    gradient_clip: float = Field(default=0.2, gt=0)
    floor: float = Field(default=0.02, ge=0, lt=0.2, description="uniform mix: no weight hits 0")
    min_feedback: int = Field(default=50, ge=1, description="fewer samples: no update")
    loss_cap: float = Field(default=3.0, gt=0, description="TTFT/deadline is capped here")


class SchedulerConfig(BaseModel):
    """All scheduler tuning in one validated object; `digest()` goes into every decision."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    router: RouterConfig = Field(default_factory=RouterConfig)
    spill: SpillConfig = Field(default_factory=SpillConfig)
    batching: BatchingConfig = Field(default_factory=BatchingConfig)
    correction: CorrectionConfig = Field(default_factory=CorrectionConfig)
    learning: LearningConfig = Field(default_factory=LearningConfig)
    degrade: bool = True
    priorities: tuple[Priority, ...] = tuple(Priority)

    @model_validator(mode="after")
    def _periods_coupled(self) -> SchedulerConfig:
        ratio = self.correction.period_s / self.batching.tick_s
        if not 3.0 <= ratio <= 10.0:
            raise ValueError(
                f"correction.period_s / batching.tick_s = {ratio:.1f}; keep it near 5 "
                "(between 3 and 10): faster couples and oscillates, slower corrects too little"
            )
        return self

    def digest(self) -> str:
        """Short stable hash of the whole configuration, recorded with each decision."""
        text = json.dumps(self.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]
