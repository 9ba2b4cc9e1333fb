"""Click's usage errors, on every command, are one `error:` line naming the option or
argument and where help is, exit 2 (they were a usage line, a hint and a boxed message)."""

from __future__ import annotations

import re

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
        (["audit", "incident", "abc"], "argument incident_id: 'abc': input should be a valid "),
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


@pytest.mark.parametrize("args", [["-h"], ["audit", "-h"], ["audit", "decisions", "-h"]])
def test_dash_h_is_help_everywhere(args: list[str]) -> None:
    """`-h` was "no such option: -h" on every command."""
    result = runner.invoke(app, args)
    assert result.exit_code == 0 and "Usage: slaguard" in result.output, result.output
    assert result.output == runner.invoke(app, [*args[:-1], "--help"]).output
