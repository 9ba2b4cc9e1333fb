"""Click's usage errors, on every command, are one `error:` line naming the option or
argument and where help is, exit 2 (they were a usage line, a hint and a boxed message)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from slaguard.cli.main import app

runner = CliRunner()
HELP_POINTER = re.compile(r"(; see|\? See) 'slaguard[a-z ]* --help'\n\Z")


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["simulate", "--rate-scale", "0"],
            "--rate-scale: 0 is not in the range 0.01<=x<=1000; see 'slaguard simulate --help'",
        ),
        (["simulate", "--seed", "-1"], "--seed: -1 is not in the range x>=0; see "),
        (
            ["simulate", "--policy", "fastest"],
            "--policy: 'fastest' is not one of round-robin, learned, rollout, guarded; see ",
        ),
        (["audit", "decisions", "-f", "xml"], "--format: 'xml' is not one of 'table', "),
        (["audit", "decisions", "--limit", "x"], "--limit: 'x': input should be a valid integer"),
        (
            ["audit", "explain"],
            "missing argument 'request_id'; see 'slaguard audit explain --help'",
        ),
        (
            ["audit", "incident", "abc"],
            "argument incident_id: 'abc': input should be an incident's audit id (a number) or ",
        ),
        (["audit", "prune"], "missing option '--older-than'; see 'slaguard audit prune --help'"),
        (
            ["audit", "decisions", "--sinc", "-1h"],
            "no such option: --sinc; did you mean --since? See 'slaguard audit decisions --help'",
        ),
        (["simulat"], "no such command 'simulat'; did you mean 'simulate', 'emulate'? See "),
        (["--verbose"], "no such option: --verbose; see 'slaguard --help'"),
        (
            ["simulate", "--duration"],
            "option '--duration' requires an argument; see 'slaguard simulate --help'",
        ),
        (
            ["audit", "decisions", "--since"],
            "option '--since' requires an argument; see 'slaguard audit decisions --help'",
        ),
        (["rollback", "--reason"], "option '--reason' requires an argument; see 'slaguard "),
        (["rollback", "--hold=yes"], "option '--hold' does not take a value; see 'slaguard "),
        (
            ["rollback", "--hold", "x"],
            "got unexpected extra argument(s) (x); see 'slaguard rollback ",
        ),
    ],
)
def test_a_usage_error_is_one_error_line(args: list[str], line: str) -> None:
    result = runner.invoke(app, args)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.startswith(f"error: {line}") and result.stderr.count("\n") == 1
    assert HELP_POINTER.search(result.stderr), "every usage error ends pointing at help"


def test_help_and_a_bare_group_still_print_help() -> None:
    assert runner.invoke(app, ["simulate", "--help"]).stdout.lstrip().startswith("Usage:")
    bare = runner.invoke(app, ["audit"])
    assert "Postmortem queries" in bare.stdout + bare.stderr
    assert not (bare.stdout + bare.stderr).startswith("error:")


@pytest.mark.parametrize("group", ["audit", "db", "fleet", "dashboards"])
def test_a_groups_help_lists_each_command_on_one_line(group: str) -> None:
    """A docstring's first paragraph over two source lines was listed over three lines,
    cut where the source wrapped (`audit explain`, `summary`, `incident`, `dashboards
    build`): each command's summary is one line of its own."""
    listing = runner.invoke(app, [group, "--help"], env={"COLUMNS": "200"}).output
    panel = listing[listing.index("Commands") :]
    rows = [line.strip("│ ") for line in panel.splitlines()[1:] if line.startswith("│")]
    assert rows and all(re.match(r"[a-z-]+ {2,}\S", row) for row in rows), rows


@pytest.mark.parametrize("args", [["-h"], ["audit", "-h"], ["audit", "decisions", "-h"]])
def test_dash_h_is_help_everywhere(args: list[str]) -> None:
    """`-h` was "no such option: -h" on every command."""
    result = runner.invoke(app, args)
    assert result.exit_code == 0 and "Usage: slaguard" in result.output, result.output
    assert result.output == runner.invoke(app, [*args[:-1], "--help"]).output


@pytest.mark.parametrize(
    ("args", "flag", "value"),
    [
        (["audit", "decisions", "--target", "--db", "x.db"], "--target", "--db"),
        (["audit", "decisions", "--model", "--since", "now"], "--model", "--since"),
        (["audit", "decisions", "--since", "--until", "now"], "--since", "--until"),
        (["audit", "incident", "1", "--plot", "--db", "x.db"], "--plot", "--db"),
        (["audit", "summary", "--fleet", "--db", "x.db"], "--fleet", "--db"),
        (["audit", "prune", "--older-than", "--dry-run"], "--older-than", "--dry-run"),
        (["history", "--db", "--until", "now"], "--db", "--until"),
        (["incidents", "--since", "--open"], "--since", "--open"),
        (["status", "--window", "--json"], "--window", "--json"),
        (["db", "upgrade", "--revision", "--db", "x.db"], "--revision", "--db"),
        (["simulate", "--audit-db", "--duration", "5"], "--audit-db", "--duration"),
        (["dashboards", "queries", "--var", "--help"], "--var", "--help"),
        (["rollback", "--reason", "drill", "--actor", "--hold"], "--actor", "--hold"),
    ],
)
def test_an_option_taken_as_a_value_is_refused(
    args: list[str], flag: str, value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--target --db x.db` filtered on a target named `--db` and read the default
    database: only `rollback` and `resume` refused a value that is the next flag."""
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, args)
    assert (result.exit_code, result.stdout) == (2, ""), result.output
    assert result.stderr.startswith(
        f"error: {flag}: '{value}' looks like an option, not a value; fix: "
    ), result.stderr
    assert HELP_POINTER.search(result.stderr) and list(tmp_path.iterdir()) == []


def test_a_relative_time_with_one_dash_is_still_a_value(tmp_path: Path) -> None:
    db = str(tmp_path / "audit.db")
    assert runner.invoke(app, ["db", "upgrade", "--db", db]).exit_code == 0
    for args in (["history", "--since", "-2h"], ["audit", "decisions", "--since", "-30m"]):
        result = runner.invoke(app, [*args, "--db", db])
        shown = " ".join(result.stdout.split())  # the title wraps at 80 columns
        assert result.exit_code == 0 and "(0 rows)" in shown, result.output
