"""Fleet mode and the cold-start rollout plan (reference scheduler, section 5, Corollary 5).

Round-robin first to collect an unbiased baseline, then the learned policy on 10 %, 50 %,
100 % of traffic, rolled back whenever `learned violation rate > round-robin rate x 1.05`.
Arm assignment is a deterministic hash of the request id, so a replayed request lands in
the same arm on every replica.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import StrEnum

ROLLBACK_RATIO = 1.05
"""Roll back when the learned arm's SLA violation rate exceeds round-robin's by 5 %."""

DEFAULT_STAGES_PCT: tuple[int, ...] = (10, 50, 100)


class ModeKind(StrEnum):
    """Which policy the whole fleet routes with."""

    ROUND_ROBIN = "round_robin"
    ROLLOUT = "rollout"
    LEARNED = "learned"
    HELD_ROUND_ROBIN = "held_round_robin"


class Arm(StrEnum):
    """The policy that made one decision (the A/B arm)."""

    ROUND_ROBIN = "round_robin"
    LEARNED = "learned"


@dataclass(frozen=True, slots=True)
class FleetMode:
    """The fleet's routing mode; `stage_pct` is the learned share while in rollout."""

    kind: ModeKind
    stage_pct: int = 0

    def __post_init__(self) -> None:
        if self.kind is ModeKind.ROLLOUT and not 0 < self.stage_pct <= 100:
            raise ValueError(f"rollout stage must be in (0, 100], got {self.stage_pct}")

    @property
    def learned_share(self) -> float:
        """Fraction of traffic the learned policy routes in this mode."""
        if self.kind is ModeKind.LEARNED:
            return 1.0
        if self.kind is ModeKind.ROLLOUT:
            return self.stage_pct / 100.0
        return 0.0

    @property
    def label(self) -> str:
        """Stable text form: `round_robin`, `rollout(10)`, `learned`, `held_round_robin`."""
        if self.kind is ModeKind.ROLLOUT:
            return f"rollout({self.stage_pct})"
        return self.kind.value

    @classmethod
    def parse(cls, text: str) -> FleetMode:
        """Inverse of `label`."""
        if text.startswith("rollout(") and text.endswith(")"):
            return cls(ModeKind.ROLLOUT, int(text[len("rollout(") : -1]))
        return cls(ModeKind(text))


ROUND_ROBIN = FleetMode(ModeKind.ROUND_ROBIN)
HELD_ROUND_ROBIN = FleetMode(ModeKind.HELD_ROUND_ROBIN)
LEARNED = FleetMode(ModeKind.LEARNED)


def ab_bucket(request_id: str) -> float:
    """Deterministic position of a request in [0, 1) for A/B assignment."""
    digest = hashlib.blake2b(request_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def assign_arm(mode: FleetMode, request_id: str) -> Arm:
    """Which arm routes this request under `mode` (same answer on every replica)."""
    share = mode.learned_share
    if share >= 1.0:
        return Arm.LEARNED
    if share <= 0.0:
        return Arm.ROUND_ROBIN
    return Arm.LEARNED if ab_bucket(request_id) < share else Arm.ROUND_ROBIN


def should_roll_back(
    learned_violation_rate: float, round_robin_violation_rate: float, ratio: float = ROLLBACK_RATIO
) -> bool:
    """The document's rule: learned > round-robin x 1.05 (callers gate on sample counts)."""
    return learned_violation_rate > round_robin_violation_rate * ratio


@dataclass(frozen=True, slots=True)
class RolloutPlan:
    """Stage schedule: baseline, then each learned share for `stage_s` seconds.

    Production uses days (86,400 s per stage); simulations use seconds.
    """

    baseline_s: float = 86_400.0
    stage_s: float = 86_400.0
    stages_pct: tuple[int, ...] = DEFAULT_STAGES_PCT

    def __post_init__(self) -> None:
        if self.baseline_s < 0 or self.stage_s <= 0:
            raise ValueError("baseline_s must be >= 0 and stage_s > 0")
        if not self.stages_pct or any(not 0 < p <= 100 for p in self.stages_pct):
            raise ValueError("stages_pct must be non-empty values in (0, 100]")
        if list(self.stages_pct) != sorted(self.stages_pct):
            raise ValueError("stages_pct must be increasing")

    def mode_at(self, elapsed_s: float) -> FleetMode:
        """The planned mode `elapsed_s` after the plan started (no rollback considered)."""
        if elapsed_s < self.baseline_s:
            return ROUND_ROBIN
        stage = int((elapsed_s - self.baseline_s) // self.stage_s)
        if stage >= len(self.stages_pct):
            return LEARNED
        return FleetMode(ModeKind.ROLLOUT, self.stages_pct[stage])

    def first_stage(self) -> FleetMode:
        """Where a return to the learned policy re-enters the plan."""
        return FleetMode(ModeKind.ROLLOUT, self.stages_pct[0])

    def next_stage(self, mode: FleetMode) -> FleetMode:
        """The stage after `mode` in the plan; the last stage leads to `learned`."""
        if mode.kind is not ModeKind.ROLLOUT:
            return self.first_stage() if mode.kind is ModeKind.ROUND_ROBIN else mode
        later = [p for p in self.stages_pct if p > mode.stage_pct]
        return FleetMode(ModeKind.ROLLOUT, later[0]) if later else LEARNED
