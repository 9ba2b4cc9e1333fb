"""The terminal table of bench/guard_efficacy.py (its `--json` has everything)."""

from __future__ import annotations

from typing import Any


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.2f} %"


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f} s"


def _yes(v: bool | None) -> str:
    return "-" if v is None else ("meets" if v else "MISSES")


def print_table(r: dict[str, Any]) -> None:
    print(f"guard efficacy, {r['fleet']} fleet, start={r['start']} ({r['machine']}, {r['date']})")
    print(
        "\nclean hours (goal: 0 trips); shadow = the guard watching the unguarded learned run"
        " / round-robin run"
    )
    print(
        f"{'trace':<14} {'scale':>5} {'trips':>5} {'shadow':>7} {'demote':>6} {'RR viol':>9} "
        f"{'learned':>9} {'guarded':>9}  PromQL firings"
    )
    for c in r["clean"]:
        v = c["violation"]
        rules = ", ".join(f"{k}: {len(n)}" for k, n in c["promql_firings"].items())
        rr = c.get("shadow_rr_would_trip_s")
        shadow = f"{len(c['shadow_would_trip_s'])}/{'-' if rr is None else len(rr)}"
        print(
            f"{c['trace']:<14} {c['scale']:>5g} {len(c['trips']):>5} {shadow:>7} "
            f"{c['demotions']:>6} {_pct(v['round-robin']):>9} {_pct(v['learned']):>9} "
            f"{_pct(v['guarded']):>9}  {rules}"
        )
        for t in c["trips"]:
            print(f"{'':>14} trip at {t['at_s']:.0f} s: {t['summary'][:100]}")
    print("\nfaults (violation of the requests arriving in the fault window)")
    print(
        f"{'fault':<11} {'delay':>6} {'shadow':>6} {'goal':>5} {'RR':>8} {'learned':>8} "
        f"{'guarded':>8}  <=RRx1.05 <learned  first trip"
    )
    for f in r["faults"]:
        v = f["violation_in_window"]
        trip = f["first_trip"]
        what = f"{trip['detector']} {trip['subject'][:24]}" if trip else "no trip"
        if f["trips_before_fault"]:
            what += f" ({len(f['trips_before_fault'])} trip(s) before the fault)"
        print(
            f"{f.get('label', f['fault']):<11} {_s(f['delay_s']):>6} {_s(f['shadow_delay_s']):>6} "
            f"{_s(f['goal_delay_s']):>5} {_pct(v['round-robin']):>8} {_pct(v['learned']):>8} "
            f"{_pct(v['guarded']):>8}  {_yes(f['meets_rr']):>9} {_yes(f['meets_learned']):>8}  "
            f"{what}"
        )
    print(
        "\nPromQL z-score rule (15 s evaluations, 1m window, for: 1m) against the shadow guard, "
        "on the same series"
    )
    for c in r["promql_comparison"]:
        ratios = c["ratio_by_rule"]
        rules = ", ".join(
            f"{k}: "
            + ("never" if d is None else _s(d))
            + (f" ({ratios[k]:.1f}x)" if k in ratios else "")
            for k, d in c["promql_delay_s"].items()
        )
        goal = f"{r['promql_ratio_goal']:g}x"
        if c["rule_never_fires"]:
            verdict = f"no rule fires: no ratio to hold against {goal}"
        else:
            ratio = "-" if c["ratio"] is None else f"{c['ratio']:.1f}x"
            verdict = f"{ratio} ({_yes(c['meets'])} >= {goal})"
        label, guard = c.get("label", c["fault"]), _s(c["guard_delay_s"])
        print(f"{label:<11} {c['series']:<12} {rules}; guard {guard}; {verdict}")
