"""runbooks/: one per alert, the same sections in each, and PromQL that really parses."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

from slaguard.fleet import load_fleet
from slaguard.service.gateway_metrics import GatewayMetrics
from slaguard.telemetry import SlaguardMetrics, fleet_target_labels
from slaguard.telemetry.promql import check_promql, referenced_series

ROOT = Path(__file__).resolve().parents[1]
RUNBOOKS = ROOT / "runbooks"
SECTIONS = ("## What it means", "## User impact", "## Confirm", "## Mitigate", "## Escalate")
PROMQL_BLOCK = re.compile(r"```promql\n(.*?)```", re.DOTALL)
MITIGATION_COMMANDS = ("slaguard rollback", "slaguard resume")
HEAD = re.compile(r"^Severity: (?P<severity>.*?) · Rule: `(?P<rule>alerts/[^`]+)`", re.M)
PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]*")
"""A value a runbook leaves for the operator to fill in (`TARGET`)."""


def alert_names() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "alerts").glob("slaguard-*.yml"):
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]:
            names |= {r["alert"] for r in group["rules"] if "alert" in r}
    return names


def runbooks() -> dict[str, str]:
    return {
        p.stem: p.read_text(encoding="utf-8")
        for p in RUNBOOKS.glob("*.md")
        if p.name != "README.md"
    }


def promql_lines(text: str) -> list[str]:
    """Expressions of the ```promql blocks: `#` lines are comments, indented lines continue."""
    exprs: list[str] = []
    for block in PROMQL_BLOCK.findall(text):
        for line in block.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if line.startswith((" ", "\t")) and exprs:
                exprs[-1] += " " + line.strip()
            else:
                exprs.append(line.strip())
    return exprs


def test_every_alert_has_a_runbook_and_every_runbook_an_alert() -> None:
    assert sorted(runbooks()) == sorted(alert_names())


def test_every_runbook_has_the_sections_in_order_and_the_cli_to_confirm() -> None:
    for name, text in runbooks().items():
        assert text.startswith(f"# {name}\n"), name
        positions = [text.find(s) for s in SECTIONS]
        assert -1 not in positions and positions == sorted(positions), (name, positions)
        confirm = text[text.find("## Confirm") : text.find("## Mitigate")]
        assert any(c in confirm for c in ("slaguard status", "slaguard incidents", "curl")), name
        assert promql_lines(text), f"{name}: no PromQL to confirm with"


def test_every_runbook_names_its_alerts_severities_and_rule_file() -> None:
    """The head line is what an SRE reads first: a page must not say **warning**."""
    said: dict[str, tuple[set[str], set[str]]] = {}
    for path in (ROOT / "alerts").glob("slaguard-*.yml"):
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]:
            for rule in (r for r in group["rules"] if "alert" in r):
                severities, files = said.setdefault(rule["alert"], (set(), set()))
                severities.add(rule["labels"]["severity"])
                files.add(f"alerts/{path.name}")
    for name, text in runbooks().items():
        head = HEAD.search(text)
        assert head is not None, name
        named = set(re.findall(r"\b(critical|warning)\b", head["severity"]))
        assert (named, {head["rule"]}) == said[name], name


def test_runbooks_with_slaguard_commands_say_which_database_and_fleet() -> None:
    """Run away from the service's directory, the commands read `./slaguard.db` and
    `audit incident` the built-in fleet: nothing said to point them at the service's."""
    readme = (RUNBOOKS / "README.md").read_text(encoding="utf-8")
    assert "export SLAGUARD_DB=" in readme and "--fleet <the service's fleet file>" in readme
    for name, text in runbooks().items():
        head = text[: text.find("## What it means")]
        if re.search(r"(^|`)slaguard [a-z]", text, re.MULTILINE):
            assert "export SLAGUARD_DB=" in head, name
        if "audit incident" in text or "audit summary" in text:
            assert "--fleet <the service's fleet file>" in head, name


def test_runbooks_mitigate_with_the_slaguard_cli_where_routing_can_help() -> None:
    with_cli = {n for n, t in runbooks().items() if any(c in t for c in MITIGATION_COMMANDS)}
    # Only the pure plumbing alerts (scrape, audit storage, Slack, overruns) may lack one.
    assert len(with_cli) >= 10
    assert {
        "SlaguardSLAErrorBudgetBurn",
        "SlaguardRolloutArmLosing",
        "SlaguardHeldInRoundRobinTooLong",
        "SlaguardFleetSwitchedToRoundRobin",
    } <= with_cli


def test_runbook_promql_reads_only_series_slaguard_exposes_or_records() -> None:
    fleet = load_fleet()
    metrics = SlaguardMetrics(CollectorRegistry(), targets=fleet_target_labels(fleet))
    GatewayMetrics(metrics.registry, (t.id for t in fleet))  # the service adds them
    exposed = {s.name for fam in metrics.registry.collect() for s in fam.samples}
    recorded: set[str] = set()
    for path in (ROOT / "alerts").glob("slaguard-*.yml"):
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]:
            recorded |= {r["record"] for r in group["rules"] if "record" in r}
    for name, text in runbooks().items():
        for expr in promql_lines(text):
            plain, used = referenced_series(expr)
            assert plain <= exposed and used <= recorded, (name, expr)


SELECTOR = re.compile(r"\b(slaguard_[a-z0-9_]+)\s*\{([^}]*)\}")
MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
SCRAPE_LABELS = {"fleet", "instance", "job"}
"""Labels Prometheus attaches to every scraped series (alerts/prometheus.example.yml)."""


def exposed_labels() -> dict[str, dict[str, set[str]]]:
    """Each series name of a fresh registry (the service's) -> label -> values."""
    fleet = load_fleet()
    metrics = SlaguardMetrics(CollectorRegistry(), targets=fleet_target_labels(fleet))
    GatewayMetrics(metrics.registry, (t.id for t in fleet))
    labels: dict[str, dict[str, set[str]]] = {}
    for fam in metrics.registry.collect():
        for sample in fam.samples:
            for key, value in sample.labels.items():
                labels.setdefault(sample.name, {}).setdefault(key, set()).add(value)
    return labels


def matcher_problems(expr: str, labels: dict[str, dict[str, set[str]]]) -> list[str]:
    """A matcher on a label the series lacks, or an `=`/`=~` value it never has (a
    placeholder such as `TARGET` aside): the query answers nothing, silently."""
    wrong: list[str] = []
    for series, body in SELECTOR.findall(expr):
        for label, op, value in MATCHER.findall(body):
            has = labels.get(series, {})
            if label in SCRAPE_LABELS:
                continue
            if label not in has:
                wrong.append(f"{series}: no label {label!r}")
            elif op in ("=", "=~") and not PLACEHOLDER.fullmatch(value):
                unknown = sorted(set(value.split("|")) - has[label])
                wrong += [f"{series}: {label} is never {v!r}" for v in unknown]
    return wrong


def test_promql_label_matchers_name_labels_and_values_slaguard_exposes() -> None:
    labels = exposed_labels()
    exprs = [(n, e) for n, text in runbooks().items() for e in promql_lines(text)]
    for path in (ROOT / "alerts").glob("slaguard-*.yml"):
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]:
            exprs += [(r.get("alert") or r["record"], r["expr"]) for r in group["rules"]]
    assert [(n, p) for n, e in exprs for p in matcher_problems(e, labels)] == []
    probe = (
        'slaguard_tokens_total{kind="genrated", fleet="F", target="TARGET"}'
        ' + slaguard_gateway_retries_total{target="TARGET"}'
    )
    assert matcher_problems(probe, labels) == [
        "slaguard_tokens_total: kind is never 'genrated'",
        "slaguard_gateway_retries_total: no label 'target'",
    ]


def test_runbook_promql_parses_with_promtool() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("CI") == "true":
            pytest.fail("promtool is not installed and CI=true")
        pytest.skip("promtool is not installed")
    exprs = {
        f"{name} #{i}": expr
        for name, text in sorted(runbooks().items())
        for i, expr in enumerate(promql_lines(text))
    }
    assert len(exprs) >= 50
    check_promql(exprs, promtool)
