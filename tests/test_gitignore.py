"""What `slaguard serve` leaves beside a SQLite database is ignored by git, as the
database itself is (`*.db`): the guard's lock, router and sample files were not."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import make_url

from slaguard.guard.leader import leader_lock_file
from slaguard.guard.lease_file import FileLeaderLease

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout"
)
def test_the_guard_files_beside_a_sqlite_database_are_ignored() -> None:
    lock = leader_lock_file(make_url("sqlite:///slaguard.db"))
    assert lock is not None
    lease = FileLeaderLease(lock, "replica-1")
    names = ["slaguard.db", lease.path.name, lease.router_path.name, f"{lease.spool.path.name}/x"]
    checked = subprocess.run(
        ["git", "check-ignore", "--no-index", "--verbose", *names],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    ignored = {line.split("\t", 1)[1] for line in checked.stdout.splitlines()}
    assert ignored == set(names)
