"""How a command's `--db` that cannot be opened is worded: the cause and the fix, in one
`error:` line, exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from slaguard.cli.main import app


def test_a_missing_directory_is_named_before_db_upgrade_is_offered(tmp_path: Path) -> None:
    """It offered `slaguard db upgrade --db DIR/a.db`, which then failed on the directory."""
    db = tmp_path / "nonexist" / "dir" / "a.db"
    result = CliRunner().invoke(app, ["status", "--db", str(db)])
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(
        f"error: --db: SQLite file {db} does not exist, nor does its directory {db.parent}; "
    ), result.stderr
    assert result.stderr.endswith(
        f"only for a new, empty one create {db.parent}, then run `slaguard db upgrade --db {db}`\n"
    )


@pytest.mark.parametrize("command", [["status"], ["audit", "decisions", "--since", "-1h"]])
def test_a_file_in_a_directory_this_user_cannot_write_names_the_wal_files(
    command: list[str], tmp_path: Path
) -> None:
    """SQLite's "unable to open database file; check --db" pointed at the wrong problem:
    WAL mode needs to create the -shm file beside the database, even to read it."""
    rodir = tmp_path / "rodir"
    rodir.mkdir()
    db = rodir / "a.db"
    # in a process of its own: its last connection's close removes a.db-wal and a.db-shm
    upgrade = [sys.executable, "-m", "slaguard", "db", "upgrade", "--db", str(db)]
    subprocess.run(upgrade, check=True, capture_output=True)
    assert sorted(p.name for p in rodir.iterdir()) == ["a.db"]
    if subprocess.run(["chattr", "+i", str(rodir)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i does not work here (needs root and a filesystem with it)")
    try:
        result = CliRunner().invoke(app, [*command, "--db", str(db)])
    finally:
        subprocess.run(["chattr", "-i", str(rodir)], check=True)
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr == (
        f"error: --db: cannot open SQLite file {db}: its directory {rodir} is not writable "
        "for this user, and SQLite's WAL mode needs to create a.db-shm beside it, even to "
        "read; fix: copy a.db (with a.db-wal if there is one) to a writable directory and "
        f"pass the copy as --db, or make {rodir} writable\n"
    )


GENERIC_DB = (
    "the database `slaguard serve` uses (its --db, `db:` or $SLAGUARD_SERVE_DB) or a "
    "`slaguard simulate --audit-db` run wrote"
)


@pytest.mark.parametrize("command", [["status"], ["audit", "summary", "--since", "-1h"]])
def test_a_missing_file_s_fix_names_any_database_slaguard_writes(
    command: list[str], tmp_path: Path
) -> None:
    """The fix named only the service's database, to someone reading a simulated run's."""
    db = tmp_path / "sim.db"
    result = CliRunner().invoke(app, [*command, "--db", str(db)])
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr == (
        f"error: --db: SQLite file {db} does not exist; fix: check the path, or pass as --db "
        f"{GENERIC_DB}; only for a new, empty one run `slaguard db upgrade --db {db}`\n"
    )


def test_a_file_that_is_not_a_database_is_named_as_such(tmp_path: Path) -> None:
    """It read `cannot reach database sqlite:///notes.txt: file is not a database`, as if a
    server were down, with no fix."""
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database\n")
    result = CliRunner().invoke(app, ["status", "--db", str(notes)])
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr == (
        f"error: --db: {notes} is not a SQLite database (SQLite: file is not a database); "
        f"fix: check the path, or pass as --db {GENERIC_DB}\n"
    )
    created = CliRunner().invoke(app, ["db", "upgrade", "--db", str(notes)])
    assert created.exit_code == 2 and created.stderr == (
        f"error: --db: {notes} is not a SQLite database (SQLite: file is not a database); "
        "fix: check the path, or name a file that does not exist yet for a new database\n"
    )
    assert notes.read_text() == "not a database\n"


@pytest.mark.parametrize(
    ("db", "shown"),
    [
        (
            "postgres://u@127.0.0.1:1/x?password=s3cret&sslmode=disable",  # nothing listens
            "error: cannot reach database postgresql+psycopg://u@127.0.0.1:1/x?password=***"
            "&sslmode=disable: ",
        ),
        (
            "postgresql://u@127.0.0.1:port/x?sslpassword=s3cret",  # does not parse
            "error: --db: cannot read 'postgresql://u@127.0.0.1:port/x?sslpassword=***' as a "
            "database URL; ",
        ),
    ],
)
def test_a_password_given_as_a_url_option_is_masked(db: str, shown: str) -> None:
    """libpq takes the password as `?password=` too: only the one before `@` was masked,
    so an error line printed this one."""
    result = CliRunner().invoke(app, ["status", "--db", db])
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr.startswith(shown) and "s3cret" not in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("args", "env", "option"),
    [
        (["audit", "decisions", "--db", "postgresql+psycopg://postgres@127.0.0.1:1/x"], {}, "--db"),
        (
            ["status"],
            {"SLAGUARD_DB": "postgresql+psycopg://postgres@127.0.0.1:1/x"},
            "$SLAGUARD_DB",
        ),
    ],
)
def test_an_unreachable_server_gets_a_fix(
    args: list[str], env: dict[str, str], option: str
) -> None:
    """A wrong port (nothing listens on 1) ended '; check --db', no 'fix:' and no word of
    what to check."""
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("error: cannot reach database postgresql+psycopg://"), (
        result.stderr
    )
    assert result.stderr.endswith(
        f"; fix: check the host, port, user and database name in {option}, and that the "
        "server is up\n"
    ), result.stderr


@pytest.mark.parametrize(
    "command",
    [["status"], ["rollback", "--reason", "x"], ["db", "upgrade"], ["db", "current"]],
)
def test_a_directory_given_as_the_database_is_named_as_one(
    command: list[str], tmp_path: Path
) -> None:
    """`--db DIR` said the SQLite file DIR "does not exist" and offered `db upgrade --db
    DIR`, which then failed with `cannot reach database: unable to open database file`."""
    result = CliRunner().invoke(app, [*command, "--db", str(tmp_path)])
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr == (
        f"error: --db: {tmp_path} is a directory, not a SQLite file; fix: name the database "
        f"file, e.g. --db {tmp_path / 'slaguard.db'}\n"
    )
    assert list(tmp_path.iterdir()) == []
