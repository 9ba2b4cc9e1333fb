"""docs/simulate-report.md against the code: its example is what its command prints, and
every key a guard trip carries is documented (the example's weight version had drifted,
six trip keys were undocumented)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from test_sim_guard import JITTER, guarded_run
from test_traces import require_full
from typer.testing import CliRunner

from slaguard.cli.main import COMMANDS, app, load_command
from slaguard.fleet import load_fleet
from slaguard.sim.paths import AZURE_CONV_RELPATH, default_trace_path

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "simulate-report.md").read_text(encoding="utf-8")
MACHINE = {"wall_s", "decision_latency_s"}
"""Keys that measure the machine, not the simulation: any value is right."""


def _section(title: str) -> str:
    return DOC.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _compare(doc: Any, got: Any, where: str) -> list[str]:
    """Where the report differs from the doc's value, to the digits the doc shows."""
    if isinstance(doc, dict):
        return [p for k, v in doc.items() for p in _compare(v, got.get(k), f"{where}.{k}")]
    if isinstance(doc, list):
        if len(doc) != len(got):
            return [f"{where}: {len(doc)} entries in the doc, {len(got)} in the run"]
        return [
            p
            for i, (d, g) in enumerate(zip(doc, got, strict=True))
            for p in _compare(d, g, f"{where}[{i}]")
        ]
    if isinstance(doc, str) and re.fullmatch(r"-?\d+\.\d+", doc):  # a float as the doc wrote it
        digits = len(doc.split(".")[1])
        ok = isinstance(got, float) and abs(got - float(doc)) <= 0.5 * 10**-digits + 1e-12
        return [] if ok else [f"{where}: doc {doc}, run {got}"]
    return [] if doc == got else [f"{where}: doc {doc!r}, run {got!r}"]


def test_the_example_is_what_its_command_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_full(default_trace_path())
    example = _section("Example")
    command = shlex.split(" ".join(example.split("`")[1].split()))
    assert command[:2] == ["slaguard", "simulate"] and command[-2] == "--report-json"
    out = tmp_path / command[-1]
    monkeypatch.chdir(ROOT)  # the scenario path is repository-relative
    result = CliRunner().invoke(app, [*command[1:-1], str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text(encoding="utf-8"))
    shown = json.loads(example.split("```json\n")[1].split("```")[0], parse_float=str)
    # absolute, so shortened in the doc
    assert report["trace"].pop("path") == str(default_trace_path())
    assert shown["trace"].pop("path").endswith(f"/shared/data/{AZURE_CONV_RELPATH}")
    assert _compare({k: v for k, v in shown.items() if k not in MACHINE}, report, "report") == []


def test_every_trip_key_is_documented() -> None:
    trips = guarded_run(load_fleet(), JITTER).guard.trips
    assert trips
    table = DOC.split("\n### Guard trips\n", 1)[1].split("\n### ", 1)[0]
    documented: set[str] = set()
    for row in table.splitlines()[4:]:
        if row.startswith("| `"):
            documented |= {k.rstrip("[]{}") for k in re.findall(r"`([^`]+)`", row.split("|")[1])}
    assert set(trips[0]) == documented


def test_the_usage_block_and_help_agree() -> None:
    """The usage block listed `--trace-format azure|mooncake` (help: auto too), and
    `--weight-update-s` had no help text."""
    usage = DOC.split("```\n", 2)[1]
    documented = dict(re.findall(r"\[(--[\w-]+)(?: ([^\]]*))?\]", usage))
    command = load_command("simulate", COMMANDS["simulate"])
    options = [p for p in command.params if p.param_type_name == "option"]
    assert {p.opts[0] for p in options} == set(documented)
    assert [p.opts[0] for p in options if not p.help] == []
    wide = CliRunner().invoke(app, ["simulate", "--help"], env={"COLUMNS": "200"}).stdout
    choices = dict(re.findall(r"(--[\w-]+) +<([^>]*\|[^>]*)>", wide))
    assert choices == {k: v for k, v in documented.items() if "|" in v}
