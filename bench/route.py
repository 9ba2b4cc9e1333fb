"""In-process routing decision cost: learned (explanation included) vs round-robin.

Fleets of 16, 64 and 256 targets are built by repeating the default fleet's mix; each
decision runs against a fleet picture with varied queues and KV use. Prints a table, or
JSON with --json. Goal (issue): learned p99 <= 0.25 ms at 64 targets and <= 3x round-robin.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from slaguard.audit.from_scheduler import decision_head
from slaguard.audit.lines import JournalEncoder
from slaguard.audit.writer import open_writer
from slaguard.fleet import Fleet, Priority, Request, build_fleet
from slaguard.scheduler.core import Scheduler
from slaguard.scheduler.explain import Decision
from slaguard.scheduler.rollout import LEARNED, ROUND_ROBIN, FleetMode

MIX = [
    ("h100-70b", "llama3.1-70b", "h100", 4),
    ("h200-70b", "llama3.1-70b", "h200", 2),
    ("a100-70b", "llama3.1-70b", "a100", 4),
    ("ascend-70b", "llama3.1-70b", "ascend910b", 4),
    ("h100-8b", "llama3.1-8b", "h100", 1),
    ("h200-8b", "llama3.1-8b", "h200", 1),
    ("l40s-8b", "llama3.1-8b", "l40s", 1),
    ("l40s-8b-b", "llama3.1-8b", "l40s", 1),
]


def fleet_of_size(n: int) -> Fleet:
    """n targets, half per model, cycling through the card mix."""
    per = n // len(MIX)
    targets = [
        {"id": tid, "model": model, "card": card, "tp": tp, "count": per}
        for tid, model, card, tp in MIX
    ]
    return build_fleet({"name": f"bench-{n}", "targets": targets}, f"<bench {n}>")


def requests(n: int, seed: int, prefix: str = "b") -> list[Request]:
    """n requests: lognormal prompts, both models, mixed priorities; ids `<prefix><i>`."""
    rng = np.random.default_rng(seed)
    prompts = rng.lognormal(6.9, 1.0, n).astype(int) + 1
    models = rng.choice(["llama3.1-70b", "llama3.1-8b"], n)
    prios = rng.choice(list(Priority), n, p=[0.2, 0.6, 0.2])
    return [
        Request(
            f"{prefix}{i}",
            int(min(prompts[i], 60_000)),
            200,
            str(models[i]),
            Priority(str(prios[i])),
            4.0,
        )
        for i in range(n)
    ]


def warm_scheduler(fleet: Fleet, mode: FleetMode, reqs: list[Request]) -> Scheduler:
    """A scheduler over a fleet picture with varied queues and KV use, warmed up."""
    sched = Scheduler(fleet)
    rng = np.random.default_rng(3)
    for t in fleet:
        sched.state.refresh(
            t.index,
            0.0,
            queue_depth=float(rng.integers(0, 30)),
            kv_used_gb=float(rng.uniform(0, 0.7)) * t.kv_budget_gb,
        )
    for r in reqs[:500]:
        sched.decide(r, 0.0, mode)
    return sched


def timed_ns(
    sched: Scheduler,
    mode: FleetMode,
    reqs: list[Request],
    record: Callable[[Scheduler, Decision], None] | None = None,
    record_timed: bool = True,
    record_ns: np.ndarray | None = None,
) -> np.ndarray:
    """Per-decision cost in ns. With `record` each decision is also recorded (the audit
    enqueue): inside the timed span, or just after it when `record_timed` is False.
    `record_ns`, if given, receives the timed span's recording part alone."""
    samples = np.empty(len(reqs))
    clock = time.perf_counter_ns
    gc.disable()
    try:
        for i, r in enumerate(reqs):
            t0 = clock()
            d = sched.decide(r, 0.0, mode)
            if record is not None and record_timed:
                t1 = clock()
                record(sched, d)
                if record_ns is not None:
                    record_ns[i] = clock() - t1
            samples[i] = clock() - t0
            if record is not None and not record_timed:
                record(sched, d)
    finally:
        gc.enable()
    return samples


def summary(samples_ns: np.ndarray) -> dict[str, float]:
    us = samples_ns / 1e3
    return {
        "p50_us": float(np.percentile(us, 50)),
        "p99_us": float(np.percentile(us, 99)),
        "decisions_per_s": float(1e6 / us.mean()),
    }


def measure(fleet: Fleet, mode: FleetMode, reqs: list[Request]) -> dict[str, float]:
    """Per-decision cost of `mode` on a fresh, warmed scheduler."""
    return summary(timed_ns(warm_scheduler(fleet, mode, reqs), mode, reqs))


def measure_with_writer(fleet: Fleet, reqs: list[Request], blocks: int = 10) -> dict[str, Any]:
    """The routing decision with the audit writer off vs on, in `blocks` interleaved rounds
    over the same requests, so the box's noise hits every arm alike. Two "on" arms, both
    with the writer process flushing into SQLite meanwhile: `decide_writer_on` times the
    decision alone (the enqueue follows it, untimed: what the writer does to routing), and
    `decide_enqueue` times decide + enqueue (the routing path the service runs; its
    enqueue part alone is `enqueue_in_loop`). A third timed arm, `decide_encode`, builds
    the journal line and drops it: the floor of any journal on the routing thread. Before
    each off block the writer has drained (its process idle)."""
    sched = warm_scheduler(fleet, LEARNED, reqs)
    size = len(reqs) // blocks
    order = ("off", "decide", "decide_encode", "decide_enqueue")
    arms: dict[str, list[np.ndarray]] = {arm: [] for arm in order}
    encoder = JournalEncoder()
    enqueue_parts: list[np.ndarray] = []
    flushed_while_timed = 0
    with tempfile.TemporaryDirectory() as tmp:
        writer = open_writer(
            f"sqlite:///{tmp}/audit.db", spill_dir=Path(tmp) / "spill", migrate=True
        )

        def head(sched: Scheduler, d: Decision) -> tuple[Any, ...]:
            return decision_head(
                d,
                decided_at_s=time.time(),
                fleet_mode="learned",
                config_hash=sched.config_hash,
                latency_s=0.0,
            )

        def enqueue(sched: Scheduler, d: Decision) -> None:
            writer.enqueue_decision(head(sched, d), d.explanation)

        def encode(sched: Scheduler, d: Decision) -> None:
            encoder.encode_raw(head(sched, d), d.explanation)

        try:
            for b in range(blocks):
                chunk = reqs[b * size : (b + 1) * size]
                for arm in order[b % len(order) :] + order[: b % len(order)]:
                    if arm == "off":
                        writer.wait_flushed(120)
                        arms[arm].append(timed_ns(sched, LEARNED, chunk))
                        continue
                    if arm == "decide_encode":
                        arms[arm].append(timed_ns(sched, LEARNED, chunk, encode))
                        continue
                    before = writer.stats().records_flushed
                    timed = arm == "decide_enqueue"
                    part = np.empty(len(chunk)) if timed else None
                    arms[arm].append(timed_ns(sched, LEARNED, chunk, enqueue, timed, part))
                    if part is not None:
                        enqueue_parts.append(part)
                    flushed_while_timed += writer.stats().records_flushed - before
        finally:
            stats = writer.close(drain_timeout_s=120)
    off_s = summary(np.concatenate(arms["off"]))
    decide_s = summary(np.concatenate(arms["decide"]))
    encode_s = summary(np.concatenate(arms["decide_encode"]))
    on_s = summary(np.concatenate(arms["decide_enqueue"]))
    return {
        "targets": len(fleet),
        "blocks": blocks,
        "writer_off": off_s,
        "decide_writer_on": decide_s,
        "decide_encode": encode_s,
        "writer_on": on_s,
        "enqueue_in_loop": summary(np.concatenate(enqueue_parts)),
        "decide_p99_ratio": decide_s["p99_us"] / off_s["p99_us"],
        "encode_p99_ratio": encode_s["p99_us"] / off_s["p99_us"],
        "p99_ratio": on_s["p99_us"] / off_s["p99_us"],
        "rows_written": stats.rows_written,
        "flushed_while_timed": flushed_while_timed,
    }


def run(n_requests: int) -> dict[str, Any]:
    reqs = requests(n_requests, seed=11)
    rows = []
    for size in (16, 64, 256):
        fleet = fleet_of_size(size)
        learned = measure(fleet, LEARNED, reqs)
        rr = measure(fleet, ROUND_ROBIN, reqs)
        rows.append(
            {
                "targets": size,
                "learned": learned,
                "round_robin": rr,
                "p99_ratio": learned["p99_us"] / rr["p99_us"],
                "mean_ratio": rr["decisions_per_s"] / learned["decisions_per_s"],
            }
        )
    audit = measure_with_writer(fleet_of_size(64), reqs)
    return {
        "bench": "route",
        "audit_writer": audit,
        "machine": f"{platform.machine()}, {platform.python_implementation()} "
        f"{platform.python_version()}",
        "requests_per_fleet": n_requests,
        "rows": rows,
        "goal": {
            "p99_us_at_64": 250,
            "max_ratio_vs_round_robin": 3.0,
            "max_p99_ratio_writer_on_vs_off": 1.10,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    result = run(args.requests)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"routing decision cost, {result['requests_per_fleet']} requests per fleet "
        f"({result['machine']})"
    )
    print(
        f"{'targets':>7} | {'learned p50':>11} {'p99':>8} {'dec/s':>9} | "
        f"{'rr p50':>7} {'p99':>8} {'dec/s':>9} | {'p99 x':>6} {'cost x':>6}"
    )
    for row in result["rows"]:
        lr, rr = row["learned"], row["round_robin"]
        print(
            f"{row['targets']:>7} | {lr['p50_us']:>9.1f}us {lr['p99_us']:>6.1f}us "
            f"{lr['decisions_per_s']:>9.0f} | {rr['p50_us']:>5.1f}us {rr['p99_us']:>6.1f}us "
            f"{rr['decisions_per_s']:>9.0f} | {row['p99_ratio']:>6.2f} {row['mean_ratio']:>6.2f}"
        )
    a = result["audit_writer"]
    off, dec, on = a["writer_off"], a["decide_writer_on"], a["writer_on"]
    print(
        f"routing at {a['targets']} targets, audit writer off vs on ({a['blocks']} "
        f"interleaved rounds, {a['rows_written']} rows written, "
        f"{a['flushed_while_timed']} committed during timed on blocks):"
    )
    for name, arm, ratio in (
        ("writer off: decide", off, 1.0),
        ("writer on: decide (enqueue untimed)", dec, a["decide_p99_ratio"]),
        ("decide + encode (line dropped)", a["decide_encode"], a["encode_p99_ratio"]),
        ("writer on: decide + enqueue", on, a["p99_ratio"]),
    ):
        print(
            f"  {name:<36} p50 {arm['p50_us']:>7.1f} us  p99 {arm['p99_us']:>7.1f} us"
            f"  (p99 x{ratio:.2f})"
        )
    enq = a["enqueue_in_loop"]
    print(
        f"  {'of which the enqueue':<36} p50 {enq['p50_us']:>7.1f} us  p99 {enq['p99_us']:>7.1f} us"
    )


if __name__ == "__main__":
    main()
