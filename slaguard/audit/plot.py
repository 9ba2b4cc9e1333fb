"""`audit incident --plot`: TTFT p99 per target over time, mode switches marked.

The targets the incident's subject covers (`incident_subject`) get coloured lines and the
legend; the rest are thin grey lines, named together. The six targets with the highest
p99 peak used to be the coloured ones: for `card:l40s` that was five 70B targets with
300 s peaks and one L40S. A subject that names no target (a prefix, alert names) colours
the targets whose p99 rose most against their median before the incident. Values that
span more than 1.5 decades are drawn on a log axis (on a linear one the 70B targets'
minutes flattened an L40S rise from 0.1 s to 0.3 s into nothing), and the time axis
covers the data, the incident and the switches, not the whole window (a 9-minute
simulated run left 80 % of a 30-minute-either-side axis empty).

Each minute's p99 is a step over the minute it covers: drawn as a point at the minute's
start, an incident opening at :38 showed no TTFT in its shaded span and its minute's
traffic left of the switches that shaped it (a step is also seen for a target with one
minute, which a line of one point did not draw). The incident span is shaded. Switches are
dashed lines; the fleet mode over time is a coloured band under the plot with the modes in
a legend: labels written at each switch piled up into one unreadable block when a few
minutes held ten of them. A window without a switch is banded with the mode in force
throughout: without a band the reader could not tell which mode the fleet was in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pandas as pd  # type: ignore[import-untyped]
from matplotlib.axes import Axes
from matplotlib.dates import AutoDateLocator, ConciseDateFormatter, date2num
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from slaguard.audit.incident_timeline import IncidentTimeline
from slaguard.audit.render import counted

CONTEXT_TARGETS = 6
"""Targets coloured when the subject names none: those whose p99 rose most."""
LOG_SPAN_DECADES = 1.5
"""Values spanning more decades than this are drawn on a log axis."""
NAMED_SEGMENT = 0.08
"""A mode segment at least this share of the x axis wide gets its mode written in it."""
X_LABEL = "time (UTC)"
FAINT = "0.8"


def _x(moment: datetime) -> float:
    """A datetime as a matplotlib date coordinate (its stubs type limits as floats)."""
    return float(date2num(moment))  # type: ignore[no-untyped-call]


def incident_figure(
    tl: IncidentTimeline,
    series: pd.DataFrame,
    now: datetime,
    mode_in_force: str | None = None,
    subject_targets: Sequence[str] = (),
) -> Figure:
    """The figure of `series` (`ttft_p99_series`) around incident `tl`, up to `now`
    at most: a window reaching past it (30 min after a recent resolution) had the last
    mode painted over a future no data or switch can be in. `mode_in_force` bands a
    window `tl` holds no switch for; `subject_targets` are coloured and named."""
    changes = tl.mode_changes
    modes = [changes["from_mode"].iloc[0], *changes["to_mode"]] if len(changes) else []
    if not modes and mode_in_force is not None:
        modes = [mode_in_force]
    fig, axes = plt.subplots(
        2 if modes else 1, 1, figsize=(12, 6), dpi=100, sharex=True, squeeze=False,
        gridspec_kw={"height_ratios": [14, 1]} if modes else None,
    )  # fmt: skip
    ax, bottom = axes[0][0], axes[-1][0]
    during = tl.phases["during"]
    title = None
    if not series.empty:
        title, coloured = _coloured(series, subject_targets, during[0])
        _draw_targets(ax, series, coloured)
    ax.axvspan(_x(during[0]), _x(during[1]), color="tab:red", alpha=0.08, label="incident")
    for at in changes["at"]:
        ax.axvline(_x(at), color="black", linestyle="--", linewidth=0.8)
    start, end = _x_limits(tl, series, now)
    ax.set_xlim(_x(start), _x(end))
    ax.set_ylabel("TTFT p99 per minute (s),\neach step one minute")
    ax.set_title(f"incident {tl.incident.id}: {tl.incident.record.subject}"[:110])
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, title=title,
              title_fontsize=8, frameon=False)  # fmt: skip
    if modes:
        _mode_band(bottom, modes, changes, start, end)
    locator = AutoDateLocator(tz=UTC)  # type: ignore[no-untyped-call]
    bottom.xaxis.set_major_locator(locator)
    bottom.xaxis.set_major_formatter(ConciseDateFormatter(locator, tz=UTC))  # type: ignore[no-untyped-call]
    bottom.set_xlabel(X_LABEL)
    fig.tight_layout()
    return fig


def _coloured(
    series: pd.DataFrame, subject_targets: Sequence[str], opened: datetime
) -> tuple[str, list[str]]:
    """The legend's title and the targets to colour: the subject's with data, else the
    ones whose p99 in the minutes from the opening on rose most over their median in
    the minutes that ended before it. With no such minute (`--before 10s`, a run that
    tripped in its first minute) nothing could rise and no target was coloured: the
    highest from the opening on are, under a title that says so."""
    named = [t for t in subject_targets if t in series.columns]
    if named:
        return "the incident's targets", named
    ends = series.index + pd.Timedelta(series.index.freq)
    before = series[ends <= opened].median()
    since = series[ends > opened].max()
    rise = (since / before).dropna()
    title = "largest p99 rise vs before"
    if rise.empty:
        rise, title = since.dropna(), "highest p99 from the opening\n(no minute before it)"
    top = rise.sort_values(ascending=False, kind="stable").index[:CONTEXT_TARGETS]
    return title, [str(t) for t in top]


def _draw_targets(ax: Axes, series: pd.DataFrame, coloured: list[str]) -> None:
    """Every target as steps (`gid` its id), the `coloured` ones named, the rest faint
    and named together; a log y axis when the values span many decades."""
    steps = _over_each_bucket(series)
    others = [t for t in series.columns if t not in coloured]
    for i, target in enumerate(others):
        label = f"other targets ({len(others)})" if i == 0 else "_nolegend_"
        ax.plot(steps.index, steps[target], color=FAINT, linewidth=0.8, drawstyle="steps-post",
                label=label, gid=str(target))  # fmt: skip
    for target in coloured:
        ax.plot(steps.index, steps[target], linewidth=1.8, drawstyle="steps-post",
                label=str(target), gid=str(target))  # fmt: skip
    values = series.to_numpy(dtype=float)
    positive = values[values > 0]
    if positive.size and math.log10(positive.max() / positive.min()) > LOG_SPAN_DECADES:
        ax.set_yscale("log")


def _x_limits(
    tl: IncidentTimeline, series: pd.DataFrame, now: datetime
) -> tuple[datetime, datetime]:
    """The span of the data, the incident and the switches, within the window and not
    past `now`."""
    start, end = tl.window[0], min(tl.window[1], now)
    moments = [*tl.phases["during"], *(at.to_pydatetime() for at in tl.mode_changes["at"])]
    if not series.empty:
        moments += [series.index[0].to_pydatetime(), _over_each_bucket(series).index[-1]]
    inside = [max(start, min(end, moment)) for moment in moments]
    return min(inside), max(inside)


def _mode_band(
    ax: Axes, modes: list[str], changes: pd.DataFrame, start: datetime, end: datetime
) -> None:
    """The fleet `modes` from `start` to `end` as coloured spans, one colour per mode,
    the switches in `changes` between them."""
    ats = [max(start, min(end, at.to_pydatetime())) for at in changes["at"]]
    bounds = [start, *ats, end]
    palette: list[tuple[float, float, float]] = list(plt.get_cmap("Pastel1").colors)  # type: ignore[attr-defined]
    colours: dict[str, tuple[float, float, float]] = {}
    for mode, left, right in zip(modes, bounds[:-1], bounds[1:], strict=True):
        if right <= left:  # a switch outside the window (linked to the incident)
            continue
        colour = colours.setdefault(str(mode), palette[len(colours) % len(palette)])
        ax.axvspan(_x(left), _x(right), color=colour)
        if (right - left) / (end - start) >= NAMED_SEGMENT:
            middle = left + (right - left) / 2
            ax.text(_x(middle), 0.5, str(mode), ha="center", va="center", fontsize=8)
    ax.set_yticks([])
    ax.set_ylabel("mode", rotation=0, ha="right", va="center", fontsize=8)
    handles = [Patch(color=c, label=m) for m, c in colours.items()]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.5), fontsize=7,
              ncol=math.ceil(len(handles) / 6), frameon=False, title_fontsize=7,
              title=f"fleet mode ({counted(len(changes), 'mode change')})")  # fmt: skip


def _over_each_bucket(series: pd.DataFrame) -> pd.DataFrame:
    """`series` with a last row at its last bucket's end repeating that bucket, so that
    drawn as steps from each bucket's start the last one spans its bucket too."""
    end = series.index[-1] + pd.Timedelta(series.index.freq)
    return pd.concat([series, series.iloc[[-1]].set_axis([end])])


def plot_incident(
    tl: IncidentTimeline,
    series: pd.DataFrame,
    path: Path,
    now: datetime,
    mode_in_force: str | None = None,
    subject_targets: Sequence[str] = (),
) -> None:
    """Write a PNG of `series` (bucket x target TTFT p99) around incident `tl`."""
    fig = incident_figure(tl, series, now, mode_in_force, subject_targets)
    try:
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)
