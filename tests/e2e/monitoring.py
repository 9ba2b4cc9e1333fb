"""Prometheus and Alertmanager for the end-to-end test: configs derived from the repo's.

`prometheus_config` takes `alerts/prometheus.example.yml` and changes only what a test must
(1 s scrape and evaluation, absolute rule-file paths, local ports). `alertmanager_config`
takes `alerts/alertmanager.yml` and keeps its routes, matchers, grouping and inhibitions,
but points every receiver at a local webhook and shortens the group timers so a
notification leaves within seconds. `PrometheusApi` is the small slice of the HTTP API the
test reads, including Grafana's `label_values(...)` variable queries.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx
import yaml

ALERTS_DIR = Path(__file__).resolve().parents[2] / "alerts"
TEST_GROUP_WAIT = "1s"
TEST_GROUP_INTERVAL = "2s"


def rule_files() -> list[Path]:
    """Every Prometheus rule file of the repo (not the two example configs)."""
    configs = {"alertmanager.yml", "prometheus.example.yml"}
    return sorted(p for p in ALERTS_DIR.glob("*.yml") if p.name not in configs)


def prometheus_config(*, slaguard: str, alertmanager: str) -> tuple[dict[str, Any], str]:
    """The example config scraping `slaguard` (host:port) every second, alerting to
    `alertmanager`; also returns the `fleet` label the example attaches."""
    cfg: dict[str, Any] = yaml.safe_load((ALERTS_DIR / "prometheus.example.yml").read_text())
    cfg["global"] = {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"}
    listed = sorted(ALERTS_DIR / name for name in cfg["rule_files"])
    assert listed == rule_files(), f"prometheus.example.yml loads {listed}, not every rule file"
    cfg["rule_files"] = [str(path) for path in listed]
    cfg["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] = [alertmanager]
    (job,) = [j for j in cfg["scrape_configs"] if j["job_name"] == "slaguard"]
    (static,) = job["static_configs"]
    static["targets"] = [slaguard]
    return cfg, str(static["labels"]["fleet"])


def _seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)(ms|s|m|h|d)", duration))


def _shorten(route: dict[str, Any]) -> None:
    """Cap the group timers this route (and its children) sets, for a test run."""
    for key, cap in (("group_wait", TEST_GROUP_WAIT), ("group_interval", TEST_GROUP_INTERVAL)):
        if key in route:
            route[key] = min(route[key], cap, key=_seconds)
    for child in route.get("routes", []):
        _shorten(child)


def alertmanager_config(webhook_for: Callable[[str], str]) -> dict[str, Any]:
    """`alerts/alertmanager.yml` with each receiver posting to `webhook_for(name)`; routes,
    matchers, grouping and inhibitions unchanged, group timers capped at seconds."""
    cfg: dict[str, Any] = yaml.safe_load((ALERTS_DIR / "alertmanager.yml").read_text())
    cfg["route"].setdefault("group_wait", TEST_GROUP_WAIT)
    cfg["route"].setdefault("group_interval", TEST_GROUP_INTERVAL)
    _shorten(cfg["route"])
    cfg["receivers"] = [
        {"name": r["name"], "webhook_configs": [{"url": webhook_for(r["name"])}]}
        for r in cfg["receivers"]
    ]
    return cfg


def write_yaml(path: Path, data: Mapping[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(dict(data), sort_keys=False), encoding="utf-8")
    return path


class PromQueryError(RuntimeError):
    """Prometheus answered a query with an error (the message is Prometheus's)."""


_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?:(?P<selector>.+),\s*)?(?P<label>\w+)\s*\)\s*$")


class PrometheusApi:
    """`/api/v1/query`, rules and label values of one Prometheus."""

    def __init__(self, base_url: str) -> None:
        self.client = httpx.Client(base_url=base_url, timeout=10.0)

    def close(self) -> None:
        self.client.close()

    def _data(self, path: str, params: Mapping[str, Any]) -> Any:
        answer = self.client.get(path, params=params)
        body = answer.json()
        if body.get("status") != "success":
            raise PromQueryError(f"{body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector (or scalar as one series) `expr` evaluates to now."""
        data = self._data("/api/v1/query", {"query": expr})
        if data["resultType"] == "vector":
            return list(data["result"])
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        raise PromQueryError(f"unexpected result type {data['resultType']}")

    def rules(self) -> list[dict[str, Any]]:
        """Every loaded rule with its group name, health and last error."""
        groups = self._data("/api/v1/rules", {})["groups"]
        return [{**rule, "group": g["name"]} for g in groups for rule in g["rules"]]

    def variable_values(self, query: str) -> list[str]:
        """What Grafana shows for a `label_values([selector,] label)` variable query."""
        m = _LABEL_VALUES.match(query)
        if m is None:
            raise ValueError(f"not a label_values() query: {query!r}")
        params = {"match[]": m["selector"]} if m["selector"] else {}
        return sorted(self._data(f"/api/v1/label/{m['label']}/values", params))
