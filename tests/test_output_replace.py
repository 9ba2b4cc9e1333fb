"""A file a command writes whole beside its target and renames over it (`writing_to`)
keeps the target's permissions: a report or export kept private (`chmod 600`) was made
readable by everyone the umask lets read a new file."""

from __future__ import annotations

import stat
from pathlib import Path

from helpers import usual_umask

from slaguard.cli.output import writing_to


def test_a_replaced_file_keeps_its_mode(tmp_path: Path) -> None:
    private = tmp_path / "report.json"
    private.write_text("old\n")
    private.chmod(0o600)
    with usual_umask(), writing_to(private, "--report-json") as out:
        out.write_text("new\n")
    assert private.read_text() == "new\n"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def test_a_new_file_gets_the_umask_s_mode(tmp_path: Path) -> None:
    fresh = tmp_path / "new.json"
    with usual_umask(), writing_to(fresh, "--report-json") as out:
        out.write_text("new\n")
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o644
