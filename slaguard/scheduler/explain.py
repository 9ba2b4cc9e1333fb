"""Decisions and their explanations.

An explanation keeps the router's arrays as they were at decision time and turns them
into a JSON-able dict only when asked. `render_explanation` is the one rendering: the
audit writer process calls it on the arrays journalled raw by `enqueue()`, so the
routing path never renders.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Any

import numpy as np

from slaguard.fleet.fleet import Fleet, Target
from slaguard.fleet.request import Request
from slaguard.scheduler.config import COMPONENTS
from slaguard.scheduler.rollout import Arm


class Reason(IntEnum):
    """Why a pre-filtered candidate was not eligible."""

    ELIGIBLE = 0
    MEMORY = 1
    CONTEXT = 2
    UNHEALTHY = 3
    STALE = 4
    DEMOTED = 5


REASON_TEXT = {
    Reason.MEMORY: "memory bound: v_h + v_peak > 0.92 x V_h",
    Reason.CONTEXT: "prompt + generation exceeds the model's context window",
    Reason.UNHEALTHY: "target marked unhealthy",
    Reason.STALE: "stale hardware picture: treated as saturated",
    Reason.DEMOTED: "demoted for persistent TTFT jitter: takes low priority only",
}


_REASON_TEXT_BY_CODE = {int(k): v for k, v in REASON_TEXT.items()}


class Outcome(StrEnum):
    ROUTED = "routed"
    SPILLED = "spilled"
    DEGRADED = "degraded"
    NO_CAPACITY = "no_capacity"


@dataclass(slots=True, kw_only=True)
class ExplanationArrays:
    """What rendering reads: the router's arrays as they were at decision time (an
    `Explanation`, or its raw journalled copy rebuilt in the audit writer process)."""

    candidates: np.ndarray
    reasons: np.ndarray
    components: np.ndarray | None
    scores: np.ndarray | None
    v_peak_gb: float
    v_used_gb: np.ndarray
    limit_gb: np.ndarray
    weights: tuple[float, ...]
    weights_version: str
    prefiltered_out: int
    chosen: int | None = None
    notes: list[str] = field(default_factory=list)
    spill: dict[str, Any] | None = None
    degraded_from: str | None = None


def _rejected(
    target_ids: Sequence[str], candidates: np.ndarray, reasons: np.ndarray
) -> list[tuple[str, str]]:
    return [
        (target_ids[c], _REASON_TEXT_BY_CODE[r])
        for c, r in zip(candidates.tolist(), reasons.tolist(), strict=True)
        if r != 0
    ]


def render_explanation(
    e: ExplanationArrays,
    policy: str,
    target_ids: Sequence[str],
    card_ids: Sequence[str],
    static_gb: np.ndarray,
) -> dict[str, Any]:
    """The JSON-able explanation (audit line, `?explain=1`); vectorised, ~20 us."""
    ok = e.reasons == 0
    chosen = e.candidates[ok]
    cand = chosen.tolist()
    # As the spec's rule reads, `v_h + v_peak > 0.92 x V_h`: v_peak holds the weights and
    # activation buffers (the static reservation), v_h the KV in use.
    static = static_gb[chosen]
    v_used = (e.v_used_gb[ok] - static).round(3).tolist()
    limit = e.limit_gb[ok].round(3).tolist()
    v_peak = (static + e.v_peak_gb).round(3).tolist()
    cands: list[dict[str, Any]] = [
        {"target": target_ids[c], "card": card_ids[c], "v_h_gb": v, "v_peak_gb": p,
         "limit_gb": lim}
        for c, v, p, lim in zip(cand, v_used, v_peak, limit, strict=True)
    ]  # fmt: skip
    if e.components is not None and e.scores is not None:
        rows = e.components[ok].round(4).tolist()
        scores = e.scores[ok].round(4).tolist()
        for entry, row, score in zip(cands, rows, scores, strict=True):
            entry["components"] = dict(zip(COMPONENTS, row, strict=True))
            entry["score"] = score
    return {
        "policy": policy,
        "weights": dict(zip(COMPONENTS, e.weights, strict=True)),
        "weights_version": e.weights_version,
        "candidates": cands,
        "rejected": [
            {"target": t, "reason": r} for t, r in _rejected(target_ids, e.candidates, e.reasons)
        ],
        "prefiltered_out": e.prefiltered_out,
        "chosen": None if e.chosen is None else target_ids[e.chosen],
        "spill": e.spill,
        "degraded_from": e.degraded_from,
        "notes": list(e.notes),
    }


@dataclass(slots=True, kw_only=True)
class Explanation(ExplanationArrays):
    """Everything needed to answer "why did this request go there?"."""

    fleet: Fleet
    arm: Arm

    def rejected(self) -> list[tuple[str, str]]:
        """(target id, reason) for every candidate that was not eligible."""
        return _rejected(self.fleet.target_ids, self.candidates, self.reasons)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form for the audit line and `?explain=1`."""
        fleet = self.fleet
        return render_explanation(
            self, self.arm.value, fleet.target_ids, fleet.card_ids, fleet.static_gb_array
        )


@dataclass(slots=True)
class Decision:
    """The router's answer for one request; `target` is None when nothing can take it."""

    request: Request
    arm: Arm
    outcome: Outcome
    target: Target | None
    explanation: Explanation
    served_model: str = ""
    transfer_s: float = 0.0
    """KV transfer penalty a spilled request pays on its TTFT."""

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def alternatives(self) -> tuple[int, ...]:
        """Other eligible targets, best first: the gateway's retry-before-first-byte order."""
        expl = self.explanation
        ok = expl.reasons == Reason.ELIGIBLE
        if expl.scores is not None:
            order = np.argsort(-expl.scores, kind="stable")
            ranked = expl.candidates[order][ok[order]]
        else:
            ranked = expl.candidates[ok]
        return tuple(int(i) for i in ranked if i != expl.chosen)

    def chosen_components(self) -> np.ndarray | None:
        """The chosen target's score components (None for round-robin or no capacity)."""
        expl = self.explanation
        if expl.components is None or expl.chosen is None:
            return None
        pos = np.flatnonzero(expl.candidates == expl.chosen)
        return expl.components[int(pos[0])] if pos.size else None
