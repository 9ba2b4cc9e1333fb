"""alerts/alertmanager.yml: real `amtool check-config` and `amtool config routes test`.

Needs `amtool` (Debian `prometheus-alertmanager`): skipped when missing, failed when missing
and CI=true.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "alerts" / "alertmanager.yml"
RULE_FILES = sorted((ROOT / "alerts").glob("slaguard-*.yml"))
GUARD_ENDPOINT = "http://127.0.0.1:8080/v1/alertmanager"


def amtool() -> str:
    path = shutil.which("amtool")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("amtool is not installed and CI=true")
        pytest.skip("amtool is not installed")
    return path


def routed_to(labels: dict[str, str]) -> list[str]:
    """Receivers Alertmanager picks for `labels`, as `amtool config routes test` reports."""
    pairs = [f"{k}={v}" for k, v in sorted(labels.items())]
    done = subprocess.run(
        [amtool(), "config", "routes", "test", f"--config.file={CONFIG}", *pairs],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip().split(",")


def config() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    return loaded


def test_amtool_check_config_accepts_it() -> None:
    done = subprocess.run(
        [amtool(), "check-config", str(CONFIG)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout
    assert "3 receivers" in done.stdout and "2 inhibit rules" in done.stdout


def test_groups_by_alertname_and_fleet_and_critical_inhibits_warning() -> None:
    cfg = config()
    assert cfg["route"]["group_by"] == ["alertname", "fleet"]
    inhibit = cfg["inhibit_rules"][0]
    assert inhibit["source_matchers"] == ['severity="critical"']
    assert inhibit["target_matchers"] == ['severity="warning"']
    assert inhibit["equal"] == ["alertname", "fleet"]


def test_receivers_read_secrets_from_files_and_the_webhook_targets_slaguard() -> None:
    receivers = {r["name"]: r for r in config()["receivers"]}
    slack = receivers["slack-sre"]["slack_configs"][0]
    assert slack["api_url_file"] and "api_url" not in slack
    hook = receivers["slaguard-guard"]["webhook_configs"][0]
    assert hook["url"] == GUARD_ENDPOINT
    auth = hook["http_config"]["authorization"]
    assert auth["type"] == "Bearer" and auth["credentials_file"] and "credentials" not in auth


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        (
            {"alertname": "SlaguardSLAErrorBudgetBurn", "severity": "critical",
             "slaguard_action": "rollback", "fleet": "default-mixed", "long_window": "1h"},
            ["slaguard-guard", "oncall-pager", "slack-sre"],
        ),
        (
            {"alertname": "SlaguardSLAErrorBudgetBurn", "severity": "warning",
             "fleet": "default-mixed", "long_window": "3d"},
            ["slack-sre"],
        ),
        ({"alertname": "SlaguardDown", "severity": "critical", "instance": "sg-0:8080"},
         ["oncall-pager", "slack-sre"]),
        ({"alertname": "SlaguardSlackDeliveryFailing", "severity": "warning"}, ["oncall-pager"]),
        ({"alertname": "SlaguardTargetTTFTAnomaly", "severity": "warning"}, ["slack-sre"]),
        ({"alertname": "SomethingUnlabelled"}, ["slack-sre"]),
    ],
)  # fmt: skip
def test_routes(labels: dict[str, str], expected: list[str]) -> None:
    assert routed_to(labels) == expected


def test_every_alert_rule_reaches_the_receivers_its_labels_call_for() -> None:
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]:
            for rule in group["rules"]:
                if "alert" not in rule:
                    continue
                labels = {"alertname": rule["alert"], "fleet": "f", **rule["labels"]}
                expected = []
                if labels.get("slaguard_action") == "rollback":
                    expected.append("slaguard-guard")
                if rule["alert"] == "SlaguardSlackDeliveryFailing":
                    expected.append("oncall-pager")
                else:
                    if labels["severity"] == "critical":
                        expected.append("oncall-pager")
                    expected.append("slack-sre")
                assert routed_to(labels) == expected, labels
