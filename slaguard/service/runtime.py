"""What one running service holds, and the two things it does per request: decide, finish.

`ServiceRuntime.decide` is the routing hot path shared by `POST /v1/route` and the
gateway: scheduler decision, the arrival for the guard's hot-spot detector (queued),
audit record (enqueued, never written here), metrics, and a pending entry so the outcome
can find its decision. `finish` is the other half: learner
feedback, audit outcome, TTFT/TPOT metrics, a guard sample. Both run on the event loop
thread and do no I/O.

The per-decision entries and the SLA rule are in `pending`; what a request may ask for is
checked in `request_checks`.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable

from sqlalchemy import Engine

from slaguard.audit.from_scheduler import decision_head
from slaguard.audit.records import OutcomeRecord, RequestStatus
from slaguard.audit.writer import AuditWriter
from slaguard.audit.writer_settings import RecordRefusedError, SpillFullError
from slaguard.failure_log import FailureLog
from slaguard.fleet import Fleet, Priority, Request
from slaguard.guard.samples import FirstToken, GuardSample
from slaguard.scheduler.core import Scheduler
from slaguard.scheduler.explain import Outcome
from slaguard.scheduler.rollout import Arm
from slaguard.service.config import ServiceConfig
from slaguard.service.ejection import Ejections
from slaguard.service.gateway_metrics import GatewayMetrics
from slaguard.service.modes import ModeSource
from slaguard.service.pending import Finished, Pending, Routed, sla_met
from slaguard.service.request_checks import RequestChecks
from slaguard.service.store import DecisionStore
from slaguard.telemetry.metrics import SlaguardMetrics

log = logging.getLogger(__name__)
ID_BATCH = 4096


class ServiceRuntime:
    """The fleet, the scheduler, the audit writer, metrics and the mode source, together."""

    def __init__(
        self,
        config: ServiceConfig,
        fleet: Fleet,
        scheduler: Scheduler,
        metrics: SlaguardMetrics,
        modes: ModeSource,
        *,
        writer: AuditWriter | None = None,
        engine: Engine | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.fleet = fleet
        self.scheduler = scheduler
        self.metrics = metrics
        self.modes = modes
        self.writer = writer
        self.engine = engine
        self.store = DecisionStore(engine) if engine is not None else None
        self.gateway_metrics = GatewayMetrics(metrics.registry, (t.id for t in fleet))
        self.ejections = Ejections(fleet, scheduler.state, self.gateway_metrics.ejections, config)
        self.clock = clock
        self.pending: OrderedDict[str, Pending] = OrderedDict()
        self.late_outcomes: OrderedDict[str, bool | None] = OrderedDict()
        """Decisions evicted from `pending` whose outcome came later and was enqueued
        (id -> SLA met): a repeat is a duplicate even before the writer stored the first."""
        self.ready_problem: str | None = "starting"
        """None when ready; otherwise why `/readyz` answers 503."""
        self.audit_refused = 0
        self._refusals = FailureLog(log, "audit record")
        self.finished_count = 0
        """Finished requests an SLA judged (`sla_met` not None): with `violated_count`,
        the global correction's violation rate."""
        self.violated_count = 0
        self.started_at_s = clock()
        self.checks = RequestChecks(fleet)
        self._id_prefix = uuid.uuid4().hex[:20]
        self._id_counter = itertools.count()
        self._random_hex = ""
        self._random_at = 0

    def request(
        self,
        *,
        model: str,
        prompt_tokens: int,
        max_new_tokens: int,
        priority: Priority,
        deadline_s: float | None,
        request_id: str | None,
        prefix_id: str | None,
    ) -> Request:
        """A scheduler `Request` (the deadline defaults to the priority's SLA; the id to
        a fresh decision id)."""
        deadline = deadline_s if deadline_s is not None else self.fleet.sla[priority].ttft_s
        return Request(
            request_id or self.new_decision_id(),
            prompt_tokens,
            max_new_tokens,
            model,
            priority,
            deadline,
            arrival_s=self.clock(),
            prefix_id=prefix_id,
        )

    def new_decision_id(self) -> str:
        """48 hex digits: 80 random bits drawn at start and a counter (unique across
        restarts and replicas), then 64 random bits of its own: an id is what a client
        needs to report its outcome, so the next one must not be guessable from the last
        (the random bits come from the OS `ID_BATCH` ids at a time, not per request)."""
        at = self._random_at
        if at >= len(self._random_hex):
            self._random_hex, at = os.urandom(8 * ID_BATCH).hex(), 0
        self._random_at = at + 16
        return f"{self._id_prefix}{next(self._id_counter):012x}{self._random_hex[at : at + 16]}"

    # -- the hot path ------------------------------------------------------------------

    def decide(self, request: Request, *, record: bool = True) -> Routed:
        """Route one request and remember it; `record=False` defers the audit record
        (the gateway records once it knows which target actually served). Raises
        `NeverFitsError`, counting and remembering nothing, for a request no target
        could ever take."""
        now = request.arrival_s
        mode = self.modes.current()
        started = time.perf_counter()
        decision = self.scheduler.decide(request, now, mode)
        latency = time.perf_counter() - started
        target = decision.target
        if target is None and (never_fits := self.checks.never_fits(decision)) is not None:
            raise never_fits
        handed = (
            None if target is None else (target.card.id, target.model.id, request.prompt_tokens)
        )
        self.modes.on_arrival(now, request.prefix_id, handed)
        learner_components = None
        if target is not None:
            self.scheduler.state.add_queue(target.index, 1)
            if decision.arm is Arm.LEARNED:
                chosen = decision.chosen_components()
                learner_components = None if chosen is None else chosen.copy()
        entry = Pending(
            request.request_id,
            mode.label,
            now,
            None if target is None else target.index,
            decision.arm,
            decision.outcome,
            decision.served_model,
            request.priority,
            request.deadline_s,
            request.prompt_tokens,
            request.prefix_id,
            decision.alternatives if target is not None else (),
            learner_components,
        )
        self.metrics.observe_decision(
            decision.arm.value, mode.kind.value, decision.outcome, latency
        )
        if decision.outcome is Outcome.SPILLED and decision.explanation.spill is not None:
            self.metrics.count_spill(str(decision.explanation.spill["from"]))
        routed = Routed(decision, entry)
        if record:
            self.record_decision(routed, latency)
        self.pending[request.request_id] = entry
        if len(self.pending) > self.config.max_pending_decisions:
            _, evicted = self.pending.popitem(last=False)
            if not evicted.done and evicted.target_index is not None:
                # its outcome may still come (from the database), but the request no longer
                # counts in its target's queue: a lost feedback must not hold it for ever
                self.scheduler.state.add_queue(evicted.target_index, -1)
        return routed

    def record_decision(self, routed: Routed, latency_s: float) -> None:
        """Enqueue the decision's audit record (its target is the one that served)."""
        if self.writer is None:
            return
        d, entry = routed.decision, routed.entry
        target = None if entry.target_index is None else self.fleet.targets[entry.target_index]
        try:
            head = decision_head(
                d,
                decided_at_s=entry.decided_at_s,
                fleet_mode=entry.mode,
                config_hash=self.scheduler.config_hash,
                latency_s=latency_s,
                served_by=target,
            )
            self.writer.enqueue_decision(head, d.explanation)
        except RecordRefusedError as exc:
            self._refused(exc)

    def _refused(self, exc: RecordRefusedError) -> None:
        """A record the spill journal refused (full, or not writable): counted (the
        SlaguardAuditRecordsRefused page), logged once and then once a minute, not once
        per request; the request itself is answered."""
        self.audit_refused += 1
        self.metrics.count_audit_refused()
        full = isinstance(exc, SpillFullError)  # its text counts bytes: one line, not many
        reason = "the audit spill journal is full" if full else str(exc)
        self._refusals.failed(f"not audited: {reason}", self.clock())

    def first_token(self, entry: Pending, ttft_s: float) -> bool:
        """The answer's first token (seen by the gateway, or reported with
        `/v1/first-token`): the TTFT detectors get it now, not when the answer ends (no
        I/O: a queue append). False when the guard already has it or the request ended."""
        if entry.done or entry.first_ttft_s is not None or entry.target_index is None:
            return False
        entry.first_ttft_s = ttft_s
        target = self.fleet.targets[entry.target_index]
        self.modes.on_first_token(
            FirstToken(
                self.clock(), target.id, target.card.id, target.model.id,
                _served(entry, ttft_s), entry.prompt_tokens,
            )
        )  # fmt: skip
        return True

    def attempt_failed(self, entry: Pending, stalled_s: float | None) -> None:
        """The gateway's attempt on `entry`'s target failed before the first byte: the
        learner takes it as that target's failure (the components it holds are the
        learned router's for the first target, so a retry's answer is not learned
        against them), and a stall of `stalled_s` reaches the TTFT detectors as a TTFT
        of at least that (a target that only stalls would otherwise never be demoted)."""
        assert entry.target_index is not None
        if entry.learner_components is not None:
            self.scheduler.observe_outcome(entry.learner_components, None, entry.deadline_s)
            entry.learner_components = None
        if stalled_s is not None:
            self._stalled(entry, stalled_s)

    def _stalled(self, entry: Pending, waited_s: float) -> None:
        """`waited_s` without a first token from `entry`'s target, to its TTFT detectors
        as a TTFT of at least that."""
        assert entry.target_index is not None
        target = self.fleet.targets[entry.target_index]
        self.modes.on_first_token(
            FirstToken(
                self.clock(), target.id, target.card.id, target.model.id,
                waited_s, entry.prompt_tokens,
            )
        )  # fmt: skip

    def finish(
        self,
        entry: Pending,
        status: RequestStatus,
        *,
        ttft_s: float | None,
        tpot_s: float | None,
        e2e_s: float | None,
        prompt_tokens: int | None = None,
        completion_tokens: int | None = None,
    ) -> Finished:
        """Record a request's outcome once; a second call is a no-op reporting duplicate.
        Without a `ttft_s` the one `first_token` got stands (the SLA is on the TTFT)."""
        if entry.done:
            return Finished(False, True, entry.sla_met)
        entry.done = True
        if ttft_s is None:
            ttft_s = entry.first_ttft_s
        now = self.clock()
        deadline = entry.deadline_s
        met = sla_met(status, ttft_s, e2e_s, deadline)
        entry.sla_met = met
        self.finished_count += met is not None
        self.violated_count += met is False
        if entry.target_index is not None:
            self.scheduler.state.add_queue(entry.target_index, -1)
        own_ttft_s = None if ttft_s is None else _served(entry, ttft_s)
        if met is not None and (status != "ok" or own_ttft_s is not None):
            # a failure (or a client giving up on a card past the deadline) teaches the
            # learner as a miss; a first token its TTFT; an unjudged request nothing
            learned_ttft_s = own_ttft_s if status in ("ok", "cancelled") else None
            self.scheduler.observe_outcome(entry.learner_components, learned_ttft_s, deadline)
        if self.writer is not None:
            try:
                self.writer.enqueue(
                    OutcomeRecord(entry.decision_id, now, ttft_s, tpot_s, e2e_s, status, met)
                )
            except RecordRefusedError as exc:
                self._refused(exc)
        if entry.target_index is None or met is None:
            return Finished(True, False, met)  # no card's doing: no SLA figure, no guard sample
        if status == "cancelled" and own_ttft_s is None and e2e_s is not None:
            self._stalled(entry, _served(entry, e2e_s))  # the client gave up waiting on it
        target = self.fleet.targets[entry.target_index]
        prompt = prompt_tokens if prompt_tokens is not None else entry.prompt_tokens
        self.metrics.observe_completion(
            target.id,
            entry.arm.value,
            entry.priority.value,
            ttft_s,
            violated=not met,
            tpot_s=tpot_s,
            prompt_tokens=prompt,
            generated_tokens=completion_tokens or 0,
        )
        self.modes.on_outcome(
            GuardSample(
                at_s=now,
                target_id=target.id,
                card_type=target.card.id,
                model_id=target.model.id,
                sla_met=met,
                deadline_s=deadline,
                ttft_s=own_ttft_s,
                arm=entry.arm,
                prefix_id=entry.prefix_id,
                prompt_tokens=prompt,
                ttft_observed=entry.first_ttft_s is not None,
            )
        )
        return Finished(True, False, met)

    def status(self) -> dict[str, object]:
        """The `/v1/status` body."""
        st = self.modes.state()
        rows = self.scheduler.state
        now = self.clock()
        scored = self.modes.scored_targets()
        targets = []
        for t in self.fleet:
            pic = rows.picture(t.index)
            targets.append(
                {
                    "target": t.id,
                    "card": t.card.id,
                    "model": t.model.id,
                    "url": t.url,
                    "queue_depth": pic.queue_depth,
                    "kv_used_ratio": round(pic.kv_used_gb / t.kv_budget_gb, 4),
                    "jitter_z": round(pic.jitter_z, 3) if t.id in scored else None,
                    "healthy": pic.healthy,
                    "demoted": pic.demoted,
                    "picture_age_s": round(now - pic.refreshed_at_s, 3),
                    "batching_factor": round(float(self.scheduler.factors[t.index]), 3),
                }
            )
        writer = self.writer.stats() if self.writer is not None else None
        return {
            "fleet": self.fleet.name,
            "mode": {
                "mode": st.mode.label,
                "version": st.version,
                "since_s": st.since_s,
                "reason": st.reason,
                "actor": st.actor,
            },
            "guard": self.modes.guard_status(),
            "weights": {
                "version": self.scheduler.weights.version,
                "values": list(self.scheduler.weights.values),
            },
            "pending_decisions": len(self.pending),
            "audit": None
            if writer is None
            else {
                "queue_depth": writer.queue_depth,
                "spill_bytes": writer.spill_bytes,
                "rows_written": writer.rows_written,
                "write_errors": writer.write_errors,
                "refused": writer.refused,
                "unreadable": writer.torn_records,
                "last_error": writer.last_error,
                "last_error_at_s": writer.last_error_at_s,
            },
            "stale_after_s": self.config.telemetry.stale_after_s,
            "targets": targets,
        }


def _served(entry: Pending, ttft_s: float) -> float:
    """The answering target's own TTFT: a gateway retry's failed attempts (a backend that
    stalled to `first_byte_timeout_s`) are not the target's doing, and were fed to the
    guard as its TTFT, demoting a healthy target for a stalled one. The SLA, the audit DB
    and the TTFT histogram keep the client's TTFT."""
    return max(0.0, ttft_s - entry.not_served_s)
