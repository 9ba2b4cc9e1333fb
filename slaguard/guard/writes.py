"""The replica's guard events on their way to the database, and what happens when the
database refuses them.

A refusal a retry can mend (a lock, a timeout, the database down: OperationalError) keeps
a batch that holds a switch: it is stored again at the next sync, with the next batch, or
first thing in a command, so the trip's incident opens and its switch names it.

A refusal no retry can mend (DataError, IntegrityError: a NUL in a hot prefix, which
PostgreSQL text cannot hold, or a row the database contradicts) kept the batch for ever:
the fleet never switched, and every command on that replica failed on it until a
restart. Such a batch is said once at ERROR and stored in the first form the database
takes: with each NUL written out as `\\x00` (the incident keeps its evidence, readable),
else its mode changes alone (the fleet does switch; the incident is not stored), else not
at all, and this replica takes the stored mode back so its next command starts from it.
"""

from __future__ import annotations

import dataclasses
import logging
from enum import Enum
from typing import TypeVar, cast

from sqlalchemy.exc import DataError, IntegrityError, SQLAlchemyError

from slaguard.audit.engine import error_line
from slaguard.guard.events import GuardEvent, IncidentEvent, ModeChangedEvent
from slaguard.guard.guard import Guard
from slaguard.guard.lead_gate import LeadGate
from slaguard.guard.persist import EventPersister
from slaguard.guard.replica_stats import ReplicaStats

log = logging.getLogger(__name__)

NUL = "\x00"
NO_RETRY_MENDS = (DataError, IntegrityError)
"""Refusals of the values themselves: the same batch is refused the same way every time."""

T = TypeVar("T")


def written_out(value: T) -> T:
    """`value` (an event, its verdicts, evidence, reason ..., an Alertmanager alert's
    labels) with each NUL in its texts written out as `\\x00`."""
    found: object = value
    if isinstance(value, Enum):
        return value
    if isinstance(value, str):
        found = value.replace(NUL, "\\x00")
    elif isinstance(value, dict):
        found = {written_out(k): written_out(v) for k, v in value.items()}
    elif isinstance(value, list | tuple):
        found = type(value)(written_out(v) for v in value)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        texts = {f.name: written_out(getattr(value, f.name)) for f in dataclasses.fields(value)}
        found = dataclasses.replace(value, **texts)
    return cast(T, found)


def _next_form(batch: list[GuardEvent]) -> tuple[str, list[GuardEvent]] | None:
    """The batch in the next form to offer a database that refused it for good."""
    written = written_out(batch)
    if written != batch:
        return "with each NUL written out as \\x00", written
    switches: list[GuardEvent] = [e for e in batch if isinstance(e, ModeChangedEvent)]
    if switches and switches != batch:
        return "as the mode change alone, without the incident", switches
    return None


class GuardWrites:
    """Stores a replica's guard events (blocking; the caller holds the guard's lock)."""

    def __init__(self, persister: EventPersister, gate: LeadGate, stats: ReplicaStats) -> None:
        self.persister = persister
        self.gate = gate
        self.stats = stats
        self.unsaved: list[GuardEvent] | None = None
        """A refused batch holding a switch, to store again before anything else."""

    def store(self, guard: Guard, events: list[GuardEvent], now_s: float) -> None:
        """Store `events` after any refused batch; a refusal is counted and logged."""
        batch = [*(self.unsaved or []), *events]
        if not batch:
            return
        try:
            self._write(guard, batch, now_s)
        except SQLAlchemyError as exc:
            self.stats.persist_errors += 1
            self.stats.note_error(error_line(exc, with_type=True), now_s)
            log.error("guard events not stored: %s", self.stats.last_error)

    def retry(self, guard: Guard, now_s: float) -> None:
        """Store the refused batch (raises while the database refuses it and a retry may
        mend that). Another writer that took its version meanwhile wins: its state
        replaces this guard's."""
        if self.unsaved is not None:
            self._write(guard, self.unsaved, now_s)

    def _write(self, guard: Guard, batch: list[GuardEvent], now_s: float) -> None:
        while True:
            try:
                self.persister.persist(guard, batch, now_s)
            except NO_RETRY_MENDS as exc:
                self.unsaved = None
                self.stats.persist_errors += 1
                self.stats.note_error(error_line(exc, with_type=True), now_s)
                form = _next_form(batch)
                if form is None:
                    self._drop(guard, now_s)
                    return
                how, batch = form
                log.error(
                    "guard events refused by the database as they are, which no retry"
                    " mends (%s); storing them %s",
                    self.stats.last_error, how,
                )  # fmt: skip
                if not any(isinstance(e, IncidentEvent) for e in batch):  # left out: untracked
                    guard.incidents.current = self.persister.incidents.restore()
            except SQLAlchemyError:
                self.gate.wrote(ok=False)
                if any(isinstance(e, ModeChangedEvent) for e in batch):
                    self.unsaved = batch
                raise
            else:
                self.unsaved = None
                self.gate.wrote(ok=True)
                return

    def _drop(self, guard: Guard, now_s: float) -> None:
        """No form of the batch is stored: this replica goes back to the stored mode, so
        that neither its routing nor its next command starts from a switch never made."""
        self.gate.wrote(ok=False)
        stored = self.persister.take_stored(guard, now_s)
        log.error(
            "guard events dropped: the database refuses them (%s); this replica is back on"
            " the stored mode %s",
            self.stats.last_error, stored.mode.label,
        )  # fmt: skip
