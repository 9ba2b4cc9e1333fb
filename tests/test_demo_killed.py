"""A demo that dies without its stop (SIGKILL, a crash): its processes, each in a session
of its own so that the terminal's signals reach the demo alone, ran on for good, ports
open and the work directory written to."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from demo_procs import ROOT, all_started, kill_all, running, start_demo
from helpers import wait_for

pytestmark = pytest.mark.slow  # real processes
needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")


@pytest.fixture
def leftovers() -> Iterator[set[int]]:
    """Pids to SIGKILL after the test, so a failing one leaves nothing behind."""
    pids: set[int] = set()
    yield pids
    kill_all(pids)


@needs_proc
def test_a_sigkilled_demo_takes_every_process_it_started_with_it(
    tmp_path: Path, leftovers: set[int]
) -> None:
    demo = start_demo(tmp_path / "wd", leftovers)
    started = wait_for("the demo's 7 processes", lambda: all_started(demo), timeout_s=120)
    leftovers.update(started)
    assert len(started) == 7
    demo.kill()
    assert demo.wait(timeout=10) == -signal.SIGKILL
    wait_for(
        "every process the demo started to exit",
        lambda: not any(running(pid) for pid in started),
        timeout_s=15,
    )


def _tethered(tmp_path: Path, parent: int) -> tuple[subprocess.CompletedProcess[str], bool]:
    """The tether run as our child, told its demo is `parent`; whether its program ran."""
    ran = tmp_path / "ran"
    program = [sys.executable, "-c", f"open({str(ran)!r}, 'w')"]
    done = subprocess.run(
        [sys.executable, "-m", "slaguard.emulator.tether", str(parent), *program],
        env={**os.environ, "PYTHONPATH": ROOT},
        capture_output=True,
        text=True,
        timeout=30,
    )
    return done, ran.exists()


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_a_process_whose_demo_died_before_it_was_tethered_does_not_start(
    tmp_path: Path,
) -> None:
    """Between the fork and the prctl a dying demo sends no signal: the process saw its
    parent gone (adopted by another) and must not start, or it ran on for good."""
    gone, ran = _tethered(tmp_path, parent=os.getppid())  # not the tether's parent
    assert (gone.returncode, gone.stdout, ran) == (1, "", False)
    assert gone.stderr == (
        f"error: the demo (pid {os.getppid()}) exited before this process started; not "
        "starting it\n"
    )
    ok, ran = _tethered(tmp_path, parent=os.getpid())
    assert (ok.returncode, ok.stdout, ok.stderr, ran) == (0, "", "", True)
