"""The installed `slaguard` with a standard output it cannot write: one `error:` line and
exit 2 (a full disk was an OSError traceback, exit 1), silence and exit 1 for a reader
that left."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slaguard.audit.engine import create_audit_engine
from slaguard.audit.migrate import upgrade
from slaguard.audit.sample import load_run, synthetic_run

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
        try:
            done = [(p.wait(timeout=120), p.communicate()[1]) for p in running]
        finally:  # a command that hangs fails the test, not the next ones
            for p in running:
                p.kill()
                p.wait(10)
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


@pytest.fixture(scope="module")
def big_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Decisions whose json is far more than a pipe holds (64 KiB)."""
    tmp = tmp_path_factory.mktemp("big")
    engine = create_audit_engine(f"sqlite:///{tmp / 'audit.db'}")
    upgrade(engine)
    load_run(engine, synthetic_run(1000, start_s=time.time() - 1800), tmp / "spill")
    engine.dispose()
    return str(tmp / "audit.db")


@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "PYTHONUNBUFFERED"])
@pytest.mark.parametrize("fmt", ["table", "json", "csv"])
def test_a_reader_leaving_mid_write_is_exit_1(big_db: str, fmt: str, unbuffered: bool) -> None:
    """`| head -c 100`: the reader leaves while the answer is being written. Unbuffered,
    the short write was taken as done: the rest of the answer was dropped, and exit 0."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    command = ["audit", "decisions", "--since", "-1h", "--limit", "0", "--db", big_db, "-f", fmt]
    with subprocess.Popen(
        [str(EXE), *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        assert len(proc.stdout.read(100)) == 100
        proc.stdout.close()
        assert (proc.wait(timeout=120), proc.stderr.read()) == (1, b"")
