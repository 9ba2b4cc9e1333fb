"""Every replica's finished requests, read back from the audit database for the leader.

With several replicas each one routes (and observes) only its share of the traffic, but
only the leader evaluates. Every replica already writes its decisions and outcomes to the
audit database, so the leader reads them back once per evaluation: the detectors see the
whole fleet's traffic, whoever routed it, and a new leader starts with the last window of
it instead of an empty one.

Rows land out of order (each replica's writer flushes on its own, a replica back from an
outage replays its journal), so each poll re-reads a `lag_s` overlap behind the newest
outcome seen and skips request ids it already fed; an outcome stored more than `lag_s`
behind that watermark by the time it lands is not fed.

What the audit rows carry: target, card type, model, deadline, arm, TTFT, SLA outcome.
An outcome no SLA judges (a `client_error`, `sla_met` NULL) is not fed: it was the
client's mistake, and the replica that routed it keeps it from its own guard too.
They do not carry the prompt's prefix identity or the model version's rollout time, so
through this feed `hot_spot` and `cold_start` see nothing; a replica that also wants
them feeds its own samples with `GuardReplica.observe` (see docs/guard-replicas.md).
"""

from __future__ import annotations

from sqlalchemy import Engine, select

from slaguard.audit.models import Decision, Outcome, utc_from_unix
from slaguard.guard.samples import GuardSample
from slaguard.scheduler.rollout import Arm

DEFAULT_LAG_S = 5.0
DEFAULT_WARMUP_S = 300.0
"""A new leader reads this much history: the TTFT detector's window."""
MAX_ROWS_PER_POLL = 50_000


class AuditSampleFeed:
    """Turns new judged `outcomes` rows (joined to their decisions) into `GuardSample`s."""

    def __init__(
        self,
        engine: Engine,
        *,
        lag_s: float = DEFAULT_LAG_S,
        warmup_s: float = DEFAULT_WARMUP_S,
        max_rows: int = MAX_ROWS_PER_POLL,
    ) -> None:
        self.engine = engine
        self.lag_s = lag_s
        self.warmup_s = warmup_s
        self.max_rows = max_rows
        self._watermark_s: float | None = None
        self._seen: dict[str, float] = {}
        self.fed = 0

    def restart(self, now_s: float) -> None:
        """Start over `warmup_s` back (a replica that just became the leader)."""
        self._watermark_s = now_s - self.warmup_s
        self._seen.clear()

    def poll(self, now_s: float) -> list[GuardSample]:
        """Samples finished since the last poll, oldest first."""
        if self._watermark_s is None:
            self.restart(now_s)
        assert self._watermark_s is not None
        start = self._watermark_s - self.lag_s
        stmt = (
            select(
                Outcome.request_id,
                Outcome.finished_at,
                Outcome.ttft_s,
                Outcome.sla_met,
                Decision.target_id,
                Decision.card_type,
                Decision.model_id,
                Decision.deadline_s,
                Decision.policy_arm,
            )
            .join(Decision, Decision.request_id == Outcome.request_id)
            .where(
                Outcome.finished_at > utc_from_unix(start),
                Outcome.sla_met.is_not(None),
                Decision.target_id.is_not(None),
            )
            .order_by(Outcome.finished_at)
            .limit(self.max_rows)
        )
        with self.engine.connect() as conn:
            rows = conn.execute(stmt).all()
        samples: list[GuardSample] = []
        for rid, finished, ttft, sla_met, target, card, model, deadline, arm in rows:
            if rid in self._seen:
                continue
            at_s = finished.timestamp()
            self._seen[rid] = at_s
            samples.append(
                GuardSample(
                    at_s=at_s,
                    target_id=str(target),
                    card_type=str(card),
                    model_id=model,
                    sla_met=bool(sla_met),
                    deadline_s=float(deadline),
                    ttft_s=ttft,
                    arm=Arm(arm),
                )
            )
        if samples:
            self._watermark_s = max(self._watermark_s, samples[-1].at_s)
        cutoff = self._watermark_s - self.lag_s
        self._seen = {rid: t for rid, t in self._seen.items() if t > cutoff}
        self.fed += len(samples)
        return samples
