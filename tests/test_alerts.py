"""Alert rules: conventions, real promtool checks and unit tests, and unit-test coverage.

Needs `promtool` (Debian `prometheus`): skipped when missing, failed when missing and CI=true.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from slaguard.fleet import load_fleet
from slaguard.service.gateway_metrics import GatewayMetrics
from slaguard.telemetry import SlaguardMetrics, fleet_target_labels
from slaguard.telemetry.promql import referenced_series

ROOT = Path(__file__).resolve().parents[1]
ALERTS = ROOT / "alerts"
RULE_FILES = sorted(ALERTS.glob("slaguard-*.yml"))
UNIT_TESTS = sorted((ALERTS / "tests").glob("*.yml"))
RUNBOOK_BASE_URL = "https://slaguard.example.com/runbooks/"
SEVERITIES = {"critical", "warning"}
RECORD_NAME = re.compile(r"^[a-z_]+:slaguard_[a-z0-9_]+:[a-z0-9_]+$")
ALERT_ROW = re.compile(r"^\| (Slaguard\w+) \| (.*) \| ([a-z /]+) \| .* \|$")
"""docs/alerting.md, "Other alerts": alert, fires when, severity, why."""
BURN_ROW = re.compile(r"^\| (\d+[hd]) \| .* \| (\d+[smh]) \| (critical|warning) \(\w+\) \|$")
"""docs/alerting.md, "Burn-rate alerts": long_window, ..., for, severity."""
FOR_PHRASE = re.compile(r"\bfor (\d+[smh])\b")


def tool(name: str) -> str:
    """Path of a real binary; a missing one fails under CI=true and skips elsewhere."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{name} is not installed and CI=true")
        pytest.skip(f"{name} is not installed")
    return path


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=False, timeout=120)


def rules() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]:
            out.extend(group["rules"])
    return out


def alert_rules() -> list[dict[str, Any]]:
    return [r for r in rules() if "alert" in r]


def unit_test_cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    for path in UNIT_TESTS:
        for test in yaml.safe_load(path.read_text(encoding="utf-8"))["tests"]:
            cases.extend(test.get("alert_rule_test", []))
    return cases


def test_rule_files_exist_and_cover_the_issue() -> None:
    names = {r["alert"] for r in alert_rules()}
    assert {
        "SlaguardFleetSwitchedToRoundRobin",
        "SlaguardHeldInRoundRobinTooLong",
        "SlaguardTargetTTFTAnomaly",
        "SlaguardHotSpotFlood",
        "SlaguardColdStartDrift",
        "SlaguardRolloutArmLosing",
        "SlaguardSLAErrorBudgetBurn",
        "SlaguardDecisionLatencyHigh",
        "SlaguardAuditBacklog",
        "SlaguardAuditSpillGrowing",
        "SlaguardAuditWriteErrors",
        "SlaguardAuditRecordsRefused",
        "SlaguardSchedulerJobOverrunning",
        "SlaguardSchedulerJobFailing",
        "SlaguardSlackDeliveryFailing",
        "SlaguardDown",
        "SlaguardMetricsAbsent",
    } <= names


def test_every_alert_has_severity_annotations_and_its_own_runbook_url() -> None:
    for rule in alert_rules():
        name = rule["alert"]
        assert rule["labels"]["severity"] in SEVERITIES, name
        notes = rule["annotations"]
        assert {"summary", "description", "runbook_url"} <= set(notes), name
        assert notes["runbook_url"] == f"{RUNBOOK_BASE_URL}{name}.md", name


def test_burn_rate_pairs_follow_the_sre_workbook() -> None:
    burn = {r["labels"]["long_window"]: r for r in alert_rules() if "long_window" in r["labels"]}
    expected = {"1h": ("5m", 14.4, "critical"), "6h": ("30m", 6, "critical"),
                "3d": ("6h", 1, "warning")}  # fmt: skip
    assert set(burn) == set(expected)
    for long_w, (short_w, factor, severity) in expected.items():
        expr = " ".join(burn[long_w]["expr"].split())
        assert f"ratio_rate{long_w} > ({factor} * 0.01)" in expr
        assert f"ratio_rate{short_w} > ({factor} * 0.01)" in expr
        assert burn[long_w]["labels"]["severity"] == severity


def test_docs_alerting_gives_each_alerts_severity_and_for_duration() -> None:
    """docs/alerting.md is where an SRE reads how long an alert waits and whom it pages:
    each alert's row names its rules' severities (in order) and `for` durations, and the
    burn-rate table each pair's (it had no `for` at all)."""
    doc = (ROOT / "docs" / "alerting.md").read_text(encoding="utf-8").splitlines()
    rows = {m[1]: m for line in doc if (m := ALERT_ROW.match(line))}
    burn_rows = {m[1]: (m[2], m[3]) for line in doc if (m := BURN_ROW.match(line))}
    said: dict[str, tuple[list[str], list[str]]] = {}
    for name, m in rows.items():
        said[name] = ([s.strip() for s in m[3].split("/")], re.findall(FOR_PHRASE, m[2]))
    wanted: dict[str, tuple[list[str], list[str]]] = {}
    burn: dict[str, tuple[str, str]] = {}
    for rule in alert_rules():
        severity, wait = rule["labels"]["severity"], rule.get("for")
        if "long_window" in rule["labels"]:
            burn[rule["labels"]["long_window"]] = (wait, severity)
            continue
        severities, waits = wanted.setdefault(rule["alert"], ([], []))
        severities.append(severity)
        waits.extend([wait] if wait else [])
    assert said == wanted
    assert burn_rows == burn


def test_recording_rules_are_named_level_metric_operation() -> None:
    recorded = [r["record"] for r in rules() if "record" in r]
    assert len(recorded) >= 10
    assert [n for n in recorded if not RECORD_NAME.match(n)] == []
    assert len(recorded) == len(set(recorded))


def test_rules_read_only_series_slaguard_exposes_or_records() -> None:
    fleet = load_fleet()
    metrics = SlaguardMetrics(CollectorRegistry(), targets=fleet_target_labels(fleet))
    GatewayMetrics(metrics.registry, (t.id for t in fleet))  # the service adds them
    exposed = {s.name for fam in metrics.registry.collect() for s in fam.samples}
    recorded = {r["record"] for r in rules() if "record" in r}
    for rule in rules():
        plain, recorded_used = referenced_series(rule["expr"])
        assert plain <= exposed, (rule.get("record") or rule.get("alert"), plain - exposed)
        assert recorded_used <= recorded, (rule.get("alert"), recorded_used - recorded)


def test_every_recording_rule_is_read_by_a_rule_or_a_runbook() -> None:
    """fleet:slaguard_decisions:rate5m and the decision latency p50 were recorded at every
    evaluation and read by nothing (the dashboards read raw series)."""
    used: set[str] = set()
    for rule in rules():
        used |= referenced_series(rule["expr"])[1]
    runbooks = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "runbooks").glob("*.md"))
    recorded = {r["record"] for r in rules() if "record" in r}
    assert sorted(n for n in recorded - used if n not in runbooks) == []


def test_rules_read_recording_rules_defined_earlier_in_their_own_group() -> None:
    # Groups are evaluated independently: across groups a rule reads the value of the
    # previous evaluation, which made alert values flap by one step in promtool tests.
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]:
            seen: set[str] = set()
            for rule in group["rules"]:
                _, used = referenced_series(rule["expr"])
                assert used <= seen, (path.name, rule.get("alert") or rule["record"], used - seen)
                if "record" in rule:
                    seen.add(rule["record"])


def test_every_alert_fires_in_one_unit_test_and_stays_silent_in_another() -> None:
    cases = unit_test_cases()
    fired = {
        (c["alertname"], a["exp_labels"]["severity"])
        for c in cases
        for a in c.get("exp_alerts") or []
    }
    silent = {c["alertname"] for c in cases if not c.get("exp_alerts")}
    wanted = {(r["alert"], r["labels"]["severity"]) for r in alert_rules()}
    assert sorted(wanted - fired) == [], "alert rules (name, severity) never seen firing"
    assert sorted({name for name, _ in wanted} - silent) == [], "alerts never tested silent"
    unknown = {c["alertname"] for c in cases} - {name for name, _ in wanted}
    assert unknown == set(), "unit tests for alerts that do not exist"


def test_promtool_check_rules() -> None:
    done = run(tool("promtool"), "check", "rules", *map(str, RULE_FILES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("SUCCESS") == len(RULE_FILES)


def test_example_prometheus_config_loads_every_rule_file() -> None:
    config = ALERTS / "prometheus.example.yml"
    listed = yaml.safe_load(config.read_text(encoding="utf-8"))["rule_files"]
    assert sorted(listed) == [p.name for p in RULE_FILES]
    done = run(tool("promtool"), "check", "config", str(config))
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_unit_tests_pass() -> None:
    done = run(tool("promtool"), "test", "rules", *map(str, UNIT_TESTS))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("SUCCESS") == len(UNIT_TESTS)
