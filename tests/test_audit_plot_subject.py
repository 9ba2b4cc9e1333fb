"""`audit incident --plot` answers the postmortem question: the incident's own targets.

For `card:l40s` the legend named the six targets with the highest p99 peaks (five 70B
targets and one L40S), a linear axis flattened the L40S rise under the 70B targets' 300 s
minutes, and a 9-minute run sat in a 30-minutes-either-side axis, 80 % of it empty."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from matplotlib.axes import Axes
from matplotlib.dates import date2num
from sqlalchemy import Engine
from test_audit_cli import ok

from slaguard.audit import plot, service
from slaguard.audit.engine import create_audit_engine
from slaguard.audit.incident_subject import served_models, subject_targets
from slaguard.audit.incident_timeline import IncidentTimeline, incident_timeline
from slaguard.audit.migrate import upgrade
from slaguard.audit.plot import incident_figure
from slaguard.audit.records import OutcomeRecord
from slaguard.audit.sample import load_run, synthetic_run

START_S = 1_796_000_000.0
L40S = [f"l40s-8b-{i}" for i in range(6)]
SERVED = pd.DataFrame(
    [("h100-70b-0", "h100", "llama3.1-70b"), ("h100-8b-0", "h100", "llama3.1-8b"),
     ("l40s-8b-0", "l40s", "llama3.1-8b"), ("l40s-8b-1", "l40s", "llama3.1-8b")],
    columns=["target_id", "card_type", "model_id"],
)  # fmt: skip


@pytest.mark.parametrize(
    ("subject", "evidence", "targets"),
    [
        ("target:l40s-8b-1", {}, ["l40s-8b-1"]),
        # a simulated run stores the verdict's evidence itself
        ("card:l40s", {"model": "llama3.1-8b"}, ["l40s-8b-0", "l40s-8b-1"]),
        # the service stores the opening verdicts, each with its evidence
        (
            "card:h100",
            {"verdicts": [{"subject": "card:h100", "evidence": {"model": "llama3.1-70b"}}]},
            ["h100-70b-0"],
        ),
        ("card:h100", {}, ["h100-70b-0", "h100-8b-0"]),
        ("model:llama3.1-8b@v2", {}, ["h100-8b-0", "l40s-8b-0", "l40s-8b-1"]),
        ("model:llama3.1-70b", {}, ["h100-70b-0"]),
        (
            "fleet",
            {"anomalous_targets": [{"target": "l40s-8b-1"}, {"target": "h100-8b-0"}]},
            ["h100-8b-0", "l40s-8b-1"],
        ),
        ("prefix:system-prompt-7", {}, []),
        ("SlaguardTTFTHigh, SlaguardSLAErrorBudgetBurn", {}, []),
    ],
)
def test_a_subject_covers_its_targets(
    subject: str, evidence: dict[str, Any], targets: list[str]
) -> None:
    assert subject_targets(subject, evidence, SERVED) == targets


def card_run(tmp: Path, subject: str = "card:l40s") -> str:
    """150 s of traffic, the 70B targets' TTFT 300x (minutes of hundreds of seconds), one
    8B target degraded a 70B request, the incident on `subject`; the SQLite file's path."""
    run = synthetic_run(120, start_s=START_S, duration_s=150.0, seed=3)
    big = {d.request_id for d in run.decisions if d.model_id == "llama3.1-70b"}
    outcomes = [
        dataclasses.replace(o, ttft_s=o.ttft_s * 300) if o.request_id in big and o.ttft_s else o
        for o in run.outcomes
    ]
    asked = next(d for d in run.decisions if d.target_id == "h100-8b-0")
    degraded = dataclasses.replace(
        asked, request_id="degraded-1", model_id="llama3.1-70b", outcome="degraded"
    )
    done = OutcomeRecord("degraded-1", asked.decided_at_s + 1, 0.2, 0.02, 1.0, "ok", True)
    incident = dataclasses.replace(run.incident, subject=subject, evidence={"model": "llama3.1-8b"})
    run = dataclasses.replace(
        run,
        decisions=[*run.decisions, degraded],
        outcomes=[*outcomes, done],
        incident=incident,
    )
    engine = create_audit_engine(f"sqlite:///{tmp / 'card.db'}")
    upgrade(engine)
    load_run(engine, run, tmp / "spill")
    engine.dispose()
    return str(tmp / "card.db")


@pytest.fixture(scope="module")
def card_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    return card_run(tmp_path_factory.mktemp("card"))


def _timeline(engine: Engine) -> tuple[IncidentTimeline, pd.DataFrame, datetime]:
    now = datetime.fromtimestamp(START_S + 3600, UTC)
    timeline = incident_timeline(engine, 1, now=now)
    return timeline, service.ttft_p99_series(engine, *timeline.window), now


@pytest.fixture
def drawn(card_db: str) -> Iterator[tuple[Axes, pd.DataFrame, IncidentTimeline]]:
    """Incident 1 of `card_db` as `audit incident --plot` draws it."""
    engine = create_audit_engine(f"sqlite:///{card_db}")
    timeline, series, now = _timeline(engine)
    rec = timeline.incident.record
    covered = subject_targets(rec.subject, rec.evidence, served_models(engine, *timeline.window))
    engine.dispose()
    fig = incident_figure(timeline, series, now, subject_targets=covered)
    yield fig.axes[0], series, timeline
    plt.close(fig)


def named(ax: Axes) -> list[str]:
    return [t.get_text() for t in ax.get_legend().texts]


def test_served_models_leave_degraded_decisions_out(card_db: str) -> None:
    engine = create_audit_engine(f"sqlite:///{card_db}")
    timeline, _, _ = _timeline(engine)
    served = served_models(engine, *timeline.window)
    engine.dispose()
    assert served[served["target_id"] == "h100-8b-0"]["model_id"].tolist() == ["llama3.1-8b"]
    assert subject_targets("card:h100", {"model": "llama3.1-70b"}, served) == [
        "h100-70b-0",
        "h100-70b-1",
    ]


def test_the_legend_names_the_subjects_targets(
    drawn: tuple[Axes, pd.DataFrame, IncidentTimeline],
) -> None:
    ax, series, _ = drawn
    others = len(series.columns) - len(L40S)
    assert named(ax) == [f"other targets ({others})", *L40S, "incident"]
    assert ax.get_legend().get_title().get_text() == "the incident's targets"
    faint = [ln for ln in ax.get_lines() if ln.get_color() == plot.FAINT]
    assert sorted(ln.get_gid() for ln in faint) == sorted(set(series.columns) - set(L40S))


def test_values_over_decades_get_a_log_axis(
    drawn: tuple[Axes, pd.DataFrame, IncidentTimeline],
) -> None:
    ax, series, _ = drawn
    assert series.max().max() / series.min().min() > 10**1.5
    assert ax.get_yscale() == "log"


@pytest.mark.parametrize(("peak_s", "scale"), [(3.0, "linear"), (3.3, "log")])
def test_the_axis_turns_log_past_one_and_a_half_decades(
    card_db: str, peak_s: float, scale: str
) -> None:
    """0.1 s to 3 s is 1.48 decades, to 3.3 s 1.52."""
    engine = create_audit_engine(f"sqlite:///{card_db}")
    timeline, series, now = _timeline(engine)
    engine.dispose()
    rows = pd.date_range(series.index[0], periods=3, freq="1min")
    values = pd.DataFrame({"l40s-8b-0": [0.1, 0.3, 0.3], "a100-70b": [1.0, peak_s, 1.0]}, rows)
    fig = incident_figure(timeline, values, now, subject_targets=L40S)
    try:
        assert fig.axes[0].get_yscale() == scale
    finally:
        plt.close(fig)


def test_the_time_axis_spans_the_data_not_the_window(
    drawn: tuple[Axes, pd.DataFrame, IncidentTimeline],
) -> None:
    """The decisions: 150 s from :20 past a minute, three one-minute buckets; the
    incident from +50 s to +100 s; the first switch at -300 s; the window 30 minutes
    either side of the incident."""
    ax, series, timeline = drawn
    assert series.index[0] == datetime.fromtimestamp(START_S - 20, UTC) and len(series) == 3
    switch = datetime.fromtimestamp(START_S - 300, UTC)
    assert timeline.mode_changes["at"].iloc[0] == switch
    last = datetime.fromtimestamp(START_S + 160, UTC)
    assert ax.get_xlim() == pytest.approx((date2num(switch), date2num(last)), abs=1e-9)
    assert timeline.window[0] < switch and timeline.window[1] > last


def test_a_subject_naming_no_target_colours_the_largest_rises(card_db: str) -> None:
    """A hot prefix names no target: the targets whose minutes from the opening rose most
    over their minutes before it are coloured, a target with no minute before is not."""
    engine = create_audit_engine(f"sqlite:///{card_db}")
    timeline, series, now = _timeline(engine)
    engine.dispose()
    rows = pd.date_range(series.index[0], periods=3, freq="1min")
    rises = pd.DataFrame({f"x{k}": [1.0, k, 1.0] for k in range(1, 9)}, index=rows)
    rises["new"] = [float("nan"), 50.0, 50.0]
    fig = incident_figure(timeline, rises, now)
    try:
        ax = fig.axes[0]
        assert named(ax) == ["other targets (3)", "x8", "x7", "x6", "x5", "x4", "x3", "incident"]
        assert ax.get_legend().get_title().get_text() == "largest p99 rise vs before"
    finally:
        plt.close(fig)


def test_with_no_minute_before_the_opening_the_highest_are_coloured(card_db: str) -> None:
    """A hot prefix opened in the first minute of the window (`--before 10s`, a run that
    tripped at once): no target has a minute before to rise from, and the plot coloured
    none under "largest p99 rise vs before". The highest minutes from the opening are
    coloured instead, and the legend says so."""
    engine = create_audit_engine(f"sqlite:///{card_db}")
    timeline, series, now = _timeline(engine)
    engine.dispose()
    opened = timeline.phases["during"][0]
    rows = pd.date_range(series.index[0] + pd.Timedelta("1min"), periods=2, freq="1min")
    assert rows[0] < opened < rows[0] + pd.Timedelta("1min")
    peaks = pd.DataFrame({f"x{k}": [1.0, float(k)] for k in range(1, 9)}, index=rows)
    fig = incident_figure(timeline, peaks, now)
    try:
        ax = fig.axes[0]
        assert named(ax) == ["other targets (2)", "x8", "x7", "x6", "x5", "x4", "x3", "incident"]
        title = ax.get_legend().get_title().get_text()
        assert title == "highest p99 from the opening\n(no minute before it)"
    finally:
        plt.close(fig)


def test_the_cli_plots_the_subjects_targets(
    card_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[object] = []

    def plot_incident(*args: object, **kwargs: object) -> None:
        seen.append(kwargs["subject_targets"])

    monkeypatch.setattr(plot, "plot_incident", plot_incident)
    ok("audit", "incident", "1", "--db", card_db, "--plot", str(tmp_path / "card.png"))
    assert seen == [L40S]
