"""Hardware and model catalogues: the static facts the scheduler reasons with.

Both ship as YAML inside the package (`slaguard/data/`); a fleet file may add entries.
KV bytes per token and weight bytes are derived from the architecture, never typed in.
"""

from __future__ import annotations

from enum import StrEnum
from importlib import resources
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from slaguard.fleet.validation import Number, Whole

GB = 1e9


class Interconnect(StrEnum):
    """Card-to-card link kind; NVLink is 4-6x PCIe, which the topology score weighs."""

    NVLINK = "nvlink"
    PCIE = "pcie"
    HCCS = "hccs"
    MLULINK = "mlulink"


class CardType(BaseModel):
    """One accelerator model's spec sheet."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = ""
    name: str
    generation: str
    memory_gb: Number = Field(gt=0)
    memory_bandwidth_gbps: Number = Field(gt=0)
    bf16_tflops: Number = Field(gt=0)
    interconnect: Interconnect
    interconnect_gbps: Number = Field(gt=0)
    failure_rate_per_hour: Number = Field(ge=0)


class ModelSpec(BaseModel):
    """One served model's architecture; KV cost per token follows from it (GQA-aware)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = ""
    params_b: Number = Field(gt=0, description="parameters, billions")
    layers: Whole = Field(gt=0)
    kv_heads: Whole = Field(gt=0)
    head_dim: Whole = Field(gt=0)
    dtype_bytes: Number = Field(gt=0, description="bytes per weight and per KV element")
    context_window: Whole = Field(gt=0)
    degrade_to: str | None = None
    activation_buffer_gb: Number = Field(default=2.0, ge=0)

    @property
    def kv_bytes_per_token(self) -> float:
        """K and V, every layer, every KV head (not every attention head: GQA)."""
        return 2.0 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

    @property
    def weights_gb(self) -> float:
        return self.params_b * 1e9 * self.dtype_bytes / GB

    @property
    def prefill_flops_per_token(self) -> float:
        """2 x parameters FLOPs per prompt token (dense forward pass)."""
        return 2.0 * self.params_b * 1e9


def _load_packaged(name: str) -> dict[str, Any]:
    text = resources.files("slaguard.data").joinpath(name).read_text(encoding="utf-8")
    data: dict[str, Any] = yaml.safe_load(text)
    return data


def builtin_cards() -> dict[str, dict[str, Any]]:
    """Raw card entries from the packaged catalogue (validated by the fleet loader)."""
    cards: dict[str, dict[str, Any]] = _load_packaged("cards.yaml")["cards"]
    return cards


def builtin_models() -> dict[str, dict[str, Any]]:
    """Raw model entries from the packaged catalogue (validated by the fleet loader)."""
    models: dict[str, dict[str, Any]] = _load_packaged("models.yaml")["models"]
    return models
