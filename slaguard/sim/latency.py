"""Per-target prefill and decode times, fitted to measured profiles and scaled by spec sheets.

The functional form (docs/latency-model.md) is linear in a few dimensionless coefficients
(inverse efficiencies) and per-layer overheads, fitted per reference GPU (A100, H100) to
splitwise's `perf_model.csv` by `slaguard.sim.latency_fit`. Any other card reuses its
reference's coefficients with its own TFLOPS, memory bandwidth and interconnect plugged in:
compute-bound prefill scales with TFLOPS, memory-bound decode with bandwidth, both with
model size. The runtime reads the packaged `slaguard/data/latency_fit.json`, never the CSV,
and every call is plain float arithmetic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from slaguard.fleet import CardType, Fleet, ModelSpec, Target

FIT_SCHEMA = "slaguard.latency_fit/v1"
FIT_RESOURCE = "latency_fit.json"

PREFILL_TERMS = (
    "layer_s",
    "tp_sync_layer_s",
    "compute",
    "attention",
    "batch_log2",
    "tp_comm",
)
DECODE_TERMS = ("layer_s", "tp_sync_layer_s", "memory", "compute")

REFERENCE_BY_GENERATION = {"hopper": "h100", "blackwell": "h100"}
DEFAULT_REFERENCE = "a100"
"""Cards without a measured profile borrow A100 efficiencies unless they are Hopper-class."""

CROSS_NODE_GBPS = 64.0
"""Card-to-card link between different card types (separate servers): PCIe Gen5 x16, per
the design document's spillover trap."""


def hidden_size(model: ModelSpec) -> float:
    """Model width estimated from parameters and depth (params ~ 12 x layers x d^2)."""
    return math.sqrt(model.params_b * 1e9 / (12.0 * model.layers))


@dataclass(frozen=True, slots=True)
class TermUnits:
    """Physical time units of one (model, card, tp) at 100 % efficiency, in seconds."""

    layers: float
    tp_sync_layers: float
    compute_per_token_s: float
    attention_unit_s: float
    tp_comm_per_token_s: float
    weights_read_s: float
    kv_read_per_token_s: float

    @classmethod
    def of(cls, model: ModelSpec, card: CardType, tp: int) -> TermUnits:
        flops = card.bf16_tflops * 1e12 * tp
        bandwidth = card.memory_bandwidth_gbps * 1e9 * tp
        d = hidden_size(model)
        ring_bytes = 4.0 * model.layers * d * model.dtype_bytes * (tp - 1) / tp
        return cls(
            layers=float(model.layers),
            tp_sync_layers=model.layers * math.log2(tp),
            compute_per_token_s=model.prefill_flops_per_token / flops,
            attention_unit_s=4.0 * model.layers * d / flops,
            tp_comm_per_token_s=ring_bytes / (card.interconnect_gbps * 1e9),
            weights_read_s=model.weights_gb * 1e9 / bandwidth,
            kv_read_per_token_s=model.kv_bytes_per_token / bandwidth,
        )

    def prefill_row(self, new_tokens: float, pairs: float, sequences: int) -> list[float]:
        """Design-matrix row for PREFILL_TERMS.

        `new_tokens`: tokens computed over the batch; `pairs`: sum over its sequences of
        P^2 - R^2 (prompt and reused lengths), the quadratic attention work.
        """
        return [
            self.layers,
            self.tp_sync_layers,
            new_tokens * self.compute_per_token_s,
            pairs * self.attention_unit_s,
            new_tokens * self.compute_per_token_s * math.log2(sequences),
            new_tokens * self.tp_comm_per_token_s,
        ]

    def decode_row(self, batch_size: float, context_tokens: float) -> list[float]:
        """Design-matrix row for DECODE_TERMS (context_tokens: KV tokens read, whole batch)."""
        return [
            self.layers,
            self.tp_sync_layers,
            self.weights_read_s + context_tokens * self.kv_read_per_token_s,
            batch_size * self.compute_per_token_s,
        ]


class PhaseError(BaseModel):
    """Relative error of the fit against measured configurations of one phase."""

    model_config = ConfigDict(extra="forbid")

    points: int
    median: float
    p90: float
    max: float


class ReferenceFit(BaseModel):
    """Coefficients of one measured GPU, and how well they reproduce its measurements."""

    model_config = ConfigDict(extra="forbid")

    prefill: dict[str, float]
    decode: dict[str, float]
    error: dict[str, PhaseError]
    error_by_group: dict[str, dict[str, PhaseError]]


class LatencyFit(BaseModel):
    """The packaged fit file (`slaguard/data/latency_fit.json`)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_id: str = Field(alias="schema")
    source: str
    source_sha256: str
    excluded: list[str]
    references: dict[str, ReferenceFit]


@dataclass(frozen=True, slots=True)
class TargetLatency:
    """One target's latency functions, pre-multiplied into a handful of floats (seconds)."""

    target_id: str
    model_id: str
    card_id: str
    kv_bytes_per_token: float
    interconnect_gbps: float
    prefill_fixed_s: float
    prefill_per_token_s: float
    prefill_per_pair_s: float
    prefill_per_token_log2_batch_s: float
    decode_fixed_s: float
    decode_per_context_token_s: float
    decode_per_sequence_s: float
    factor: float = 1.0

    def with_factor(self, factor: float) -> TargetLatency:
        """The same target slowed down (or sped up) by `factor`: the fault/jitter hook."""
        return replace(self, factor=factor)

    def prefill_s(self, prompt_tokens: int, batch_size: int = 1, reused_tokens: int = 0) -> float:
        """Prefill of `batch_size` prompts of `prompt_tokens`, each with `reused_tokens` cached.

        At least one token per prompt is always computed (the last one produces the first
        output token), so a full prefix-cache hit is cheap but not free.
        """
        reused = min(reused_tokens, prompt_tokens - 1) if prompt_tokens > 0 else 0
        new = max(prompt_tokens - reused, 1) * batch_size
        pairs = float(prompt_tokens * prompt_tokens - reused * reused) * batch_size
        per_token = self.prefill_per_token_s
        if batch_size > 1:
            per_token += math.log2(batch_size) * self.prefill_per_token_log2_batch_s
        return self.factor * (
            self.prefill_fixed_s + new * per_token + pairs * self.prefill_per_pair_s
        )

    def prefill_many_s(self, prompts: Sequence[tuple[int, int]]) -> float:
        """One prefill pass over mixed prompts given as (prompt_tokens, reused_tokens) pairs."""
        new = 0
        pairs = 0.0
        for prompt, reused_tokens in prompts:
            reused = min(reused_tokens, prompt - 1) if prompt > 0 else 0
            new += max(prompt - reused, 1)
            pairs += float(prompt * prompt - reused * reused)
        per_token = self.prefill_per_token_s
        if len(prompts) > 1:
            per_token += math.log2(len(prompts)) * self.prefill_per_token_log2_batch_s
        return self.factor * (
            self.prefill_fixed_s + new * per_token + pairs * self.prefill_per_pair_s
        )

    def decode_step_s(self, batch_size: int, context_tokens: int) -> float:
        """One decode step producing a token for each of `batch_size` sequences.

        `context_tokens` is the KV cache read in that step: the sum of the sequences' current
        lengths (prompt + tokens generated so far) over the whole batch.
        """
        return self.factor * (
            self.decode_fixed_s
            + context_tokens * self.decode_per_context_token_s
            + batch_size * self.decode_per_sequence_s
        )

    def kv_transfer_s(self, tokens: int, to_target: TargetLatency) -> float:
        """Moving `tokens` of this target's KV cache to `to_target` (spillover, migration).

        Same card type: the slower of the two links (same NVLink/HCCS domain assumed).
        Different card types: also capped at `CROSS_NODE_GBPS`. Only the same model's KV
        cache can move.
        """
        if to_target.model_id != self.model_id:
            raise ValueError(
                f"cannot move KV of {self.model_id} from {self.target_id} to "
                f"{to_target.target_id} ({to_target.model_id})"
            )
        if to_target.target_id == self.target_id:
            return 0.0
        gbps = min(self.interconnect_gbps, to_target.interconnect_gbps)
        if to_target.card_id != self.card_id:
            gbps = min(gbps, CROSS_NODE_GBPS)
        return tokens * self.kv_bytes_per_token / (gbps * 1e9)


def reference_for(card: CardType) -> str:
    """Which measured GPU's efficiencies a card borrows."""
    return REFERENCE_BY_GENERATION.get(card.generation, DEFAULT_REFERENCE)


class LatencyModel:
    """Builds `TargetLatency` objects from a fit; one instance serves a whole simulation."""

    def __init__(self, fit: LatencyFit) -> None:
        self.fit = fit
        self._cache: dict[tuple[str, str, str, int], TargetLatency] = {}

    @classmethod
    def load(cls, path: str | Path | None = None) -> LatencyModel:
        """The packaged fit (default) or a refitted file written by `latency_fit.write_fit`."""
        if path is None:
            text = resources.files("slaguard.data").joinpath(FIT_RESOURCE).read_text("utf-8")
        else:
            text = Path(path).read_text(encoding="utf-8")
        return cls(LatencyFit.model_validate_json(text))

    def for_target(self, target: Target) -> TargetLatency:
        key = (target.id, target.model.id, target.card.id, target.tp)
        cached = self._cache.get(key)
        if cached is None:
            cached = self.build(target.id, target.model, target.card, target.tp)
            self._cache[key] = cached
        return cached

    def for_fleet(self, fleet: Fleet) -> tuple[TargetLatency, ...]:
        """Latencies indexed like `fleet.targets`."""
        return tuple(self.for_target(t) for t in fleet.targets)

    def build(self, target_id: str, model: ModelSpec, card: CardType, tp: int) -> TargetLatency:
        """Apply the reference coefficients to this model/card/tp's physical units."""
        ref = self.fit.references[reference_for(card)]
        units = TermUnits.of(model, card, tp)
        pre = [ref.prefill[t] for t in PREFILL_TERMS]
        dec = [ref.decode[t] for t in DECODE_TERMS]
        return TargetLatency(
            target_id=target_id,
            model_id=model.id,
            card_id=card.id,
            kv_bytes_per_token=model.kv_bytes_per_token,
            interconnect_gbps=card.interconnect_gbps,
            prefill_fixed_s=pre[0] * units.layers + pre[1] * units.tp_sync_layers,
            prefill_per_token_s=pre[2] * units.compute_per_token_s
            + pre[5] * units.tp_comm_per_token_s,
            prefill_per_pair_s=pre[3] * units.attention_unit_s,
            prefill_per_token_log2_batch_s=pre[4] * units.compute_per_token_s,
            decode_fixed_s=dec[0] * units.layers
            + dec[1] * units.tp_sync_layers
            + dec[2] * units.weights_read_s,
            decode_per_context_token_s=dec[2] * units.kv_read_per_token_s,
            decode_per_sequence_s=dec[3] * units.compute_per_token_s,
        )
