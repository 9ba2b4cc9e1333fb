"""`slaguard simulate --audit-db URL`: record a simulated run with the audit writer.

Simulated seconds are mapped onto wall-clock time (`base_epoch_s + now_s`, the run placed
so that it ends before now even if it drains for as long as the simulator allows: ~11
minutes after the last arrival at most), so its decisions answer `slaguard audit decisions
--since -2h` like real ones; an incident still open when the run ends is resolved at its
end. Its weight versions are not stored: each decision's explanation carries the weights it
was scored with, and a service started on this database must not continue from a
simulation's learned weights (it restores the newest stored version).
Decisions and outcomes go through the same background writer as the service; guard trips
and mode switches are written as incidents (one per incident the guard kept, its later
trips and what joined it while open as updates) and history rows after the run (history
only: a simulation never changes the shared fleet mode).
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from slaguard.audit.from_scheduler import decision_head
from slaguard.audit.records import IncidentRecord, ModeChangeRecord, OutcomeRecord
from slaguard.audit.store import log_mode_change, open_incident
from slaguard.audit.writer import AuditWriter
from slaguard.guard.incident_store import UPDATES_KEY
from slaguard.scheduler.explain import Decision
from slaguard.scheduler.rollout import ModeKind
from slaguard.sim.engine import Simulation
from slaguard.sim.observers import SimObserver
from slaguard.sim.results import OutcomeInfo

_ROUND_ROBIN = (ModeKind.ROUND_ROBIN, ModeKind.HELD_ROUND_ROBIN)
"""Modes that route no learned traffic: a trip's incident stays open while on one."""


class AuditObserver(SimObserver):
    """Enqueues one decision row and one outcome row per simulated request."""

    def __init__(self, writer: AuditWriter, sim: Simulation, base_epoch_s: float) -> None:
        self.writer = writer
        self.sim = sim
        self.base = base_epoch_s
        self.decisions = 0
        self.outcomes = 0

    def on_decision(self, decision: Decision, now_s: float, latency_s: float) -> None:
        head = decision_head(
            decision,
            decided_at_s=self.base + now_s,
            fleet_mode=self.sim.mode.label,
            config_hash=self.sim.scheduler.config_hash,
            latency_s=latency_s,
        )
        self.writer.enqueue_decision(head, decision.explanation)
        self.decisions += 1

    def on_outcome(self, decision: Decision, now_s: float, outcome: OutcomeInfo) -> None:
        self.writer.enqueue(
            OutcomeRecord(
                request_id=decision.request_id,
                finished_at_s=self.base + now_s,
                ttft_s=outcome.ttft_s,
                tpot_s=outcome.tpot_s,
                e2e_s=outcome.e2e_s,
                status=outcome.status,  # type: ignore[arg-type]
                sla_met=outcome.sla_met,
            )
        )
        self.outcomes += 1

    def record_guard_history(self, report: dict[str, Any]) -> list[int]:
        """Write the run's incidents and the simulator's mode timeline as history rows.

        One row per incident, as the service keeps them: the trips the guard counted to one
        incident (the report's `incident_id`) open it at the first and join it as updates;
        a trip without one is an incident of its own. An incident is resolved at the next
        switch, after its last trip, to a mode that routes learned traffic again, else at
        the run's end; a switch within a second of a trip is linked to its incident."""
        engine = self.writer.engine
        episodes: dict[object, list[dict[str, Any]]] = {}
        for n, trip in enumerate(report["guard"]["trips"]):
            episodes.setdefault(trip.get("incident_id") or n, []).append(trip)
        joined: dict[object, list[dict[str, Any]]] = {}
        for update in report["guard"].get("incident_updates", []):
            joined.setdefault(update["incident_id"], []).append(update)
        incident_of: list[tuple[float, int]] = []
        for key, trips in episodes.items():
            db_id = open_incident(engine, self._incident(trips, joined.get(key, [])))
            incident_of.extend((float(trip["at_s"]), db_id) for trip in trips)
        for (_, before, _), (at, mode, reason) in pairwise(self.sim.mode_timeline):
            linked = next((i for t, i in incident_of if abs(t - at) <= 1.0), None)
            log_mode_change(
                engine,
                ModeChangeRecord(
                    at_s=self.base + at,
                    from_mode=before.label,
                    to_mode=mode.label,
                    reason=reason,
                    actor="simulator",
                    evidence={"simulated": True},
                    incident_id=linked,
                ),
            )
        return sorted({i for _, i in incident_of})

    def _incident(
        self, trips: list[dict[str, Any]], joined: list[dict[str, Any]]
    ) -> IncidentRecord:
        """`joined`: the incident's updates that were no trip (`guard.incident_updates`)."""
        first, last_at = trips[0], float(trips[-1]["at_s"])
        resolved = next(
            (t for t, mode, _ in self.sim.mode_timeline
             if t > last_at and mode.kind not in _ROUND_ROBIN),
            self.sim.results.sim_s,
        )  # fmt: skip
        updates: list[dict[str, Any]] = [
            {"state": "updated", "at_s": self.base + float(trip["at_s"]),
             "detector": str(trip["detector"]), "subject": str(trip["subject"]),
             "summary": str(trip.get("summary", ""))}
            for trip in trips[1:]
        ] + [
            {"state": str(u["state"]), "at_s": self.base + float(u["at_s"]),
             "detector": str(u["detector"]), "subject": str(u["subject"]),
             "summary": str(u["summary"])}
            for u in joined
        ]  # fmt: skip
        updates.sort(key=lambda u: float(u["at_s"]))
        evidence: dict[str, Any] = {
            "summary": str(first.get("summary", "")),
            **first.get("evidence", {}),
            "simulated": True,
        }
        if first.get("incident_id"):
            evidence["incident"] = str(first["incident_id"])
        if updates:
            evidence[UPDATES_KEY] = updates
        return IncidentRecord(
            opened_at_s=self.base + float(first["at_s"]),
            detector=str(first["detector"]),
            severity=str(first.get("severity", "critical")),
            subject=str(first["subject"]),
            evidence=evidence,
            resolved_at_s=self.base + resolved,
            notification_state="simulated",
        )
