"""Latency-model fit quality and the cost of the simulator's inputs.

Prints, per reference GPU and profiled setup, the relative error of the fit against the
measured configurations of splitwise's perf_model.csv (the committed fit versus a fresh
refit, which must agree), then the cost of one latency call (plain-float runtime versus
evaluating the same formula through numpy, the baseline) and of loading the real traces
(our validated loaders versus a bare pandas/json parse, the baseline).

    .venv/bin/python bench/latency_fit.py [--csv PATH] [--json] [--write]

`--write` regenerates the packaged slaguard/data/latency_fit.json from the CSV.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from slaguard.fleet import load_fleet
from slaguard.sim.latency import LatencyModel, TermUnits
from slaguard.sim.latency_fit import fit_json, refit, write_fit
from slaguard.sim.paths import default_trace_path, mooncake_trace_path, perf_model_path
from slaguard.sim.traces import load_trace
from slaguard.sim.workload import assign_workload


def _best_of(fn: Callable[[], object], repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def fit_rows(csv: Path) -> tuple[list[dict[str, Any]], bool]:
    fresh = refit(csv)
    committed = LatencyModel.load().fit
    rows = []
    for card, ref in fresh.references.items():
        groups = {"all": ref.error, **ref.error_by_group}
        for group, err in groups.items():
            rows.append(
                {
                    "reference": card,
                    "setup": group,
                    "prefill_median": err["prefill"].median,
                    "prefill_p90": err["prefill"].p90,
                    "decode_median": err["decode"].median,
                    "decode_p90": err["decode"].p90,
                    "points": err["prefill"].points + err["decode"].points,
                }
            )
    return rows, fit_json(fresh) == fit_json(committed)


def call_costs() -> dict[str, float]:
    fleet = load_fleet()
    target = fleet.target("h100-70b-0")
    lat = LatencyModel.load().for_target(target)
    ref = LatencyModel.load().fit.references["h100"]
    units = TermUnits.of(target.model, target.card, target.tp)
    coef_pre = np.asarray(list(ref.prefill.values()))
    coef_dec = np.asarray(list(ref.decode.values()))
    n = 100_000

    def runtime() -> None:
        for i in range(n):
            lat.prefill_s(1000 + i % 500)
            lat.decode_step_s(16, 16_000)

    def numpy_baseline() -> None:
        for i in range(n):
            p = 1000 + i % 500
            float(np.dot(coef_pre, units.prefill_row(p, p * p, 1)))
            float(np.dot(coef_dec, units.decode_row(16, 16_000)))

    fast, slow = _best_of(runtime), _best_of(numpy_baseline)
    return {
        "runtime_ns_per_call": fast / (2 * n) * 1e9,
        "numpy_ns_per_call": slow / (2 * n) * 1e9,
    }


def _materialise_s(path: Path) -> float:
    """Assigning the workload and building every Request object, as the engine will."""
    trace, fleet = load_trace(path), load_fleet()
    return _best_of(lambda: list(assign_workload(trace, fleet).requests()))


def load_costs() -> list[dict[str, Any]]:
    rows = []
    azure, mooncake = default_trace_path(), mooncake_trace_path()
    if azure.exists():
        rows.append(
            {
                "trace": azure.name,
                "requests": len(load_trace(azure)),
                "loader_s": _best_of(lambda: load_trace(azure)),
                "bare_parse_s": _best_of(lambda: pd.read_csv(azure)),
                "requests_s": _materialise_s(azure),
            }
        )
    if mooncake.exists():
        text = mooncake.read_text(encoding="utf-8")
        rows.append(
            {
                "trace": mooncake.name,
                "requests": len(load_trace(mooncake)),
                "loader_s": _best_of(lambda: load_trace(mooncake)),
                "bare_parse_s": _best_of(
                    lambda: [json.loads(x) for x in text.splitlines() if x.strip()]
                ),
                "requests_s": _materialise_s(mooncake),
            }
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", type=Path, default=perf_model_path())
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--write", action="store_true", help="regenerate the packaged fit")
    args = parser.parse_args()
    if not args.csv.exists():
        print(f"error: {args.csv}: file not found; fix: pass --csv", file=sys.stderr)
        return 2
    if args.write:
        target = resources.files("slaguard.data").joinpath("latency_fit.json")
        write_fit(refit(args.csv), Path(str(target)))
    fit, matches = fit_rows(args.csv)
    result = {
        "fit": fit,
        "committed_matches_refit": matches,
        "calls": call_costs(),
        "loads": load_costs(),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{'ref':5} {'setup':16} {'prefill med':>11} {'p90':>6} {'decode med':>10} {'p90':>6}")
    for r in fit:
        print(
            f"{r['reference']:5} {r['setup']:16} {r['prefill_median']:11.1%} "
            f"{r['prefill_p90']:6.1%} {r['decode_median']:10.1%} {r['decode_p90']:6.1%}"
        )
    print(f"committed fit == refit from {args.csv.name}: {matches}")
    calls = result["calls"]
    print(
        f"latency call: {calls['runtime_ns_per_call']:.0f} ns (plain floats) vs "
        f"{calls['numpy_ns_per_call']:.0f} ns (numpy baseline)"
    )
    for row in result["loads"]:
        print(
            f"load {row['trace']}: {row['requests']} requests in {row['loader_s'] * 1000:.0f} ms"
            f" (bare parse {row['bare_parse_s'] * 1000:.0f} ms); all Request objects in "
            f"{row['requests_s'] * 1000:.0f} ms"
        )
    return 0 if matches else 1


if __name__ == "__main__":
    sys.exit(main())
