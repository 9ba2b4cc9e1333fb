"""Incidents in the audit database, with the guard's bookkeeping and a durable outbox.

A new leader must continue the open incident (same id, next revision, which detectors
it has seen), deliver what the old leader queued but had not sent, and never resend what
was sent. The existing `incidents` row holds all of it, no schema change:

* `evidence`: the detectors' evidence at the opening (verdicts with their numbers), plus
  `updates` (every later state change as its message states it: detectors joining with
  their numbers, the clear, the resolution; kept for the postmortem), `guard` (the
  tracker's bookkeeping: revision, modes, cleared, seen subjects, messages sent) and
  `outbox` (messages not yet delivered, oldest first, with attempts and the next attempt
  time; delivered ones leave it).
* `notification_state`: `pending:rN` / `retrying:rN` (N: the revision waiting) or, with
  an empty outbox, `delivered:rN` / `dropped:rN` (the last message's fate).
* `slack_channel` + `slack_ts`: the thread root, so whoever sends a reply threads it.

The incident's audit id (`incidents.id`) is its id everywhere: messages, the resume
command, `slaguard audit incident ID`. Every change is one transaction that first writes
the row (taking its lock on both backends), then reads it, so a leader and a CLI updating
the same incident queue behind each other instead of losing an update.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Connection, Engine, insert, or_, select, update
from sqlalchemy.orm import Session

from slaguard.audit.models import Incident, utc_from_unix
from slaguard.guard.events import IncidentEvent, IncidentState
from slaguard.guard.incidents import OpenIncident
from slaguard.guard.verdicts import JsonDict, Severity

GUARD_KEY = "guard"
OUTBOX_KEY = "outbox"
UPDATES_KEY = "updates"
BASE_BACKOFF_S = 2.0
MAX_BACKOFF_S = 300.0
"""Retry schedule of an undelivered message: 2 s doubling to 5 min, never before Retry-After."""
_WAITING = ("pending", "retrying")


def event_to_json(event: IncidentEvent) -> JsonDict:
    """The message as stored in the outbox."""
    return event.to_dict()


def event_from_json(data: JsonDict) -> IncidentEvent:
    """Inverse of `event_to_json`."""
    return IncidentEvent(
        incident_id=str(data["incident_id"]),
        state=IncidentState(data["state"]),
        revision=int(data["revision"]),
        at_s=float(data["at_s"]),
        opened_at_s=float(data["opened_at_s"]),
        detector=str(data["detector"]),
        severity=Severity(data["severity"]),
        subject=str(data["subject"]),
        summary=str(data["summary"]),
        mode_before=str(data["mode_before"]),
        mode_after=str(data["mode_after"]),
        resume_stage_pct=int(data["resume_stage_pct"]),
        evidence=dict(data.get("evidence") or {}),
    )


@dataclass(frozen=True, slots=True)
class QueuedMessage:
    """The oldest undelivered message of one incident, due now."""

    incident_id: int
    event: IncidentEvent
    attempts: int
    slack_channel: str | None
    slack_ts: str | None


def _bookkeeping(tracked: OpenIncident | None, previous: JsonDict) -> JsonDict:
    book = dict(previous)
    if tracked is not None:
        book.update(
            mode_before=tracked.mode_before,
            mode_after=tracked.mode_after,
            cleared=tracked.cleared,
            seen=sorted([d, s] for d, s in tracked.seen),
        )
    return book


def _state_word(evidence: JsonDict, last: str) -> str:
    outbox = evidence.get(OUTBOX_KEY) or []
    if outbox:
        head = outbox[0]
        word = "retrying" if head.get("attempts", 0) else "pending"
        return f"{word}:r{head['event']['revision']}"
    return last


def _entry(event: IncidentEvent, now_s: float) -> JsonDict:
    return {"event": event_to_json(event), "attempts": 0, "next_attempt_s": now_s, "error": ""}


class IncidentStore:
    """Incident rows and their outbox (blocking calls; one transaction each)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def open(
        self,
        event: IncidentEvent,
        now_s: float,
        tracked: OpenIncident | None,
        conn: Connection,
    ) -> IncidentEvent:
        """Store a newly opened incident and queue its message, in the caller's
        transaction `conn`; the event under its audit id (`str(incidents.id)`), revision 0."""
        evidence: JsonDict = {"summary": event.summary, **event.evidence}
        db_id = conn.execute(
            insert(Incident)
            .values(
                opened_at=utc_from_unix(event.opened_at_s),
                resolved_at=None,
                detector=event.detector,
                severity=event.severity.value,
                subject=event.subject,
                evidence=evidence,
                notification_state="pending:r0",
            )
            .returning(Incident.id)
        ).scalar_one()
        stored = replace(event, incident_id=str(db_id), revision=0)
        book = _bookkeeping(tracked, {"tracker_id": event.incident_id, "sent": 0})
        evidence[GUARD_KEY] = {**book, "revision": 1}
        evidence[OUTBOX_KEY] = [_entry(stored, now_s)]
        conn.execute(update(Incident).where(Incident.id == db_id).values(evidence=evidence))
        return stored

    def append(
        self, event: IncidentEvent, now_s: float, tracked: OpenIncident | None
    ) -> IncidentEvent | None:
        """Queue an update or the resolution of a stored incident under its next revision.

        None when the incident is unknown or already resolved (a CLI or another leader
        resolved it first): the message would repeat a state change, so it is dropped.
        """
        try:
            db_id = int(event.incident_id)
        except ValueError:
            return None
        with self.engine.begin() as conn:
            row = _locked(conn, db_id)
            if row is None or row.resolved_at is not None:
                return None
            evidence = dict(row.evidence)
            book = _bookkeeping(tracked, dict(evidence.get(GUARD_KEY) or {}))
            revision = int(book.get("revision", 1))
            stored = replace(event, revision=revision)
            book["revision"] = revision + 1
            evidence[GUARD_KEY] = book
            evidence[OUTBOX_KEY] = [*(evidence.get(OUTBOX_KEY) or []), _entry(stored, now_s)]
            evidence[UPDATES_KEY] = [*(evidence.get(UPDATES_KEY) or []), event_to_json(stored)]
            values: dict[str, Any] = {
                "evidence": evidence,
                "notification_state": _state_word(evidence, row.notification_state),
            }
            if event.state is IncidentState.RESOLVED:
                values["resolved_at"] = utc_from_unix(event.at_s)
            conn.execute(update(Incident).where(Incident.id == db_id).values(**values))
        return stored

    def restore(self) -> OpenIncident | None:
        """The newest unresolved incident as the tracker holds it (for a new leader)."""
        with Session(self.engine) as session:
            row = session.scalars(
                select(Incident)
                .where(Incident.resolved_at.is_(None))
                .order_by(Incident.opened_at.desc(), Incident.id.desc())
                .limit(1)
            ).one_or_none()
            if row is None:
                return None
            book = dict(row.evidence.get(GUARD_KEY) or {})
            return OpenIncident(
                incident_id=str(row.id),
                opened_at_s=row.opened_at.timestamp(),
                detector=row.detector,
                subject=row.subject,
                mode_before=str(book.get("mode_before", "")),
                mode_after=str(book.get("mode_after", "")),
                revision=int(book.get("revision", 1)),
                cleared=bool(book.get("cleared", False)),
                seen={(str(d), str(s)) for d, s in book.get("seen", [])}
                or {(row.detector, row.subject)},
            )

    def due(self, now_s: float) -> list[QueuedMessage]:
        """Per incident with waiting messages, the oldest one if its time has come."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(Incident.id, Incident.evidence, Incident.slack_channel, Incident.slack_ts)
                .where(or_(*(Incident.notification_state.like(f"{w}:%") for w in _WAITING)))
                .order_by(Incident.id)
            ).all()
        due: list[QueuedMessage] = []
        for db_id, evidence, channel, ts in rows:
            outbox = evidence.get(OUTBOX_KEY) or []
            if outbox and float(outbox[0]["next_attempt_s"]) <= now_s:
                head = outbox[0]
                event = event_from_json(head["event"])
                due.append(QueuedMessage(db_id, event, int(head["attempts"]), channel, ts))
        return due

    def delivered(
        self, msg: QueuedMessage, *, slack_channel: str | None, slack_ts: str | None
    ) -> None:
        """The message went out: drop it from the outbox, remember the thread."""
        with self.engine.begin() as conn:
            row = _locked(conn, msg.incident_id)
            if row is None:
                return
            evidence = dict(row.evidence)
            outbox = list(evidence.get(OUTBOX_KEY) or [])
            if outbox and outbox[0]["event"]["revision"] == msg.event.revision:
                outbox.pop(0)
            evidence[OUTBOX_KEY] = outbox
            book = dict(evidence.get(GUARD_KEY) or {})
            book["sent"] = int(book.get("sent", 0)) + 1
            evidence[GUARD_KEY] = book
            values: dict[str, Any] = {
                "evidence": evidence,
                "notification_state": _state_word(evidence, f"delivered:r{msg.event.revision}"),
            }
            if msg.event.state is IncidentState.OPENED and slack_ts:
                values.update(slack_channel=slack_channel, slack_ts=slack_ts)
            conn.execute(update(Incident).where(Incident.id == msg.incident_id).values(**values))

    def failed(
        self,
        msg: QueuedMessage,
        now_s: float,
        detail: str,
        *,
        retry_after_s: float | None = None,
        permanent: bool = False,
    ) -> float:
        """Reschedule with exponential backoff (at least Retry-After), or drop a message
        that can never be delivered; the next attempt time (inf when dropped)."""
        next_s = float("inf")
        with self.engine.begin() as conn:
            row = _locked(conn, msg.incident_id)
            if row is None:
                return next_s
            evidence = dict(row.evidence)
            outbox = list(evidence.get(OUTBOX_KEY) or [])
            if not outbox or outbox[0]["event"]["revision"] != msg.event.revision:
                return next_s
            last = row.notification_state
            if permanent:
                outbox.pop(0)
                last = f"dropped:r{msg.event.revision}"
            else:
                head = dict(outbox[0])
                head["attempts"] = int(head["attempts"]) + 1
                backoff = min(BASE_BACKOFF_S * 2 ** (head["attempts"] - 1), MAX_BACKOFF_S)
                next_s = now_s + max(backoff, retry_after_s or 0.0)
                head["next_attempt_s"] = next_s
                head["error"] = detail[:500]
                outbox[0] = head
            evidence[OUTBOX_KEY] = outbox
            conn.execute(
                update(Incident)
                .where(Incident.id == msg.incident_id)
                .values(evidence=evidence, notification_state=_state_word(evidence, last))
            )
        return next_s


def _locked(conn: Connection, incident_id: int) -> Any:
    """The row after a no-op write: the write takes the row (PostgreSQL) or database
    (SQLite) lock first, so the read that follows is the latest and stays so."""
    touched = conn.execute(
        update(Incident)
        .where(Incident.id == incident_id)
        .values(notification_state=Incident.notification_state)
    )
    if touched.rowcount != 1:
        return None
    return conn.execute(
        select(Incident.evidence, Incident.resolved_at, Incident.notification_state).where(
            Incident.id == incident_id
        )
    ).one()
