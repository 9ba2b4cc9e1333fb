"""A drained `simulate --audit-db` run leaves no spill directory behind: its journal only
ever held the run's own rows, and each run is refused while one holds records."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import create_scratch_database, drop_database, require_postgres
from test_engine_support import AZURE_FIXTURE
from typer.testing import CliRunner

from slaguard.cli.main import app


def _simulate(db: str) -> str:
    result = CliRunner().invoke(
        app,
        ["simulate", "--trace", str(AZURE_FIXTURE), "--policy", "round-robin", "--audit-db", db],
    )
    assert result.exit_code == 0, result.output
    assert "200 decisions and 200 outcomes recorded (400 rows written) in" in result.stderr
    return result.stderr


def test_a_drained_run_removes_the_spill_directory_it_made(tmp_path: Path) -> None:
    """It left `sim.db.spill/` holding only its `LOCK` file after every run."""
    _simulate(f"sqlite:///{tmp_path / 'sim.db'}")
    assert (tmp_path / "sim.db").is_file() and not (tmp_path / "sim.db.spill").exists()


def test_a_spill_directory_holding_anything_else_is_kept_as_it_was(tmp_path: Path) -> None:
    spill = tmp_path / "sim.db.spill"
    spill.mkdir()
    (spill / "unreadable.lines").write_bytes(b"kept for recovery\n")
    _simulate(f"sqlite:///{tmp_path / 'sim.db'}")
    assert sorted(p.name for p in spill.iterdir()) == ["LOCK", "unreadable.lines"]
    assert (spill / "unreadable.lines").read_bytes() == b"kept for recovery\n"


def test_an_empty_spill_directory_an_earlier_run_left_is_removed(tmp_path: Path) -> None:
    """What earlier versions left after every run: only the `LOCK` file."""
    spill = tmp_path / "sim.db.spill"
    spill.mkdir()
    (spill / "LOCK").touch()
    _simulate(f"sqlite:///{tmp_path / 'sim.db'}")
    assert not spill.exists()


@pytest.mark.postgres
def test_a_postgres_run_leaves_no_spill_directory_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_postgres()
    monkeypatch.chdir(tmp_path)
    url = create_scratch_database()
    try:
        _simulate(url.render_as_string(hide_password=False))
    finally:
        drop_database(url)
    assert list(tmp_path.iterdir()) == []
