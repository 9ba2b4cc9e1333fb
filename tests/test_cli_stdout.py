"""The installed `slaguard` with a standard output it cannot write: one `error:` line and
exit 2 (a full disk was an OSError traceback, exit 1), silence and exit 1 for a reader
that left."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from slaguard.audit.engine import create_audit_engine
from slaguard.audit.migrate import upgrade

pytestmark = pytest.mark.slow  # real processes
EXE = Path(sys.executable).with_name("slaguard")
FULL = Path("/dev/full")
NO_SPACE = (
    "error: cannot write to standard output: No space left on device; fix: free space "
    "where it goes, or send it elsewhere\n"
)


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("stdout") / "audit.db"
    engine = create_audit_engine(f"sqlite:///{path}")
    upgrade(engine)
    engine.dispose()
    return str(path)


@pytest.mark.skipif(not FULL.exists(), reason="needs Linux's /dev/full")
def test_a_full_stdout_is_one_error_line(db: str) -> None:
    commands = [
        ["audit", "decisions", "--since", "-5m", "--db", db],
        ["audit", "decisions", "--since", "-5m", "--db", db, "-f", "json"],  # written at exit
        ["status", "--db", db],
        ["fleet", "show"],
    ]
    with FULL.open("w") as full:
        running = [
            subprocess.Popen([str(EXE), *c], stdout=full, stderr=subprocess.PIPE, text=True)
            for c in commands
        ]
        done = [(p.wait(timeout=120), p.communicate()[1]) for p in running]
    assert done == [(2, NO_SPACE)] * len(commands)


def test_a_reader_that_left_gets_silence_and_exit_1(db: str) -> None:
    """Nobody reads the pipe any more (EPIPE, `| head -0`): the json, flushed as the
    command ends, is dropped without a word, exit 1, as in a shell pipeline."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [str(EXE), "audit", "decisions", "--since", "-5m", "--db", db, "-f", "json"],
            stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (1, "")
