"""The fleet's `ModeState` in the audit database, shared by every replica and the CLI.

Stored: the one-row `fleet_state` table (mode, since, reason, actor, version) is the truth
every replica routes with. Each switch goes through `audit.store.record_mode_change`, a
compare-and-set on `version` that also writes the `mode_changes` row; that row's evidence
carries, besides the detector's numbers, `transition: {kind, version}`.

Derived when loading, so no extra columns are needed and rows written by any writer
(this store, an older slaguard's single-replica service, any other writer) read back:
* `entered_by`: the newest mode change's kind (its evidence, else the `kind: reason`
  prefix the service's store writes), if that row produced the current version;
* `auto_advance`: from that kind, exactly as `modes.py` sets it (tested against it);
* `switch_times_s`: policy switches among the mode changes of the last hour.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, false, insert, literal, select, update

from slaguard.audit.models import (
    FLEET_STATE_ROW_ID,
    FleetState,
    Incident,
    ModeChange,
    select_fleet_state,
    utc_from_unix,
)
from slaguard.audit.records import ModeChangeRecord
from slaguard.audit.store import ModeConflictError, record_mode_change, switch_mode
from slaguard.guard.modes import HOUR_S, ModeState, ModeTransition, TransitionKind, start_baseline
from slaguard.scheduler.rollout import FleetMode, ModeKind

TRANSITION_KEY = "transition"
"""Key of the mode change evidence that names the transition kind and version."""
ACTOR_MAX = 128
_RR_FAMILY = (ModeKind.ROUND_ROBIN, ModeKind.HELD_ROUND_ROBIN)
SEED_ACTOR = "migration 0002_guard_state"
"""Who the migration's seed row names: a `fleet_state` at version 0 still saying so has
never been touched (no switch, no baseline start)."""
_KINDS = {k.value: k for k in TransitionKind}
_LOAD_ATTEMPTS = 3
_RECENT_CHANGES = 200
_RETURNS = (TransitionKind.MANUAL_RESUME, TransitionKind.AUTO_RETURN)
_PLANNED = (TransitionKind.STAGE_ADVANCE, TransitionKind.AUTO_RETURN)


class FleetStateMissingError(LookupError):
    """The database has no `fleet_state` row (not migrated)."""


def auto_advance_after(kind: TransitionKind | None, mode: FleetMode, version: int) -> bool:
    """Whether the rollout plan may move the fleet on from a state entered by `kind`.

    Mirrors `modes.py`: trips and human rollbacks stop the plan, returns and resumes
    restart it, a plan advance keeps it going until `learned`. Without a known kind (the
    migration's seed, foreign rows) only the untouched cold-start baseline and rollout
    stages advance.
    """
    if kind is None:
        return mode.kind is ModeKind.ROLLOUT or (mode.kind is ModeKind.ROUND_ROBIN and version == 0)
    if kind in (TransitionKind.AUTO_RETURN, TransitionKind.MANUAL_RESUME):
        return True
    if kind is TransitionKind.STAGE_ADVANCE:
        return mode.kind is ModeKind.ROLLOUT
    return False


def is_policy_switch(from_label: str, to_label: str) -> bool:
    """A change between the round-robin family and the learned family (unknown: no)."""
    try:
        before, after = FleetMode.parse(from_label), FleetMode.parse(to_label)
    except ValueError:
        return False
    return (before.kind in _RR_FAMILY) != (after.kind in _RR_FAMILY)


def transition_kind(evidence: Any, reason: str) -> TransitionKind | None:
    """A mode change row's kind: its evidence marker, else a `kind: ...` reason prefix."""
    marker = evidence.get(TRANSITION_KEY) if isinstance(evidence, dict) else None
    if isinstance(marker, dict):
        return _KINDS.get(str(marker.get("kind")))
    prefix, sep, _ = reason.partition(": ")
    return _KINDS.get(prefix) if sep else None


def is_simulated(evidence: Any) -> bool:
    """A row `simulate --audit-db` wrote: history only, never a switch of this fleet (a
    simulated run's switches counted against the guard's switches-per-hour cap)."""
    return isinstance(evidence, dict) and bool(evidence.get("simulated"))


def _claims_other_version(evidence: Any, version: int) -> bool:
    marker = evidence.get(TRANSITION_KEY) if isinstance(evidence, dict) else None
    return isinstance(marker, dict) and marker.get("version") != version


@dataclass(frozen=True, slots=True)
class SaveResult:
    """`saved`: the switch is now the shared mode. Otherwise `stored` is what won."""

    saved: bool
    stored: ModeState | None = None


class GuardStore:
    """Load and compare-and-set the shared fleet mode (one engine, blocking calls)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def version(self) -> int:
        """The stored version alone (the 500 ms sync's cheap first read)."""
        with self.engine.connect() as conn:
            value = conn.execute(
                select(FleetState.version).where(FleetState.id == FLEET_STATE_ROW_ID)
            ).scalar_one_or_none()
        if value is None:
            raise FleetStateMissingError("fleet_state has no row; run `slaguard db upgrade`")
        return int(value)

    def load(self, now_s: float) -> ModeState:
        """The shared mode with everything the state machine needs to decide the next one."""
        with self.engine.connect() as conn:
            for _ in range(_LOAD_ATTEMPTS):
                state = self._read(conn, now_s)
                if state is not None:
                    return state
                conn.rollback()
        # A switch landed between the two reads every time: the row alone is still right.
        with self.engine.connect() as conn:
            return self._read(conn, now_s, trust_row=True) or ModeState()

    def _read(self, conn: Connection, now_s: float, trust_row: bool = False) -> ModeState | None:
        row = conn.execute(select_fleet_state()).one_or_none()
        if row is None:
            raise FleetStateMissingError("fleet_state has no row; run `slaguard db upgrade`")
        mode_label, since, reason, actor, version = row
        mode = FleetMode.parse(mode_label)
        last = conn.execute(
            select(ModeChange.at, ModeChange.to_mode, ModeChange.reason, ModeChange.evidence)
            .order_by(ModeChange.id.desc())
            .limit(1)
        ).one_or_none()
        kind: TransitionKind | None = None
        if last is not None and version > 0:
            if _claims_other_version(last.evidence, version) or last.to_mode != mode_label:
                if not trust_row:
                    return None  # a switch landed between the two reads: read again
            elif abs(_seconds(last.at) - _seconds(since)) < 1e-3:
                kind = transition_kind(last.evidence, last.reason)
        return ModeState(
            mode=mode,
            version=version,
            since_s=_seconds(since),
            reason=reason,
            actor=actor,
            auto_advance=auto_advance_after(kind, mode, version),
            entered_by=kind,
            switch_times_s=self._switch_times(conn, now_s),
        )

    def baseline_start(self, state: ModeState, now_s: float, *, stamp: bool) -> ModeState | None:
        """For a replica still on the untouched seed: the stored state to take, after
        (`stamp`: the leader) restamping the seed's `since` to `now_s` with a
        compare-and-set on the untouched seed, so only the first leader's start counts and
        a switch in between wins. None (no I/O) for any other state."""
        started = start_baseline(state, now_s, seed_actor=SEED_ACTOR)
        if started is None:
            return None
        if stamp:
            with self.engine.begin() as conn:
                conn.execute(
                    update(FleetState)
                    .where(
                        FleetState.id == FLEET_STATE_ROW_ID,
                        FleetState.version == 0,
                        FleetState.actor == SEED_ACTOR,
                    )
                    .values(
                        since=utc_from_unix(started.since_s),
                        reason=started.reason,
                        actor=started.actor,
                    )
                )
        stored = self.load(now_s)
        return None if stored.actor == SEED_ACTOR else stored

    def confirm_version(self, version: int) -> bool:
        """Whether the stored mode is still at `version`, after any switch being written
        has committed (PostgreSQL: the row lock; SQLite has one writer at a time). A
        command that changes nothing must not answer from a state another replica is
        replacing: a rollback said "already on round-robin" while a resume was landing."""
        with self.engine.begin() as conn:
            stored = conn.execute(
                select(FleetState.version)
                .where(FleetState.id == FLEET_STATE_ROW_ID)
                .with_for_update()
            ).scalar_one_or_none()
        return stored == version

    def check_writable(self) -> None:
        """Raise (SQLAlchemyError) unless this replica may write what a guard leader
        writes: the mode row, mode changes, incidents. Rolled back, nothing changed. A
        replica with a read-only role took the lead and turned the guard off for all."""
        nothing = select(literal(0)).where(false())
        with self.engine.connect() as conn:
            conn.execute(
                update(FleetState)
                .where(FleetState.id == FLEET_STATE_ROW_ID)
                .values(version=FleetState.version)
            )
            conn.execute(insert(ModeChange).from_select([ModeChange.id], nothing))
            conn.execute(insert(Incident).from_select([Incident.id], nothing))
            conn.execute(update(Incident).where(false()).values(evidence=Incident.evidence))
            conn.rollback()

    def last_return_s(self) -> float | None:
        """When the fleet last went back towards the learned policy (a resume or an
        automatic return), from the newest mode changes: an alert that started before it
        was already acted on, and Alertmanager re-sends firing alerts every repeat interval."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(ModeChange.at, ModeChange.reason, ModeChange.evidence)
                .order_by(ModeChange.id.desc())
                .limit(_RECENT_CHANGES)
            ).all()
        for at, reason, evidence in rows:
            if transition_kind(evidence, reason) in _RETURNS:
                return _seconds(at)
        return None

    def planned_first_stage(self) -> int | None:
        """The rollout plan's first stage as the guard last entered it from round-robin
        (a plan advance or an automatic return), from the newest mode changes: the CLI
        has no service config, and its default stage was not the plan's."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(ModeChange.to_mode, ModeChange.reason, ModeChange.evidence)
                .where(ModeChange.from_mode == ModeKind.ROUND_ROBIN.value)
                .order_by(ModeChange.id.desc())
                .limit(_RECENT_CHANGES)
            ).all()
        for to_mode, reason, evidence in rows:
            planned = transition_kind(evidence, reason) in _PLANNED and not is_simulated(evidence)
            if planned and to_mode.startswith("rollout("):
                return FleetMode.parse(to_mode).stage_pct
        return None

    def simulated_switches_within_hour(self, now_s: float) -> int:
        """Policy switches a simulated run wrote in (now - 1 h, now]: not counted in the
        state's, so `status` can say why its count misses what `history` lists."""
        with self.engine.connect() as conn:
            return sum(simulated and at <= now_s for at, simulated in _policy_switches(conn, now_s))

    def _switch_times(self, conn: Connection, now_s: float) -> tuple[float, ...]:
        return tuple(at for at, simulated in _policy_switches(conn, now_s) if not simulated)

    def save(
        self,
        transition: ModeTransition,
        now_s: float,
        *,
        incident_id: int | None = None,
        conn: Connection | None = None,
    ) -> SaveResult:
        """Make `transition` the shared mode if nobody switched since its version - 1. In
        the caller's transaction `conn`, a lost race raises ModeConflictError instead, so
        the caller's transaction (and what it wrote before) is rolled back."""
        evidence = dict(transition.evidence)
        evidence[TRANSITION_KEY] = {"kind": transition.kind.value, "version": transition.version}
        rec = ModeChangeRecord(
            at_s=transition.at_s,
            from_mode=transition.from_mode,
            to_mode=transition.to_mode,
            reason=transition.reason,
            actor=transition.actor[:ACTOR_MAX],
            evidence=evidence,
            incident_id=incident_id,
        )
        if conn is not None:
            switch_mode(conn, rec, expected_version=transition.version - 1)
            return SaveResult(True)
        try:
            record_mode_change(self.engine, rec, expected_version=transition.version - 1)
        except ModeConflictError:
            return SaveResult(False, self.load(now_s))
        return SaveResult(True)


def _seconds(moment: datetime) -> float:
    return moment.timestamp()


def _policy_switches(conn: Connection, now_s: float) -> list[tuple[float, bool]]:
    """(when, written by a simulated run) of each policy switch after now - 1 h."""
    rows = conn.execute(
        select(ModeChange.at, ModeChange.from_mode, ModeChange.to_mode, ModeChange.evidence)
        .where(ModeChange.at > utc_from_unix(now_s - HOUR_S))
        .order_by(ModeChange.at)
    ).all()
    return [
        (_seconds(at), is_simulated(evidence))
        for at, a, b, evidence in rows
        if is_policy_switch(a, b)
    ]
