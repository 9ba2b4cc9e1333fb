"""A demo that dies without its stop (SIGKILL, a crash): its processes, each in a session
of its own so that the terminal's signals reach the demo alone, ran on for good, ports
open and the work directory written to."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from child_processes import cmdline, descendants, running
from demo_procs import ROOT, all_started, kill_all, start_demo
from helpers import wait_for

from slaguard.emulator.workdir import claimed_workdir

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


def _serving(work: Path) -> bool:
    port = yaml.safe_load((work / "serve.yaml").read_text())["port"]
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200
    return False


@needs_proc
def test_a_process_a_killed_demo_left_keeps_the_next_demo_out_of_its_work_directory(
    tmp_path: Path, leftovers: set[int]
) -> None:
    """The lock went with the demo, so the next demo emptied the directory under a process
    still writing there (serve draining its audit writer after the SIGTERM)."""
    work = tmp_path / "wd"
    demo = start_demo(work, leftovers)
    started = wait_for("the demo's 7 processes", lambda: all_started(demo), timeout_s=120)
    leftovers.update(started)
    serve = next(pid for pid in started if b"slaguard\x00serve\x00" in cmdline(pid))
    # before its handler (uvicorn's, as it starts serving) SIGTERM ends even a stopped serve
    wait_for("serve to answer", lambda: _serving(work))
    os.kill(serve, signal.SIGSTOP)  # a slow stop: the demo's SIGTERM waits for SIGCONT
    try:
        demo.kill()
        demo.wait(timeout=10)
        backends = {pid for pid in started if b"slaguard\x00emulate\x00" in cmdline(pid)}
        wait_for("the backends to exit", lambda: not any(running(pid) for pid in backends))
        second = start_demo(work, leftovers)
        try:
            answer = second.communicate(timeout=60)
        finally:
            leftovers.update(descendants(second.pid))
    finally:
        os.kill(serve, signal.SIGCONT)
    command = f"{Path(sys.executable).name} -m slaguard serve --config {work / 'serve.yaml'}"
    assert (second.returncode, answer) == (
        2,
        ("", f"error: an earlier demo (pid {demo.pid}) is gone but left pid {serve} "
         f"({command}) using {work}; fix: wait for it to exit or `kill {serve}`, or pass "
         "--workdir DIR\n"),
    )  # fmt: skip
    wait_for("serve and its writer to exit", lambda: not any(running(p) for p in started))
    said = wait_for("the lock to go with serve's last thread", lambda: _claim(work))
    assert said == [f"removing the previous demo run in {work}"]


def _claim(work: Path) -> list[str] | None:
    """What claiming `work` said; None while it is locked."""
    said: list[str] = []
    try:
        with claimed_workdir(work, said.append):
            return said
    except RuntimeError:
        return None


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
