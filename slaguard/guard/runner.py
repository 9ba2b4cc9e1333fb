"""A guard replica on its own: `python -m slaguard.guard.runner --db URL`.

Runs `GuardReplica` on the same APScheduler job layout as the service (mode sync every
500 ms, detectors and notifications every 1 s; `max_instances=1`, coalescing) with the
audit feed (every replica's outcomes from the database), and prints one JSON line per
happening on stdout (`start`, `status` after every sync, `leader`, `adopted`,
`mode_changed`, `incident`, `sent`, `error`, `stop`), each with `t` (unix seconds) and
the replica id. The multi-process tests read those lines; an operator can run it to
guard a fleet whose routers do not run the guard themselves.

Notifications go where the environment says (`slaguard.notify.factory`). SIGTERM or
SIGINT stops it cleanly (leadership released at once); SIGKILL releases it too.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler
from pydantic import ValidationError
from sqlalchemy.exc import SQLAlchemyError

from slaguard.audit.engine import (
    DatabaseUrlError,
    create_audit_engine,
    error_line,
    operator_url,
    resolve_db_url,
)
from slaguard.audit.migrate import SchemaNotCurrentError, require_current_schema
from slaguard.fleet.validation import explain
from slaguard.guard.config import GuardConfig
from slaguard.guard.events import GuardEvent, IncidentEvent, ModeChangedEvent
from slaguard.guard.feed import AuditSampleFeed
from slaguard.guard.leader import default_replica_id, lease_for
from slaguard.guard.lease_pg import LEASE_S
from slaguard.guard.runtime import GuardReplica
from slaguard.notify.factory import NotifyConfigError, notifier_from_env
from slaguard.scheduler.rollout import RolloutPlan
from slaguard.userfiles import load_user_yaml

_print_lock = threading.Lock()


def emit(event: str, replica: str, t: float | None = None, **fields: Any) -> None:
    """One JSON line on stdout (whole lines even from several threads); `t` defaults to
    now."""
    stamp = time.time() if t is None else t
    line = json.dumps({"event": event, "t": stamp, "replica": replica, **fields})
    with _print_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m slaguard.guard.runner", description=__doc__)
    p.add_argument("--db", default=None, help="audit database URL (default $SLAGUARD_DB)")
    p.add_argument("--replica-id", default=default_replica_id())
    p.add_argument("--config", type=Path, default=None, help="GuardConfig YAML")
    p.add_argument("--sync-s", type=float, default=0.5)
    p.add_argument(
        "--evaluate-s",
        type=float,
        default=None,
        help="detector period (default: the config's evaluation_interval_s, 1 s)",
    )
    p.add_argument("--lease-s", type=float, default=LEASE_S)
    p.add_argument("--baseline-s", type=float, default=86_400.0)
    p.add_argument("--stage-s", type=float, default=86_400.0)
    p.add_argument("--duration-s", type=float, default=None, help="stop after this long")
    return p


class RunnerConfigError(ValueError):
    """The `--config` file cannot be read or is not a guard configuration."""


def _config(path: Path | None) -> GuardConfig:
    """The guard section read as `serve` reads its files: duplicate keys refused, only
    true/false as booleans, one line naming the file, field, value and fix."""
    if path is None:
        return GuardConfig()
    raw = load_user_yaml(path, RunnerConfigError, "guard config file") or {}
    try:
        return GuardConfig.model_validate(raw)
    except ValidationError as exc:
        field, problem, fix = explain(exc.errors(), GuardConfig)
        raise RunnerConfigError(f"{path}: {field}: {problem}; fix: {fix}") from None


def _report(replica: GuardReplica, events: list[GuardEvent]) -> None:
    rid = replica.replica_id
    for event in events:
        if isinstance(event, ModeChangedEvent):
            tr = event.transition
            emit("mode_changed", rid, kind=tr.kind.value, to_mode=tr.to_mode, version=tr.version,
                 message=event.message, from_mode=tr.from_mode)  # fmt: skip
        elif isinstance(event, IncidentEvent):
            emit("incident", rid, state=event.state.value, detector=event.detector,
                 subject=event.subject)  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Run until stopped; the exit code."""
    rid = args.replica_id
    try:
        url = resolve_db_url(args.db)
        config = _config(args.config)
        notifier = notifier_from_env(guard_db_url=operator_url(url))
        engine = create_audit_engine(url)
        require_current_schema(engine)
    except (
        DatabaseUrlError, NotifyConfigError, SchemaNotCurrentError, RunnerConfigError,
        OSError, SQLAlchemyError,
    ) as exc:  # fmt: skip
        emit("error", rid, where="start", detail=error_line(exc))
        return 2
    replica = GuardReplica(
        engine,
        lease_for(url, rid, lease_s=args.lease_s),
        notifier,
        replica_id=rid,
        config=config,
        plan=RolloutPlan(args.baseline_s, args.stage_s),
        feed=AuditSampleFeed(engine),
    )
    emit("start", rid, pid=os.getpid(), lease=replica.lease.kind)

    def sync() -> None:
        # `t`: when the poll began (a lock it reports was verified after that);
        # `done`: when the sync finished (a mode it reports was in use from then on).
        started = time.time()
        report = replica.sync(started)
        done = time.time()
        if report.gained or report.lost:
            emit("leader", rid, t=started, done=done, leader=report.leader)
        if report.adopted is not None:
            st = report.adopted
            emit("adopted", rid, t=done, mode=st.mode.label, version=st.version,
                 reason=st.reason, actor=st.actor, since=st.since_s)  # fmt: skip
        if report.error is not None:
            emit("error", rid, where="sync", detail=report.error)
        st = replica.state()
        emit("status", rid, t=started, done=done, leader=report.leader, mode=st.mode.label,
             version=st.version)  # fmt: skip

    def evaluate() -> None:
        _report(replica, replica.evaluate(time.time()))
        for msg, result in replica.deliver(time.time()):
            emit("sent", rid, incident_id=msg.incident_id, state=msg.event.state.value,
                 revision=msg.event.revision, ok=result.ok, detail=result.detail)  # fmt: skip

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    sched = BackgroundScheduler(
        job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None}
    )
    evaluate_s = args.evaluate_s if args.evaluate_s is not None else config.evaluation_interval_s
    sched.add_job(sync, "interval", seconds=args.sync_s, id="mode_sync")
    sched.add_job(evaluate, "interval", seconds=evaluate_s, id="detectors")
    sync()
    sched.start()
    stop.wait(args.duration_s)
    sched.shutdown(wait=True)
    replica.close()
    engine.dispose()
    emit("stop", rid, sent=replica.stats.sent, evaluations=replica.stats.evaluations)
    return 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    return run(_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
