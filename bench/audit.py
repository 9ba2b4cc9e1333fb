"""Audit writer and postmortem query benchmark (figures for docs/benchmarks.md).

Measures, in one run:
  1. enqueue() cost per record (p50/p99/max), paced like a router and in a burst;
  2. sustained decisions/s through the AuditWriter (its writer process) into SQLite and
     into PostgreSQL, with mapping explanations (JSON passed through) and with the
     scheduler's Explanation objects (journalled raw, rendered in the writer process);
  3. the raw PostgreSQL COPY rate of the same rows (records -> rows -> COPY), and the
     writer/COPY ratio;
  4. with --big-rows decisions (default 1,000,000, loaded by COPY into a scratch
     database), the time of `audit summary` and `audit incident` over one hour.

Goals from issue 4: >= 20,000 decisions/s into PostgreSQL, >= 0.5x raw COPY, and < 2 s
for both queries at 1M rows. Prints a table, or JSON with --json.

    .venv/bin/python bench/audit.py [--decisions 100000] [--big-rows 1000000] [--json]
"""

from __future__ import annotations

import argparse
import io
import json
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import psycopg
from rich.console import Console
from rich.table import Table
from route import requests, warm_scheduler
from sqlalchemy import Engine, text
from sqlalchemy.engine import URL, make_url

from slaguard.audit import service
from slaguard.audit.engine import create_audit_engine
from slaguard.audit.from_scheduler import decision_head, record_from_head
from slaguard.audit.group_stats import fleet_capacity
from slaguard.audit.incident_timeline import incident_timeline
from slaguard.audit.lines_decode import decision_row
from slaguard.audit.migrate import upgrade
from slaguard.audit.records import DecisionRecord, IncidentRecord, PriorityName
from slaguard.audit.sink import DECISION_COLUMNS, OUTCOME_COLUMNS
from slaguard.audit.store import open_incident
from slaguard.audit.writer import AuditWriter
from slaguard.fleet.fleet import load_fleet
from slaguard.scheduler.rollout import LEARNED

START_S = 1_796_000_000.0
PRIORITIES: tuple[PriorityName, ...] = ("high", "normal", "low")


@dataclass
class Figure:
    name: str
    value: float
    unit: str
    goal: str = ""
    met: bool | None = None


def explanations() -> list[tuple[str, str, str, dict[str, object]]]:
    """(target id, card, model, explanation) per target: realistic size and shape."""
    fleet = load_fleet()
    out = []
    for t in fleet.targets:
        peers = [p for p in fleet.targets if p.model.id == t.model.id][:4]
        cands = [{"target": p.id, "card": p.card.id, "components": {
            "compute": 0.71, "interconnect": 0.52, "memory": 0.4431, "load": 0.25,
            "jitter": -0.12}, "score": 0.5123, "v_h_gb": 21.5, "v_peak_gb": 41.5,
            "limit_gb": 73.6} for p in peers]  # fmt: skip
        expl = {"policy": "learned", "weights": {"compute": 0.3, "interconnect": 0.2,
                "memory": 0.25, "load": 0.15, "jitter": 0.1}, "weights_version": "w-bench",
                "candidates": cands, "rejected": [{"target": "l40s-8b-3",
                "reason": "memory bound: v_h + v_peak > 0.92 x V_h"}],
                "prefiltered_out": 9, "chosen": t.id, "notes": []}  # fmt: skip
        out.append((t.id, t.card.id, t.model.id, expl))
    return out


def make_decisions(n: int, prefix: str, seed: int = 1) -> list[DecisionRecord]:
    rng = np.random.default_rng(seed)
    pool = explanations()
    pick = rng.integers(len(pool), size=n)
    times = START_S + np.sort(rng.uniform(0, 3600, n))
    prio = rng.integers(3, size=n)
    tokens = rng.integers(64, 8192, size=n)
    out = []
    for i in range(n):
        target, card, model, expl = pool[pick[i]]
        out.append(DecisionRecord(
            f"{prefix}-{i:09d}", float(times[i]), model, PRIORITIES[prio[i]], int(tokens[i]),
            256, 4.0, "learned", "rollout(50)", "routed", target, card, expl, "w-bench",
            "cfg-bench", 0.0009,
        ))  # fmt: skip
    return out


def percentiles_us(samples_ns: list[int]) -> tuple[float, float, float]:
    arr = np.asarray(samples_ns, dtype=float) / 1000.0
    return float(np.percentile(arr, 50)), float(np.percentile(arr, 99)), float(arr.max())


@contextmanager
def scratch_database(admin: URL, label: str) -> Iterator[URL]:
    name = f"slaguard_bench_{label}_{secrets.token_hex(3)}"
    libpq = admin.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(libpq, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield admin.set(database=name)
    finally:
        with psycopg.connect(libpq, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def scheduler_decisions(n: int, prefix: str) -> list[DecisionRecord]:
    """Records as the service builds them: the scheduler's own `Explanation` objects
    (journalled raw, rendered in the writer process), default fleet, varied load."""
    reqs = requests(n, seed=5, prefix=f"{prefix}-")
    sched = warm_scheduler(load_fleet(), LEARNED, reqs)
    out = []
    for i, req in enumerate(reqs):
        d = sched.decide(req, 0.0, LEARNED)
        head = decision_head(d, decided_at_s=START_S + i * 0.001, fleet_mode="learned",
                             config_hash=sched.config_hash, latency_s=0.0)  # fmt: skip
        out.append(record_from_head(head, d.explanation))
    return out


def writer_rate(engine: Engine, records: list[DecisionRecord]) -> tuple[float, list[int]]:
    """Burst-enqueue every record, wait until all are committed; rate and per-call costs.
    The clock starts once the writer process is up (a first record committed)."""
    costs: list[int] = []
    clock = time.perf_counter_ns
    with tempfile.TemporaryDirectory() as spill, AuditWriter(engine, Path(spill)) as writer:
        writer.enqueue(records[0])
        if not writer.wait_flushed(60):
            raise RuntimeError(f"writer did not start: {writer.stats()}")
        records = records[1:]
        started = time.perf_counter()
        for record in records:
            t0 = clock()
            writer.enqueue(record)
            costs.append(clock() - t0)
        if not writer.wait_flushed(600):
            raise RuntimeError(f"writer did not drain: {writer.stats()}")
        elapsed = time.perf_counter() - started
        written = writer.stats().rows_written
        if written != len(records) + 1:
            raise RuntimeError(f"expected {len(records) + 1} rows, wrote {written}")
    return len(records) / elapsed, costs


def paced_enqueue_costs(engine: Engine, records: list[DecisionRecord], rate: float) -> list[int]:
    """Enqueue at a router-like steady rate; per-call cost while the writer works."""
    costs: list[int] = []
    clock = time.perf_counter_ns
    interval_ns = int(1e9 / rate)
    with tempfile.TemporaryDirectory() as spill, AuditWriter(engine, Path(spill)) as writer:
        next_ns = clock()
        for record in records:
            if (idle := next_ns - clock()) > 0:
                time.sleep(idle / 1e9)  # a router waits on I/O between requests
            t0 = clock()
            writer.enqueue(record)
            costs.append(clock() - t0)
            next_ns += interval_ns
        writer.wait_flushed(120)
    return costs


def raw_copy_rate(url: URL, records: list[DecisionRecord]) -> float:
    """records -> rows -> one COPY straight into `decisions` (no queue, journal, dedup)."""
    libpq = url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(libpq) as conn:
        conn.execute("TRUNCATE decisions")
        conn.commit()
        started = time.perf_counter()
        with (
            conn.cursor() as cur,
            cur.copy(f"COPY decisions ({', '.join(DECISION_COLUMNS)}) FROM STDIN") as copy,
        ):
            for record in records:
                copy.write_row(decision_row(record))
        conn.commit()
        return len(records) / (time.perf_counter() - started)


def load_big(url: URL, rows: int, hours: float, seed: int = 2) -> None:
    """`rows` decisions + outcomes over `hours` via COPY (csv), with the usual indexes."""
    rng = np.random.default_rng(seed)
    pool = explanations()
    encoded = [json.dumps(p[3], separators=(",", ":")) for p in pool]
    chunk = 200_000
    libpq = url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(libpq) as conn, conn.cursor() as cur:
        for lo in range(0, rows, chunk):
            n = min(chunk, rows - lo)
            pick = rng.integers(len(pool), size=n)
            # Time-ordered like the writer inserts them: each chunk is the next slice.
            span = hours * 3600 / rows
            offsets = np.sort(rng.uniform(lo * span, (lo + n) * span, n))
            at = pd.to_datetime(START_S + offsets, unit="s", utc=True)
            ids = [f"big-{i:09d}" for i in range(lo, lo + n)]
            ttft = rng.lognormal(-0.7, 0.4, n)
            dec = pd.DataFrame({
                "request_id": ids, "decided_at": at,
                "model_id": [pool[k][2] for k in pick],
                "priority": np.array(PRIORITIES)[rng.integers(3, size=n)],
                "prompt_tokens": rng.integers(64, 8192, n), "max_new_tokens": 256,
                "deadline_s": 4.0,
                "policy_arm": np.where(rng.random(n) < 0.5, "learned", "round_robin"),
                "fleet_mode": "rollout(50)", "outcome": "routed",
                "target_id": [pool[k][0] for k in pick], "card_type": [pool[k][1] for k in pick],
                "explanation": [encoded[k] for k in pick],
                "weights_version": "w-bench", "config_hash": "cfg-bench",
                "decision_latency_s": 0.0009,
            })[list(DECISION_COLUMNS)]  # fmt: skip
            out = pd.DataFrame({
                "request_id": ids, "finished_at": at + pd.Timedelta(seconds=5), "ttft_s": ttft,
                "tpot_s": 0.02, "e2e_s": ttft + 5.0, "status": "ok", "sla_met": ttft < 1.5,
            })[list(OUTCOME_COLUMNS)]  # fmt: skip
            for table, frame in (("decisions", dec), ("outcomes", out)):
                buf = io.StringIO()
                frame.to_csv(buf, index=False, header=False)
                with cur.copy(f"COPY {table} FROM STDIN WITH (FORMAT csv)") as copy:
                    copy.write(buf.getvalue())
            conn.commit()
        conn.autocommit = True
        cur.execute("VACUUM ANALYZE decisions")
        cur.execute("VACUUM ANALYZE outcomes")


def timed(fn: Callable[[], object], repeat: int = 3) -> tuple[float, float]:
    """(first run, median of the following runs) in seconds."""
    times = []
    for _ in range(repeat + 1):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return times[0], statistics.median(times[1:])


BENCH_STARTED = time.perf_counter()


def progress(step: str) -> None:
    """One line on stderr per phase: the whole run takes minutes."""
    print(f"[{time.perf_counter() - BENCH_STARTED:6.1f} s] {step}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> list[Figure]:
    admin = make_url(args.pg_url)
    figures: list[Figure] = []
    n = args.decisions
    if n == 0:
        return big_queries(admin, args.big_rows, args.big_hours) if args.big_rows else []
    progress(f"writer -> SQLite, {n:,} decisions")
    records = make_decisions(n, "w")
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = create_audit_engine(f"sqlite:///{tmp}/bench.db")
        upgrade(sqlite)
        sqlite_rate, _ = writer_rate(sqlite, records)
        sqlite.dispose()
    figures.append(Figure("writer -> SQLite (WAL), sustained", sqlite_rate, "decisions/s"))
    progress(f"scheduler decisions for {args.rounds} rounds")
    scheduler_records = [scheduler_decisions(n, f"s{k}") for k in range(args.rounds)]
    with scratch_database(admin, "w") as url:
        pg = create_audit_engine(url)
        upgrade(pg)
        progress(f"enqueue paced at {args.paced_rate:,.0f}/s, writer -> PostgreSQL")
        paced = paced_enqueue_costs(pg, make_decisions(min(n, 20_000), "p"), args.paced_rate)
        # Writer and raw COPY alternate, so load from other processes hits both alike.
        writer_rates, copy_rates, raw_rates, burst = [], [], [], []
        for round_no in range(args.rounds):
            progress(f"round {round_no + 1}/{args.rounds}: writer, raw COPY, scheduler rows")
            with pg.begin() as conn:
                conn.execute(text("TRUNCATE decisions"))
            rate_w, costs = writer_rate(pg, make_decisions(n, f"w{round_no}"))
            writer_rates.append(rate_w)
            burst += costs
            copy_rates.append(raw_copy_rate(url, records))
            raw_rates.append(writer_rate(pg, scheduler_records[round_no])[0])
        pg_rate = statistics.median(writer_rates)
        copy_rate = statistics.median(copy_rates)
        raw_rate = statistics.median(raw_rates)
        pg.dispose()
    p50, p99, worst = percentiles_us(paced)
    rate = f"{args.paced_rate:,.0f}/s"
    figures += [
        Figure(f"enqueue() p50, paced at {rate}, writer -> PG", p50, "us"),
        Figure(f"enqueue() p99, paced at {rate}, writer -> PG", p99, "us"),
        Figure(f"enqueue() max, paced at {rate}", worst, "us"),
    ]
    b50, b99, _ = percentiles_us(burst)
    figures += [
        Figure("enqueue() p50, burst (writer busy)", b50, "us"),
        Figure("enqueue() p99, burst (writer busy)", b99, "us"),
        Figure(f"writer -> PostgreSQL, sustained (median of {args.rounds})", pg_rate,
               "decisions/s", ">= 20,000",
               pg_rate >= 20_000),
        Figure(f"raw COPY of the same rows (median of {args.rounds})", copy_rate, "rows/s"),
        Figure("writer -> PostgreSQL, scheduler explanations rendered in the writer "
               f"process (median of {args.rounds})", raw_rate, "decisions/s"),
        Figure("writer / raw COPY", pg_rate / copy_rate, "x", ">= 0.5",
               pg_rate / copy_rate >= 0.5),
    ]  # fmt: skip
    if args.big_rows:
        figures += big_queries(admin, args.big_rows, args.big_hours)
    return figures


def big_queries(admin: URL, rows: int, hours: float) -> list[Figure]:
    with scratch_database(admin, "big") as url:
        engine = create_audit_engine(url)
        upgrade(engine)
        progress(f"COPY-loading {rows:,} decisions + outcomes over {hours:g} h")
        started = time.perf_counter()
        load_big(url, rows, hours)
        load_s = time.perf_counter() - started
        mid = START_S + hours * 1800
        incident = open_incident(engine, IncidentRecord(
            mid - 600, "ttft_zscore", "page", "bench incident", {}, mid + 600,
        ))  # fmt: skip
        since = datetime.fromtimestamp(mid - 1800, UTC)
        until = since + timedelta(hours=1)
        cap = fleet_capacity(load_fleet())
        progress("audit summary and audit incident over one hour")
        s_first, s_med = timed(lambda: service.summary(engine, since, until, cap))
        i_first, i_med = timed(lambda: incident_timeline(
            engine, incident, before=timedelta(minutes=20), after=timedelta(minutes=20),
            now=until, capacity=cap))  # fmt: skip
        all_since = datetime.fromtimestamp(START_S, UTC)
        all_until = all_since + timedelta(hours=hours)
        a_first, _ = timed(lambda: service.summary(engine, all_since, all_until, cap), 1)
        engine.dispose()
    per_hour = rows / hours
    label = f"{rows:,} rows, {per_hour:,.0f} in the hour"
    return [
        Figure(f"COPY load of {rows:,} decisions + outcomes", rows / load_s, "rows/s"),
        Figure(f"audit summary, 1 h ({label}), first", s_first, "s", "< 2", s_first < 2),
        Figure("audit summary, 1 h, median of 3 warm", s_med, "s", "< 2", s_med < 2),
        Figure(f"audit incident, 1 h window ({label}), first", i_first, "s", "< 2", i_first < 2),
        Figure("audit incident, 1 h window, median of 3 warm", i_med, "s", "< 2", i_med < 2),
        Figure(f"audit summary over all {rows:,} rows ({hours:g} h)", a_first, "s"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=100_000, help="0 skips the writer part")
    parser.add_argument("--paced-rate", type=float, default=2000.0,
                        help="decisions/s for the paced enqueue-cost measurement")  # fmt: skip
    parser.add_argument("--big-rows", type=int, default=1_000_000, help="0 skips the big part")
    parser.add_argument("--big-hours", type=float, default=24.0)
    parser.add_argument("--pg-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/test",
                        help="server and admin database for scratch databases")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3, help="writer/COPY alternations")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = run(args)
    if args.json:
        json.dump([f.__dict__ for f in figures], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    table = Table(title="audit benchmark")
    for col in ("measure", "value", "unit", "goal", "met"):
        table.add_column(col, justify="right" if col == "value" else "left")
    for f in figures:
        met = "" if f.met is None else ("yes" if f.met else "NO")
        table.add_row(f.name, f"{f.value:,.3g}" if f.value < 100 else f"{f.value:,.0f}",
                      f.unit, f.goal, met)  # fmt: skip
    Console().print(table)


if __name__ == "__main__":
    main()
