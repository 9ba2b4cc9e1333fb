"""The seam between the service and the guard: where the fleet mode comes from.

The router reads `ModeSource.current()` on every decision (an attribute read, no I/O).
Everything that may change the mode (the 1 s detector evaluation, `POST /v1/mode`, an
Alertmanager webhook, a change made elsewhere and picked up by `sync`) goes through the
same object.

`ReplicaModes` is the service's adapter over `GuardReplica`: the mode lives in the audit
database (`fleet_state`, compare-and-set), every `slaguard serve` replica on one database
routes with it, and only the leader (advisory lock / file lock) runs the detectors,
stores incidents and sends their messages; the others route with the jitter Z-scores and
demotions the leader publishes (taken at each sync). Here only metrics and the router's
jitter inputs are fed; the blocking replica calls go to worker threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from sqlalchemy.exc import SQLAlchemyError

from slaguard.audit.engine import error_line
from slaguard.guard import rollout_compare
from slaguard.guard.events import BreakerEvent, GuardEvent, IncidentState, VerdictEvent, log_line
from slaguard.guard.manual import ManualAction, ManualOutcome, ModeBusyError
from slaguard.guard.modes import ModeState
from slaguard.guard.runtime import GuardReplica
from slaguard.guard.samples import FirstToken, GuardSample, Handed
from slaguard.guard.verdicts import Action, JsonDict, Severity, Verdict
from slaguard.notify.base import SLACK_NOTIFIERS
from slaguard.plaintext import visible
from slaguard.scheduler.rollout import Arm, FleetMode
from slaguard.scheduler.state import FleetState
from slaguard.telemetry.metrics import SlaguardMetrics

log = logging.getLogger(__name__)
_T = TypeVar("_T")
GUARD_THREADS = 2
"""Sync, evaluation, delivery and commands take the replica's lock in turn: two threads
let a delivery wait on Slack while a sync runs."""

ALERT_ACTOR = "alertmanager"


class ModeUnavailableError(RuntimeError):
    """A mode command could not be stored (database down, or the mode kept changing)."""


@dataclass(frozen=True, slots=True)
class ModeChange:
    """The answer to a mode command: whether it changed anything, and the mode now."""

    changed: bool
    mode: str
    version: int
    message: str
    resolved_incident: str | None = None
    """The incident this command resolved (its `[resolved]` is queued for the leader)."""


@dataclass(frozen=True, slots=True)
class FiringAlert:
    """An Alertmanager alert that asks for a rollback."""

    alertname: str
    summary: str
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    starts_at_s: float | None = None
    """When it started firing (Alertmanager's `startsAt`); None when not given."""


class ModeSource(Protocol):
    """What the service needs from whoever owns the fleet mode."""

    def current(self) -> FleetMode:
        """The mode to route with now (called on every decision: no I/O)."""
        ...

    def state(self) -> ModeState:
        """The mode with its version, since, reason and actor (for `/v1/status`)."""
        ...

    def guard_status(self) -> dict[str, object]:
        """This replica's part in the guard (leader or not) for `/v1/status` (no I/O)."""
        ...

    def scored_targets(self) -> Collection[str]:
        """Targets the guard's TTFT Z-score covers now (no I/O); the router reads 0, no
        jitter, for the others, which the metrics must not pass off as a measured 0."""
        ...

    def on_arrival(self, at_s: float, prefix_id: str | None, handed: Handed | None = None) -> None:
        """One routed request, at its routing decision, for the hot-spot detector and, with
        `handed` (the chosen target's card type and model, the prompt tokens), the tier
        test's handed work (a queue append on the request path: no I/O, no detector work)."""
        ...

    def on_first_token(self, first: FirstToken) -> None:
        """One first token for the TTFT detectors, as it arrives (no I/O)."""
        ...

    def on_outcome(self, sample: GuardSample) -> None:
        """One finished request for the detectors (no I/O)."""
        ...

    async def evaluate(self, now_s: float) -> None:
        """The 1 s detector hook."""
        ...

    async def sync(self, now_s: float) -> None:
        """The 500 ms hook: leadership, a mode changed elsewhere (CLI, another replica)."""
        ...

    async def command(
        self, action: str, now_s: float, *, actor: str, reason: str, stage_pct: int | None = None
    ) -> ModeChange:
        """A human's `rollback`, `hold` or `resume` (raises ModeUnavailableError)."""
        ...

    async def alerts(self, firing: list[FiringAlert], now_s: float) -> ModeChange:
        """Alertmanager asks for a guarded rollback (raises ModeUnavailableError)."""
        ...

    async def alerts_resolved(self, alertnames: set[str], now_s: float) -> bool:
        """Alertmanager says these alerts resolved: one update in the thread of the
        incident they opened, if it is still open (raises ModeUnavailableError)."""
        ...

    def close(self) -> None:
        """Give up whatever this replica holds (leadership)."""
        ...


def _acted_on(alert: FiringAlert, returned_s: float | None) -> bool:
    """An alert episode that began before the last return: a re-sent notice of it (its
    long burn window stays firing long after the fault) must not roll back again."""
    return (
        returned_s is not None and alert.starts_at_s is not None and alert.starts_at_s < returned_s
    )


def _tripped_by(trip: BreakerEvent) -> str:
    """The detector of the trip's first verdict, the one its reason and incident name."""
    verdicts: list[JsonDict] = trip.evidence.get("verdicts") or [{}]
    return str(verdicts[0].get("detector", "other"))


def alert_verdict(firing: list[FiringAlert], now_s: float) -> Verdict:
    """The firing alerts as the trip verdict of the incident their rollback opens."""
    names = ", ".join(sorted({a.alertname for a in firing}))
    return Verdict(
        detector=ALERT_ACTOR,
        action=Action.TRIP,
        subject=names,
        severity=Severity.CRITICAL,
        summary=f"{names} firing ({firing[0].summary})"[:500],
        at_s=now_s,
        evidence={"alerts": [{"labels": a.labels, "annotations": a.annotations} for a in firing]},
    )


class ReplicaModes:
    """`ModeSource` over one `GuardReplica`: metrics and router inputs fed from it."""

    def __init__(
        self, replica: GuardReplica, fleet_state: FleetState, metrics: SlaguardMetrics
    ) -> None:
        self.replica = replica
        self.fleet_state = fleet_state
        self.metrics = metrics
        self._index = {t.id: t.index for t in fleet_state.fleet}
        self._delivery: asyncio.Task[None] | None = None
        self._guard_threads = ThreadPoolExecutor(GUARD_THREADS, thread_name_prefix="guard")
        """The guard's own threads: in asyncio's default pool (6 threads on 2 cores), a
        burst of feedback for unknown ids waiting on a locked table held mode sync back
        for 19-32 s."""
        metrics.set_fleet_mode(replica.current())

    def current(self) -> FleetMode:
        return self.replica.current()

    async def _in_guard_thread(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        loop = asyncio.get_running_loop()
        call = functools.partial(fn, *args, **kwargs)
        return await loop.run_in_executor(self._guard_threads, call)

    def state(self) -> ModeState:
        return self.replica.state()

    def guard_status(self) -> dict[str, object]:
        r = self.replica
        return {
            "replica_id": r.replica_id,
            "leader": r.is_leader,
            "lease": r.lease.kind,
            "evaluations": r.stats.evaluations,
            "sync_errors": r.stats.sync_errors,
            "persist_errors": r.stats.persist_errors,
            "last_error": r.stats.last_error,
            "last_error_at_s": r.stats.last_error_at_s,
            "fleet_digest": r.fleet_digest,
            "fleet_matches_leader": r.fleet_matches_leader,
        }

    def scored_targets(self) -> Collection[str]:
        return self.replica.router.jitter_z.keys()

    def on_arrival(self, at_s: float, prefix_id: str | None, handed: Handed | None = None) -> None:
        self.replica.observe_arrival(at_s, prefix_id, handed)

    def on_first_token(self, first: FirstToken) -> None:
        self.replica.observe(first)

    def on_outcome(self, sample: GuardSample) -> None:
        self.replica.observe(sample)

    async def evaluate(self, now_s: float) -> None:
        events = await self._in_guard_thread(self.replica.evaluate, now_s)
        self._count(events)
        if self.replica.is_leader:
            self._publish_reports()
            self._apply_router()
        self.metrics.set_fleet_mode(self.replica.current())
        if self._delivery is None or self._delivery.done():
            self._delivery = asyncio.get_running_loop().create_task(self._deliver(now_s))

    @property
    def delivering(self) -> bool:
        """A delivery round is still running."""
        return self._delivery is not None and not self._delivery.done()

    async def wait_for_delivery(self) -> None:
        """The current delivery round's end, if one runs."""
        if self._delivery is not None:
            await self._delivery

    async def _deliver(self, now_s: float) -> None:
        """Send due incident messages beside the detectors, not in their job: the Slack
        client sleeps out a short 429 Retry-After (up to 30 s) in the sending thread, which
        stopped the guard's evaluations for that long. One delivery round at a time. Only
        a Slack notifier's results feed the Slack metrics: a notify file that could not be
        written paged as Slack failing, and its deliveries hid a failing Slack."""
        try:
            delivered = await self._in_guard_thread(self.replica.deliver, now_s)
        except asyncio.CancelledError:
            return  # the service is stopping; the outbox keeps the message
        except Exception:  # never lost in an unawaited task: the outbox keeps the message
            log.exception("incident delivery round failed; retried at the next evaluation")
            return
        if self.replica.notifier.name in SLACK_NOTIFIERS:
            self.metrics.count_slack_results(result for _, result in delivered)

    async def sync(self, now_s: float) -> None:
        report = await self._in_guard_thread(self.replica.sync, now_s)
        self.metrics.record_mode_sync(at_s=now_s, ok=report.error is None, leader=report.leader)
        if report.gained:
            log.warning("this replica (%s) now leads the guard", self.replica.replica_id)
        if report.lost:
            log.warning("this replica (%s) no longer leads the guard", self.replica.replica_id)
        if not report.leader:
            self._apply_router()  # the leader's published jitter scores and demotions
            self.metrics.clear_leader_gauges()  # the leader's to publish, never a stale one
        if report.adopted is not None:
            log.info("fleet mode %s adopted from the database", report.adopted.mode.label)
        self.metrics.set_fleet_mode(self.replica.current())

    async def command(
        self, action: str, now_s: float, *, actor: str, reason: str, stage_pct: int | None = None
    ) -> ModeChange:
        manual = ManualAction(action)
        outcome = await self._run(manual, now_s, actor, reason, stage_pct, None)
        if outcome.result.changed and manual is not ManualAction.RESUME:
            self.metrics.count_trip("manual")
        return self._answer(outcome)

    async def alerts_resolved(self, alertnames: set[str], now_s: float) -> bool:
        try:
            return await self._in_guard_thread(
                self.replica.alerts_resolved, ALERT_ACTOR, alertnames, now_s
            )
        except SQLAlchemyError as exc:
            raise ModeUnavailableError(error_line(exc)) from exc

    async def alerts(self, firing: list[FiringAlert], now_s: float) -> ModeChange:
        returned = await self._in_guard_thread(self.replica.store.last_return_s)
        fresh = [a for a in firing if not _acted_on(a, returned)]
        if not fresh:
            st = self.replica.state()
            names = ", ".join(sorted({a.alertname for a in firing}))
            message = (
                f"{names} started before the fleet's last return to the learned policy: "
                "already acted on, not rolled back again"
            )
            log.info("alertmanager: %s", message)
            return ModeChange(False, st.mode.label, st.version, message)
        firing = fresh
        alert = alert_verdict(firing, now_s)
        reason = f"{ALERT_ACTOR}: {alert.summary}"[:500]
        outcome = await self._run(ManualAction.ROLLBACK, now_s, ALERT_ACTOR, reason, None, alert)
        if outcome.result.changed:
            self.metrics.count_trip(ALERT_ACTOR)
        return self._answer(outcome)

    def close(self) -> None:
        if self.delivering:
            assert self._delivery is not None
            with contextlib.suppress(RuntimeError):  # its event loop already closed
                self._delivery.cancel()
        self.replica.close()
        self._guard_threads.shutdown(wait=False, cancel_futures=True)

    # -- internals ----------------------------------------------------------------------

    async def _run(
        self,
        action: ManualAction,
        now_s: float,
        actor: str,
        reason: str,
        stage_pct: int | None,
        alert: Verdict | None,
    ) -> ManualOutcome:
        try:
            outcome = await self._in_guard_thread(
                self.replica.command, action, now_s,
                actor=actor, reason=reason, stage_pct=stage_pct, alert=alert,
            )  # fmt: skip
        except SQLAlchemyError as exc:
            raise ModeUnavailableError(
                f"the audit database refused the change: {error_line(exc)}"
            ) from exc
        except ModeBusyError as exc:
            raise ModeUnavailableError(str(exc)) from exc
        msg = outcome.result.message
        # WARNING only for what moves traffic: Alertmanager repeats a firing alert every
        # repeat interval, and each no-op said so at WARNING
        level = logging.WARNING if outcome.result.changed else logging.INFO
        log.log(level, "fleet mode %s by %s: %s", action.value, actor, visible(msg))
        self.metrics.set_fleet_mode(self.replica.current())
        return outcome

    def _answer(self, outcome: ManualOutcome) -> ModeChange:
        st = self.replica.state()
        resolved = [e.incident_id for e in outcome.queued if e.state is IncidentState.RESOLVED]
        return ModeChange(
            outcome.result.changed,
            st.mode.label,
            st.version,
            outcome.result.message,
            resolved[0] if resolved else None,
        )

    def _count(self, events: list[GuardEvent]) -> None:
        """A trip is the breaker's, when it acts (switches the fleet, or opens or updates
        the incident): a raised trip verdict the breaker never acts on is not one."""
        for event in events:
            said = log_line(event)
            if said is not None:
                log.log(logging.WARNING if said[0] else logging.INFO, "%s", said[1])
            if isinstance(event, BreakerEvent) and event.signal == "trip":
                self.metrics.count_trip(_tripped_by(event))
            elif isinstance(event, VerdictEvent) and event.verdict.action is Action.DEMOTE:
                self.metrics.count_demotion(event.verdict.subject.removeprefix("target:"))

    def _publish_reports(self) -> None:
        for report in self.replica.reports:
            ev = report.evidence
            if report.detector == rollout_compare.NAME:
                self._publish_arm_ratios(ev)
            self.metrics.record_verdict(
                report.detector,
                report.status.value,
                math.nan if report.score is None else report.score,
                math.nan if report.threshold is None else report.threshold,
            )

    def _publish_arm_ratios(self, evidence: JsonDict) -> None:
        """Each arm's SLA violation ratio over the rollout comparison's window (NaN: no
        requests in it, never a made-up 0)."""
        for arm in Arm:
            counts = evidence.get(arm.value, {})
            requests = counts.get("requests", 0)
            ratio = counts.get("violations", 0) / requests if requests else math.nan
            self.metrics.set_arm_violation_ratio(arm.value, ratio)

    def _apply_router(self) -> None:
        """The leader's jitter Z-scores and demotions into this router (computed here on the
        leader, published by it elsewhere); a target without a score gets 0 (all of them
        when nothing fresh was published), never a stale one. The metrics export NaN for
        those (`scored_targets`)."""
        self.replica.router.apply(self.fleet_state, self._index)
