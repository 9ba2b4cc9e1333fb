"""Write what `Guard` decided to the audit database: incidents, then mode switches.

Shared by the replica runtime (the leader's evaluations, adopted changes) and the manual
CLI (a one-shot guard over the database), so both number, link and queue the same way:

1. an opened incident is stored first, so the trip's mode change can name it; from then
   on the tracker uses the audit id (`incidents.id`) as the incident id;
2. each mode change is a compare-and-set on the version it was made from, in the same
   transaction as the incidents it opens; when another writer won, both are rolled back
   (replicas answering one Alertmanager alert at once opened one incident each, and each
   was announced), the stored state is adopted (`Guard.adopt_state`: the local
   transition did not happen, and a changed learned share restarts the TTFT baselines)
   and the tracker is re-read from the database; the tracker takes an opened incident's
   audit id only once it is committed;
3. updates and resolutions are queued under the stored incident's next revision, unless
   the incident is already resolved (then the state change was already announced);
4. each incident state change stored is logged once (INFO), with its audit id, by the
   process that stored it: a replica's evaluation, adoption, admin command or
   Alertmanager webhook (the CLI says it on its own output line instead).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from sqlalchemy import Connection

from slaguard.audit.store import ModeConflictError
from slaguard.guard.events import (
    GuardEvent,
    IncidentEvent,
    IncidentState,
    ModeChangedEvent,
    incident_line,
)
from slaguard.guard.guard import Guard
from slaguard.guard.incident_store import IncidentStore
from slaguard.guard.modes import ModeState
from slaguard.guard.store import GuardStore

log = logging.getLogger(__name__)


@dataclass(slots=True)
class PersistResult:
    """What reached the database.

    `conflict`: the stored state that won a compare-and-set (now the guard's state).
    `queued`: incident messages stored in the outbox (audit ids, stored revisions).
    `incident_id`: the audit id the batch's mode change was linked to.
    """

    conflict: ModeState | None = None
    queued: list[IncidentEvent] = field(default_factory=list)
    incident_id: int | None = None


class EventPersister:
    """Stores a batch of guard events (blocking; the caller serialises batches)."""

    def __init__(self, modes: GuardStore, incidents: IncidentStore) -> None:
        self.modes = modes
        self.incidents = incidents

    def persist(self, guard: Guard, events: list[GuardEvent], now_s: float) -> PersistResult:
        """Store `events` (one `evaluate`, command or adoption) for `guard`."""
        result = PersistResult()
        try:
            with self.modes.engine.begin() as conn:
                self._open_and_switch(guard, events, now_s, conn, result)
        except ModeConflictError:
            # Another replica switched first: its incident stands, ours was rolled back
            # with our switch (one incident and one message per state change).
            return PersistResult(conflict=self.take_stored(guard, now_s))
        _track_opened(guard, events, result.queued)
        for event in events:
            if isinstance(event, IncidentEvent) and event.state is not IncidentState.OPENED:
                current = guard.incidents.current
                stored_event = self.incidents.append(event, now_s, current)
                if stored_event is None:
                    continue
                if current is not None and current.incident_id == event.incident_id:
                    current.revision = stored_event.revision + 1
                result.queued.append(stored_event)
        for stored_event in result.queued:
            log.info("%s", incident_line(stored_event))
        return result

    def take_stored(self, guard: Guard, now_s: float) -> ModeState:
        """The stored mode and open incident replace `guard`'s, whose own switch was not
        stored (lost to another writer, or dropped), however far ahead it was."""
        stored = self.modes.load(now_s)
        guard.adopt_state(stored, now_s, replacing_unsaved=True)
        guard.incidents.current = self.incidents.restore()
        return stored

    def _open_and_switch(
        self,
        guard: Guard,
        events: list[GuardEvent],
        now_s: float,
        conn: Connection,
        result: PersistResult,
    ) -> None:
        """Opened incidents, then the mode change naming them, in one transaction."""
        for event in events:
            if isinstance(event, IncidentEvent) and event.state is IncidentState.OPENED:
                stored = self.incidents.open(event, now_s, guard.incidents.current, conn)
                result.queued.append(stored)
                result.incident_id = int(stored.incident_id)
        if result.incident_id is None:
            result.incident_id = _linked_incident(events)
        for event in events:
            if isinstance(event, ModeChangedEvent):
                self.modes.save(event.transition, now_s, incident_id=result.incident_id, conn=conn)


def _track_opened(guard: Guard, events: list[GuardEvent], opened: list[IncidentEvent]) -> None:
    """The tracker takes the audit id of the incident it opened, once that is committed: an
    id rolled back with a refused switch linked the retried switch to no row."""
    current = guard.incidents.current
    for event, stored in zip(
        (e for e in events if isinstance(e, IncidentEvent) and e.state is IncidentState.OPENED),
        opened,
        strict=True,
    ):
        if current is not None and current.incident_id == event.incident_id:
            current.incident_id = stored.incident_id
            current.revision = stored.revision + 1


def _linked_incident(events: list[GuardEvent]) -> int | None:
    """The audit id of the incident a batch's mode change belongs to, if any."""
    for event in events:
        if isinstance(event, IncidentEvent):
            try:
                return int(event.incident_id)
            except ValueError:
                return None
    return None
