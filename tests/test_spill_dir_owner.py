"""A spill directory someone else can write to is refused: the writer replays every
segment in it into the audit database and deletes what it committed, so whoever may write
there can add forged decisions and outcomes to the audit trail, or delete records not yet
written. The default directory has a predictable name beside the database or in `./`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from slaguard.audit.spill import SpillDirUnsafeError, SpillJournal
from slaguard.cli.main import app


def _shared(path: Path, mode: int = 0o777) -> Path:
    path.mkdir()
    path.chmod(mode)  # mkdir's mode passes through the umask
    return path


@pytest.mark.parametrize("mode", [0o777, 0o702, 0o1733])
def test_a_directory_others_may_write_is_refused_and_left_untouched(
    tmp_path: Path, mode: int
) -> None:
    spill = _shared(tmp_path / "spill", mode)
    with pytest.raises(SpillDirUnsafeError) as err:
        SpillJournal(spill)
    assert str(err.value) == (
        f"spill directory {spill} is writable by every user (mode {mode & 0o7777:04o}): "
        "whoever may write there can add records the audit writer replays into the "
        f"database, or delete ones not yet written; fix: `chmod o-w {spill}`, or name a "
        f"new directory inside it ({spill / 'spill'}: slaguard makes it private, as a volume "
        "mounted 0777 needs)"
    )
    assert list(spill.iterdir()) == []  # not even a LOCK file
    inside = SpillJournal(spill / "spill")  # the fix it names works
    inside.close()
    assert (spill / "spill").stat().st_mode & 0o777 == 0o700


def test_a_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can give a directory to another user")
    spill = _shared(tmp_path / "spill", 0o755)
    os.chown(spill, 65534, 65534)
    with pytest.raises(SpillDirUnsafeError) as err:
        SpillJournal(spill)
    assert str(err.value).startswith(
        f"spill directory {spill} belongs to another user (uid 65534): whoever may write "
    )


@pytest.mark.parametrize("mode", [0o700, 0o755, 0o775])
def test_a_directory_of_ours_others_cannot_write_is_taken(tmp_path: Path, mode: int) -> None:
    """0775 too: under a user-private group (umask 002) that is what `mkdir` makes."""
    spill = _shared(tmp_path / "spill", mode)
    journal = SpillJournal(spill)
    journal.close()
    made = SpillJournal(tmp_path / "new" / "spill")  # made by the journal: owner-only
    made.close()
    assert (tmp_path / "new" / "spill").stat().st_mode & 0o777 == 0o700


def test_serve_refuses_it_in_one_line_before_making_the_database(tmp_path: Path) -> None:
    spill = _shared(tmp_path / "a.db.spill")  # the default beside the database
    result = CliRunner().invoke(app, ["serve", "--db", str(tmp_path / "a.db"), "--port", "0"])
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr == (
        f"error: spill_dir (default {spill}, beside the database): spill directory {spill} "
        "is writable by every user (mode 0777): whoever may write there can add records "
        "the audit writer replays into the database, or delete ones not yet written; "
        f"fix: `chmod o-w {spill}`, or name a new directory inside it ({spill / 'spill'}: "
        "slaguard makes it private, as a volume mounted 0777 needs)\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.db.spill"]
    assert list(spill.iterdir()) == []
