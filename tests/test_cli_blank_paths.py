"""A blank path or database flag is one `error:` line naming the flag, exit 2: `Path("")`
is `.`, so `--fleet ""` said `.: is a directory`, `--plot ""` got click's error box,
`--db ""` opened (or `db upgrade` created) ./slaguard.db and `--audit-db ""` recorded
nothing, none of them saying the value was blank."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from slaguard.cli.main import app

PATH_FIX = "fix: give a path, or omit"
DB_FIX = "fix: give a database URL or SQLite file path, or omit"


@pytest.mark.parametrize(
    ("command", "flag", "fix"),
    [
        (["serve", "--port", "0"], "--fleet", PATH_FIX),
        (["serve", "--port", "0"], "--config", PATH_FIX),
        (["simulate", "--duration", "5"], "--fleet", PATH_FIX),
        (["simulate", "--duration", "5"], "--trace", PATH_FIX),
        (["simulate", "--duration", "5"], "--faults", PATH_FIX),
        (["simulate", "--duration", "5"], "--report-json", PATH_FIX),
        (["simulate", "--duration", "5"], "--audit-db", DB_FIX),
        (["fleet", "show"], "--fleet", PATH_FIX),
        (["audit", "summary"], "--fleet", PATH_FIX),
        (["audit", "incident", "1"], "--plot", PATH_FIX),
        (["audit", "summary", "-f", "csv"], "--output", PATH_FIX),
        (["history", "-f", "csv"], "--output", PATH_FIX),
        (["audit", "decisions"], "--db", DB_FIX),
        (["db", "upgrade"], "--db", DB_FIX),
        (["status"], "--db", DB_FIX),
        (["dashboards", "build"], "--out", PATH_FIX),
        (["demo", "--routing-only"], "--workdir", PATH_FIX),
    ],
)
@pytest.mark.parametrize("blank", ["", "  "])
def test_a_blank_path_flag_is_one_line_naming_it(
    command: list[str],
    flag: str,
    fix: str,
    blank: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # what a blank value used to read or create: ./
    result = CliRunner().invoke(app, [*command, flag, blank])
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr == f"error: {flag}: blank ({blank!r}); {fix} {flag}\n"
    assert list(tmp_path.iterdir()) == []


def test_a_directory_for_an_output_file_is_still_one_line(tmp_path: Path) -> None:
    """`--output` and `--plot` lost click's directory check to the parser: ours says it."""
    result = CliRunner().invoke(app, ["history", "-f", "csv", "-o", str(tmp_path)])
    assert result.exit_code == 2
    assert result.stderr == f"error: --output: {tmp_path} is a directory; fix: name a file\n"


@pytest.mark.parametrize("command", [["db", "upgrade"], ["status"], ["audit", "decisions"]])
def test_a_blank_database_variable_is_refused_as_the_flag_is(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`SLAGUARD_DB=" " slaguard db upgrade` created a file named " ", which `status` read."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SLAGUARD_DB", " ")
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr == (
        "error: $SLAGUARD_DB: blank (' '); fix: give a database URL or SQLite file path, or "
        "unset SLAGUARD_DB\n"
    )
    assert list(tmp_path.iterdir()) == []
