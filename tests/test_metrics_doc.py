"""docs/metrics.md and the real exposition name the same families, types and labels, and
its "Size" figures are the default fleet's."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from slaguard.fleet import load_fleet
from slaguard.service.gateway_metrics import GatewayMetrics
from slaguard.telemetry import SlaguardMetrics, render_snapshot

DOC = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"
ROW = re.compile(r"^\| `(?P<name>slaguard_\w+)` \| (?P<type>\w+) \| (?P<labels>[^|]*) \|")
ALLOWED = re.compile(r"^\| (?P<labels>[a-z_]+(?:, [a-z_]+)*) \| (?P<values>.*) \|$")
"""A row of the "Label allow-lists" table: labels, then their values in backticks."""
PER_TARGET = {"target", "card_type", "model"}
"""Labels whose values are the fleet's, not a fixed list."""
SIZE = re.compile(
    r"default (?P<targets>\d+)-target fleet a fresh registry exposes (?P<samples>[\d,]+) "
    r"samples, and the service\s+adds the gateway's (?P<gateway>\d+) \(about (?P<kb>\d+) kB"
)


def documented() -> dict[str, tuple[str, frozenset[str]]]:
    rows: dict[str, tuple[str, frozenset[str]]] = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        m = ROW.match(line)
        if m:
            assert m["name"] not in rows, f"{m['name']} documented twice"
            labels = frozenset(x.strip() for x in m["labels"].split(",") if x.strip())
            rows[m["name"]] = (m["type"], labels)
    return rows


def sample_count(registry: CollectorRegistry) -> int:
    return sum(len(fam.samples) for fam in registry.collect())


def exposed() -> dict[str, tuple[str, frozenset[str]]]:
    fleet = load_fleet()
    metrics = SlaguardMetrics.for_fleet(CollectorRegistry(), fleet)
    GatewayMetrics(metrics.registry, (t.id for t in fleet))  # the service adds these to it
    out: dict[str, tuple[str, frozenset[str]]] = {}
    for fam in text_string_to_metric_families(render_snapshot(metrics.registry)):
        name = f"{fam.name}_total" if fam.type == "counter" else fam.name
        labels = frozenset(k for s in fam.samples for k in s.labels if k != "le")
        out[name] = (fam.type, labels)
    return out


def test_every_exposed_family_is_documented_and_every_documented_one_exposed() -> None:
    docs, live = documented(), exposed()
    assert sorted(set(live) - set(docs)) == [], "exposed but not in docs/metrics.md"
    assert sorted(set(docs) - set(live)) == [], "in docs/metrics.md but not exposed"


def test_documented_types_and_labels_match_the_exposition() -> None:
    docs, live = documented(), exposed()
    wrong = {name: (docs[name], live[name]) for name in live if docs.get(name) != live[name]}
    assert wrong == {}


def test_the_documented_size_is_the_default_fleets() -> None:
    """The figures drifted unnoticed (1,075 documented, 1,058 exposed)."""
    size = SIZE.search(DOC.read_text(encoding="utf-8"))
    assert size is not None, "docs/metrics.md: the Size sentence changed; update SIZE"
    fleet = load_fleet()
    metrics = SlaguardMetrics.for_fleet(CollectorRegistry(), fleet)
    own = sample_count(metrics.registry)
    GatewayMetrics(metrics.registry, (t.id for t in fleet))
    kb = len(render_snapshot(metrics.registry).encode()) / 1000
    assert int(size["targets"]) == len(fleet.targets)
    assert int(size["samples"].replace(",", "")) == own
    assert int(size["gateway"]) == sample_count(metrics.registry) - own
    assert abs(int(size["kb"]) - kb) <= 1, f"{kb:.1f} kB"


def test_the_service_doc_names_every_family_the_gateway_adds() -> None:
    """docs/service.md's `GET /metrics` row listed three of the gateway's four families
    (`slaguard_gateway_ejections_total` was missing)."""
    service = (DOC.parent / "service.md").read_text(encoding="utf-8")
    (row,) = [line for line in service.splitlines() if line.startswith("| `GET /metrics` |")]
    registry = CollectorRegistry()
    GatewayMetrics(registry, (t.id for t in load_fleet()))
    names = {f"{fam.name}_total" for fam in registry.collect()}
    assert sorted(n for n in names if f"`{n}" not in row) == []


def test_the_label_allow_lists_are_the_values_exposed() -> None:
    """The table is where a query's label value is looked up: a detector, job or reason
    added to `labels.py` must be listed, and a listed one must exist."""
    section = DOC.read_text(encoding="utf-8").split("## Label allow-lists")[1].split("\n## ")[0]
    listed: dict[str, set[str]] = {}
    for line in section.splitlines():
        m = ALLOWED.match(line)
        if m and m["labels"] != "label":
            for label in m["labels"].split(", "):
                listed[label] = set(re.findall(r"`([a-z_]+)`", m["values"]))
    fleet = load_fleet()
    metrics = SlaguardMetrics.for_fleet(CollectorRegistry(), fleet)
    GatewayMetrics(metrics.registry, (t.id for t in fleet))
    values: dict[str, set[str]] = {}
    for fam in metrics.registry.collect():
        for sample in fam.samples:
            for label, value in sample.labels.items():
                values.setdefault(label, set()).add(value)
    fixed = {k: v for k, v in values.items() if k not in PER_TARGET | {"le", "version"}}
    assert {k: v for k, v in listed.items() if k not in PER_TARGET} == fixed
    assert set(listed) >= PER_TARGET
