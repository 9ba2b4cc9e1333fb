"""Grafana dashboards as code (grafana-foundation-sdk, Grafana 11.6 line).

`render_all()` gives each dashboard's JSON text; `slaguard dashboards build` writes them to
`dashboards/`, where they are committed (a test fails when they drift from a fresh build).
`panel_queries()` lists every panel's PromQL with template variables substituted, so tests
can parse them with promtool and run them against a real Prometheus.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.cog.encoder import JSONEncoder

from slaguard.dashboards import fleet, guard, ops, targets
from slaguard.telemetry.promql import DEFAULT_VARIABLES, substitute

BUILDERS: Mapping[str, Callable[[], db.Dashboard]] = {
    fleet.UID: fleet.build,
    targets.UID: targets.build,
    guard.UID: guard.build,
    ops.UID: ops.build,
}
"""Dashboard uid -> builder; the file name is `<uid>.json`."""

VARIABLES: Mapping[str, str] = {**DEFAULT_VARIABLES, "card_type": ".*", "target": ".*"}
"""Default values for every template variable the dashboards use."""


class PanelQuery(NamedTuple):
    """One PromQL expression of one panel (or annotation) of one dashboard."""

    dashboard_uid: str
    panel_title: str
    expr: str


def render(uid: str) -> str:
    """One dashboard as stable JSON text: sorted keys, panel ids numbered in order."""
    model = BUILDERS[uid]().build()
    for number, panel in enumerate(model.panels or [], start=1):
        panel.id_val = number
    return JSONEncoder(sort_keys=True, indent=2).encode(model) + "\n"


def render_all() -> dict[str, str]:
    """File name -> JSON text for every dashboard."""
    return {f"{uid}.json": render(uid) for uid in BUILDERS}


def write_all(out_dir: Path) -> list[Path]:
    """Write every dashboard into `out_dir` (created if missing); return the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render_all().items():
        path = out_dir / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def _panels(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    flat: list[dict[str, Any]] = []
    for panel in panels:
        flat.append(panel)
        flat.extend(_panels(panel.get("panels", [])))
    return flat


def panel_queries(
    variables: Mapping[str, str] | None = None, *, annotations: bool = False
) -> list[PanelQuery]:
    """Every panel's PromQL (and with `annotations=True`, every annotation's) per dashboard.

    Template variables are replaced from `variables` (default `VARIABLES`), e.g. pass
    `{"__rate_interval": "30s", ...}` to run them against a Prometheus scraping every 1 s.
    """
    values = {**VARIABLES, **(variables or {})}
    out: list[PanelQuery] = []
    for uid in BUILDERS:
        board = json.loads(render(uid))
        for panel in _panels(board.get("panels", [])):
            for target in panel.get("targets", []):
                out.append(PanelQuery(uid, panel["title"], substitute(target["expr"], values)))
        if annotations:
            for note in board.get("annotations", {}).get("list", []):
                if "expr" in note:
                    out.append(
                        PanelQuery(
                            uid, f"annotation: {note['name']}", substitute(note["expr"], values)
                        )
                    )
    return out
