"""The background writer on both backends: exactly-once rows, counters, bounded drain."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select, text

from slaguard.audit.engine import create_audit_engine
from slaguard.audit.lines import encode_record
from slaguard.audit.migrate import SchemaNotCurrentError, upgrade
from slaguard.audit.models import Decision, Outcome
from slaguard.audit.records import DecisionRecord, OutcomeRecord
from slaguard.audit.sample import synthetic_run
from slaguard.audit.spill import SEGMENT_SUFFIX
from slaguard.audit.writer import STOP_GRACE_S, AuditWriter, open_writer
from slaguard.audit.writer_settings import SpillFullError, WriterSettings

RUN = synthetic_run(600, seed=11)
UNREACHABLE_PG = "postgresql+psycopg://postgres@127.0.0.1:1/nowhere"


def count(engine: Engine, table: type[Decision] | type[Outcome]) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


def enqueue_all(writer: AuditWriter, records: list[DecisionRecord] | list[OutcomeRecord]) -> None:
    for record in records:
        writer.enqueue(record)


def test_every_record_lands_once_and_the_counters_say_so(
    audit_engine: Engine, tmp_path: Path
) -> None:
    written: list[int] = []
    with AuditWriter(audit_engine, tmp_path / "spill", on_rows_written=written.append) as w:
        enqueue_all(w, RUN.decisions)
        enqueue_all(w, RUN.outcomes)
        assert w.wait_flushed(30)
        stats = w.stats()
    assert count(audit_engine, Decision) == len(RUN.decisions) == 600
    assert count(audit_engine, Outcome) == len(RUN.outcomes) == 600
    assert stats.rows_written == stats.records_flushed == sum(written) == 1200
    assert (stats.queue_depth, stats.spill_bytes, stats.write_errors) == (0, 0, 0)
    assert list((tmp_path / "spill").glob(f"*{SEGMENT_SUFFIX}")) == []


def test_replayed_records_never_duplicate(audit_engine: Engine, tmp_path: Path) -> None:
    with AuditWriter(audit_engine, tmp_path / "a") as first:
        enqueue_all(first, RUN.decisions[:400])
    with AuditWriter(audit_engine, tmp_path / "b") as again:
        enqueue_all(again, RUN.decisions)  # 400 already stored, 200 new
        enqueue_all(again, RUN.decisions[:50])  # duplicates inside one run
        assert again.wait_flushed(30)
        stats = again.stats()
    assert count(audit_engine, Decision) == 600
    assert stats.rows_written == 200
    assert stats.records_flushed == 650


@pytest.mark.postgres
def test_copy_and_multi_row_inserts_store_identical_rows(
    pg_audit_engine: Engine, tmp_path: Path
) -> None:
    stored = {}
    for label, copy_min_rows in (("copy", 1), ("insert", 10**9)):
        with pg_audit_engine.begin() as conn:
            conn.execute(text("TRUNCATE decisions, outcomes"))
        settings = WriterSettings(copy_min_rows=copy_min_rows)
        with AuditWriter(pg_audit_engine, tmp_path / label, settings) as writer:
            enqueue_all(writer, RUN.decisions[:200])
            enqueue_all(writer, RUN.outcomes[:200])
            enqueue_all(writer, RUN.decisions[:10])  # duplicates are not counted
            assert writer.wait_flushed(30)
            assert writer.stats().rows_written == 400
        with pg_audit_engine.connect() as conn:
            stored[label] = conn.execute(
                text(
                    "SELECT d.*, d.explanation::text AS explanation_text, o.* FROM decisions d "
                    "JOIN outcomes o ON o.request_id = d.request_id ORDER BY d.request_id"
                )
            ).all()
    assert len(stored["copy"]) == 200
    assert stored["copy"] == stored["insert"]


def test_stored_rows_match_the_records(audit_engine: Engine, tmp_path: Path) -> None:
    record = RUN.decisions[3]
    outcome = RUN.outcomes[3]
    with AuditWriter(audit_engine, tmp_path / "s") as writer:
        writer.enqueue(record)
        writer.enqueue(outcome)
    with audit_engine.connect() as conn:
        row = conn.execute(select(Decision.__table__)).one()._mapping
        out = conn.execute(select(Outcome.__table__)).one()._mapping
    assert row["decided_at"].timestamp() == pytest.approx(record.decided_at_s, abs=1e-6)
    assert row["explanation"] == record.explanation
    assert (row["target_id"], row["policy_arm"], row["fleet_mode"]) == (
        record.target_id, record.policy_arm, record.fleet_mode,
    )  # fmt: skip
    assert out["ttft_s"] == outcome.ttft_s
    assert out["sla_met"] is outcome.sla_met


def test_unreachable_database_spills_within_the_limit_and_refuses_beyond(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    errors: list[str] = []
    settings = WriterSettings(max_spill_bytes=200_000)
    with AuditWriter(
        create_audit_engine(UNREACHABLE_PG), tmp_path / "s", settings, on_write_error=errors.append
    ) as writer:
        accepted = 0
        with pytest.raises(SpillFullError, match="limit 200000"):
            for record in RUN.decisions:
                writer.enqueue(record)
                accepted += 1
        assert 100 < accepted < len(RUN.decisions)
        deadline = time.monotonic() + 10
        while not errors and time.monotonic() < deadline:
            time.sleep(0.01)
        stats = writer.stats()
        assert stats.queue_depth == accepted
        assert 190_000 < stats.spill_bytes <= 200_000
        assert stats.refused == 1
        assert errors and "OperationalError" in errors[0]
        caplog.set_level(logging.INFO, logger="slaguard.audit.writer")
        started = time.monotonic()
        final = writer.close(drain_timeout_s=0.3)
    assert time.monotonic() - started < 3.0
    assert final.queue_depth == accepted
    assert f"with {accepted} records" in caplog.text
    assert "replay on the next start" in caplog.text
    assert list((tmp_path / "s").glob(f"*{SEGMENT_SUFFIX}"))
    with pytest.raises(RuntimeError, match="closed"):
        writer.enqueue(RUN.decisions[0])


def test_a_corrupt_journal_line_is_skipped_not_retried_forever(
    audit_engine: Engine, tmp_path: Path
) -> None:
    spill = tmp_path / "spill"
    spill.mkdir()
    good = [encode_record(d) for d in RUN.decisions[:300]]
    poison = [b"D{not json at all\x02{}\n", b'D{"request_id":"only-an-id"}\x02{}\n']
    (spill / f"{0:020d}{SEGMENT_SUFFIX}").write_bytes(b"".join(good[:150] + poison + good[150:]))
    with AuditWriter(audit_engine, spill, WriterSettings(copy_min_rows=1)) as writer:
        assert writer.stats().queue_depth == 302
        assert writer.wait_flushed(30), writer.stats()
        stats = writer.stats()
    assert count(audit_engine, Decision) == 300
    assert (stats.rows_written, stats.torn_records) == (300, 2)


def test_open_writer_migrates_and_spills_beside_the_sqlite_file(tmp_path: Path) -> None:
    db = tmp_path / "sim.db"
    with open_writer(f"sqlite:///{db}", migrate=True) as writer:
        enqueue_all(writer, RUN.decisions[:20])
        assert writer.wait_flushed(10)
    assert (tmp_path / "sim.db.spill").is_dir()
    assert count(create_audit_engine(f"sqlite:///{db}"), Decision) == 20
    fresh = tmp_path / "fresh.db"
    with pytest.raises(SchemaNotCurrentError, match="slaguard db upgrade"):
        open_writer(f"sqlite:///{fresh}")


def test_drain_time_is_bounded_and_what_is_left_replays(tmp_path: Path) -> None:
    engine = create_audit_engine(f"sqlite:///{tmp_path / 'a.db'}")
    upgrade(engine)
    with AuditWriter(engine, tmp_path / "spill") as writer:
        enqueue_all(writer, RUN.decisions)
        enqueue_all(writer, RUN.outcomes)
        started = time.monotonic()
        left = writer.close(drain_timeout_s=0.0)
    # No drain time: the child gets STOP_GRACE_S to finish its batch, then is killed.
    assert time.monotonic() - started < STOP_GRACE_S + 1.0
    assert left.queue_depth + left.records_flushed == 1200
    with AuditWriter(engine, tmp_path / "spill") as again:
        assert again.stats().queue_depth >= left.queue_depth
        assert again.wait_flushed(30)
    assert (count(engine, Decision), count(engine, Outcome)) == (600, 600)


def test_concurrent_producers_each_record_once(tmp_path: Path) -> None:
    engine = create_audit_engine(f"sqlite:///{tmp_path / 'c.db'}")
    upgrade(engine)
    run = synthetic_run(2000, seed=13)
    with AuditWriter(engine, tmp_path / "spill") as w:
        producers = [
            threading.Thread(target=enqueue_all, args=(w, run.decisions[k::4])) for k in range(4)
        ]
        for thread in producers:
            thread.start()
        for thread in producers:
            thread.join()
        assert w.wait_flushed(30)
        assert w.stats().rows_written == 2000
    assert count(engine, Decision) == 2000
