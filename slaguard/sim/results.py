"""Per-request results of a simulation, as arrays (19k requests -> a few hundred KB)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from slaguard.fleet.fleet import Fleet
from slaguard.scheduler.rollout import FleetMode


class Status(IntEnum):
    PENDING = 0
    OK = 1
    FAILED = 2
    REJECTED = 3
    INCOMPLETE = 4


STATUS_TEXT = {
    Status.PENDING: "pending",
    Status.OK: "ok",
    Status.FAILED: "failed",
    Status.REJECTED: "rejected",
    Status.INCOMPLETE: "timeout",
}


@dataclass(frozen=True, slots=True)
class OutcomeInfo:
    """One finished request as observers see it (TTFT/TPOT/end-to-end in seconds)."""

    status: str
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float
    sla_met: bool


@dataclass
class Results:
    """Arrays indexed like the workload; NaN where a value does not exist."""

    arrival_s: np.ndarray
    first_token_s: np.ndarray
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    e2e_s: np.ndarray
    transfer_s: np.ndarray
    status: np.ndarray
    sla_met: np.ndarray
    arm: np.ndarray
    target: np.ndarray
    outcome: np.ndarray
    decision_latency_s: list[float] = field(default_factory=list)
    busy_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    sim_s: float = 0.0
    wall_s: float = 0.0
    mode_timeline: list[tuple[float, FleetMode, str]] = field(default_factory=list)

    @classmethod
    def empty(cls, n: int, fleet: Fleet) -> Results:
        nan = np.full(n, np.nan)
        return cls(
            arrival_s=nan.copy(),
            first_token_s=nan.copy(),
            ttft_s=nan.copy(),
            tpot_s=nan.copy(),
            e2e_s=nan.copy(),
            transfer_s=np.zeros(n),
            status=np.zeros(n, dtype=np.int8),
            sla_met=np.zeros(n, dtype=bool),
            arm=np.full(n, -1, dtype=np.int8),
            target=np.full(n, -1, dtype=np.int32),
            outcome=np.full(n, "no_capacity", dtype=object),
        )

    def finish(self, i: int, at: float, status: Status, deadline_s: float, tokens: int) -> None:
        """Record request i's end (plain floats: called once per request, numpy scalars
        would cost more than the arithmetic)."""
        self.status[i] = status
        self.e2e_s[i] = at - float(self.arrival_s[i])
        ok = status is Status.OK
        first = float(self.first_token_s[i])
        if ok and tokens > 1 and math.isfinite(first):
            self.tpot_s[i] = (at - first) / (tokens - 1)
        self.sla_met[i] = ok and float(self.ttft_s[i]) <= deadline_s

    def outcome_of(self, i: int) -> OutcomeInfo:
        ttft, tpot = float(self.ttft_s[i]), float(self.tpot_s[i])
        return OutcomeInfo(
            STATUS_TEXT[Status(int(self.status[i]))],
            ttft if math.isfinite(ttft) else None,
            tpot if math.isfinite(tpot) else None,
            float(self.e2e_s[i]),
            bool(self.sla_met[i]),
        )
