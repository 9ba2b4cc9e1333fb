"""`serve` on a SQLite path that holds something else refuses at start, in one line."""

from __future__ import annotations

import socket
from pathlib import Path

from typer.testing import CliRunner

from slaguard.cli.main import app


def test_a_file_that_is_not_sqlite_is_one_line_before_anything_starts(tmp_path: Path) -> None:
    """`serve --db notes.txt` started, served unready ("file is not a database") and made
    `notes.txt.spill/` beside the file."""
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database, but long enough to have SQLite read its header\n" * 4)
    with socket.socket() as taken:  # without the check: refused for the port, not served
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = ["--port", str(taken.getsockname()[1])]
        result = CliRunner().invoke(app, ["serve", "--db", str(notes), *port])
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr == (
        f"error: --db: {notes} is not a SQLite database (SQLite: file is not a database); "
        "fix: check the path, or name a file that does not exist yet for a new database\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_an_empty_file_is_a_new_database_as_before(tmp_path: Path) -> None:
    """SQLite takes an empty file as an empty database: `serve` goes on (here to the port
    check, which the taken port fails)."""
    empty = tmp_path / "new.db"
    empty.touch()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = CliRunner().invoke(
            app, ["serve", "--db", str(empty), "--port", str(taken.getsockname()[1])]
        )
    assert result.exit_code == 2 and "is not a SQLite database" not in result.stderr
    assert "cannot listen on 127.0.0.1:" in result.stderr


def test_a_directory_as_the_database_is_one_line_before_anything_starts(tmp_path: Path) -> None:
    """`serve --db DIR` started and served unready, its guard logging `unable to open
    database file` every half second."""
    with socket.socket() as taken:  # without the check: refused for the port, not served
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = ["--port", str(taken.getsockname()[1])]
        result = CliRunner().invoke(app, ["serve", "--db", str(tmp_path), *port])
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr == (
        f"error: --db: {tmp_path} is a directory, not a SQLite file; fix: name the database "
        f"file, e.g. --db {tmp_path / 'slaguard.db'}\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_directory_as_the_config_s_database_names_the_config_key(tmp_path: Path) -> None:
    config = tmp_path / "serve.yaml"
    config.write_text(f"db: {tmp_path}\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = ["--port", str(taken.getsockname()[1])]
        result = CliRunner().invoke(app, ["serve", "--config", str(config), *port])
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr == (
        f"error: {config}: db: {tmp_path} is a directory, not a SQLite file; fix: name the "
        f"database file, e.g. {tmp_path / 'slaguard.db'} there\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["serve.yaml"]
