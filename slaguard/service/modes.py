"""The seam between the service and the guard: where the fleet mode comes from.

The router reads `ModeSource.current()` on every decision (an attribute read, no I/O).
Everything that may change the mode (the 1 s detector evaluation, `POST /v1/mode`, an
Alertmanager webhook, a change made elsewhere and picked up by `sync`) goes through the
same object, which persists each switch to the audit database's `fleet_state` row with
compare-and-set and hands incident messages to the notify line.

`GuardedModes` runs the `Guard` facade in this process (one replica). A multi-replica
deployment (shared mode, leader election) replaces it behind the same protocol.
All methods run on the event loop thread; database and Slack calls go to worker threads.
"""

from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import dataclass, field
from typing import Any, Protocol

from slaguard.guard import rollout_compare
from slaguard.guard.events import (
    GuardEvent,
    IncidentEvent,
    IncidentState,
    ModeChangedEvent,
    VerdictEvent,
    VerdictPhase,
)
from slaguard.guard.guard import Guard
from slaguard.guard.modes import ModeState, TransitionResult
from slaguard.guard.samples import GuardSample
from slaguard.guard.verdicts import Action, JsonDict, Severity
from slaguard.notify.dispatcher import IncidentDispatcher
from slaguard.scheduler.rollout import Arm, FleetMode, ModeKind
from slaguard.scheduler.state import FleetState
from slaguard.service.store import ModeStore
from slaguard.telemetry.metrics import SlaguardMetrics

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ModeChange:
    """The answer to a mode command: whether it changed anything, and the mode now."""

    changed: bool
    mode: str
    version: int
    message: str


@dataclass(frozen=True, slots=True)
class FiringAlert:
    """An Alertmanager alert that asks for a rollback."""

    alertname: str
    summary: str
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)


class ModeSource(Protocol):
    """What the service needs from whoever owns the fleet mode."""

    def current(self) -> FleetMode:
        """The mode to route with now (called on every decision: no I/O)."""
        ...

    def state(self) -> ModeState:
        """The mode with its version, since, reason and actor (for `/v1/status`)."""
        ...

    def on_outcome(self, sample: GuardSample) -> None:
        """One finished request for the detectors (no I/O)."""
        ...

    async def evaluate(self, now_s: float) -> None:
        """The 1 s detector hook."""
        ...

    async def sync(self, now_s: float) -> None:
        """The 500 ms hook: pick up a mode changed elsewhere (CLI, another replica)."""
        ...

    async def command(
        self, action: str, now_s: float, *, actor: str, reason: str, stage_pct: int | None = None
    ) -> ModeChange:
        """A human's `rollback`, `hold` or `resume`."""
        ...

    async def alerts(self, firing: list[FiringAlert], now_s: float) -> ModeChange:
        """Alertmanager asks for a guarded rollback."""
        ...


def state_from_store(mode: str, version: int, since_s: float, reason: str, actor: str) -> ModeState:
    """A guard state for a mode read from the database (the plan advances only from the
    cold-start baseline, never switched since the migration seeded it, and from stages)."""
    fleet_mode = FleetMode.parse(mode)
    advance = fleet_mode.kind is ModeKind.ROLLOUT or (
        fleet_mode.kind is ModeKind.ROUND_ROBIN and (version == 0 or actor == "system")
    )
    return ModeState(fleet_mode, version, since_s, reason, actor, advance)


class GuardedModes:
    """The `Guard` facade in this process, its switches persisted through a `ModeStore`."""

    def __init__(
        self,
        guard: Guard,
        fleet_state: FleetState,
        metrics: SlaguardMetrics,
        *,
        store: ModeStore | None = None,
        dispatcher: IncidentDispatcher | None = None,
    ) -> None:
        self.guard = guard
        self.fleet_state = fleet_state
        self.metrics = metrics
        self.store = store
        self.dispatcher = dispatcher
        self._index = {t.id: t.index for t in fleet_state.fleet}
        self._incident_ids: dict[str, int] = {}
        self._alert_incidents = 0
        self._persist = asyncio.Lock()
        self.persist_errors = 0
        metrics.set_fleet_mode(guard.state.mode)

    def current(self) -> FleetMode:
        return self.guard.state.mode

    def state(self) -> ModeState:
        return self.guard.state

    def on_outcome(self, sample: GuardSample) -> None:
        self.guard.observe(sample)

    async def evaluate(self, now_s: float) -> None:
        events = self.guard.evaluate(now_s)
        self._publish_reports()
        self._apply_jitter()
        await self._handle(events, now_s)
        if self.dispatcher is not None:
            results = await asyncio.to_thread(self.dispatcher.deliver_pending, now_s)
            self.metrics.count_slack_results(results)

    async def sync(self, now_s: float) -> None:
        if self.store is None:
            return
        stored = await asyncio.to_thread(self.store.load)
        if stored is None or stored.version <= self.guard.state.version:
            return
        events = self.guard.adopt_state(
            state_from_store(
                stored.mode, stored.version, stored.since_s, stored.reason, stored.actor
            ),
            now_s,
        )
        log.info("fleet mode %s adopted from the database (%s)", stored.mode, stored.reason)
        self.metrics.set_fleet_mode(self.guard.state.mode)
        await self._handle(events, now_s)

    async def command(
        self, action: str, now_s: float, *, actor: str, reason: str, stage_pct: int | None = None
    ) -> ModeChange:
        if action == "resume":
            result, events = self.guard.resume(
                now_s, actor=actor, reason=reason, stage_pct=stage_pct
            )
        else:
            result, events = self.guard.rollback(
                now_s, actor=actor, reason=reason, hold=action == "hold"
            )
        if result.changed:
            self.metrics.count_trip("manual")
        await self._handle(events, now_s)
        return self._answer(result)

    async def alerts(self, firing: list[FiringAlert], now_s: float) -> ModeChange:
        names = ", ".join(sorted({a.alertname for a in firing}))
        reason = f"alertmanager: {names} firing ({firing[0].summary})"[:500]
        before = self.guard.state.mode.label
        result, events = self.guard.rollback(now_s, actor="alertmanager", reason=reason)
        self.metrics.count_trip("alertmanager")
        evidence: dict[str, Any] = {
            "alerts": [{"labels": a.labels, "annotations": a.annotations} for a in firing]
        }
        self._alert_incidents += 1
        incident = IncidentEvent(
            incident_id=f"alert-{int(now_s)}-{self._alert_incidents}",
            state=IncidentState.OPENED,
            revision=0,
            at_s=now_s,
            opened_at_s=now_s,
            detector="alertmanager",
            severity=Severity.CRITICAL,
            subject=names,
            summary=reason,
            mode_before=before,
            mode_after=result.state.mode.label,
            resume_stage_pct=self.guard.plan.first_stage().stage_pct,
            evidence=evidence,
        )
        await self._handle([incident, *events], now_s)
        return self._answer(result)

    # -- internals ----------------------------------------------------------------------

    def _answer(self, result: TransitionResult) -> ModeChange:
        st = self.guard.state
        return ModeChange(result.changed, st.mode.label, st.version, result.message)

    def _publish_reports(self) -> None:
        for report in self.guard.last_reports:
            ev = report.evidence
            if report.detector == rollout_compare.NAME:
                self._publish_arm_ratios(ev)
            score = ev.get("score", ev.get("share", math.nan))
            limit = ev.get("threshold", math.nan)
            self.metrics.record_verdict(
                report.detector,
                report.status.value,
                float(score) if isinstance(score, int | float) else math.nan,
                float(limit) if isinstance(limit, int | float) else math.nan,
            )

    def _publish_arm_ratios(self, evidence: JsonDict) -> None:
        """Each arm's SLA violation ratio over the rollout comparison's window (NaN: no
        requests in it, never a made-up 0)."""
        for arm in Arm:
            counts = evidence.get(arm.value, {})
            requests = counts.get("requests", 0)
            ratio = counts.get("violations", 0) / requests if requests else math.nan
            self.metrics.set_arm_violation_ratio(arm.value, ratio)

    def _apply_jitter(self) -> None:
        z = self.guard.jitter_zscores()
        self.fleet_state.set_jitter({self._index[t]: v for t, v in z.items() if t in self._index})
        demoted = self.guard.demoted_targets()
        for target_id, index in self._index.items():
            self.fleet_state.set_demoted(index, target_id in demoted)

    async def _handle(self, events: list[GuardEvent], now_s: float) -> None:
        """Incidents first (so a trip's mode change can name its incident), then modes."""
        for event in events:
            if isinstance(event, VerdictEvent) and event.phase is not VerdictPhase.ENDED:
                if event.verdict.action is Action.TRIP:
                    self.metrics.count_trip(event.verdict.detector)
                elif event.verdict.action is Action.DEMOTE:
                    self.metrics.count_demotion(event.verdict.subject.removeprefix("target:"))
        async with self._persist:
            opened: int | None = None
            for event in events:
                if isinstance(event, IncidentEvent):
                    opened = await self._incident(event, now_s) or opened
            for event in events:
                if isinstance(event, ModeChangedEvent):
                    await self._mode_changed(event, opened)

    async def _incident(self, event: IncidentEvent, now_s: float) -> int | None:
        """Queue the message, store the incident; the database id of a newly opened one."""
        log.warning("incident %s %s: %s", event.incident_id, event.state.value, event.summary)
        if self.dispatcher is not None:
            self.dispatcher.submit(event, now_s)
        if self.store is None:
            return None
        try:
            if event.state is IncidentState.OPENED:
                db_id = await asyncio.to_thread(self.store.open_incident, event)
                self._incident_ids[event.incident_id] = db_id
                return db_id
            if event.state is IncidentState.RESOLVED and event.incident_id in self._incident_ids:
                db_id = self._incident_ids.pop(event.incident_id)
                await asyncio.to_thread(self.store.resolve_incident, db_id, event.at_s)
        except Exception:
            self.persist_errors += 1
            log.exception("could not store incident %s", event.incident_id)
        return None

    def incident_db_id(self, incident_id: str) -> int | None:
        """The audit database id of an open incident (for `slaguard audit incident ID`)."""
        return self._incident_ids.get(incident_id)

    async def _mode_changed(self, event: ModeChangedEvent, incident: int | None) -> None:
        tr = event.transition
        log.warning("fleet mode %s -> %s: %s", tr.from_mode, tr.to_mode, event.message)
        self.metrics.set_fleet_mode(FleetMode.parse(tr.to_mode))
        if self.store is None:
            return
        try:
            stored = await asyncio.to_thread(self.store.save, tr, incident)
        except Exception:
            self.persist_errors += 1
            log.exception("could not store the mode change %s -> %s", tr.from_mode, tr.to_mode)
            return
        if stored.version != tr.version or stored.mode != tr.to_mode:
            log.warning(
                "fleet mode changed elsewhere first: now %s (version %d)",
                stored.mode,
                stored.version,
            )
            self.guard.adopt_state(
                state_from_store(
                    stored.mode, stored.version, stored.since_s, stored.reason, stored.actor
                ),
                tr.at_s,
            )
            self.metrics.set_fleet_mode(self.guard.state.mode)
