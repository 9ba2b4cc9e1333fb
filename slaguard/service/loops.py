"""The service's background loops as APScheduler 3 jobs on the event loop.

| job | period | what |
|---|---|---|
| hardware_refresh | batching tick (100 ms) | per-target gauges from the picture, audit backlog |
| global_correction | correction period (500 ms) | correction signal from recent SLA misses |
| mode_sync | correction period (500 ms) | guard leadership, a mode changed elsewhere; readiness |
| detectors | 1 s | leader: guard evaluation (trips, demotions, incidents), messages |
| weight_update | 1 h | learned weights refit, version stored |

Jobs are coroutines, so they share the event loop thread with the request handlers and
need no locks; blocking work (database, Slack) goes to worker threads inside them. Every
job has `max_instances=1` and `coalesce=True`; `misfire_grace_time=None` because it takes
whole seconds only, so each run checks itself how late it is: a run that starts more than
one period after the previous one counts the periods it missed as overruns. A run skipped
because the previous one is still going is counted when APScheduler skips it (and not
logged each time), and not again by the next run's lateness. An exception is counted and
logged; it never stops this job or the others.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from apscheduler.events import EVENT_JOB_MAX_INSTANCES, JobEvent
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from slaguard.audit.records import WeightVersionRecord
from slaguard.audit.store import record_weight_version
from slaguard.scheduler.correction import Action
from slaguard.scheduler.weights import Weights
from slaguard.service.runtime import ServiceRuntime

log = logging.getLogger(__name__)

JobBody = Callable[[float], Awaitable[None]]


@dataclass(slots=True)
class JobStats:
    """Per-job counters, also published as metrics."""

    runs: int = 0
    failures: int = 0
    overruns: int = 0
    skipped_since_start: int = 0
    """Ticks APScheduler skipped (and counted) since the last run started: that run's
    lateness covers them, and they are not counted twice."""
    last_started: float | None = None
    last_error: str | None = None


@dataclass(slots=True)
class ViolationWindow:
    """SLA misses over the last correction period, smoothed (EMA, factor 0.5)."""

    _seen: tuple[int, int] = (0, 0)
    rate: float = 0.0

    def step(self, finished: int, violated: int) -> float:
        """The smoothed rate given the running totals of finished and violated requests."""
        done = finished - self._seen[0]
        bad = violated - self._seen[1]
        self._seen = (finished, violated)
        if done > 0:
            self.rate = 0.5 * self.rate + 0.5 * bad / done
        return self.rate


@dataclass
class ServiceLoops:
    """Builds and owns the AsyncIOScheduler of one service."""

    runtime: ServiceRuntime
    stats: dict[str, JobStats] = field(default_factory=dict)
    violations: ViolationWindow = field(default_factory=ViolationWindow)
    scheduler: AsyncIOScheduler | None = None
    readiness: Callable[[], Awaitable[None]] | None = None
    unstored_weights: Weights | None = None
    """A refit the database has not taken yet: routed with once stored."""
    monotonic: Callable[[], float] = time.monotonic
    """The clock a run's lateness is measured on (a test's to set)."""

    def jobs(self) -> dict[str, tuple[float, JobBody]]:
        cfg = self.runtime.scheduler.cfg
        loops = self.runtime.config.loops
        return {
            "hardware_refresh": (cfg.batching.tick_s, self.hardware_refresh),
            "global_correction": (cfg.correction.period_s, self.global_correction),
            "mode_sync": (cfg.correction.period_s, self.mode_sync),
            "detectors": (loops.detectors_s, self.detectors),
            "weight_update": (loops.weights_s, self.weight_update),
        }

    def start(self) -> None:
        """Add every job and start (inside a running event loop)."""
        logging.getLogger("apscheduler").setLevel(logging.ERROR)
        sched = AsyncIOScheduler(
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None}
        )
        for name, (period, body) in self.jobs().items():
            self.stats[name] = JobStats()
            sched.add_job(self._wrap(name, period, body), "interval", seconds=period, id=name)
        sched.add_listener(self._skipped, EVENT_JOB_MAX_INSTANCES)
        sched.start()
        self.scheduler = sched

    def stop(self) -> None:
        if self.scheduler is not None and self.scheduler.running:
            self.scheduler.shutdown(wait=False)

    def _skipped(self, event: JobEvent) -> None:
        stats = self.stats.get(event.job_id)
        if stats is not None:
            stats.overruns += 1
            stats.skipped_since_start += 1
            self.runtime.metrics.count_job_overrun(event.job_id)

    def _wrap(self, name: str, period_s: float, body: JobBody) -> Callable[[], Awaitable[None]]:
        stats = self.stats[name]
        metrics = self.runtime.metrics

        async def run() -> None:
            started = self.monotonic()
            if stats.last_started is not None:
                missed = int((started - stats.last_started) / period_s + 1e-9) - 1
                for _ in range(max(0, missed - stats.skipped_since_start)):
                    stats.overruns += 1
                    metrics.count_job_overrun(name)
            stats.last_started = started
            stats.skipped_since_start = 0
            stats.runs += 1
            failed = False
            try:
                await body(self.runtime.clock())
            except asyncio.CancelledError:
                # the event loop is closing (a stop): APScheduler would log it as a failure
                log.debug("job %s cancelled by the shutdown", name)
                return
            except Exception as exc:
                failed = True
                stats.failures += 1
                stats.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("job %s failed", name)
            metrics.observe_job(name, self.monotonic() - started, failed=failed)

        return run

    # -- the jobs ------------------------------------------------------------------------

    async def hardware_refresh(self, now_s: float) -> None:
        rt = self.runtime
        state = rt.scheduler.state
        scored = rt.modes.scored_targets()
        for t in rt.fleet:
            pic = state.picture(t.index)
            rt.metrics.set_target_state(
                t.id,
                queue_depth=int(pic.queue_depth),
                kv_used_ratio=pic.kv_used_gb / t.kv_budget_gb,
                # the router's 0 for an unscored target read as "normal" on a slow, demoted one
                ttft_p99_zscore=pic.jitter_z if t.id in scored else math.nan,
                demoted=pic.demoted,
            )
        if rt.writer is not None:
            st = rt.writer.stats()
            rt.metrics.set_audit_backlog(queue_depth=st.queue_depth, spill_bytes=st.spill_bytes)

    async def global_correction(self, now_s: float) -> None:
        rt = self.runtime
        rate = self.violations.step(rt.finished_count, rt.violated_count)
        signal = rt.scheduler.correct(rate)
        rt.scheduler.apply_factors(now_s)
        rt.metrics.set_correction(
            signal=signal.value,
            load_imbalance_ratio=signal.imbalance,
            queued_requests=int(signal.queued),
            violation_ratio=signal.violation_rate,
        )
        for action in (Action.SPEED_UP, Action.SLOW_DOWN):
            n = sum(1 for a in signal.actions if a is action)
            if n:
                rt.metrics.count_correction_action(action.value, n)

    async def mode_sync(self, now_s: float) -> None:
        if self.readiness is not None:
            await self.readiness()
        await self.runtime.modes.sync(now_s)

    async def detectors(self, now_s: float) -> None:
        await self.runtime.modes.evaluate(now_s)

    async def weight_update(self, now_s: float) -> None:
        """Refit (the job keeps the period, `loops.weights_s`), store, then route with the
        new weights: a version the database refused was routed with but never stored, so
        decisions named weights no postmortem could find. It is stored at the next run."""
        rt = self.runtime
        new = self.unstored_weights or rt.scheduler.refit_weights(now_s)
        if new is None:
            return
        if rt.engine is not None:
            self.unstored_weights = new
            rec = WeightVersionRecord(new.version, now_s, new.as_dict())
            await asyncio.to_thread(record_weight_version, rt.engine, rec)
            self.unstored_weights = None
        rt.scheduler.adopt_weights(new)
        log.info("learned weights updated to %s", new.version)
