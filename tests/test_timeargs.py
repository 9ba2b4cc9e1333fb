"""Time and duration arguments at their limits, through the CLI: a relative time or a
duration past 100 years is one `error:` line naming it and the limit (it was an
OverflowError traceback), and `-0h` is now."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from test_audit_cli import ok, one_line_error, run_db

from slaguard.audit.timeargs import parse_time

TOO_FAR_BACK = "is too far back; relative times go back at most -36500d (100 years)"
TOO_LONG = "is too long; durations go up to 36500d (100 years); fix: give a shorter one"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    return run_db(tmp_path_factory.mktemp("timeargs"))


@pytest.mark.parametrize("since", ["-999999d", "-99999999d", "-36501d", "-99999999999999999999w"])
@pytest.mark.parametrize("command", [["audit", "decisions"], ["audit", "summary"], ["history"]])
def test_a_relative_time_past_100_years_is_refused_in_one_line(
    db: str, command: list[str], since: str
) -> None:
    error = one_line_error(*command, "--since", since, "--db", db)
    assert (
        f"error: --since: '{since}' {TOO_FAR_BACK}; fix: write an older time as an ISO date"
        in error
    )


@pytest.mark.parametrize(
    "args",
    [
        ["audit", "prune", "--older-than", "999999d", "--dry-run"],
        ["audit", "incident", "1", "--after", "99999999d"],
        ["audit", "incident", "1", "--before", "99999999d"],
        ["status", "--window", "99999999d"],
    ],
)
def test_a_duration_past_100_years_is_refused_in_one_line(db: str, args: list[str]) -> None:
    flag, value = args[-2:] if args[-1] != "--dry-run" else args[-3:-1]
    assert f"error: {flag}: '{value}' {TOO_LONG}\n" == one_line_error(*args, "--db", db)


def test_100_years_is_still_read(db: str) -> None:
    assert "held_round_robin" in ok("audit", "incident", "1", "--after", "36500d", "--db", db)
    assert ok("audit", "decisions", "--since", "-36500d", "--db", db, "-f", "csv").count("\n") > 1
    dry = ok("audit", "prune", "--older-than", "36500d", "--dry-run", "--db", db)
    assert dry.startswith("would delete 0 decisions and 0 outcomes older than 19")


def test_minus_zero_is_now(db: str) -> None:
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    assert parse_time("-0h", "--until", now) == now
    assert parse_time("-0m0s", "--until", now) == now
    # --since -0h is now, so the range is empty: said as such, not "cannot read"
    assert "--since '-0h' and --until 'now' are the same time (" in one_line_error(
        "audit", "decisions", "--since", "-0h", "--db", db
    )
    assert "'0h' is a duration, not a time; fix: write -0h for 0h before now" in one_line_error(
        "audit", "decisions", "--since", "0h", "--db", db
    )


def test_an_iso_time_long_ago_is_still_read(db: str) -> None:
    out = ok("audit", "decisions", "--since", "1900-01-01", "--db", db, "-f", "csv", "--limit", "1")
    assert out.startswith("request_id,")


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--since", "0001-01-01T00:00+05:00"), ("--until", "9999-12-31T23:00-05:00")],
)
def test_an_iso_time_outside_the_years_utc_holds_names_its_flag(
    db: str, flag: str, value: str
) -> None:
    """It was `error: year 0 is out of range`, with no flag named."""
    error = one_line_error("audit", "decisions", flag, value, "--db", db)
    fix = "falls outside years 1-9999 in UTC; fix: give a time within them"
    assert error == f"error: {flag}: '{value}' {fix}\n"


@pytest.mark.parametrize(
    ("command", "default"),
    [(["history"], "-2h"), (["audit", "decisions"], "-1h"), (["audit", "summary"], "-1h")],
)
def test_an_until_before_the_default_since_names_the_default(
    db: str, command: list[str], default: str
) -> None:
    """`history --until -3h` said "--since '-2h' ... is not before --until '-3h'; swap them":
    no --since was given, and there was nothing to swap."""
    error = one_line_error(*command, "--until", "-3d", "--db", db)
    iso = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z"
    assert re.fullmatch(
        rf"error: --until '-3d' \({iso}\) is not after --since '{default}' \({iso}\), the "
        r"default when --since is not given; fix: give an earlier --since as well\n",
        error,
    ), error
