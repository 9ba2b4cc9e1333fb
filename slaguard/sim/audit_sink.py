"""`slaguard simulate --audit-db URL`: record a simulated run with the audit writer.

Simulated seconds are mapped onto wall-clock time (`base_epoch_s + now_s`, the run placed
so that it ends before now even if it drains for as long as the simulator allows: ~11
minutes after the last arrival at most), so its decisions answer `slaguard audit decisions
--since -2h` like real ones; an incident still open when the run ends is resolved at its
end. Its weight versions are not stored: each decision's explanation carries the weights it
was scored with, and a service started on this database must not continue from a
simulation's learned weights (it restores the newest stored version).
Decisions and outcomes go through the same background writer as the service; guard trips
and mode switches are written as incidents and history rows after the run (history only:
a simulation never changes the shared fleet mode).
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from slaguard.audit.from_scheduler import decision_head
from slaguard.audit.records import IncidentRecord, ModeChangeRecord, OutcomeRecord
from slaguard.audit.store import log_mode_change, open_incident
from slaguard.audit.writer import AuditWriter
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
        """Write the run's trips (the report's, as the guard controller recorded them) as
        incidents and the simulator's mode timeline as history rows. A trip's incident is
        resolved at the next switch to a mode that routes learned traffic again, else at the
        run's end; a switch within a second of a trip is linked to that trip's incident."""
        engine = self.writer.engine
        timeline = self.sim.mode_timeline
        trips: list[dict[str, Any]] = report["guard"]["trips"]
        incident_ids: list[int] = []
        for trip in trips:
            at = float(trip["at_s"])
            resolved = next(
                (t for t, mode, _ in timeline if t > at and mode.kind not in _ROUND_ROBIN),
                self.sim.results.sim_s,
            )
            incident_ids.append(
                open_incident(
                    engine,
                    IncidentRecord(
                        opened_at_s=self.base + at,
                        detector=str(trip["detector"]),
                        severity=str(trip.get("severity", "critical")),
                        subject=str(trip["subject"]),
                        evidence={
                            "summary": str(trip.get("summary", "")),
                            **trip.get("evidence", {}),
                            "simulated": True,
                        },
                        resolved_at_s=self.base + resolved,
                        notification_state="simulated",
                    ),
                )
            )
        for (_, before, _), (at, mode, reason) in pairwise(timeline):
            linked = next(
                (
                    i
                    for i, trip in zip(incident_ids, trips, strict=True)
                    if abs(float(trip["at_s"]) - at) <= 1.0
                ),
                None,
            )
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
        return incident_ids
