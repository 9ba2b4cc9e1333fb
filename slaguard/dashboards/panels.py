"""Shared pieces of the slaguard dashboards: data source, variables, selectors, panels.

Every dashboard starts with a `datasource` variable and the chained `fleet` -> `job` ->
`instance` query variables; every panel queries through `${datasource}` and filters with
`SEL` (or `TARGET_SEL`), so one dashboard serves every fleet and Prometheus.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, Self, TypeVar

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus, stat, statetimeline, timeseries
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import units

DATASOURCE = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")

SEL = 'fleet=~"$fleet", job=~"$job", instance=~"$instance"'
"""Label filter for every slaguard series."""

TARGET_SEL = f'{SEL}, card_type=~"$card_type", target=~"$target"'
"""Label filter for per-target series (targets dashboard only)."""

_CARD_SEL = f'{SEL}, card_type=~"$card_type"'

SLO_BUDGET = 0.01
"""Error budget of the 99 % SLA SLO (docs/alerting.md); burn rate = violation ratio / this."""

TOKENS_PER_SECOND = "suffix: tok/s"
BURN_RATE = "suffix:x"

Query = tuple[str, str]
"""(PromQL, legend format)."""

Row = tuple[str, Sequence[cogbuilder.Builder[dm.Panel]]]
"""(row title, the panels under it)."""


def _query_variable(name: str, label: str, query: str) -> db.QueryVariable:
    return (
        db.QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query(query)
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dm.VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
    )


def variables(*, per_target: bool = False) -> list[db.QueryVariable | db.DatasourceVariable]:
    """`datasource`, then fleet -> job -> instance (-> card_type -> target), each chained."""
    out: list[db.QueryVariable | db.DatasourceVariable] = [
        db.DatasourceVariable("datasource").label("Data source").type("prometheus"),
        _query_variable("fleet", "Fleet", "label_values(slaguard_build_info, fleet)"),
        _query_variable("job", "Job", 'label_values(slaguard_build_info{fleet=~"$fleet"}, job)'),
        _query_variable(
            "instance",
            "Instance",
            'label_values(slaguard_build_info{fleet=~"$fleet", job=~"$job"}, instance)',
        ),
    ]
    if per_target:
        out += [
            _query_variable(
                "card_type",
                "Card type",
                f"label_values(slaguard_target_queue_depth{{{SEL}}}, card_type)",
            ),
            _query_variable(
                "target",
                "Target",
                f"label_values(slaguard_target_queue_depth{{{_CARD_SEL}}}, target)",
            ),
        ]
    return out


def dashboard(
    uid: str,
    title: str,
    description: str,
    rows: Sequence[Row],
    *,
    per_target: bool = False,
    annotations: Sequence[Annotation] = (),
) -> db.Dashboard:
    """A dashboard with the slaguard tags, time range and variables, then `rows` in order."""
    board = (
        db.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["slaguard"])
        .time("now-3h", "now")
        .refresh("30s")
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
    )
    for var in variables(per_target=per_target):
        board = board.with_variable(var)
    for note in annotations:
        board = board.annotation(note)
    for row_title, panels in rows:
        board = board.with_row(db.Row(row_title))
        for panel in panels:
            board = board.with_panel(panel)
    return board


class _PrometheusAnnotationQuery(dm.AnnotationQuery):
    """An annotation query with the Prometheus data source's display fields, which the
    SDK's schema lacks: Grafana takes a marker's title and text only from `titleFormat`
    and `textFormat`, and its tags only from the labels `tagKeys` names (a blank marker
    without them)."""

    def __init__(self, note: Annotation) -> None:
        super().__init__(
            name=note.name, datasource=DATASOURCE, enable=True, icon_color=note.color,
            expr=note.expr,
        )  # fmt: skip
        self.display = {
            "titleFormat": note.title,
            "textFormat": note.text,
            "tagKeys": ",".join(note.tag_keys),
        }

    def to_json(self) -> dict[str, object]:
        return {**super().to_json(), **self.display}


@dataclass(frozen=True, slots=True)
class Annotation(cogbuilder.Builder[dm.AnnotationQuery]):
    """An enabled Prometheus annotation: a marker wherever `expr` has a value, titled and
    described from its labels (`{{label}}`) and tagged with the `tag_keys` labels' values."""

    name: str
    color: str
    expr: str
    title: str
    text: str
    tag_keys: tuple[str, ...]

    def build(self) -> dm.AnnotationQuery:
        return _PrometheusAnnotationQuery(self)


def _targets(queries: Sequence[Query]) -> list[cogbuilder.Builder[cogvariants.Dataquery]]:
    return [
        prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(chr(ord("A") + i))
        for i, (expr, legend) in enumerate(queries)
    ]


class _Panel(Protocol):
    """What the time series, stat and state timeline panel builders have in common."""

    def title(self, title: str) -> Self: ...
    def description(self, description: str) -> Self: ...
    def datasource(self, datasource: dm.DataSourceRef) -> Self: ...
    def unit(self, unit: str) -> Self: ...
    def targets(self, targets: list[cogbuilder.Builder[cogvariants.Dataquery]]) -> Self: ...
    def height(self, h: int) -> Self: ...
    def span(self, w: int) -> Self: ...


P = TypeVar("P", bound=_Panel)


def _panel(
    panel: P,
    title: str,
    description: str,
    unit: str,
    queries: Sequence[Query],
    *,
    height: int,
    span: int,
) -> P:
    """Title, description, data source, unit, queries and size: set alike on every panel."""
    return (
        panel.title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .targets(_targets(queries))
        .height(height)
        .span(span)
    )


def _thresholds(steps: Sequence[tuple[float, str]], base: str) -> db.ThresholdsConfig:
    """`base` colours everything below the first step: red where low is bad (budget left)."""
    return (
        db.ThresholdsConfig()
        .mode(dm.ThresholdsMode.ABSOLUTE)
        .steps(
            [dm.Threshold(value=None, color=base)]
            + [dm.Threshold(value=v, color=c) for v, c in steps]
        )
    )


def ts(
    title: str,
    description: str,
    unit: str,
    queries: Sequence[Query],
    *,
    thresholds: Sequence[tuple[float, str]] = (),
    span: int = 12,
    bars: bool = False,
) -> timeseries.Panel:
    """A time series panel; `thresholds` are drawn as dashed lines (budgets, SLOs)."""
    panel = _panel(
        timeseries.Panel(), title, description, unit, queries, height=8, span=span
    ).legend(
        cb.VizLegendOptions()
        .display_mode(cm.LegendDisplayMode.TABLE)
        .placement(cm.LegendPlacement.BOTTOM)
        .show_legend(True)
        .calcs(["lastNotNull", "max"])
    )
    if bars:
        panel = panel.draw_style(cm.GraphDrawStyle.BARS).fill_opacity(80)
    if thresholds:
        panel = panel.thresholds(_thresholds(thresholds, "green")).thresholds_style(
            cb.GraphThresholdsStyleConfig().mode(cm.GraphThresholdsStyleMode.DASHED)
        )
    return panel


def single_stat(
    title: str,
    description: str,
    unit: str,
    queries: Sequence[Query],
    *,
    thresholds: Sequence[tuple[float, str]] = (),
    base_color: str = "green",
    span: int = 6,
) -> stat.Panel:
    """A stat panel showing the last value, coloured `base_color` below the first threshold."""
    panel = (
        _panel(stat.Panel(), title, description, unit, queries, height=5, span=span)
        .graph_mode(cm.BigValueGraphMode.AREA)
        .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
    )
    if thresholds:
        panel = panel.thresholds(_thresholds(thresholds, base_color))
    return panel


def mode_timeline(
    title: str, description: str, query: Query, *, span: int = 24
) -> statetimeline.Panel:
    """A state timeline for enum gauges: a green bar while a state's value is 1."""
    current = {
        "1": dm.ValueMappingResult(text="current", color="green", index=0),
        "0": dm.ValueMappingResult(text="-", color="transparent", index=1),
    }
    return (
        _panel(
            statetimeline.Panel(), title, description, units.NoUnit, [query], height=6, span=span
        )
        .mappings([dm.ValueMap(options=current)])
        .show_value(cm.VisibilityMode.NEVER)
    )


def rate(metric: str, by: str, sel: str = SEL, *, window: str = "$__rate_interval") -> str:
    """`sum by (<by>) (rate(<metric>{sel}[window]))`; `by=""` sums everything."""
    grouping = f"sum by ({by}) " if by else "sum "
    return f"{grouping}(rate({metric}{{{sel}}}[{window}]))"


def increase(metric: str, by: str, sel: str = SEL, *, window: str = "$__rate_interval") -> str:
    """`sum by (<by>) (increase(<metric>{sel}[window]))`; `by=""` sums everything."""
    grouping = f"sum by ({by}) " if by else "sum"
    return f"{grouping}(increase({metric}{{{sel}}}[{window}]))"


def increase_once(metric: str, by: str, sel: str = SEL, *, window: str = "$__rate_interval") -> str:
    """`max by (<by>) (increase(<metric>{sel}[window]))`, for an event every replica counts
    (a fleet mode change): `sum` would count it once per replica."""
    return f"max by ({by}) (increase({metric}{{{sel}}}[{window}]))"


def gauge(metric: str, by: str, sel: str = SEL) -> str:
    """`max by (<by>) (<metric>{sel})`: one value per group however many instances report it."""
    grouping = f"max by ({by}) " if by else "max"
    return f"{grouping}({metric}{{{sel}}})"


FLEET_MODE: Query = (gauge("slaguard_fleet_mode", "mode"), "{{mode}}")
"""The fleet mode enum gauge, for `mode_timeline`."""


def quantile(q: float, metric: str, by: str, sel: str = SEL) -> str:
    """`histogram_quantile(q, ...)` of a histogram's buckets, grouped by `by` and `le`."""
    group = f"{by}, le" if by else "le"
    return f"histogram_quantile({q}, {rate(f'{metric}_bucket', group, sel)})"


def ratio(
    numerator: str, denominator: str, by: str, sel: str = SEL, *, window: str = "$__rate_interval"
) -> str:
    """Rate of one counter over the rate of another, grouped alike."""
    top, bottom = rate(numerator, by, sel, window=window), rate(denominator, by, sel, window=window)
    return f"{top} / {bottom}"
