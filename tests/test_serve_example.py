"""examples/serve.yaml is the reference of `slaguard serve`'s settings (the "unknown setting"
error sends users there): it names every field of `ServiceConfig`, nested sections included,
with the model's default. A field added to the model, a default changed in it, or a key
renamed in one of the two without the other fails here instead of misleading a reader."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from slaguard.guard.config import ServeGuardConfig
from slaguard.service.config import ENV_PREFIX, ServiceConfig, ServiceConfigError, load_config
from slaguard.userfiles import parse_user_yaml

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "serve.yaml"
DOCUMENTED_ELSEWHERE = "guard"
"""A section whose keys are listed in docs/guard.md (`test_guard_config_docs.py` holds
that table to the model): the example shows it commented out, with two of its defaults."""
COMMENTED_OUT = {"db", "spill_dir", DOCUMENTED_ELSEWHERE, "notify_file", "alertmanager.fleet"}
"""Settings without a value by default: the example shows a sample, commented out, and
says in the comment what happens without it."""
DIFFERS = {"fleet": "default: the built-in fleet"}
"""Settings the example sets to another value than the default, each with the comment on
its line that says so."""
SETTING_LINE = re.compile(r"^(\s*)# (?=\s*[a-z_]+:(\s|$))")
"""A commented-out `key: value` line (a section's indented), not a comment's prose (which
starts otherwise)."""


def leaf_paths(model: type[BaseModel], prefix: str = "") -> set[str]:
    """`gateway.enabled`, ...: each field of `model`, a section's fields in its place."""
    paths: set[str] = set()
    for name, field in model.model_fields.items():
        inner = field.annotation
        section = isinstance(inner, type) and issubclass(inner, BaseModel)
        if section and f"{prefix}{name}" != DOCUMENTED_ELSEWHERE:
            paths |= leaf_paths(inner, f"{prefix}{name}.")
        else:
            paths.add(f"{prefix}{name}")
    return paths


def written_paths(values: dict[str, Any], prefix: str = "") -> set[str]:
    """The same dotted paths for the keys a YAML mapping writes."""
    paths: set[str] = set()
    for key, value in values.items():
        if isinstance(value, dict) and f"{prefix}{key}" != DOCUMENTED_ELSEWHERE:
            paths |= written_paths(value, f"{prefix}{key}.")
        else:
            paths.add(f"{prefix}{key}")
    return paths


def value_at(config: BaseModel, path: str) -> Any:
    value: Any = config
    for part in path.split("."):
        value = getattr(value, part)
    return value


def uncommented(text: str) -> str:
    """The example with its commented-out settings put back."""
    return "\n".join(SETTING_LINE.sub(r"\1", line) for line in text.splitlines()) + "\n"


def problems(text: str, scratch: Path) -> list[str]:
    """What an example `text` gets wrong against the model, one line each."""
    every = leaf_paths(ServiceConfig)
    written = written_paths(parse_user_yaml(uncommented(text), "example", ValueError))
    active = written_paths(parse_user_yaml(text, "example", ValueError))
    wrong = [f"{p}: not in the example" for p in sorted(every - written)]
    wrong += [f"{p}: commented out" for p in sorted((every & written) - active - COMMENTED_OUT)]
    wrong += [f"{p}: set, not commented out" for p in sorted(active & COMMENTED_OUT)]
    default = ServiceConfig()
    wrong += [
        f"{p}: {value_at(default, p)!r} by default, not unset"
        for p in sorted(COMMENTED_OUT - {DOCUMENTED_ELSEWHERE})
        if value_at(default, p) is not None
    ]
    try:
        example = load_config(_write(scratch / "example.yaml", text))
        samples = load_config(_write(scratch / "uncommented.yaml", uncommented(text)))
    except ServiceConfigError as exc:
        return [*wrong, str(exc)]
    for path in sorted((active & every) - COMMENTED_OUT):
        value, model = value_at(example, path), value_at(default, path)
        if path in DIFFERS and not re.search(rf"^{path}: .*# {DIFFERS[path]}$", text, re.M):
            wrong.append(f"{path}: differs from the default without `# {DIFFERS[path]}`")
        elif path not in DIFFERS and value != model:
            wrong.append(f"{path}: {value!r} in the example, {model!r} by default")
    if samples.guard != ServeGuardConfig():
        wrong.append("guard: the commented-out values are not the defaults")
    return wrong


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.fixture(autouse=True)
def _no_serve_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """The model's defaults, not the machine's `SLAGUARD_SERVE_*` or `SLAGUARD_DB`."""
    for name in list(os.environ):
        if name.upper().startswith((ENV_PREFIX, "SLAGUARD_DB")):
            monkeypatch.delenv(name)


def test_the_example_names_every_setting_with_its_default(tmp_path: Path) -> None:
    assert problems(EXAMPLE.read_text(encoding="utf-8"), tmp_path) == []


def test_the_check_finds_a_missing_key_a_drifted_default_and_an_unsaid_difference(
    tmp_path: Path,
) -> None:
    """The guard itself: each drift of the example from the model is one line."""
    text = EXAMPLE.read_text(encoding="utf-8")
    edits = [
        ("  max_connections: 512\n", ""),
        ("  read_timeout_s: 60.0\n", "  read_timeout_s: 90.0\n"),
        ("#     trip_after: 3\n", "#     trip_after: 5\n"),
        ("# default: the built-in fleet", "# the demo's"),
        ("# notify_file: incidents.jsonl", "notify_file: incidents.jsonl"),
        ("  stale_after_s: 1.0", "#   stale_after_s: 1.0"),
    ]
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    assert problems(text, tmp_path) == [
        "gateway.max_connections: not in the example",
        "telemetry.stale_after_s: commented out",
        "notify_file: set, not commented out",
        "fleet: differs from the default without `# default: the built-in fleet`",
        "gateway.read_timeout_s: 90.0 in the example, 60.0 by default",
        "guard: the commented-out values are not the defaults",
    ]
