"""One replica's guard: the shared fleet mode, leadership, and, on the leader only, the
detectors, incidents and notifications (sent by `outbox_sender.py`). The service's loops
drive it; `runner.py` runs it on its own.

| call | caller | period | what |
|---|---|---|---|
| `current()`, `state()`, `router`, `reports` | router, metrics | every decision | no I/O |
| `observe_arrival(at_s, prefix, handed)` | routing | per request | queue only (local feed) |
| `observe(sample)` | request path | per finished request | queue only (local feed) |
| `sync(now_s)` | mode sync job | 500 ms | leadership; newer mode; router inputs; samples out |
| `evaluate(now_s)` | detector job | 1 s | leader: feed (own + forwarded), evaluate, store events |
| `deliver(now_s)` | task the detector job starts | 1 s | leader: send due outbox messages |
| `command(...)` | admin endpoint | on demand | rollback (alert: + incident) / hold / resume |
| `close()` | shutdown | once | give leadership up |

The blocking calls are safe to run from worker threads at the same time
(`asyncio.to_thread`): the `Guard` is only touched under one lock. Nothing waits on
Slack while holding it. Database errors are counted and logged, never raised, except
from `command` (a human must see them).
"""

from __future__ import annotations

import logging
import math
import threading
from collections import deque
from collections.abc import Callable

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from slaguard.audit.engine import error_line
from slaguard.failure_log import FailureLog
from slaguard.guard.breaker import BreakerPhase, BreakerState
from slaguard.guard.config import GuardConfig
from slaguard.guard.events import GuardEvent
from slaguard.guard.feed import AuditSampleFeed
from slaguard.guard.forward import Arrival, decode_batch, encode_batches
from slaguard.guard.guard import Guard
from slaguard.guard.incident_store import IncidentStore, QueuedMessage
from slaguard.guard.lead_gate import LeadGate, Lease
from slaguard.guard.leader import LeaderLease
from slaguard.guard.manual import ManualAction, ManualOutcome, apply_manual, note_alerts_resolved
from slaguard.guard.modes import NOT_LOADED, ModeState, TransitionKind
from slaguard.guard.outbox_sender import OutboxSender
from slaguard.guard.persist import EventPersister
from slaguard.guard.replica_stats import ReplicaStats, SyncReport
from slaguard.guard.router_inputs import INHERIT_MAX_AGE_S, RouterInputs
from slaguard.guard.samples import FirstToken, GuardSample, Handed
from slaguard.guard.store import FleetStateMissingError, GuardStore
from slaguard.guard.verdicts import DetectorReport, Verdict
from slaguard.guard.writes import GuardWrites
from slaguard.notify.base import DeliveryResult, Notifier
from slaguard.scheduler.rollout import FleetMode, ModeKind, RolloutPlan

log = logging.getLogger(__name__)

HANDED_PARTIAL_HOLD_S = 10.0
"""How long after the last batch of a replica that sends no handed work (an earlier
version) the leader goes on ignoring handed work: such replicas forward at every sync
(500 ms) while they route."""
LOCAL_QUEUE_MAX = 100_000
"""Locally observed samples waiting for the next evaluation (oldest dropped beyond)."""


class GuardReplica:
    """The guard of one replica over a shared audit database."""

    def __init__(
        self,
        engine: Engine,
        lease: LeaderLease,
        notifier: Notifier,
        *,
        replica_id: str,
        config: GuardConfig | None = None,
        plan: RolloutPlan | None = None,
        feed: AuditSampleFeed | None = None,
        fleet_digest: str | None = None,
    ) -> None:
        self.engine = engine
        self.fleet_digest = fleet_digest
        """This replica's `Fleet.digest`, published when it leads, compared when not."""
        self.lease = lease
        self.notifier = notifier
        self.replica_id = replica_id
        self.feed = feed
        self.store = GuardStore(engine)
        self.incidents = IncidentStore(engine)
        self.persister = EventPersister(self.store, self.incidents)
        self.guard = Guard(config, plan, state=NOT_LOADED)
        self.stats = ReplicaStats()
        self.outbox = OutboxSender(self.incidents, notifier, self.stats)
        self._sync_failures = FailureLog(log, "guard mode sync")
        self._warned_fleet: str | None = None
        self._feed_failures = FailureLog(log, "guard sample feed")
        self.router = RouterInputs()
        self.reports: tuple[DetectorReport, ...] = ()
        """The leader's last evaluation, one report per detector (empty on other replicas)."""
        self._lock = threading.RLock()
        self._local: deque[GuardSample | FirstToken] = deque(maxlen=LOCAL_QUEUE_MAX)
        self._arrivals: deque[Arrival] = deque(maxlen=LOCAL_QUEUE_MAX)
        self._handed_partial_until = -math.inf
        self._leading = False
        self._reset_due = False
        """Leadership changed and `_reset_leader_state` has not run yet (it reads the
        database when gaining): it runs at each sync until it has."""
        self.not_ready: Callable[[], str | None] = lambda: None
        """Why this replica must not lead now (the service's readiness), None if it may."""
        self._gate = LeadGate()
        self.writes = GuardWrites(self.persister, self._gate, self.stats)

    # -- no I/O ---------------------------------------------------------------------------

    def current(self) -> FleetMode:
        """The mode to route with now (NOT_LOADED routes round-robin)."""
        return self.guard.state.mode

    def state(self) -> ModeState:
        return self.guard.state

    @property
    def is_leader(self) -> bool:
        """Leader as of the last sync (a lease lost since is noticed at the next)."""
        return self._leading

    def observe(self, sample: GuardSample | FirstToken) -> None:
        """Queue one finished request (or first token) of this replica for the detectors.
        Ignored with an audit feed, which already brings every replica's requests, their
        TTFTs included (no double counting)."""
        if self.feed is None:
            self._local.append(sample)

    def observe_arrival(
        self, at_s: float, prefix_id: str | None, handed: Handed | None = None
    ) -> None:
        """Queue one routed request's arrival for the hot-spot detector, which then counts
        a flood as it arrives instead of as it finishes (a latency later), and its handed
        work (`Guard.observe_arrival`) for the tier test. Ignored with an audit feed: the
        feed brings every replica's completions, and arrivals seen by this replica alone
        would replace them there."""
        if self.feed is None:
            self._arrivals.append((at_s, prefix_id, handed))

    # -- the loops ------------------------------------------------------------------------

    def sync(self, now_s: float) -> SyncReport:
        """Poll leadership, take a mode written elsewhere, retry a switch not yet stored;
        the leader publishes its router inputs, the others take the leader's."""
        self.stats.syncs += 1
        was = self._leading
        leader = self._poll_lease(now_s)
        gained, lost = leader and not was, was and not leader
        self._leading = leader
        if gained or lost:
            self.stats.leader_changes += 1
            self._reset_due = True
        try:
            with self._lock:
                try:
                    self.writes.retry(self.guard, now_s)
                    adopted = self._adopt_newer(now_s)
                finally:  # a refused retry skipped it for good, leaving a leader's state here
                    if self._reset_due:
                        self._reset_leader_state(now_s, leading=leader)
                        self._reset_due = False
                started = self.store.baseline_start(self.guard.state, now_s, stamp=leader)
                if started is not None:  # the baseline counts from the first leader's start
                    self.guard.adopt_state(started, now_s, replacing_unsaved=True)
        except (SQLAlchemyError, FleetStateMissingError) as exc:
            self.stats.sync_errors += 1
            message = self.stats.note_error(error_line(exc, with_type=True), now_s)
            self._sync_failures.failed(message, now_s)
            report = SyncReport(leader, gained, lost, error=message)
        else:
            self._sync_failures.succeeded(now_s)
            report = SyncReport(leader, gained, lost, adopted)
        # through the lease, not the audit database: works while that one is down
        if leader:
            self.lease.publish(self.router.to_text(self.replica_id, now_s))
        else:
            self.router = RouterInputs.from_text(self.lease.latest(), now_s, self.replica_id)
            self._check_fleet(self.router.fleet)
            self._forward(now_s)
        return report

    def evaluate(self, now_s: float) -> list[GuardEvent]:
        """Leader: feed the detectors (its own samples, the followers' forwarded ones, the
        audit feed's), evaluate once, store what changed. Others: nothing (their samples
        go to the leader at their sync)."""
        if self.guard.state.version < 0 or not self._leading:
            return []
        samples: list[GuardSample | FirstToken] = []
        arrivals: list[Arrival] = []
        for text in self.lease.take_forwarded():
            got = decode_batch(text, now_s, self.replica_id)
            samples += got.samples
            arrivals += got.arrivals
            if got.handed_unknown:
                self._handed_partial_until = now_s + HANDED_PARTIAL_HOLD_S
        self.stats.forwarded_in += len(samples) + len(arrivals)
        partial = now_s < self._handed_partial_until
        if self.feed is not None:
            try:
                samples += self.feed.poll(now_s)
            except SQLAlchemyError as exc:
                message = self.stats.note_error(error_line(exc, with_type=True), now_s)
                self._feed_failures.failed(message, now_s)
            else:
                self._feed_failures.succeeded(now_s)
        with self._lock:
            if self.stats.handed_work_partial != partial:  # unknown now, or comparable again
                self.guard.restart_handed_work()
            self.stats.handed_work_partial = partial
            while self._arrivals:  # appended to meanwhile by the routing thread
                arrivals.append(self._arrivals.popleft())
            for at_s, prefix_id, handed in arrivals:
                self.guard.observe_arrival(at_s, prefix_id, None if partial else handed)
            while self._local:
                self.guard.observe(self._local.popleft())
            for sample in samples:
                self.guard.observe(sample)
            self.stats.evaluations += 1
            events = self.guard.evaluate(now_s)
            self.router = RouterInputs(
                self.guard.jitter_zscores(),
                frozenset(self.guard.demoted_targets()),
                self.fleet_digest,
            )
            self.reports = self.guard.last_reports
            self.writes.store(self.guard, events, now_s)
        return events

    def deliver(self, now_s: float) -> list[tuple[QueuedMessage, DeliveryResult]]:
        """Leader: send the outbox's due messages (`OutboxSender.deliver`)."""
        if not self._leading:
            return []
        return self.outbox.deliver(now_s)

    def command(
        self,
        action: ManualAction,
        now_s: float,
        *,
        actor: str,
        reason: str,
        stage_pct: int | None = None,
        alert: Verdict | None = None,
    ) -> ManualOutcome:
        """A human's rollback / hold / resume, stored at once (raises on database errors).
        `alert`: the alert that asked for a rollback, stored as the incident it opens."""
        with self._lock:
            self.writes.retry(self.guard, now_s)  # the command starts from this guard's state
            try:
                return apply_manual(
                    self.guard, self.persister, action, now_s,
                    actor=actor, reason=reason, stage_pct=stage_pct, alert=alert,
                )  # fmt: skip
            finally:
                if not self._leading:
                    self.guard.incidents.current = None

    def alerts_resolved(self, detector: str, alertnames: set[str], now_s: float) -> bool:
        """See `note_alerts_resolved` (raises on database errors)."""
        with self._lock:
            self.writes.retry(self.guard, now_s)
            try:
                return note_alerts_resolved(self.guard, self.persister, detector, alertnames, now_s)
            finally:
                if not self._leading:
                    self.guard.incidents.current = None

    @property
    def fleet_matches_leader(self) -> bool | None:
        """Whether the leader routes with the same fleet file (None: not known)."""
        leader = self.router.fleet
        if self._leading or leader is None or self.fleet_digest is None:
            return None
        return leader == self.fleet_digest

    def _check_fleet(self, leader_digest: str | None) -> None:
        """Warn once per leader fleet that differs: the shared guard then judges targets
        only some replicas route to, and a target's card is whatever was reported first."""
        if self.fleet_matches_leader is False and leader_digest != self._warned_fleet:
            self._warned_fleet = leader_digest
            log.warning(
                "the guard leader routes with another fleet file (digest %s, this replica %s):"
                " replicas sharing a database must share one fleet file; finish the change"
                " on every replica",
                leader_digest, self.fleet_digest,
            )  # fmt: skip

    def close(self) -> None:
        """Give leadership up (the next replica's poll takes it)."""
        self.lease.close()

    # -- internals --------------------------------------------------------------------------

    def _forward(self, now_s: float) -> None:
        """Follower: this replica's queued samples and arrivals go to the leader (at most
        once: what the leader misses while leadership changes hands is lost), and into
        these detectors too, so that a replica taking over starts with its own share."""
        with self._lock:
            samples = [self._local.popleft() for _ in range(len(self._local))]
            arrivals = [self._arrivals.popleft() for _ in range(len(self._arrivals))]
            for arrival in arrivals:
                self.guard.observe_arrival(*arrival)
            for sample in samples:
                self.guard.observe(sample)
        if samples or arrivals:
            batches = list(encode_batches(self.replica_id, now_s, samples, arrivals))
            self.lease.forward(batches)
            self.stats.forwarded_out += len(samples) + len(arrivals)

    def _poll_lease(self, now_s: float) -> bool:
        """Poll the lease unless this replica must not lead (`LeadGate`: not ready, or
        its writes keep failing). Gaining it, check first that this replica can write,
        else give it up at once; after giving it up, take it again only when it is free
        and the check passes (a lone replica leads again as soon as it can write)."""
        problem = None if self.lease.held else self.not_ready()  # a leader's writes tell
        why_not = self._gate.why_not(problem, self.stats.last_error)
        if why_not is not None:
            if self.lease.held:
                self._give_up(why_not, now_s)
            return self.lease.poll(take=False)
        if self.lease.held or not self._gate.holding_off(now_s):
            if self.lease.poll() and not self._leading:
                self._can_write(now_s)
            return self.lease.held
        self.lease.poll(take=False)  # another replica's lease is left alone
        if self.lease.vacant and self._can_write(now_s):
            self.lease.poll()
        return self.lease.held

    def _can_write(self, now_s: float) -> bool:
        """The write check (`GuardStore.check_writable`), told to the gate; a lease held
        meanwhile is given up if it fails."""
        try:
            self.store.check_writable()
        except SQLAlchemyError as exc:
            self._give_up(f"it cannot write: {error_line(exc, with_type=True)}", now_s)
            return False
        self._gate.can_write()
        return True

    def _give_up(self, why: str, now_s: float) -> None:
        """Release the lease if held, and say which of that happened (`LeadGate.gave_up`)."""
        held = self.lease.held
        self.lease.release()
        lease: Lease = "kept" if self.lease.held else "released" if held else "not taken"
        self._gate.gave_up(why, now_s, lease=lease)

    def _reset_leader_state(self, now_s: float, *, leading: bool) -> None:
        """A new leader continues from the database: open incident, breaker, history."""
        g = self.guard
        if leading and self.feed is not None:
            self.guard = Guard(g.config, g.plan, state=g.state)
            self.feed.restart(now_s)
        self.guard.breaker = BreakerState()
        self.guard.incidents.current = None
        if not leading:
            self.router = RouterInputs()  # the leader's, from the next sync on
            self.reports = ()
            return
        self.guard.incidents.current = self.incidents.restore()
        self.guard.restart_handed_work()  # it counted this replica's share, now everyone's
        last = RouterInputs.from_text(self.lease.latest(), now_s, None, INHERIT_MAX_AGE_S)
        self.guard.inherit_demotions(last.inheritable(self.fleet_digest))
        # routed with and published from this sync on, not only after the first evaluation
        demoted = frozenset(self.guard.demoted_targets())
        self.router = RouterInputs(self.router.jitter_z, demoted, self.fleet_digest)
        st, tripped = self.guard.state, self.guard.incidents.current
        opened_s = st.since_s if st.entered_by is TransitionKind.TRIP else None
        if tripped is not None and not tripped.cleared and st.auto_advance:
            # A trip in the baseline switched nothing: only the open breaker holds the plan
            # back (an empty new leader advanced it under the fault).
            opened_s = tripped.opened_at_s
        if st.mode.kind is ModeKind.ROUND_ROBIN and opened_s is not None:
            self.guard.breaker = BreakerState(BreakerPhase.OPEN, opened_at_s=opened_s)

    def _adopt_newer(self, now_s: float) -> ModeState | None:
        if self.store.version() <= self.guard.state.version:
            return None
        stored = self.store.load(now_s)
        if stored.version <= self.guard.state.version:
            return None
        events = self.guard.adopt_state(stored, now_s)
        if self._leading and events:
            self.writes.store(self.guard, events, now_s)
        return stored
