"""The simulate report: one dict (schema `slaguard.simulate/v1`) and its terminal summary.

Keys and meanings are documented in docs/simulate-report.md; tests pin the schema.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table
from rich.text import Text

from slaguard.fleet.fleet import Fleet
from slaguard.plaintext import visible
from slaguard.sim.results import Results, Status
from slaguard.sim.workload import PRIORITY_ORDER, Workload

SCHEMA = "slaguard.simulate/v1"
ARMS = ("round_robin", "learned")


def _pct(values: np.ndarray, q: float) -> float | None:
    finite = values[np.isfinite(values)]
    return float(np.percentile(finite, q)) if finite.size else None


def _rate(mask: np.ndarray, met: np.ndarray) -> float | None:
    n = int(mask.sum())
    return float(1.0 - met[mask].mean()) if n else None


def build_report(
    *,
    fleet: Fleet,
    workload: Workload,
    results: Results,
    policy: str,
    trace_path: str,
    faults: list[dict[str, Any]],
    trips: list[dict[str, Any]] | None = None,
    incident_updates: list[dict[str, Any]] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Everything the summary shows, as JSON-able data."""
    res = results
    n = len(workload)
    met = res.sla_met
    status = res.status
    everyone = np.ones(n, dtype=bool)
    by_priority = {
        p.value: _rate(workload.priority_code == k, met) for k, p in enumerate(PRIORITY_ORDER)
    }
    by_arm = {
        arm: {"requests": int((res.arm == k).sum()), "violation_rate": _rate(res.arm == k, met)}
        for k, arm in enumerate(ARMS)
    }
    total_tflops = sum(t.tflops for t in fleet)
    by_card: dict[str, Any] = {}
    for card in fleet.card_types():
        idx = np.array([t.index for t in fleet if t.card.id == card])
        on_card = np.isin(res.target, idx)
        by_card[card] = {
            "requests": int(on_card.sum()),
            "request_share": float(on_card.mean()) if n else 0.0,
            "capacity_share": sum(t.tflops for t in fleet if t.card.id == card) / total_tflops,
            "ttft_p99_s": _pct(res.ttft_s[on_card], 99),
            "utilisation": float(res.busy_s[idx].mean() / res.sim_s) if res.sim_s else 0.0,
        }
    by_target = {
        t.id: {
            "requests": int((res.target == t.index).sum()),
            "ttft_p99_s": _pct(res.ttft_s[res.target == t.index], 99),
            "utilisation": float(res.busy_s[t.index] / res.sim_s) if res.sim_s else 0.0,
        }
        for t in fleet
    }
    lat = np.asarray(res.decision_latency_s)
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "trace": {"path": trace_path, "requests": n, "duration_s": workload.trace.duration_s},
        "policy": policy,
        "requests": {
            "total": n,
            "completed": int((status == Status.OK).sum()),
            "rejected": int((status == Status.REJECTED).sum()),
            "failed": int(((status == Status.FAILED) | (status == Status.INCOMPLETE)).sum()),
        },
        "sla": {
            "violation_rate": _rate(everyone, met),
            "by_priority": by_priority,
            "by_arm": by_arm,
        },
        "ttft_s": {
            "p50": _pct(res.ttft_s, 50),
            "p90": _pct(res.ttft_s, 90),
            "p99": _pct(res.ttft_s, 99),
        },
        "tpot_s": {"p50": _pct(res.tpot_s, 50), "p99": _pct(res.tpot_s, 99)},
        "e2e_s": {"p50": _pct(res.e2e_s, 50), "p99": _pct(res.e2e_s, 99)},
        "by_card_type": by_card,
        "by_target": by_target,
        "decision_latency_s": {"p50": _pct(lat, 50), "p99": _pct(lat, 99)},
        "wall_s": res.wall_s,
        "sim_s": res.sim_s,
        "faults": faults,
        "guard": {
            "trips": trips or [],
            "incident_updates": incident_updates or [],
            "mode_timeline": [
                {"at_s": at, "mode": mode.label, "reason": reason}
                for at, mode, reason in res.mode_timeline
            ],
        },
    }
    report.update(extra or {})
    return report


def _fmt(v: float | None, scale: float = 1.0, digits: int = 3) -> str:
    return "-" if v is None else f"{v * scale:.{digits}f}"


def _percent(v: float | None) -> str:
    """A rate as `12.50 %`, or `-` where there is none (it printed `- %`)."""
    return "-" if v is None else f"{_fmt(v, 100, 2)} %"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _plain(value: object) -> Text:
    """A trace path, card id, prefix id or reason: never markup (`trace[/b].csv` was a
    MarkupError), control characters written out."""
    return Text(visible(str(value)))


def print_summary(report: dict[str, Any], console: Console) -> None:
    """The terminal view of a report."""
    r, sla = report["requests"], report["sla"]
    console.print(
        Text.assemble(
            (report["policy"], "bold"),
            _plain(
                f" on {report['trace']['path']}: {_count(r['total'], 'request')} ({r['completed']} "
                f"completed, {r['rejected']} rejected, {r['failed']} failed) in "
                f"{report['sim_s']:.0f} simulated s, {report['wall_s']:.1f} s wall"
            ),
        )
    )
    head = Table(title="SLA and latency")
    for col in ("metric", "value"):
        head.add_column(col)
    head.add_row("SLA violation rate", _percent(sla["violation_rate"]))
    for prio, v in sla["by_priority"].items():
        head.add_row(f"  priority {prio}", _percent(v))
    for arm, v in sla["by_arm"].items():
        if v["requests"]:
            head.add_row(f"  arm {arm} ({v['requests']} req)", _percent(v["violation_rate"]))
    t = report["ttft_s"]
    head.add_row(
        "TTFT p50 / p90 / p99 (s)", f"{_fmt(t['p50'])} / {_fmt(t['p90'])} / {_fmt(t['p99'])}"
    )
    d = report["decision_latency_s"]
    head.add_row("decision p50 / p99 (us)", f"{_fmt(d['p50'], 1e6, 1)} / {_fmt(d['p99'], 1e6, 1)}")
    console.print(head)
    cards = Table(title="per card type")
    for col in ("card", "requests", "share", "capacity share", "TTFT p99 s", "utilisation"):
        cards.add_column(col, justify="right")
    for card, v in report["by_card_type"].items():
        cards.add_row(
            _plain(card),
            str(v["requests"]),
            f"{v['request_share']:.1%}",
            f"{v['capacity_share']:.1%}",
            _fmt(v["ttft_p99_s"]),
            f"{v['utilisation']:.1%}",
        )
    console.print(cards)
    g = report["guard"]
    if len(g["mode_timeline"]) > 1 or g["trips"]:
        tl = Table(title="guard: trips and mode timeline")
        for col in ("at s", "event", "detail"):
            tl.add_column(col)
        # one time line: a trip sorts before the mode change it caused at the same time
        rows: list[tuple[float, int, str, Text]] = []
        for trip in g["trips"]:
            subject = _plain(trip["subject"])
            if not trip.get("switched", True):  # the baseline: the breaker holds the plan
                subject += " (no switch: already round-robin)"
            rows.append((trip["at_s"], 0, f"trip {trip['detector']}", subject))
        for m in g["mode_timeline"][1:]:
            rows.append((m["at_s"], 1, f"mode -> {m['mode']}", _plain(m["reason"])))
        for at_s, _, event, detail in sorted(rows, key=lambda row: row[:2]):
            tl.add_row(f"{at_s:.1f}", event, detail)
        console.print(tl)
