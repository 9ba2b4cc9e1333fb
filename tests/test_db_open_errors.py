"""How a command's `--db` that cannot be opened is worded: the cause and the fix, in one
`error:` line, exit 2."""

from __future__ import annotations

from pathlib import Path

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
