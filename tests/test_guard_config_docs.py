"""Every `GuardConfig` field is in docs/guard.md's tables with its default and bounds: the
serve config's "unknown setting" error sends users there, and a key missing from it
(`rollout_compare.window_s`, `cold_start.baseline_tau_s`, ...) was documented nowhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from slaguard.guard.config import GuardConfig

DOC = Path(__file__).resolve().parents[1] / "docs" / "guard.md"


def _tables() -> dict[str, dict[str, list[str]]]:
    """Rows of each `| setting | default | bounds | why |` table by section and key."""
    tables: dict[str, dict[str, list[str]]] = {}
    section = ""
    for line in DOC.read_text().splitlines():
        if line == "## Detectors":
            section = ""
        elif heading := re.match(r"### `(\w+)`|## (Breaker)$", line):
            section = (heading.group(1) or heading.group(2)).lower()
        elif line.startswith("| `"):
            cells = [cell.strip() for cell in line.strip("|").split(" | ")]
            for key in re.findall(r"`(\w+)`", cells[0]):
                tables.setdefault(section, {})[key] = cells
    return tables


def _bounds(field: FieldInfo) -> str:
    if field.annotation is bool:
        return "true/false"
    low = high = ""
    for m in field.metadata:
        if isinstance(m, Gt | Ge):
            low = f"> {m.gt:g}" if isinstance(m, Gt) else f">= {m.ge:g}"
        elif isinstance(m, Lt | Le):
            high = f"< {m.lt:g}" if isinstance(m, Lt) else f"<= {m.le:g}"
    if low and high:
        text = f"{'(' if low[1] == ' ' else '['}{low.split()[1]}, {high.split()[1]}"
        text += ")" if high[1] == " " else "]"
    else:
        text = low or high
    return f"whole, {text}" if field.annotation is int else text


def _fields() -> list[tuple[str, str, FieldInfo]]:
    out: list[tuple[str, str, FieldInfo]] = []
    for name, field in GuardConfig.model_fields.items():
        inner = field.annotation
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            out += [(name, key, sub) for key, sub in inner.model_fields.items()]
        else:
            out.append(("", name, field))
    return out


@pytest.mark.parametrize(
    ("section", "key", "field"),
    [pytest.param(*f, id=f"{f[0]}.{f[1]}".lstrip(".")) for f in _fields()],
)
def test_every_guard_setting_is_documented_with_default_and_bounds(
    section: str, key: str, field: FieldInfo
) -> None:
    rows = _tables().get(section, {})
    assert key in rows, f"{section}.{key} is not in a table of its section in docs/guard.md"
    _, default, bounds, why = rows[key]
    value = field.get_default(call_default_factory=True)
    shown = (
        {str(value).lower(), f"{value:g}", f"{value:,.0f}"}
        if not isinstance(value, bool)
        else {str(value).lower()}
    )
    assert any(text in default for text in shown), (key, default, shown)
    assert _bounds(field) in bounds.split("; "), (key, bounds, _bounds(field))
    assert why
