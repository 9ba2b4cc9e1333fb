"""Monitoring end to end, with the real things (docs/monitoring-e2e.md).

Three emulated backends of different card types, `slaguard serve` in gateway mode, a real
Prometheus (scraping every 1 s, the repo's rule files loaded unchanged) and a real
Alertmanager (the repo's routing, receivers pointed at a local webhook). Streamed traffic
goes through the gateway; once the fleet is in its rollout stage, a hot prompt floods it,
the hot-spot detector trips the guard and the fleet falls back to round-robin. The test
asserts that `SlaguardFleetSwitchedToRoundRobin` reaches the right receiver with its
labels and runbook, that every rule evaluates without error, and that every dashboard
panel and annotation query returns series, with the template variables resolved the way
Grafana resolves them.
"""

from __future__ import annotations

import json
import math
import secrets
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from e2e.monitoring import (
    PrometheusApi,
    PromQueryError,
    alertmanager_config,
    prometheus_config,
    rule_files,
    write_yaml,
)
from e2e.processes import ProcessGroup, require_binaries
from e2e.traffic import GatewayTraffic
from fakes.webhook_receiver import Notification, WebhookReceiver

from slaguard.dashboards import VARIABLES, panel_queries, render_all
from slaguard.service.local import free_port
from slaguard.sim.traces import load_trace

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

REPO = Path(__file__).resolve().parents[1]
MODEL = "llama3.1-8b"
CARDS = ("h100", "a100", "l40s")
ALERT = "SlaguardFleetSwitchedToRoundRobin"
RUNBOOK_BASE = "https://slaguard.example.com/runbooks/"
START_TIMEOUT_S = 45.0
ROLLOUT_TIMEOUT_S = 30.0
ALERT_TIMEOUT_S = 60.0
THIN_IN_THIS_RUN = {
    ("slaguard-guard", "Rollout comparison: score vs threshold"),
    ("slaguard-targets", "TTFT p99 Z-score"),
}
"""Panels whose queries may answer only NaN here, where the guard has not judged yet: no
rollout comparison score before each arm has 200 requests in its window, no target's TTFT
Z-score before three targets have 30 first tokens each; more than this short run sends."""


@dataclass
class Stack:
    """The running processes and what the test talks to."""

    procs: ProcessGroup
    slaguard_url: str
    instance: str
    fleet_label: str
    targets: dict[str, str]
    """Target id -> card type."""
    prom: PrometheusApi
    hooks: WebhookReceiver
    incidents: Path


def _wait_until(what: str, check: Callable[[], Any], timeout_s: float, procs: ProcessGroup) -> Any:
    """Poll `check` until it returns neither None nor False; fail naming `what` at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        if gone := procs.exited():
            logs = "\n".join(f"--- {c.name}:\n{c.tail()}" for c in gone)
            pytest.fail(f"waiting for {what}: processes exited:\n{logs}")
        value = check()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not seen within {timeout_s:.0f}s")
        time.sleep(0.2)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    bins = require_binaries("prometheus", "prometheus-alertmanager")
    procs = ProcessGroup(tmp_path)
    prom: PrometheusApi | None = None
    with WebhookReceiver() as hooks:
        try:
            emulators = {}
            for card in CARDS:
                port = free_port()
                child = procs.spawn(
                    f"emulate-{card}",
                    [sys.executable, "-m", "slaguard", "emulate", "--card", card,
                     "--model", MODEL, "--port", str(port)],
                )  # fmt: skip
                emulators[f"{card}-8b"] = (child, f"http://127.0.0.1:{port}")
            fleet = {
                "name": "e2e",
                "targets": [
                    {"id": tid, "model": MODEL, "card": tid.removesuffix("-8b"), "url": url}
                    for tid, (_, url) in emulators.items()
                ],
            }
            serve_port, prom_port, am_port = free_port(), free_port(), free_port()
            serve_cfg = {
                "fleet": str(write_yaml(tmp_path / "fleet.yaml", fleet)),
                "db": f"sqlite:///{tmp_path / 'audit.db'}",
                "port": serve_port,
                "notify_file": str(tmp_path / "incidents.jsonl"),
                "log_level": "warning",
                # Round-robin baseline for 2 s, then 50 % learned until the fault.
                "rollout": {"baseline_s": 2, "stage_s": 3600, "stages_pct": [50, 100]},
            }
            instance = f"127.0.0.1:{serve_port}"
            prom_cfg, fleet_label = prometheus_config(
                slaguard=instance, alertmanager=f"127.0.0.1:{am_port}"
            )
            am_cfg = write_yaml(tmp_path / "alertmanager.yml", alertmanager_config(hooks.url_for))
            am = procs.spawn(
                "alertmanager",
                [bins["prometheus-alertmanager"], f"--config.file={am_cfg}",
                 f"--storage.path={tmp_path / 'am-data'}",
                 f"--web.listen-address=127.0.0.1:{am_port}",
                 "--cluster.listen-address="],
            )  # fmt: skip
            prometheus = procs.spawn(
                "prometheus",
                [bins["prometheus"],
                 f"--config.file={write_yaml(tmp_path / 'prometheus.yml', prom_cfg)}",
                 f"--storage.tsdb.path={tmp_path / 'prom-data'}",
                 f"--web.listen-address=127.0.0.1:{prom_port}"],
            )  # fmt: skip
            serve = procs.spawn(
                "serve",
                [sys.executable, "-m", "slaguard", "serve", "--config",
                 str(write_yaml(tmp_path / "serve.yaml", serve_cfg))],
                {"SLAGUARD_ADMIN_TOKEN": secrets.token_hex(16)},
            )  # fmt: skip
            # Everything starts at once; the scraper tolerates backends that are not up yet.
            for child, url in emulators.values():
                procs.wait_http_ok(child, f"{url}/health", START_TIMEOUT_S)
            procs.wait_http_ok(serve, f"http://{instance}/readyz", START_TIMEOUT_S)
            procs.wait_http_ok(am, f"http://127.0.0.1:{am_port}/-/ready", START_TIMEOUT_S)
            procs.wait_http_ok(prometheus, f"http://127.0.0.1:{prom_port}/-/ready", START_TIMEOUT_S)
            _wait_until(
                "a fresh hardware picture of every backend",
                lambda: _pictures_fresh(f"http://{instance}"),
                START_TIMEOUT_S,
                procs,
            )
            prom = PrometheusApi(f"http://127.0.0.1:{prom_port}")
            yield Stack(
                procs,
                f"http://{instance}",
                instance,
                fleet_label,
                {tid: tid.removesuffix("-8b") for tid in emulators},
                prom,
                hooks,
                tmp_path / "incidents.jsonl",
            )
        finally:
            if prom is not None:
                prom.close()
            procs.stop()


def _pictures_fresh(slaguard_url: str) -> bool:
    """Every target scraped recently enough for the router to use it (else 503s)."""
    status = httpx.get(f"{slaguard_url}/v1/status", timeout=5).json()
    return all(t["picture_age_s"] < status["stale_after_s"] for t in status["targets"])


def _has(prom: PrometheusApi, expr: str) -> bool:
    try:
        return bool(prom.query(expr))
    except PromQueryError:
        return False


def _value(prom: PrometheusApi, expr: str) -> float:
    (series,) = prom.query(expr)
    return float(series["value"][1])


def _is_the_alert(note: Notification) -> bool:
    return any(a["labels"].get("alertname") == ALERT for a in note.alerts("firing"))


def _rule_problems(prom: PrometheusApi) -> list[str] | None:
    """Rules that failed to evaluate; None while some have not evaluated yet."""
    rules = prom.rules()
    if any(r["health"] == "unknown" for r in rules):
        return None
    return [f"{r['group']}/{r['name']}: {r.get('lastError')}" for r in rules if r["health"] != "ok"]


def _run_panel_query(
    prom: PrometheusApi, expr: str, *, nan_ok: bool = False
) -> tuple[list[dict[str, Any]], str | None]:
    """The query's series and what is wrong with them for a panel: an error, no series, or
    nothing but NaN (the panel would show nothing in all three cases; `nan_ok`: NaN is the
    honest answer in this short run)."""
    try:
        series = prom.query(expr)
    except PromQueryError as exc:
        return [], str(exc)
    if not series:
        return series, "no series"
    if not nan_ok and all(math.isnan(float(s["value"][1])) for s in series):
        return series, f"only NaN in {len(series)} series"
    return series, None


def _variables(prom: PrometheusApi) -> list[dict[str, str]]:
    """Resolve every dashboard variable the way Grafana does, chained in order; one
    variable set per (card_type, target) pair, so every target is looked at."""
    queries: dict[str, str] = {}
    for text in render_all().values():
        board = json.loads(text)
        for var in board["templating"]["list"]:
            if var["type"] == "query":
                queries.setdefault(var["name"], var["query"])
    assert list(queries) == ["fleet", "job", "instance", "card_type", "target"], queries

    def resolve(name: str, chosen: dict[str, str]) -> list[str]:
        query = queries[name]
        for key, value in chosen.items():
            query = query.replace(f"${key}", value)
        return prom.variable_values(query)

    sets = []
    chosen: dict[str, str] = {}
    for name in ("fleet", "job", "instance"):
        (chosen[name],) = resolve(name, chosen)
    for card in resolve("card_type", chosen):
        for target in resolve("target", {**chosen, "card_type": card}):
            sets.append({**chosen, "card_type": card, "target": target})
    return sets


def _check_alert(stack: Stack, note: Notification) -> None:
    """The warning went to the Slack receiver only, grouped by alertname and fleet, with
    the labels and runbook the rule file promises."""
    assert note.receiver == "slack-sre"
    assert note.payload["version"] == "4"
    assert note.payload["groupLabels"] == {"alertname": ALERT, "fleet": stack.fleet_label}
    (alert,) = [a for a in note.alerts("firing") if a["labels"]["alertname"] == ALERT]
    assert alert["labels"] == {
        "alertname": ALERT,
        "fleet": stack.fleet_label,
        "from": "rollout",
        "to": "round_robin",
        "severity": "warning",
    }
    runbook = alert["annotations"]["runbook_url"]
    assert runbook == f"{RUNBOOK_BASE}{ALERT}.md"
    assert (REPO / "runbooks" / runbook.removeprefix(RUNBOOK_BASE)).is_file()
    assert "from rollout to round_robin" in alert["annotations"]["summary"]
    assert {n.receiver for n in stack.hooks.received() if _is_the_alert(n)} == {"slack-sre"}


def _check_rules(stack: Stack) -> None:
    """Prometheus loaded every rule of the repo's files and evaluates each without error."""
    problems = _wait_until(
        "every rule evaluated once", lambda: _rule_problems(stack.prom), 10, stack.procs
    )
    assert problems == [], "rules failing in Prometheus:\n" + "\n".join(problems)
    in_files = sum(
        len(group["rules"])
        for path in rule_files()
        for group in yaml.safe_load(path.read_text())["groups"]
    )
    assert len(stack.prom.rules()) == in_files


def _query_every_panel(
    stack: Stack,
) -> tuple[dict[tuple[str, str], list[dict[str, Any]]], list[str]]:
    """Every panel and annotation query, once per resolved (card_type, target) pair:
    results by (dashboard uid, panel title) for the first pair, and every failure (all
    panels are run before anything is asserted, so one run lists every broken query)."""
    variable_sets = _variables(stack.prom)
    assert {(v["card_type"], v["target"]) for v in variable_sets} == {
        (card, tid) for tid, card in stack.targets.items()
    }, variable_sets
    assert {v["instance"] for v in variable_sets} == {stack.instance}
    assert {v["fleet"] for v in variable_sets} == {stack.fleet_label}
    seen: dict[str, list[dict[str, Any]]] = {}
    failures: list[str] = []
    first: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for variables in variable_sets:
        for q in panel_queries({**VARIABLES, **variables}, annotations=True):
            if q.expr not in seen:
                nan_ok = (q.dashboard_uid, q.panel_title) in THIN_IN_THIS_RUN
                seen[q.expr], problem = _run_panel_query(stack.prom, q.expr, nan_ok=nan_ok)
                if problem:
                    failures.append(
                        f"{q.dashboard_uid} / {q.panel_title}: {q.expr}\n  -> {problem}"
                    )
            first.setdefault((q.dashboard_uid, q.panel_title), seen[q.expr])
    return first, failures


def test_fault_alerts_through_alertmanager_and_every_panel_has_data(stack: Stack) -> None:
    prom = stack.prom
    trace = load_trace(REPO / "tests" / "fixtures" / "azure_conv_200.csv")
    traffic = GatewayTraffic(
        stack.slaguard_url,
        model=MODEL,
        rate_per_s=12.0,
        prompt_tokens=[min(int(n), 1500) for n in trace.prompt_tokens],
        tight_every=4,
    ).start()
    try:
        _wait_until(
            "rollout mode and completions of both arms in Prometheus",
            lambda: (
                _has(prom, 'slaguard_fleet_mode{mode="rollout"} == 1')
                and _has(prom, 'sum(slaguard_requests_completed_total{arm="learned"}) >= 5')
                and _has(prom, 'sum(slaguard_requests_completed_total{arm="round_robin"}) >= 5')
            ),
            ROLLOUT_TIMEOUT_S,
            stack.procs,
        )
        traffic.hot = True
        note = stack.hooks.wait_for(_is_the_alert, ALERT_TIMEOUT_S)
        assert note is not None, (
            f"{ALERT} not delivered within {ALERT_TIMEOUT_S:.0f}s of the hot prompt; "
            f"mode now {prom.query('slaguard_fleet_mode == 1')}; traffic {traffic.stats}; "
            f"received {stack.hooks.received()}"
        )
        _check_alert(stack, note)
        # The guard says why: the hot-spot detector, in its incident message. serve writes
        # it in a delivery round of its own, which the alert's path does not wait for.
        _wait_until(
            "the hot_spot incident message",
            lambda: stack.incidents.is_file() and "hot_spot" in stack.incidents.read_text(),
            10,
            stack.procs,
        )
        _check_rules(stack)
        panels, failures = _query_every_panel(stack)
        assert not failures, "panel queries failed:\n" + "\n".join(failures)
    finally:
        traffic.stop()

    # A few panels pinned to what this scenario did.
    modes = {
        s["metric"]["mode"]: float(s["value"][1]) for s in panels["slaguard-guard", "Fleet mode"]
    }
    assert modes == {"round_robin": 1.0, "rollout": 0.0, "learned": 0.0, "held_round_robin": 0.0}
    tripped = {
        s["metric"]["detector"] for s in panels["slaguard-guard", "annotation: Detector trips"]
    }
    assert "hot_spot" in tripped
    assert float(panels["slaguard-ops", "Instances up"][0]["value"][1]) == 1.0
    assert float(panels["slaguard-guard", "Trips in range"][0]["value"][1]) >= 1.0
    stats = traffic.stats
    assert stats.ok == stats.sent >= 60 and not stats.errors, stats
    assert set(stats.by_target) == set(stack.targets), stats.by_target
    # Every answered request counted once in Prometheus; every unmeetable deadline a miss.
    _wait_until(
        "Prometheus counting every answered request",
        lambda: _value(prom, "sum(slaguard_requests_completed_total)") == stats.ok or None,
        10,
        stack.procs,
    )
    # Each answered request is two audit rows, its decision and its outcome (the ops
    # dashboard and the SlaguardAuditBacklog runbook compare rows/s with 2x decisions/s).
    _wait_until(
        "Prometheus counting two audit rows per answered request",
        lambda: _value(prom, "sum(slaguard_audit_rows_written_total)") == 2 * stats.ok or None,
        10,
        stack.procs,
    )
    violations = _value(prom, "sum(slaguard_sla_violations_total)")
    assert stats.tight_ok <= violations <= stats.tight_ok + 0.05 * stats.ok, (violations, stats)
