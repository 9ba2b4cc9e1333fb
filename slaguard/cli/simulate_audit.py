"""`slaguard simulate --audit-db`: the checks before a run is simulated (schema, empty,
writable, no journal left by another run), the writer attached to it, and the drain that
ends it."""

from __future__ import annotations

import logging
import math
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, select, text
from sqlalchemy.exc import SQLAlchemyError

from slaguard.audit.engine import (
    default_spill_dir,
    error_line,
    refused_writes,
    shown_url,
    sqlite_path,
)
from slaguard.audit.lines import FLEET_TAG
from slaguard.audit.migrate import SchemaNotCurrentError, refuse_newer_schema, upgrade
from slaguard.audit.models import Decision, Incident, ModeChange, Outcome, WeightVersion
from slaguard.audit.spill import (
    SpillDirUnsafeError,
    SpillInUseError,
    SpillJournal,
    remove_if_unused,
    segment_files,
)
from slaguard.audit.writer import open_writer
from slaguard.audit.writer_settings import WriterStats
from slaguard.cli.dbopen import connect
from slaguard.cli.errors import fail
from slaguard.cli.stops import Stopped, StopSignals
from slaguard.sim.audit_sink import AuditObserver
from slaguard.sim.engine import Simulation


def audit_sink(db: str, sim: Simulation) -> AuditObserver:
    """Check the database answers and takes the schema before anything is simulated,
    then open the audit writer and attach it to the run."""
    engine = connect(db, create=True, option="--audit-db")
    try:
        refuse_newer_schema(engine)  # Alembic cannot upgrade from a revision it lacks
        upgrade(engine)
    except SchemaNotCurrentError as exc:
        fail(f"--audit-db: {exc}")
    except SQLAlchemyError as exc:
        fail(f"--audit-db: cannot create the audit schema in {shown_url(engine.url)}: "
             f"{error_line(exc)}; fix: use a new database, or one slaguard made")  # fmt: skip
    finally:
        engine.dispose()
    held = _rows_held(engine)
    if held is not None:
        fail(
            f"--audit-db: {shown_url(engine.url)} already holds {held}; a run's request ids "
            "are its trace's, so a second run's rows would be dropped as duplicates; fix: "
            "record each run in a new database, e.g. --audit-db sqlite:///run2.db"
        )
    _check_takes_writes(engine)
    spill_dir = default_spill_dir(engine.url)
    _check_journal_empty(spill_dir, shown_url(engine.url))
    try:
        writer = open_writer(engine.url.render_as_string(hide_password=False), spill_dir=spill_dir)
    except (SchemaNotCurrentError, SpillInUseError, SpillDirUnsafeError, OSError) as exc:
        fail(f"--audit-db: {exc}")
    # ends before now even if every request drains for as long as the simulator allows
    horizon = (float(sim.arrivals[-1]) if len(sim.arrivals) else 0.0) + sim.options.drain_s
    sink = AuditObserver(writer, sim, base_epoch_s=time.time() - horizon - 60.0)
    sim.observers = [*sim.observers, sink]
    return sink


def _rows_held(engine: Engine) -> str | None:
    """What an audit database already records ("decisions", ...), or None when empty."""
    try:
        with engine.connect() as conn:
            for table in (Decision, ModeChange, Incident, WeightVersion):
                if conn.execute(select(table).limit(1)).first() is not None:
                    return f"{table.__tablename__} (another run, or a service's)"
    except SQLAlchemyError as exc:
        fail(f"--audit-db: {shown_url(engine.url)}: {error_line(exc)}")
    finally:
        engine.dispose()
    return None


def _check_takes_writes(engine: Engine) -> None:
    """Insert no rows into each table the run writes, and roll back: a database that
    refuses writes (a read-only SQLite file or mount, PostgreSQL's
    `default_transaction_read_only`, a standby, a role without INSERT) was found only after
    the whole run was simulated, then retried for 120 s."""
    try:
        with engine.connect() as conn, conn.begin() as tx:
            for table in (Decision, Outcome, ModeChange, Incident):
                name = table.__tablename__
                conn.execute(text(f"INSERT INTO {name} SELECT * FROM {name} WHERE 1 = 0"))
            tx.rollback()
    except SQLAlchemyError as exc:
        fail(f"--audit-db: {refused_writes(engine.url, exc) or _no_writes(engine, exc)}")
    finally:
        engine.dispose()


def _check_journal_empty(spill_dir: Path, url: str) -> None:
    """Refuse a journal holding records an earlier run (or a service) could not write: the
    writer replays a journal before anything else, so the earlier run's rows went in first
    and this run's, with the same request ids, were dropped as duplicates beside this run's
    history, while the counts said all of them were recorded."""
    if not any(size for _, _, size in segment_files(spill_dir)):
        return  # also when there is no such directory
    try:
        journal = SpillJournal(spill_dir, header_tag=FLEET_TAG)
    except (SpillInUseError, SpillDirUnsafeError, OSError) as exc:
        fail(f"--audit-db: {exc}")
    records, size = journal.recovered_records, journal.pending_bytes
    journal.close()  # keeps segments the database has not confirmed
    fail(
        f"--audit-db: the spill journal {spill_dir} holds {records} records ({size} bytes) "
        f"not written to {url}, left by an earlier run; a run never takes in another's rows; "
        f"fix: remove {spill_dir} to simulate again (a simulation is reproducible: rerun the "
        "one that left them, into a new database if that one holds part of it)"
    )


def _no_writes(engine: Engine, exc: SQLAlchemyError) -> str:
    path = sqlite_path(engine.url)
    if str(getattr(getattr(exc, "orig", None), "sqlite_errorname", "")).startswith("SQLITE_BUSY"):
        return (
            f"{shown_url(engine.url)} is locked: {error_line(exc)} (another connection holds "
            "a write transaction); fix: run again once it ends, or record the run in another "
            "database"
        )
    fix = (
        f"make {path} and its directory writable for this user (the file's mode, "
        "`chattr -i`, a read-only mount)"
        if path is not None
        else "use a primary that takes writes (not a standby; default_transaction_read_only off)"
    )
    return (
        f"{shown_url(engine.url)} does not take writes: {error_line(exc)}; fix: {fix}, or "
        "record the run in another database"
    )


def left_in_journal(sink: AuditObserver, rows: str) -> str:
    """Where rows the database did not take are, and what that leaves out: one wording for
    every way a run can end before its writer drained."""
    return (
        f"{rows} stay in the spill journal {sink.writer.spill_dir}, never replayed into "
        "another run: remove it to simulate into this database again; the run's mode "
        "switches and incidents were not written"
    )


_WRITER_LOG = logging.getLogger("slaguard.audit.writer")


def _not_from_close(record: logging.LogRecord) -> bool:
    """The writer's closing lines say rows left "replay on the next start": not so for a
    simulated run, whose own line says what is left where (its retries still show)."""
    return record.funcName != "close"


def drain(sink: AuditObserver, stops: StopSignals) -> WriterStats:
    """Close the audit writer, waiting up to 120 s for its rows; says so first when rows
    are waiting. Drained, its spill directory goes when nothing but the lock is left in it.
    A stop signal now ends the wait: one line says what is left where, and nothing more
    is written (exit 128 + the first stop signal's number)."""
    try:  # a signal may land anywhere from here, the print below included
        stops.raise_at_once()
        waiting = sink.writer.stats().queue_depth
        if waiting:
            print(
                f"audit: writing the last {waiting} rows (up to 120 s; Ctrl-C again leaves "
                f"them in {sink.writer.spill_dir})",
                file=sys.stderr,
            )
        _WRITER_LOG.addFilter(_not_from_close)
        try:
            stats = sink.writer.close(drain_timeout_s=120)
        finally:
            _WRITER_LOG.removeFilter(_not_from_close)
        if not stats.queue_depth:  # the run's journal, drained: nothing in it is anyone's
            remove_if_unused(sink.writer.spill_dir)
        return stats
    except Stopped as exc:
        fail(
            f"interrupted by {signal.Signals(exc.signo).name} while writing the audit rows: "
            + left_in_journal(sink, f"those not yet in {shown_url(sink.writer.engine.url)}"),
            code=128 + (stops.signo or exc.signo),
        )


def finish_audit(
    sink: AuditObserver, report: dict[str, Any], fleet_file: Path | None, stops: StopSignals
) -> None:
    """Drain the writer, then write trips and mode switches (history only beside the rows
    it is about), and say where to look (with the fleet file: `audit summary` reads
    capacity shares from it)."""
    stats = drain(sink, stops)
    url = shown_url(sink.writer.engine.url)
    fleet = "" if fleet_file is None else f" --fleet '{fleet_file}'"
    if stats.queue_depth:
        fail(
            f"--audit-db: {stats.queue_depth} of {sink.decisions + sink.outcomes} rows not "
            f"written to {url} within 120 s ({stats.rows_written} written); "
            + left_in_journal(sink, "they"),
            code=1,
        )
    incidents = sink.record_guard_history(report)
    print(
        f"audit: {sink.decisions} decisions and {sink.outcomes} outcomes recorded "
        f"({stats.rows_written} rows written) in {url}; try: slaguard audit summary "
        f"{_run_range(sink)} --db '{url}'{fleet}"
        + (f"; slaguard audit incident {incidents[0]} --db '{url}'" if incidents else ""),
        file=sys.stderr,
    )


def _run_range(sink: AuditObserver) -> str:
    """The run's own time range, whole seconds around it: a relative `--since -2h` missed
    the start of a run longer than 2 simulated hours, and all of any run read 2 h later."""
    start = math.floor(sink.base)
    end = math.floor(sink.base + sink.sim.results.sim_s) + 1
    return f"--since {_utc(start)} --until {_utc(end)}"


def _utc(epoch_s: int) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
