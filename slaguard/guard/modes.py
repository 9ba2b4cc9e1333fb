"""Fleet-mode state machine: explicit transitions between the four `FleetMode` kinds.

Every function takes the current `ModeState` and returns a `TransitionResult` holding the
next state (version + 1 when it changed, so a database store can compare-and-set on the
version) and a `ModeTransition` record for the audit line. Nothing here reads a clock.

Switch cap: a *policy switch* is a change between the round-robin family and the learned
family. An automatic return is refused unless `switches in the last hour + 2 <= cap`,
which keeps room for the trip that may follow it; trips are never refused (moving to the
baseline is always safe) and humans are never refused. So automatic switching stays within
`max_switches_per_hour` in any hour (see the property tests).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum

from slaguard.guard.config import BreakerConfig
from slaguard.guard.verdicts import JsonDict
from slaguard.scheduler.rollout import (
    HELD_ROUND_ROBIN,
    ROUND_ROBIN,
    FleetMode,
    ModeKind,
    RolloutPlan,
)

HOUR_S = 3600.0
_RR_FAMILY = (ModeKind.ROUND_ROBIN, ModeKind.HELD_ROUND_ROBIN)


class TransitionKind(StrEnum):
    """Why the mode changed (or was asked to)."""

    TRIP = "trip"
    AUTO_RETURN = "auto_return"
    STAGE_ADVANCE = "stage_advance"
    MANUAL_ROLLBACK = "manual_rollback"
    MANUAL_HOLD = "manual_hold"
    MANUAL_RESUME = "manual_resume"


@dataclass(frozen=True, slots=True)
class ModeState:
    """The fleet's mode plus what the state machine needs to decide the next one.

    `auto_advance`: the rollout plan may move the fleet forward from here (baseline
    round-robin and stages entered by the plan or a resume). `entered_by`: the transition
    that produced this state (an automatic return only undoes a trip, never a human's
    rollback). `switch_times_s`: policy switches in the last hour.
    """

    mode: FleetMode = ROUND_ROBIN
    version: int = 0
    since_s: float = 0.0
    reason: str = "baseline: collecting round-robin statistics"
    actor: str = "system"
    auto_advance: bool = True
    entered_by: TransitionKind | None = None
    switch_times_s: tuple[float, ...] = field(default=())

    def switches_within_hour(self, now_s: float) -> int:
        """Policy switches in (now - 1 h, now]."""
        return sum(1 for t in self.switch_times_s if now_s - HOUR_S < t <= now_s)


NOT_LOADED = ModeState(version=-1, reason="not loaded from the database yet", auto_advance=False)
"""A replica's (or a CLI command's) state before its first read: version -1, so the first
stored state read is always adopted; it routes round-robin."""


@dataclass(frozen=True, slots=True)
class ModeTransition:
    """One mode change as the audit line stores it."""

    kind: TransitionKind
    from_mode: str
    to_mode: str
    reason: str
    actor: str
    at_s: float
    version: int
    evidence: JsonDict = field(default_factory=dict)

    def to_dict(self) -> JsonDict:
        """JSON-able form."""
        return {
            "kind": self.kind.value,
            "from": self.from_mode,
            "to": self.to_mode,
            "reason": self.reason,
            "actor": self.actor,
            "at_s": self.at_s,
            "version": self.version,
            "evidence": self.evidence,
        }


@dataclass(frozen=True, slots=True)
class TransitionResult:
    """The next state, the record when it changed, and one line saying what happened."""

    state: ModeState
    transition: ModeTransition | None
    message: str

    @property
    def changed(self) -> bool:
        """False for "no change" answers (idempotent requests, refused returns)."""
        return self.transition is not None


def _is_policy_switch(before: FleetMode, after: FleetMode) -> bool:
    return (before.kind in _RR_FAMILY) != (after.kind in _RR_FAMILY)


def _move(
    state: ModeState,
    to: FleetMode,
    kind: TransitionKind,
    now_s: float,
    *,
    reason: str,
    actor: str,
    auto_advance: bool,
    message: str,
    evidence: JsonDict | None = None,
) -> TransitionResult:
    times = tuple(t for t in state.switch_times_s if now_s - t < HOUR_S)
    if _is_policy_switch(state.mode, to):
        times += (now_s,)
    new = ModeState(to, state.version + 1, now_s, reason, actor, auto_advance, kind, times)
    record = ModeTransition(
        kind, state.mode.label, to.label, reason, actor, now_s, new.version, dict(evidence or {})
    )
    return TransitionResult(new, record, message)


def _stay(state: ModeState, message: str) -> TransitionResult:
    return TransitionResult(state, None, message)


def _aborted(mode: FleetMode) -> str:
    return (
        f"rollout '{mode.label}' aborted"
        if mode.kind is ModeKind.ROLLOUT
        else "learned policy rolled back"
    )


def trip(
    state: ModeState, now_s: float, *, reason: str, evidence: JsonDict, actor: str = "guard"
) -> TransitionResult:
    """Breaker tripped: the whole fleet goes to round-robin (never refused)."""
    if state.mode.kind in _RR_FAMILY:
        return _stay(state, f"fleet already on {state.mode.label}; trip recorded, no switch")
    message = f"{_aborted(state.mode)}: fleet on round_robin ({reason})"
    return _move(
        state,
        ROUND_ROBIN,
        TransitionKind.TRIP,
        now_s,
        reason=reason,
        actor=actor,
        auto_advance=False,
        message=message,
        evidence=evidence,
    )


def auto_return(
    state: ModeState, now_s: float, plan: RolloutPlan, config: BreakerConfig, *, reason: str
) -> TransitionResult:
    """Breaker cleared: re-enter the rollout at its first stage, if allowed."""
    if not config.auto_return:
        return _stay(
            state,
            "automatic return disabled: resume with `slaguard resume --stage "
            f"{plan.first_stage().stage_pct}`",
        )
    if state.mode.kind is not ModeKind.ROUND_ROBIN or state.entered_by is not TransitionKind.TRIP:
        return _stay(
            state, f"fleet on {state.mode.label} not by a trip; automatic return does not apply"
        )
    used = state.switches_within_hour(now_s)
    if used + 2 > config.max_switches_per_hour:
        return _stay(
            state,
            f"automatic return refused: {used} switches in the last hour "
            f"(cap {config.max_switches_per_hour})",
        )
    to = plan.first_stage()
    return _move(
        state,
        to,
        TransitionKind.AUTO_RETURN,
        now_s,
        reason=reason,
        actor="guard",
        auto_advance=True,
        message=f"fleet returned to {to.label} ({reason})",
    )


def advance(state: ModeState, now_s: float, plan: RolloutPlan) -> TransitionResult:
    """Move along the rollout plan when the current stage has lasted long enough."""
    if not state.auto_advance or state.mode.kind in (ModeKind.HELD_ROUND_ROBIN, ModeKind.LEARNED):
        return _stay(state, f"{state.mode.label}: no planned advance")
    if state.mode.kind is ModeKind.ROUND_ROBIN:
        due, to = plan.baseline_s, plan.first_stage()
    else:
        due, to = plan.stage_s, plan.next_stage(state.mode)
    if now_s - state.since_s < due:
        return _stay(
            state, f"{state.mode.label}: next stage in {due - (now_s - state.since_s):.0f}s"
        )
    reason = f"rollout plan: {state.mode.label} lasted {now_s - state.since_s:.0f}s (>= {due:.0f}s)"
    return _move(
        state,
        to,
        TransitionKind.STAGE_ADVANCE,
        now_s,
        reason=reason,
        actor="guard",
        auto_advance=to.kind is ModeKind.ROLLOUT,
        message=f"fleet advanced to {to.label}",
    )


def manual_rollback(
    state: ModeState,
    now_s: float,
    *,
    actor: str,
    reason: str,
    hold: bool = False,
    stop_plan: bool = True,
) -> TransitionResult:
    """A human sends the fleet to round-robin (`hold`: and keeps it there). On the
    round-robin baseline, which the plan leaves once `baseline_s` has run, a rollback
    stops the plan (`stop_plan`; an alert's rollback leaves it): it said "nothing to roll
    back" and the learned policy started routing at the baseline's end. On a fleet the
    guard tripped, a human's rollback takes it over: it said "nothing to roll back", and
    with `breaker.auto_return` the guard later put the learned policy back."""
    if hold:
        if state.mode.kind is ModeKind.HELD_ROUND_ROBIN:
            # the form of every idempotent answer: fleet already on <mode>; nothing to <verb>
            return _stay(state, f"fleet already on {state.mode.label}; nothing to hold")
        message = f"fleet held on round-robin by {actor} ({reason})"
        if state.mode.kind not in _RR_FAMILY:
            message = f"{_aborted(state.mode)}: {message}"
        return _move(
            state,
            HELD_ROUND_ROBIN,
            TransitionKind.MANUAL_HOLD,
            now_s,
            reason=reason,
            actor=actor,
            auto_advance=False,
            message=message,
        )
    baseline = state.mode.kind is ModeKind.ROUND_ROBIN and state.auto_advance
    tripped = state.mode.kind is ModeKind.ROUND_ROBIN and state.entered_by is TransitionKind.TRIP
    if state.mode.kind in _RR_FAMILY and not (stop_plan and (baseline or tripped)):
        return _stay(state, f"fleet already on {state.mode.label}; nothing to roll back")
    message = f"{_aborted(state.mode)}: fleet on round_robin by {actor} ({reason})"
    if baseline:
        message = f"rollout plan stopped: fleet stays on round_robin by {actor} ({reason})"
    elif tripped:
        message = (
            f"fleet stays on round_robin by {actor} ({reason}): taken over from the guard's "
            "trip, so no automatic return undoes it"
        )
    return _move(
        state,
        ROUND_ROBIN,
        TransitionKind.MANUAL_ROLLBACK,
        now_s,
        reason=reason,
        actor=actor,
        auto_advance=False,
        message=message,
    )


def manual_resume(
    state: ModeState,
    now_s: float,
    plan: RolloutPlan,
    *,
    actor: str,
    reason: str,
    stage_pct: int | None = None,
) -> TransitionResult:
    """A human re-enters the gray rollout (first stage by default); also leaves a hold.

    Only from the round-robin family, like a rollback only toward it: a resume repeated
    by a second on-call after the plan advanced must not undo the rollout's progress."""
    to = FleetMode(ModeKind.ROLLOUT, stage_pct) if stage_pct is not None else plan.first_stage()
    if state.mode.kind not in _RR_FAMILY:
        return _stay(state, _nothing_to_resume(state.mode, to))
    return _move(
        state,
        to,
        TransitionKind.MANUAL_RESUME,
        now_s,
        reason=reason,
        actor=actor,
        auto_advance=True,
        message=f"fleet resumed at {to.label} by {actor} ({reason})",
    )


def _nothing_to_resume(mode: FleetMode, asked: FleetMode) -> str:
    if mode.kind is ModeKind.LEARNED:
        return f"fleet already on {mode.label} (the learned policy routes); nothing to resume"
    message = (
        f"fleet already on {mode.label} (the learned policy routes {mode.stage_pct} % of "
        "requests); nothing to resume"
    )
    if asked != mode:
        message += f" (to restart at {asked.label}, roll back first)"
    return message


def start_baseline(state: ModeState, now_s: float, *, seed_actor: str) -> ModeState | None:
    """The cold-start baseline counted from `now_s`, the guard's first run, if `state` is
    the database's untouched seed (version 0, by `seed_actor`); else None. The seed's
    `since` is the `db upgrade`, perhaps a day before any replica routed: `baseline_s`
    measured from it took the fleet to the first stage with no baseline gathered."""
    if state.version != 0 or state.actor != seed_actor:
        return None
    reason = "baseline: collecting round-robin statistics since the guard first ran"
    return replace(state, since_s=now_s, reason=reason, actor="guard")


def adopt(state: ModeState, stored: ModeState) -> ModeState:
    """Take a state read from a shared store when it is newer than ours (by version)."""
    return stored if stored.version > state.version else state
