"""Dashboards: committed JSON equals a fresh build, Grafana habits, PromQL that parses."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard
from prometheus_client import CollectorRegistry
from typer.testing import CliRunner

from slaguard.cli.main import app
from slaguard.dashboards import BUILDERS, PanelQuery, panel_queries, render_all
from slaguard.fleet import load_fleet
from slaguard.service.gateway_metrics import GatewayMetrics
from slaguard.telemetry import SlaguardMetrics, fleet_target_labels
from slaguard.telemetry.promql import check_promql, referenced_series

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "dashboards"
WINDOW = re.compile(r"\[([^\]]+)\]")
SLO_WINDOWS = {"5m", "30m", "1h", "6h", "3d", "30d"}
"""Fixed windows, allowed only in the error-budget panels (burn rates are per window)."""
PROMETHEUS_ANNOTATION_FIELDS = ("titleFormat", "textFormat", "tagKeys")


@pytest.fixture(scope="module")
def rendered() -> dict[str, str]:
    return render_all()


@pytest.fixture(scope="module")
def boards(rendered: dict[str, str]) -> dict[str, dict[str, Any]]:
    return {name.removesuffix(".json"): json.loads(text) for name, text in rendered.items()}


@pytest.fixture(scope="module")
def queries() -> list[PanelQuery]:
    return panel_queries(annotations=True)


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in board["panels"] if p["type"] != "row"]


def test_committed_json_matches_a_fresh_build(rendered: dict[str, str]) -> None:
    committed = {p.name: p.read_text(encoding="utf-8") for p in COMMITTED.glob("*.json")}
    assert sorted(committed) == sorted(rendered)
    stale = [name for name, text in rendered.items() if committed[name] != text]
    assert stale == [], "run: slaguard dashboards build --out dashboards/"


def test_json_round_trips_through_the_sdk_schema_model(rendered: dict[str, str]) -> None:
    """Except the Prometheus annotation display fields, which the SDK's schema lacks."""
    for name, text in rendered.items():
        board = json.loads(text)
        for note in board.get("annotations", {}).get("list", []):
            for key in PROMETHEUS_ANNOTATION_FIELDS:
                note.pop(key, None)
        model = Dashboard.from_json(board)
        encoded = JSONEncoder(sort_keys=True, indent=2).encode(model)
        assert encoded == json.dumps(board, sort_keys=True, indent=2), name


def test_the_four_dashboards_exist_with_unique_ids_and_titles(
    boards: dict[str, dict[str, Any]],
) -> None:
    assert set(boards) == {"slaguard-fleet", "slaguard-targets", "slaguard-guard", "slaguard-ops"}
    assert set(BUILDERS) == set(boards)
    for uid, board in boards.items():
        assert board["uid"] == uid
        ids = [p["id"] for p in board["panels"]]
        assert ids == list(range(1, len(ids) + 1)), uid
        titles = [p["title"] for p in panels(board)]
        assert len(titles) == len(set(titles)), uid
        assert len(titles) >= 8, uid


def test_datasource_variable_first_then_chained_query_variables(
    boards: dict[str, dict[str, Any]],
) -> None:
    for uid, board in boards.items():
        variables = board["templating"]["list"]
        names = [v["name"] for v in variables]
        assert names[:4] == ["datasource", "fleet", "job", "instance"], uid
        assert variables[0]["type"] == "datasource" and variables[0]["query"] == "prometheus"
        by_name = {v["name"]: v for v in variables}
        assert '"$fleet"' in by_name["job"]["query"], uid
        assert '"$fleet"' in by_name["instance"]["query"], uid
        assert '"$job"' in by_name["instance"]["query"], uid
        for var in variables[1:]:
            assert var["type"] == "query" and var["datasource"]["uid"] == "${datasource}"
            assert var["query"].startswith("label_values(")
    assert [v["name"] for v in boards["slaguard-targets"]["templating"]["list"][4:]] == [
        "card_type",
        "target",
    ]


def test_every_panel_has_a_unit_and_queries_through_the_datasource_variable(
    boards: dict[str, dict[str, Any]],
) -> None:
    for uid, board in boards.items():
        for panel in panels(board):
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert panel["fieldConfig"]["defaults"].get("unit"), (uid, panel["title"])
            assert panel["targets"], (uid, panel["title"])


def test_ranges_use_rate_interval_except_the_slo_windows(
    boards: dict[str, dict[str, Any]],
) -> None:
    for uid, board in boards.items():
        for panel in panels(board):
            for target in panel["targets"]:
                windows = set(WINDOW.findall(target["expr"]))
                if "budget" in panel["title"].lower():
                    assert windows <= SLO_WINDOWS, (uid, panel["title"], windows)
                else:
                    assert windows <= {"$__rate_interval", "$__range"}, (uid, panel["title"])


def test_budgets_and_mode_transitions_are_drawn(boards: dict[str, dict[str, Any]]) -> None:
    latency = next(p for p in panels(boards["slaguard-fleet"]) if "latency" in p["title"])
    steps = [s["value"] for s in latency["fieldConfig"]["defaults"]["thresholds"]["steps"]]
    assert steps == [None, 0.003, 0.05]
    assert latency["fieldConfig"]["defaults"]["unit"] == "s"
    notes = {a["name"]: a for a in boards["slaguard-guard"]["annotations"]["list"]}
    assert "slaguard_fleet_mode_transitions_total" in notes["Mode transitions"]["expr"]
    assert notes["Mode transitions"]["datasource"]["uid"] == "${datasource}"


def test_error_budget_left_is_red_when_spent(boards: dict[str, dict[str, Any]]) -> None:
    """The base step was green, so an exhausted budget (-21.5 during a burn) showed green."""
    (budget,) = [p for p in panels(boards["slaguard-fleet"]) if "budget left" in p["title"]]
    steps = budget["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [(s["value"], s["color"]) for s in steps] == [
        (None, "red"), (0.25, "orange"), (0.5, "green"),
    ]  # fmt: skip


def test_the_rollout_panel_plots_the_guards_own_comparison(queries: list[PanelQuery]) -> None:
    """Dividing the two arm ratio gauges gave NaN (0/0) in every healthy sample and +Inf
    whenever round-robin had no misses; the guard publishes the number it compares."""
    arms = [q for q in queries if "slaguard_rollout_arm_sla_violation_ratio" in q.expr]
    assert arms and not [q for q in arms if "/" in q.expr]
    compare = [q.expr for q in queries if q.panel_title == "Rollout comparison: score vs threshold"]
    assert len(compare) == 2
    assert "slaguard_detector_score{" in compare[0] and "slaguard_detector_threshold{" in compare[1]
    assert all('detector="rollout_compare"' in expr for expr in compare)


def test_annotations_are_titled_and_tagged_from_their_labels(
    boards: dict[str, dict[str, Any]],
) -> None:
    """Grafana builds a Prometheus annotation's title and text only from titleFormat and
    textFormat, and its tags only from tagKeys: without them both were blank markers."""
    notes = {a["name"]: a for a in boards["slaguard-guard"]["annotations"]["list"]}
    assert set(notes) == {"Mode transitions", "Detector trips"}
    moves, trips = notes["Mode transitions"], notes["Detector trips"]
    assert (moves["titleFormat"], moves["tagKeys"]) == ("{{from}} -> {{to}}", "from,to")
    assert (trips["titleFormat"], trips["tagKeys"]) == ("{{detector}} tripped", "detector")
    for note in notes.values():
        assert note["textFormat"]
        grouped = re.search(r"by \(([^)]*)\)", note["expr"])
        assert grouped is not None
        # every label the marker names is one the query keeps
        named = set(re.findall(r"\{\{(\w+)\}\}", note["titleFormat"] + note["textFormat"]))
        kept = {label.strip() for label in grouped.group(1).split(",")}
        assert named | set(note["tagKeys"].split(",")) <= kept, note["name"]


def test_mode_changes_every_replica_counts_are_taken_once(queries: list[PanelQuery]) -> None:
    """Every replica counts each fleet mode change: `sum` across 2 replicas drew 3.01
    transitions where there were 2 (`max` gave 2.004)."""
    counted = [q for q in queries if "slaguard_fleet_mode_transitions_total" in q.expr]
    assert {q.panel_title for q in counted} == {"Mode transitions", "annotation: Mode transitions"}
    for q in counted:
        assert q.expr.startswith("max by (from, to) (increase("), q
        assert "sum" not in q.expr, q


def test_panel_queries_substitute_every_variable(queries: list[PanelQuery]) -> None:
    assert len(queries) >= 50
    assert not [q for q in queries if "$" in q.expr]
    custom = panel_queries({"__rate_interval": "30s", "instance": "sg-0:8080"})
    assert any("[30s]" in q.expr and 'instance=~"sg-0:8080"' in q.expr for q in custom)


def test_panels_read_only_series_slaguard_exposes(queries: list[PanelQuery]) -> None:
    fleet = load_fleet()
    metrics = SlaguardMetrics(CollectorRegistry(), targets=fleet_target_labels(fleet))
    GatewayMetrics(metrics.registry, (t.id for t in fleet))  # the service adds them
    exposed = {s.name for fam in metrics.registry.collect() for s in fam.samples}
    used: set[str] = set()
    for q in queries:
        plain, recorded = referenced_series(q.expr)
        assert plain <= exposed, (q.dashboard_uid, q.panel_title, plain - exposed)
        assert recorded == set(), "dashboards read raw series, not recording rules"
        used |= plain
    # Every family shows up on some dashboard (histograms through their buckets).
    families = {f.name for f in metrics.registry.collect()}
    shown = {re.sub(r"_(bucket|total)$", "", name) for name in used}
    assert sorted(families - shown) == []


def test_every_panel_expression_parses_with_promtool(queries: list[PanelQuery]) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("CI") == "true":
            pytest.fail("promtool is not installed and CI=true")
        pytest.skip("promtool is not installed")
    check_promql({f"{q.dashboard_uid} / {q.panel_title} #{i}": q.expr
                  for i, q in enumerate(queries)}, promtool)  # fmt: skip


def test_cli_builds_and_checks(tmp_path: Path) -> None:
    runner = CliRunner()
    built = runner.invoke(app, ["dashboards", "build", "--out", str(tmp_path)])
    assert built.exit_code == 0, built.output
    assert sorted(p.name for p in tmp_path.glob("*.json")) == sorted(render_all())
    fresh = runner.invoke(app, ["dashboards", "build", "--out", str(tmp_path), "--check"])
    assert fresh.exit_code == 0, fresh.output
    (tmp_path / "slaguard-ops.json").write_text("{}", encoding="utf-8")
    stale = runner.invoke(app, ["dashboards", "build", "--out", str(tmp_path), "--check"])
    assert stale.exit_code == 1
    assert "stale:" in stale.output and "slaguard-ops.json" in stale.output
    committed = runner.invoke(app, ["dashboards", "build", "--out", str(COMMITTED), "--check"])
    assert committed.exit_code == 0, committed.output


def test_cli_rejects_bad_input_with_one_line_and_exit_2(tmp_path: Path) -> None:
    runner = CliRunner()
    a_file = tmp_path / "not-a-dir"
    a_file.write_text("x", encoding="utf-8")
    result = runner.invoke(app, ["dashboards", "build", "--out", str(a_file)])
    assert result.exit_code == 2
    assert "error: --out:" in result.output and "Traceback" not in result.output
    # below a file, or a directory where a dashboard goes: OSError tracebacks before
    below = runner.invoke(app, ["dashboards", "build", "--out", str(a_file / "sub")])
    assert below.exit_code == 2 and below.stderr.startswith(f"error: --out: cannot write {a_file}")
    (tmp_path / "out" / "slaguard-fleet.json").mkdir(parents=True)
    clash = runner.invoke(app, ["dashboards", "build", "--out", str(tmp_path / "out")])
    assert clash.exit_code == 2 and "Is a directory" in clash.stderr
    assert clash.stderr.count("\n") == 1
    listed = runner.invoke(app, ["dashboards", "queries", "--var", "job=slaguard"])
    assert listed.exit_code == 0 and listed.output.count("\n") >= 50
    bad = runner.invoke(app, ["dashboards", "queries", "--var", "jobslaguard"])
    assert bad.exit_code == 2 and "error: --var:" in bad.output
    # a quote went into every matcher as is: `job="a"b"`, broken PromQL on every line
    quoted = runner.invoke(app, ["dashboards", "queries", "--var", 'job=a"b'])
    assert quoted.exit_code == 2 and quoted.stdout == "", quoted.output
    assert quoted.stderr == (
        "error: --var: 'job=a\"b' has '\"' in its value, which would end the PromQL string it "
        "goes into; fix: give a label value without quotes, backslashes or newlines\n"
    )


def test_check_from_outside_the_checkout_is_one_line_not_every_dashboard_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run elsewhere, `--check` called each committed dashboard stale and said to rebuild,
    which would have written a new dashboards/ in that directory."""
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    result = runner.invoke(app, ["dashboards", "build", "--check"])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == (
        f"error: --out: dashboards is not a directory in {tmp_path}; fix: run from the "
        "checkout, whose dashboards/ holds the committed copies, or pass --out DIR\n"
    )
    assert not (tmp_path / "dashboards").exists()
    (tmp_path / "dashboards").mkdir()  # there, but a dashboard is not: missing, not stale
    partly = runner.invoke(app, ["dashboards", "build", "--check"])
    assert partly.exit_code == 1
    assert partly.stdout.splitlines() == [
        f"missing: dashboards/{name} (run: slaguard dashboards build --out dashboards)"
        for name in render_all()
    ]
