"""`audit incident --plot` on an incident whose traffic spans two and a half minutes with
ten mode switches: every target shows, the switches stay readable, the x axis says UTC.

The figure drew a target with one per-minute bucket as a line of one point (nothing), and
wrote each switch as rotated text at its time, ten of them piled into one black block."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from matplotlib.cbook import STEP_LOOKUP_MAP
from matplotlib.dates import date2num
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from test_audit_cli import ok

from slaguard.audit import plot, service
from slaguard.audit.engine import create_audit_engine
from slaguard.audit.incident_timeline import IncidentTimeline, incident_timeline
from slaguard.audit.migrate import upgrade
from slaguard.audit.plot import incident_figure
from slaguard.audit.records import ModeChangeRecord
from slaguard.audit.sample import load_run, synthetic_run

START_S = 1_796_000_000.0
MODES = ["rollout(10)", "held_round_robin", "rollout(10)", "rollout(50)", "held_round_robin",
         "rollout(50)", "rollout(100)", "learned", "round_robin", "rollout(10)"]  # fmt: skip


@pytest.fixture(scope="module")
def short_run(tmp_path_factory: pytest.TempPathFactory) -> str:
    """150 s of traffic and a switch every 12 s, in a SQLite file; its path."""
    tmp = tmp_path_factory.mktemp("plot")
    switches = [
        ModeChangeRecord(START_S + 10 + 12 * i, ["round_robin", *MODES][i], mode,
                         "drill", "guard", {}, None)
        for i, mode in enumerate(MODES)
    ]  # fmt: skip
    run = dataclasses.replace(
        synthetic_run(120, start_s=START_S, duration_s=150.0, seed=3), mode_changes=switches
    )
    engine = create_audit_engine(f"sqlite:///{tmp / 'short.db'}")
    upgrade(engine)
    load_run(engine, run, tmp / "spill")
    engine.dispose()
    return str(tmp / "short.db")


def draw_incident(short_run: str) -> tuple[Figure, pd.DataFrame, IncidentTimeline]:
    """Incident 1 of the short run as `audit incident --plot` draws it, an hour on."""
    engine = create_audit_engine(f"sqlite:///{short_run}")
    now = datetime.fromtimestamp(START_S + 3600, UTC)
    timeline = incident_timeline(engine, 1, now=now)
    series = service.ttft_p99_series(engine, *timeline.window)
    engine.dispose()
    fig = incident_figure(timeline, series, now)
    fig.canvas.draw()
    return fig, series, timeline


@pytest.fixture
def figure(short_run: str) -> Iterator[tuple[Figure, pd.DataFrame]]:
    fig, series, _ = draw_incident(short_run)
    yield fig, series
    plt.close(fig)


def drawn(line: Line2D) -> tuple[list[float], list[float]]:
    """The vertices `line` is drawn through (its steps, if stepped), x as date numbers."""
    xs, ys = line.get_xdata(orig=False), line.get_ydata(orig=False)
    stepped = STEP_LOOKUP_MAP[line.get_drawstyle()](xs, ys)
    return list(map(float, stepped[0])), list(map(float, stepped[1]))


def test_every_target_shows_even_with_one_bucket(figure: tuple[Figure, pd.DataFrame]) -> None:
    fig, series = figure
    lonely = [t for t in series.columns if series[t].notna().sum() == 1]
    assert lonely, "the run should hold a target with a single per-minute bucket"
    for line in fig.axes[0].get_lines():
        if line.get_linestyle() == "--":  # a mode switch
            continue
        xs, ys = drawn(line)
        segments = sum(
            not math.isnan(y0) and not math.isnan(y1) and x1 > x0
            for x0, x1, y0, y1 in zip(xs[:-1], xs[1:], ys[:-1], ys[1:], strict=True)
        )
        assert line.get_marker() not in (None, "None", "") or segments, line.get_label()


def test_ten_switches_in_two_minutes_stay_readable(figure: tuple[Figure, pd.DataFrame]) -> None:
    fig, _ = figure
    texts = [t for ax in fig.axes for t in ax.texts if t.get_text()]
    boxes = [t.get_window_extent() for t in texts]
    for (a, ta), (b, tb) in itertools.combinations(zip(boxes, texts, strict=True), 2):
        assert not a.overlaps(b), (ta.get_text(), tb.get_text())
    named = {t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().texts}
    assert set(MODES) <= named
    assert fig.axes[-1].get_legend().get_title().get_text() == "fleet mode (10 mode changes)"


def test_each_minute_is_drawn_over_the_minute_it_covers(short_run: str) -> None:
    """Each minute's p99 was one point at the minute's start: an incident opening at
    :38 with its traffic in that minute showed no TTFT inside its shaded span, and the
    minute's traffic sat left of the switches that shaped it."""
    fig, series, timeline = draw_incident(short_run)
    try:
        opened = timeline.phases["during"][0]
        minute = series.loc[pd.Timestamp(opened).floor("1min")]
        target = str(minute.idxmax())  # the busiest of the incident's opening minute
        line = {ln.get_gid(): ln for ln in fig.axes[0].get_lines()}[target]
        xs, ys = drawn(line)
        spans = [
            (x0, x1)
            for x0, x1, y0, y1 in zip(xs[:-1], xs[1:], ys[:-1], ys[1:], strict=True)
            if y0 == y1 == minute[target]
        ]
        assert any(x0 <= date2num(opened) <= x1 for x0, x1 in spans), spans
        last = series[target].last_valid_index() + pd.Timedelta(minutes=1)
        finite = [x for x, y in zip(xs, ys, strict=True) if not math.isnan(y)]
        assert max(finite) == pytest.approx(date2num(last), abs=1e-9)
        assert "per minute" in fig.axes[0].get_ylabel()
    finally:
        plt.close(fig)


def test_the_time_axis_says_utc(figure: tuple[Figure, pd.DataFrame]) -> None:
    fig, _ = figure
    assert "UTC" in fig.axes[-1].get_xlabel()


def test_the_cli_writes_the_png(short_run: str, tmp_path: Path) -> None:
    png = tmp_path / "short.png"
    ok("audit", "incident", "1", "--db", short_run, "--plot", str(png))
    assert png.read_bytes().startswith(b"\x89PNG")


def test_nothing_is_drawn_past_now(short_run: str) -> None:
    """Resolved at +100 s and plotted at +130 s, inside the last minute of data: the
    window's 30 min after the resolution are mostly future, where the last mode's band
    was painted anyway."""
    engine = create_audit_engine(f"sqlite:///{short_run}")
    now = datetime.fromtimestamp(START_S + 130, UTC)
    timeline = incident_timeline(engine, 1, now=now)
    series = service.ttft_p99_series(engine, *timeline.window)
    engine.dispose()
    assert timeline.window[1] > now
    fig = incident_figure(timeline, series, now)
    try:
        right = float(date2num(now))
        band = fig.axes[-1]
        assert [ax.get_xlim()[1] for ax in fig.axes] == pytest.approx(
            [right] * len(fig.axes), abs=1e-6
        )
        assert (
            max(p.get_extents().x1 for p in band.patches)
            <= band.transData.transform((right, 0))[0] + 0.5
        )
    finally:
        plt.close(fig)


def test_a_window_without_a_switch_is_banded_with_the_mode_in_force(short_run: str) -> None:
    """No switch in the window drew no mode band: the reader could not tell which mode
    the fleet was in."""
    engine = create_audit_engine(f"sqlite:///{short_run}")
    now = datetime.fromtimestamp(START_S + 3600, UTC)
    timeline = incident_timeline(engine, 1, now=now)
    series = service.ttft_p99_series(engine, *timeline.window)
    engine.dispose()
    quiet = dataclasses.replace(timeline, mode_changes=timeline.mode_changes.iloc[0:0])
    fig = incident_figure(quiet, series, now, mode_in_force="held_round_robin")
    try:
        band = fig.axes[-1]
        assert len(fig.axes) == 2 and len(band.patches) == 1
        left, right = band.get_xlim()
        extents = band.patches[0].get_extents()
        x0, _ = band.transData.transform((left, 0))
        x1, _ = band.transData.transform((right, 0))
        assert (extents.x0, extents.x1) == pytest.approx((x0, x1), abs=0.5)
        assert [t.get_text() for t in band.get_legend().texts] == ["held_round_robin"]
        assert band.get_legend().get_title().get_text() == "fleet mode (0 mode changes)"
    finally:
        plt.close(fig)


def quiet_run(tmp: Path, switches: list[ModeChangeRecord], evidence: dict[str, object]) -> str:
    """`short_run`'s traffic with these switches instead, its incident with `evidence`."""
    run = synthetic_run(120, start_s=START_S, duration_s=150.0, seed=3)
    run = dataclasses.replace(
        run,
        mode_changes=switches,
        incident=dataclasses.replace(run.incident, evidence=evidence),
    )
    engine = create_audit_engine(f"sqlite:///{tmp / 'quiet.db'}")
    upgrade(engine)
    load_run(engine, run, tmp / "spill")
    engine.dispose()
    return str(tmp / "quiet.db")


@pytest.mark.parametrize(
    ("switches", "evidence", "mode"),
    [
        (  # switched to learned two hours before: the window is all learned
            [ModeChangeRecord(START_S - 7200, "round_robin", "learned", "plan", "guard", {})],
            {},
            "learned",
        ),
        (  # first switched two hours after: the window is all the mode that switch left
            [ModeChangeRecord(START_S + 7200, "round_robin", "learned", "plan", "guard", {})],
            {},
            "round_robin",
        ),
        (  # never switched: the mode the guard booked on the incident
            [],
            {"guard": {"mode_before": "round_robin", "mode_after": "round_robin"}},
            "round_robin",
        ),
    ],
)
def test_the_cli_plots_the_mode_in_force_when_no_switch_is_in_the_window(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    switches: list[ModeChangeRecord],
    evidence: dict[str, object],
    mode: str,
) -> None:
    db = quiet_run(tmp_path, switches, evidence)
    drawn: list[str | None] = []

    def plot_incident(*args: object, mode_in_force: str | None = None, **_: object) -> None:
        drawn.append(mode_in_force)

    monkeypatch.setattr(plot, "plot_incident", plot_incident)
    ok("audit", "incident", "1", "--db", db, "--plot", str(tmp_path / "quiet.png"))
    assert drawn == [mode]
