"""A relative fleet path in serve's config is read from the working directory: run from
elsewhere (examples/serve.yaml from outside the checkout), it is refused in one line that
names the config and its field and where the path was looked for, before anything starts;
it said only `examples/fleet.yaml: file not found; fix: pass an existing fleet file`, which
blamed no file or setting the user had written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from slaguard.cli.main import app
from slaguard.service.config import ENV_PREFIX

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "serve.yaml"


@pytest.fixture(autouse=True)
def _elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside the checkout, without the machine's `SLAGUARD_SERVE_*` or `SLAGUARD_DB`."""
    for name in list(os.environ):
        if name.upper().startswith((ENV_PREFIX, "SLAGUARD_DB")):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def _refusal(args: list[str], env: dict[str, str] | None = None) -> str:
    result = CliRunner().invoke(app, ["serve", *args, "--port", "1"], env=env)
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr.count("\n") == 1
    return result.stderr


def test_the_examples_relative_fleet_from_another_directory_names_the_config(
    tmp_path: Path,
) -> None:
    assert _refusal(["--config", str(EXAMPLE)]) == (
        f"error: {EXAMPLE}: fleet: examples/fleet.yaml: file not found in the working "
        f"directory {tmp_path}; fix: give the fleet file's path from the working directory "
        "(not from the config's), or an absolute one\n"
    )
    assert not (tmp_path / "slaguard.db").exists()  # refused before the database


def test_a_missing_fleet_from_the_environment_names_the_variable(tmp_path: Path) -> None:
    env = {f"{ENV_PREFIX}FLEET": "fleet.yaml"}
    assert _refusal([], env).startswith(
        f"error: ${ENV_PREFIX}FLEET: fleet.yaml: file not found in the working directory "
        f"{tmp_path}; fix:"
    )
    assert _refusal(["--fleet", "f.yaml"]) == (
        "error: f.yaml: file not found; fix: pass an existing fleet file\n"  # as fleet show
    )
