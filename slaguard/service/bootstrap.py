"""Build a running service from its configuration: fleet, scheduler, audit line, guard.

The guard is a `GuardReplica` over the audit database: every `slaguard serve` on the same
database shares the fleet mode and one of them (the lease holder) runs the detectors and
sends incident messages.

`build_service` does everything that can fail on a user mistake (fleet file, database
URL) before any thread starts, so `slaguard serve` can refuse with one line. A database
that is reachable but not migrated (with `migrate: false`) or not reachable at all does
not stop the start: decisions are journalled and `/readyz` says 503 with the reason until
the schema is current. That is what a rolling upgrade needs (replicas wait unready for the
migration job, then take traffic without a restart); the reason and its fix are logged
once at start, since routing goes on and nothing else says why.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from slaguard.audit.engine import (
    SqliteFileWatch,
    create_audit_engine,
    default_spill_dir,
    error_line,
    operator_url,
    refused_writes,
    resolve_db_url,
    shown_url,
)
from slaguard.audit.migrate import (
    SchemaNotCurrentError,
    refuse_newer_schema,
    require_current_schema,
    upgrade,
)
from slaguard.audit.models import utc_from_unix
from slaguard.audit.records import WeightVersionRecord
from slaguard.audit.store import record_weight_version, weights_at
from slaguard.audit.writer import AuditWriter
from slaguard.audit.writer_settings import WriterSettings
from slaguard.fleet import load_fleet
from slaguard.guard.leader import default_replica_id, lease_for
from slaguard.guard.runtime import GuardReplica
from slaguard.notify.base import Notifier
from slaguard.notify.factory import choose_notifier
from slaguard.scheduler.config import RouterConfig, SchedulerConfig
from slaguard.scheduler.core import Scheduler
from slaguard.scheduler.rollout import RolloutPlan
from slaguard.scheduler.weights import Weights, generation_of, stored_weights
from slaguard.service.config import ServiceConfig
from slaguard.service.modes import ReplicaModes
from slaguard.service.runtime import ServiceRuntime
from slaguard.telemetry.labels import fleet_target_labels
from slaguard.telemetry.metrics import SlaguardMetrics

log = logging.getLogger(__name__)
SERVICE_STATEMENT_TIMEOUT_S = 10.0
"""The service's own queries (mode sync, the guard, lookups) are small: one waiting longer
on a lock fails, is counted and logged, instead of freezing the guard without a word."""


@dataclass
class Service:
    """A built service: the runtime, its readiness probe, and what must be closed."""

    runtime: ServiceRuntime
    engine: Engine
    writer: AuditWriter
    readiness: Callable[[], Awaitable[None]]
    modes: ReplicaModes
    closed: bool = field(default=False, init=False)

    def close(self) -> None:
        """Give guard leadership up, drain the audit writer, release the database (once)."""
        if self.closed:
            return
        self.closed = True
        self.modes.close()
        self.writer.close()
        self.engine.dispose()


UNREACHABLE = "audit database unreachable"


def _schema_problem(engine: Engine) -> str | None:
    try:
        require_current_schema(engine)
    except SchemaNotCurrentError as exc:
        return str(exc)
    except SQLAlchemyError as exc:
        return (
            f"{UNREACHABLE}: {error_line(exc)}; fix: start the database, or correct the URL "
            "slaguard connects to (it turns ready by itself once the database answers with a "
            "current schema)"
        )
    return None


def _last_learned_weights(engine: Engine, now_s: float) -> Weights | None:
    """The newest stored weight set: a restart continued from the configured start and
    threw the learned weights away."""
    try:
        found = weights_at(engine, utc_from_unix(now_s))
    except SQLAlchemyError as exc:
        log.warning("learned weights not restored: %s", error_line(exc))
        return None
    weights = None if found is None else stored_weights(found.version, found.weights)
    if weights is not None and generation_of(weights.version) > 0:
        log.info("learned weights restored: version %s", weights.version)
    return weights


def build_service(
    config: ServiceConfig,
    *,
    clock: Callable[[], float] = time.time,
    registry: CollectorRegistry | None = None,
    notifier: Notifier | None = None,
    replica_id: str | None = None,
) -> Service:
    """Everything `slaguard serve` runs, not yet serving (raises FleetError,
    DatabaseUrlError, NotifyConfigError, SchemaNotCurrentError on user mistakes)."""
    fleet = load_fleet(config.fleet)
    for note in fleet.notes:
        log.warning("fleet: %s", note)
    destination = None
    url = resolve_db_url(config.db)  # parsed only: the database is not touched yet
    if notifier is None:  # a notifier mistake is refused before the database is touched
        notifier, destination = choose_notifier(
            notify_file=config.notify_file, guard_db_url=operator_url(url)
        )
    migrating = create_audit_engine(url)  # a migration may take long: no statement timeout
    migration_failed = None  # said with the readiness problem below: one line, not two
    try:
        refuse_newer_schema(migrating)  # SchemaNotCurrentError: the caller's one-line refusal
        if config.migrate:
            upgrade(migrating)
    except SQLAlchemyError as exc:
        migration_failed = error_line(exc)
    finally:
        migrating.dispose()
    engine = create_audit_engine(url, statement_timeout_s=SERVICE_STATEMENT_TIMEOUT_S)
    now = clock()
    problem = _schema_problem(engine)
    schema_current = problem is None
    metrics = SlaguardMetrics(registry or CollectorRegistry(), targets=fleet_target_labels(fleet))
    writer = AuditWriter(  # first: a spill journal in use is a one-line refusal, said alone
        engine,
        config.spill_dir or default_spill_dir(engine.url),
        WriterSettings(log_json=config.log_format == "json"),
        on_rows_written=metrics.count_audit_rows,
        on_write_error=lambda _detail: metrics.count_audit_write_error(),
        on_records_lost=metrics.count_audit_unreadable,
    )
    sched_cfg = SchedulerConfig(router=RouterConfig(stale_after_s=config.telemetry.stale_after_s))
    start = _last_learned_weights(engine, now) if schema_current else None
    scheduler = Scheduler(fleet, sched_cfg, now_s=now, weights=start)
    r = config.rollout
    name = replica_id or default_replica_id()
    replica = GuardReplica(
        engine,
        lease_for(engine.url, name),
        notifier,
        replica_id=name,
        fleet_digest=fleet.digest,
        config=config.guard,
        plan=RolloutPlan(r.baseline_s, r.stage_s, r.stages_pct),
    )
    if schema_current:
        replica.sync(now)  # route with the stored mode from the first request on
    modes = ReplicaModes(replica, scheduler.state, metrics)
    runtime = ServiceRuntime(
        config, fleet, scheduler, metrics, modes, writer=writer, engine=engine, clock=clock
    )
    replica.not_ready = lambda: runtime.ready_problem  # unready: it takes no guard lease

    # logged once nothing can refuse the start any more: a refusal stays one line
    log.info("audit database %s", shown_url(operator_url(url)))  # which of --db, env, file won
    if destination is not None:
        log.info("incident messages go to %s", destination)
    if problem is not None:
        # a database down failed the migration with the same error: said once, at ERROR
        why = (
            ""
            if migration_failed is None or problem.startswith(UNREACHABLE)
            else f" (migrating it at start failed: {migration_failed})"
        )
        log.error(
            "not ready: %s%s; serving meanwhile, with /readyz 503 and decisions in the spill "
            "journal until the schema is current",
            problem,
            why,
        )
    elif migration_failed is not None:  # the schema is current all the same
        log.warning("could not migrate the audit database: %s", migration_failed)
    file_watch = SqliteFileWatch.of(engine)

    async def readiness() -> None:
        """Called every mode sync: one `stat` of a SQLite file while ready; the schema
        query (and the weight version it records) only while not ready."""
        gone = None if file_watch is None else file_watch.problem()
        if gone is not None:
            if runtime.ready_problem != gone:
                log.error("not ready: %s (records wait in the spill journal)", gone)
            runtime.ready_problem = gone
            return
        if runtime.ready_problem is None:
            return
        problem = await asyncio.to_thread(_schema_problem, engine)
        if problem is None and runtime.ready_problem is not None:
            if generation_of(scheduler.weights.version) == 0:  # started without the DB
                found = await asyncio.to_thread(_last_learned_weights, engine, clock())
                if found is not None:
                    scheduler.restore_weights(found)
            w = scheduler.weights
            rec = WeightVersionRecord(w.version, clock(), w.as_dict())
            try:
                await asyncio.to_thread(record_weight_version, engine, rec)
            except SQLAlchemyError as exc:  # e.g. SQLite locked by another process: retried
                refused = refused_writes(engine.url, exc)
                problem = refused or f"audit database busy: {error_line(exc)}"
                if refused is not None and runtime.ready_problem != refused:
                    log.error("not ready: %s", refused)  # once: no retry mends a grant
        runtime.ready_problem = problem

    return Service(runtime, engine, writer, readiness, modes)
