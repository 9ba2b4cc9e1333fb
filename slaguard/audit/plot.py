"""`audit incident --plot`: TTFT p99 per target over time, mode switches marked.

The targets whose p99 peaked highest get coloured lines and a legend; the rest are thin
grey lines, so a 19-target fleet stays readable. The incident span is shaded.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pandas as pd  # type: ignore[import-untyped]
from matplotlib.dates import date2num

from slaguard.audit.service import IncidentTimeline

HIGHLIGHTED_TARGETS = 6


def _x(moment: datetime) -> float:
    """A datetime as a matplotlib date coordinate (its stubs type limits as floats)."""
    return float(date2num(moment))  # type: ignore[no-untyped-call]


def plot_incident(tl: IncidentTimeline, series: pd.DataFrame, path: Path) -> None:
    """Write a PNG of `series` (bucket x target TTFT p99) around incident `tl`."""
    fig, ax = plt.subplots(figsize=(12, 6), dpi=100)
    try:
        if not series.empty:
            peaks = series.max().sort_values(ascending=False)
            top = list(peaks.index[:HIGHLIGHTED_TARGETS])
            for target in series.columns:
                if target not in top:
                    ax.plot(series.index, series[target], color="0.8", linewidth=0.8)
            for target in top:
                ax.plot(series.index, series[target], linewidth=1.8, label=str(target))
        during = tl.phases["during"]
        ax.axvspan(_x(during[0]), _x(during[1]), color="tab:red", alpha=0.08, label="incident")
        for change in tl.mode_changes.itertuples(index=False):
            ax.axvline(change.at, color="black", linestyle="--", linewidth=1.0)
            ax.annotate(
                f"{change.from_mode} -> {change.to_mode}",
                xy=(change.at, 1.0), xycoords=("data", "axes fraction"),
                rotation=90, va="top", ha="right", fontsize=8,
            )  # fmt: skip
        start, end = tl.window
        ax.set_xlim(_x(start), _x(end))
        ax.set_ylabel("TTFT p99 per minute (s)")
        ax.set_title(f"incident {tl.incident.id}: {tl.incident.record.subject}"[:110])
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
        fig.autofmt_xdate()
        fig.tight_layout()
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)
