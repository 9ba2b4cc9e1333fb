"""The router's pre-filter table: per (model, priority), the targets that serve it and
their static figures, gathered once so a decision indexes arrays instead of walking the
fleet."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from slaguard.fleet.fleet import Fleet
from slaguard.fleet.request import Priority
from slaguard.scheduler.config import SchedulerConfig


@dataclass(frozen=True, slots=True)
class CandidateGroup:
    """Pre-filter table entry: the targets serving one (model, priority) and their statics."""

    model_id: str
    indices: np.ndarray
    compute: np.ndarray
    interconnect: np.ndarray
    slots: np.ndarray
    kv_budget_gb: np.ndarray
    static_gb: np.ndarray
    context_window: np.ndarray
    min_context: int
    limit_gb: np.ndarray
    seconds_per_token: np.ndarray
    kv_bytes_per_token: float
    prefiltered_out: int


def build_groups(fleet: Fleet, cfg: SchedulerConfig) -> dict[tuple[str, Priority], CandidateGroup]:
    """The pre-filter table of a fleet (a (model, priority) no target serves is absent)."""
    max_ic = max(t.card.interconnect_gbps for t in fleet)
    groups: dict[tuple[str, Priority], CandidateGroup] = {}
    for model_id in fleet.models:
        serving = [t for t in fleet if t.model.id == model_id]
        if not serving:
            continue
        max_tflops = max(t.tflops for t in serving)
        max_bw = max(t.card.memory_bandwidth_gbps * t.tp for t in serving)
        for prio in Priority:
            ts = [t for t in serving if prio in t.priorities]
            if not ts:
                continue
            gen = [cfg.router.generations.get(t.card.generation) for t in ts]
            gc = np.array([g.compute if g else 1.0 for g in gen])
            gi = np.array([g.interconnect if g else 1.0 for g in gen])
            tflops = np.array([t.tflops for t in ts])
            bw = np.array([t.card.memory_bandwidth_gbps * t.tp for t in ts])
            speed = 0.5 * tflops / max_tflops + 0.5 * bw / max_bw
            flops_per_token = ts[0].model.prefill_flops_per_token
            groups[(model_id, prio)] = CandidateGroup(
                model_id=model_id,
                indices=np.array([t.index for t in ts], dtype=np.intp),
                compute=gc * tflops / max_tflops,
                interconnect=gi * np.array([t.card.interconnect_gbps for t in ts]) / max_ic,
                slots=cfg.router.load_slots_per_unit * speed,
                kv_budget_gb=np.array([t.kv_budget_gb for t in ts]),
                static_gb=np.array([t.static_gb for t in ts]),
                context_window=np.array([t.model.context_window for t in ts]),
                min_context=min(t.model.context_window for t in ts),
                limit_gb=np.array([t.static_gb + t.kv_budget_gb for t in ts]),
                seconds_per_token=flops_per_token / (tflops * 1e12 * cfg.router.mfu_prefill),
                kv_bytes_per_token=ts[0].model.kv_bytes_per_token,
                prefiltered_out=len(fleet) - len(ts),
            )
    return groups
