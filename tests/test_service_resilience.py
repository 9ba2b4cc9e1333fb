"""The service when its audit journal or database misbehaves: refused, unreadable or
unwritable records, a locked or deleted SQLite file; and what its ids give away."""

from __future__ import annotations

import asyncio
import itertools
import logging
import sqlite3
import statistics
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import wait_for
from service_helpers import Clock, build_test_service, route_request
from sqlalchemy import text

from slaguard.audit.engine import create_audit_engine
from slaguard.audit.migrate import upgrade
from slaguard.audit.spill import SEGMENT_SUFFIX
from slaguard.fleet import Priority
from slaguard.scheduler.state import QUEUE
from slaguard.service.app import create_app
from slaguard.service.local import ServerThread
from slaguard.service.loops import JobStats, ServiceLoops
from slaguard.service.runtime import ID_BATCH


def test_decisions_a_full_journal_refuses_are_counted_and_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The refusals only reached `/v1/status`: the counter behind the critical
    SlaguardAuditRecordsRefused alert stayed 0, and each one wrote an ERROR line."""
    service = build_test_service(tmp_path, Clock(time.time()))
    try:
        rt = service.runtime
        assert rt.writer is not None
        rt.writer.settings = replace(rt.writer.settings, max_spill_bytes=1)
        for i in range(5):
            rt.decide(
                rt.request(
                    model="llama3.1-8b", prompt_tokens=10, max_new_tokens=5,
                    priority=Priority.NORMAL, deadline_s=None, request_id=f"full-{i}",
                    prefix_id=None,
                )
            )  # fmt: skip
        refused = rt.metrics.registry.get_sample_value("slaguard_audit_records_refused_total")
        assert refused == 5 and rt.audit_refused == 5
        lines = [r for r in caplog.records if "not audited" in r.getMessage()]
        assert len(lines) == 1
    finally:
        service.close()


def test_a_locked_sqlite_file_delays_readiness_instead_of_failing_the_start(
    tmp_path: Path,
) -> None:
    """The start stored the weight version and died with a traceback when another process
    held the file's write lock; now it is not ready yet, and ready once the lock goes."""
    service = build_test_service(tmp_path, Clock(time.time()))
    holder = sqlite3.connect(tmp_path / "audit.db", isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        asyncio.run(service.readiness())
        problem = service.runtime.ready_problem
        assert problem is not None and problem.startswith("audit database busy:"), problem
        holder.execute("COMMIT")
        asyncio.run(service.readiness())
        assert service.runtime.ready_problem is None
    finally:
        holder.close()
        service.close()


def test_journal_records_the_writer_cannot_read_reach_the_metrics_and_status(
    tmp_path: Path,
) -> None:
    """Only the log said so: no series, nothing in `/v1/status`, so no alert could fire."""
    spill = tmp_path / "spill"  # build_test_service's
    spill.mkdir()
    (spill / f"{0:020d}{SEGMENT_SUFFIX}").write_bytes(b"Q{'a future format'}\n")
    service = build_test_service(tmp_path, Clock(time.time()))
    try:
        rt = service.runtime
        assert rt.writer is not None and rt.writer.wait_flushed(30)
        value = rt.metrics.registry.get_sample_value("slaguard_audit_records_unreadable_total")
        assert value == 1
        audit = rt.status()["audit"]
        assert isinstance(audit, dict) and audit["unreadable"] == 1
    finally:
        service.close()


def test_a_journal_that_cannot_be_written_refuses_records_and_routing_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every route and feedback was a 500 with a traceback (80,000 log lines in 20 s), the
    refusals reached no counter, and feedback that failed was then called a duplicate."""
    service = build_test_service(tmp_path, Clock(time.time()))
    try:
        rt = service.runtime
        assert rt.writer is not None
        journal = rt.writer._journal  # block its next segment, as a read-only directory does
        journal.segment_bytes = 1
        first = rt.decide(route_request(rt, "before"))
        blocker = journal.directory / f"{journal.end_lsn:020d}{SEGMENT_SUFFIX}"
        blocker.mkdir()
        routed = [rt.decide(route_request(rt, f"blocked-{i}")) for i in range(5)]
        assert all(r.entry.target_index is not None for r in routed)  # routing goes on
        done = rt.finish(routed[0].entry, "ok", ttft_s=0.1, tpot_s=0.01, e2e_s=0.5)
        assert done.recorded and not done.duplicate
        refused = rt.metrics.registry.get_sample_value("slaguard_audit_records_refused_total")
        assert refused == 6 and rt.writer.stats().refused == 6
        assert str(journal.directory) in (rt.writer.stats().last_error or "")
        failed_at = rt.writer.stats().last_error_at_s
        assert failed_at is not None and abs(failed_at - time.time()) < 60
        assert rt.status()["audit"]["last_error_at_s"] == failed_at
        assert len([r for r in caplog.records if "not audited" in r.getMessage()]) == 1
        blocker.rmdir()
        after = rt.decide(route_request(rt, "after"))
        assert rt.writer.wait_flushed(30)
        with rt.engine.connect() as conn:
            ids = set(conn.execute(text("SELECT request_id FROM decisions")).scalars())
        assert ids == {first.entry.decision_id, after.entry.decision_id}
    finally:
        service.close()


def test_a_decision_evicted_without_feedback_leaves_its_targets_queue(tmp_path: Path) -> None:
    """Its +1 stayed in the queue depth for the life of the process: 300 routes without
    feedback held 300 requests queued with only 100 remembered (scraping off)."""
    service = build_test_service(tmp_path, Clock(time.time()), max_pending_decisions=100)
    try:
        rt = service.runtime
        for i in range(300):
            rt.decide(route_request(rt, f"lost-{i}"))
        assert len(rt.pending) == 100
        queued = float(rt.scheduler.state.rows[:, QUEUE].sum())
        assert queued == 100.0
    finally:
        service.close()


def test_an_audit_file_deleted_while_serving_is_noticed_and_nothing_goes_into_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Both processes went on committing into the deleted file (gone at exit, with every
    record since), ready, silent, deleting their journal as 'committed'."""
    service = build_test_service(tmp_path, Clock(time.time()))
    try:
        rt = service.runtime
        assert rt.writer is not None
        asyncio.run(service.readiness())
        assert rt.ready_problem is None
        (tmp_path / "audit.db").unlink()
        asyncio.run(service.readiness())
        assert rt.ready_problem is not None and "was deleted" in rt.ready_problem
        assert len([r for r in caplog.records if "was deleted" in r.getMessage()]) == 1
        kept = [
            rt.decide(route_request(rt, f"while-gone-{i}")).entry.decision_id for i in range(20)
        ]
        wait_for(
            "a write error naming the deleted file",
            lambda: "was deleted" in (rt.writer.stats().last_error or "") or None,
        )  # type: ignore[union-attr]
        assert rt.writer.stats().queue_depth == 20  # held in the journal, not committed
        upgrade(create_audit_engine(f"sqlite:///{tmp_path / 'audit.db'}"))  # put back
        asyncio.run(service.readiness())
        assert rt.ready_problem is None
        assert rt.writer.wait_flushed(30), rt.writer.stats()
        with rt.engine.connect() as conn:
            ids = set(conn.execute(text("SELECT request_id FROM decisions")).scalars())
        assert ids == set(kept)
    finally:
        service.close()


def test_a_decision_id_does_not_give_away_the_next_one(tmp_path: Path) -> None:
    """Ids were a per-process prefix and a counter: a gateway client read its own id in
    `x-slaguard-decision-id`, forged the next client's outcome with `/v1/feedback` and
    pre-claimed the next ids with `request_id` (their real decisions were then dropped)."""
    service = build_test_service(tmp_path, Clock(time.time()))
    try:
        rt = service.runtime
        ids = [rt.new_decision_id() for _ in range(3 * ID_BATCH)]  # across refills
        assert len(set(ids)) == len(ids) and all(len(i) == 48 for i in ids)
        assert all(int(i, 16) >= 0 for i in ids)
        tails = [int(i[32:], 16) for i in ids]
        assert len(set(tails)) == len(tails)
        # the tail is not a function of the head: consecutive tails share ~half their bits
        same = [64 - bin(a ^ b).count("1") for a, b in itertools.pairwise(tails)]
        assert 30 < statistics.mean(same) < 34
    finally:
        service.close()


def test_a_job_cancelled_by_the_stop_is_neither_a_failure_nor_an_error_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """mode_sync's thread hand-off, cancelled as the event loop closed, reached
    APScheduler as an exception: an ERROR traceback on 1 stop in 17."""
    service = build_test_service(tmp_path, Clock(time.time()))
    try:
        loops = ServiceLoops(service.runtime)
        loops.stats["mode_sync"] = JobStats()

        async def cut(_now_s: float) -> None:
            raise asyncio.CancelledError

        asyncio.run(loops._wrap("mode_sync", 0.5, cut)())
        assert loops.stats["mode_sync"].failures == 0
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    finally:
        service.close()


def test_each_detector_publishes_the_number_it_compares_with_its_threshold(
    tmp_path: Path,
) -> None:
    """`slaguard_detector_score` and `_threshold` were NaN for every detector, even while
    hot_spot was anomalous: the runbooks' queries for them always answered NaN."""
    clock = Clock(time.time())
    service = build_test_service(tmp_path, clock)
    try:
        rt = service.runtime
        for i in range(60):  # one prefix in 60 of 60 arrivals
            rt.decide(route_request(rt, f"hot-{i}", prefix_id="the-hot-prompt"))
        asyncio.run(_evaluated(service, clock.now))
        score = rt.metrics.registry.get_sample_value
        assert score("slaguard_detector_score", {"detector": "hot_spot"}) == pytest.approx(1.0)
        assert score("slaguard_detector_threshold", {"detector": "hot_spot"}) == 0.2
        assert score("slaguard_detector_threshold", {"detector": "ttft_zscore"}) == 3.5
        assert score("slaguard_detector_threshold", {"detector": "rollout_compare"}) == 1.05
        assert score("slaguard_detector_threshold", {"detector": "cold_start"}) == 1.0
    finally:
        service.close()


async def _evaluated(service: Any, now_s: float) -> None:
    await service.runtime.modes.sync(now_s)
    await service.runtime.modes.evaluate(now_s)


def test_mode_sync_runs_while_every_default_thread_waits_on_the_database(
    tmp_path: Path,
) -> None:
    """Feedback for unknown ids waiting on a locked table filled asyncio's default pool
    (6 threads on 2 cores), and a rollback reached the replica 19-32 s late."""
    service = build_test_service(tmp_path, Clock(time.time()))
    release = threading.Event()

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        blocked = [loop.run_in_executor(None, release.wait) for _ in range(64)]
        try:
            await asyncio.wait_for(service.runtime.modes.sync(time.time()), 10)
        finally:
            release.set()
            await asyncio.gather(*blocked)

    try:
        asyncio.run(scenario())
    finally:
        release.set()
        service.close()


def test_lookups_while_the_database_is_unreachable_are_503_or_no_explanation(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`GET /v1/decisions/{id}` and a repeated `?explain=1` answered 500 with a traceback
    in the log: a lookup the database cannot answer now is a 503 to retry, and a repeat
    is the same decision with `explanation` null (as docs/service.md promises)."""
    nowhere = "postgresql+psycopg://postgres@127.0.0.1:1/nowhere"  # nothing listens there
    service = build_test_service(tmp_path, Clock(time.time()), db=nowhere)
    app = create_app(service.runtime, admin_token=None, readiness=service.readiness)
    body = {"model": "llama3.1-8b", "prompt_tokens": 10, "max_new_tokens": 5}
    try:
        with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=10) as c:
            first = c.post("/v1/route", json={**body, "request_id": "ev-2"})
            assert first.status_code == 200, first.text
            again = c.post("/v1/route?explain=1", json={**body, "request_id": "ev-2"})
            assert again.status_code == 200, again.text
            assert again.json() == {**first.json(), "explanation": None}
            stored = c.get("/v1/decisions/ev-2")
            assert stored.status_code == 503 and stored.headers["retry-after"] == "5"
            assert stored.json()["error"].startswith(
                "decision_id: cannot look 'ev-2' up in the audit database (connection failed"
            ), stored.text
            assert stored.json()["error"].endswith("; retry")
    finally:
        # its record stays in the journal: no need to wait the default 10 s for the drain
        service.writer.settings = replace(service.writer.settings, drain_timeout_s=0.1)
        service.close()
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []
