"""The service's loops count each tick a job missed once: the overrun ratio behind
SlaguardSchedulerJobOverrunning is overruns / (runs + overruns)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from apscheduler.events import EVENT_JOB_MAX_INSTANCES, JobEvent
from service_helpers import Clock, build_test_service

from slaguard.service.loops import JobStats, ServiceLoops


def test_a_tick_skipped_while_the_previous_run_goes_on_is_one_overrun(tmp_path: Path) -> None:
    """A run of 2.5 periods covers two ticks, which APScheduler skips (counted); the next
    run, starting 3 periods after it, counted those two again as missed: 4 overruns for 2
    skipped ticks, and the alert's ratio 4/9 where 2 of 7 ticks were lost."""
    service = build_test_service(tmp_path, Clock(time.time()))
    try:
        monotonic = Clock(1000.0)
        loops = ServiceLoops(service.runtime, monotonic=monotonic)
        loops.stats["detectors"] = JobStats()

        async def body(_now_s: float) -> None:
            return None

        run = loops._wrap("detectors", 1.0, body)
        skipped = JobEvent(EVENT_JOB_MAX_INSTANCES, "detectors", None)
        asyncio.run(run())  # t=1000
        monotonic.now = 1001.0
        asyncio.run(run())  # a run that lasts until 1003.5: the ticks at 1002 and 1003 skip
        loops._skipped(skipped)
        loops._skipped(skipped)
        monotonic.now = 1004.0
        asyncio.run(run())
        assert (loops.stats["detectors"].runs, loops.stats["detectors"].overruns) == (3, 2)

        monotonic.now = 1007.0  # the event loop held up: ticks 1005 and 1006 never fired
        asyncio.run(run())
        assert (loops.stats["detectors"].runs, loops.stats["detectors"].overruns) == (4, 4)
        sample = service.runtime.metrics.registry.get_sample_value
        labels = {"scheduler_job": "detectors"}
        assert sample("slaguard_scheduler_job_overruns_total", labels) == 4
        assert sample("slaguard_scheduler_job_runs_total", labels) == 4
    finally:
        service.close()
