"""Learned vs round-robin quality on the default mixed fleet and the Azure conversation hour.

Scans `--rate-scale` with round-robin (the baseline) to find where it violates the SLA for
5-20 % of requests, then replays the same hour with the learned policy at (up to) three of
those scales and compares them side by side: violation rate overall and by priority, TTFT
p50/p99, and each card type's share of requests against its share of capacity. Goal
(issue 3): learned violation <= 0.8 x round-robin's at those scales.

    .venv/bin/python bench/quality.py [--scales 6,7,8,9,10,11] [--json | --markdown]
"""

from __future__ import annotations

import argparse
import json
import platform
from typing import Any

from slaguard.fleet import Fleet, load_fleet
from slaguard.scheduler.rollout import LEARNED, ROUND_ROBIN, FleetMode
from slaguard.sim.engine import SimOptions, Simulation
from slaguard.sim.observers import FixedPolicy
from slaguard.sim.paths import default_trace_path
from slaguard.sim.report import build_report
from slaguard.sim.traces import load_trace
from slaguard.sim.workload import Workload, assign_workload

BAND = (0.05, 0.20)
"""Round-robin violation rates where the comparison is made."""
GOAL_RATIO = 0.8
POLICIES: dict[str, FleetMode] = {"round-robin": ROUND_ROBIN, "learned": LEARNED}


def simulate(fleet: Fleet, workload: Workload, policy: str, rate_scale: float) -> dict[str, Any]:
    sim = Simulation(
        fleet,
        workload,
        FixedPolicy(POLICIES[policy]),
        options=SimOptions(rate_scale=rate_scale),
    )
    results = sim.run()
    report = build_report(
        fleet=fleet,
        workload=workload,
        results=results,
        policy=policy,
        trace_path=str(default_trace_path().name),
        faults=[],
    )
    return {
        "violation_rate": report["sla"]["violation_rate"],
        "by_priority": report["sla"]["by_priority"],
        "ttft_p50_s": report["ttft_s"]["p50"],
        "ttft_p99_s": report["ttft_s"]["p99"],
        "requests": report["requests"],
        "by_card_type": {
            card: {
                "request_share": v["request_share"],
                "capacity_share": v["capacity_share"],
                "ttft_p99_s": v["ttft_p99_s"],
                "utilisation": v["utilisation"],
            }
            for card, v in report["by_card_type"].items()
        },
        "wall_s": report["wall_s"],
    }


def pick_scales(scan: list[dict[str, Any]], count: int) -> list[float]:
    """Up to `count` scanned scales inside the band, spread from low to high violation."""
    inside = [row["rate_scale"] for row in scan if BAND[0] <= row["violation_rate"] <= BAND[1]]
    if len(inside) <= count:
        return inside
    step = (len(inside) - 1) / (count - 1)
    return [inside[round(k * step)] for k in range(count)]


def run(scales: list[float], count: int) -> dict[str, Any]:
    fleet = load_fleet()
    workload = assign_workload(load_trace(default_trace_path()), fleet)
    scan = []
    baseline: dict[float, dict[str, Any]] = {}
    for scale in scales:
        rr = simulate(fleet, workload, "round-robin", scale)
        baseline[scale] = rr
        scan.append({"rate_scale": scale, "violation_rate": rr["violation_rate"]})
    rows = []
    for scale in pick_scales(scan, count):
        rr, learned = baseline[scale], simulate(fleet, workload, "learned", scale)
        ratio = learned["violation_rate"] / rr["violation_rate"]
        rows.append(
            {
                "rate_scale": scale,
                "round_robin": rr,
                "learned": learned,
                "ratio": ratio,
                "meets_goal": ratio <= GOAL_RATIO,
            }
        )
    return {
        "bench": "quality",
        "machine": f"{platform.machine()}, {platform.python_implementation()} "
        f"{platform.python_version()}",
        "fleet": fleet.name,
        "trace": default_trace_path().name,
        "requests": len(workload),
        "band": list(BAND),
        "goal_ratio": GOAL_RATIO,
        "scan": scan,
        "rows": rows,
    }


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.2f} %"


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def markdown(result: dict[str, Any]) -> str:
    """The side-by-side tables as Markdown (for docs/benchmarks.md)."""
    scan = ", ".join(f"x{r['rate_scale']:g}: {_pct(r['violation_rate'])}" for r in result["scan"])
    lines = [
        f"Round-robin scan ({result['trace']}, {result['requests']} requests): {scan}.",
        "",
        "| rate scale | round-robin violation | learned violation | learned / round-robin |",
        "|---|---|---|---|",
    ]
    for row in result["rows"]:
        verdict = "meets" if row["meets_goal"] else "MISSES"
        lines.append(
            f"| x{row['rate_scale']:g} | {_pct(row['round_robin']['violation_rate'])} | "
            f"{_pct(row['learned']['violation_rate'])} | {row['ratio']:.2f}x "
            f"({verdict} <= {result['goal_ratio']}x) |"
        )
    lines += [
        "",
        "| rate scale | policy | high | normal | low | TTFT p50 s | TTFT p99 s |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        for policy in ("round_robin", "learned"):
            v, prio = row[policy], row[policy]["by_priority"]
            lines.append(
                f"| x{row['rate_scale']:g} | {policy.replace('_', '-')} | {_pct(prio['high'])} | "
                f"{_pct(prio['normal'])} | {_pct(prio['low'])} | {_s(v['ttft_p50_s'])} | "
                f"{_s(v['ttft_p99_s'])} |"
            )
    if not result["rows"]:
        return "\n".join(lines)
    caps = result["rows"][0]["round_robin"]["by_card_type"]
    lines += [
        "",
        "Share of requests per card type (its share of fleet capacity in the header):",
        "",
        "| rate scale | policy | "
        + " | ".join(f"{c} ({100 * v['capacity_share']:.1f} %)" for c, v in caps.items())
        + " |",
        "|---|---|" + "---|" * len(caps),
    ]
    for row in result["rows"]:
        for policy in ("round_robin", "learned"):
            shares = row[policy]["by_card_type"]
            lines.append(
                f"| x{row['rate_scale']:g} | {policy.replace('_', '-')} | "
                + " | ".join(f"{100 * shares[c]['request_share']:.1f} %" for c in caps)
                + " |"
            )
    return "\n".join(lines)


def print_table(result: dict[str, Any]) -> None:
    print(
        f"learned vs round-robin, {result['fleet']} fleet, {result['trace']} ({result['machine']})"
    )
    print("round-robin scan: " + ", ".join(
        f"x{r['rate_scale']:g} {_pct(r['violation_rate'])}" for r in result["scan"]
    ))  # fmt: skip
    if not result["rows"]:
        print(f"no scanned scale puts round-robin inside {result['band']}: widen --scales")
        return
    print(
        f"{'scale':>6} {'policy':<12} {'violation':>9} {'high':>8} {'normal':>8} {'low':>8} "
        f"{'p50 s':>7} {'p99 s':>7}"
    )
    for row in result["rows"]:
        for policy in ("round_robin", "learned"):
            v, prio = row[policy], row[policy]["by_priority"]
            print(
                f"{row['rate_scale']:>6g} {policy:<12} {_pct(v['violation_rate']):>9} "
                f"{_pct(prio['high']):>8} {_pct(prio['normal']):>8} {_pct(prio['low']):>8} "
                f"{_s(v['ttft_p50_s']):>7} {_s(v['ttft_p99_s']):>7}"
            )
        verdict = "meets" if row["meets_goal"] else "MISSES"
        print(f"{'':>6} learned/rr = {row['ratio']:.2f}x ({verdict} goal <= {GOAL_RATIO}x)")
        cards = row["round_robin"]["by_card_type"]
        print(f"{'':>6} {'card':<12} {'capacity':>9} {'rr share':>9} {'learned':>9}")
        for card, v in cards.items():
            learned = row["learned"]["by_card_type"][card]["request_share"]
            print(
                f"{'':>6} {card:<12} {100 * v['capacity_share']:>8.1f}% "
                f"{100 * v['request_share']:>8.1f}% {100 * learned:>8.1f}%"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scales", default="6,7,8,9,10,11", help="rate scales to scan")
    parser.add_argument("--count", type=int, default=3, help="scales to compare (2-3)")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print JSON instead of a table")
    out.add_argument("--markdown", action="store_true", help="print Markdown tables")
    args = parser.parse_args()
    scales = [float(s) for s in args.scales.split(",")]
    result = run(scales, args.count)
    if args.json:
        print(json.dumps(result, indent=2))
    elif args.markdown:
        print(markdown(result))
    else:
        print_table(result)


if __name__ == "__main__":
    main()
