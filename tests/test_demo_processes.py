"""The demo's processes. They run in sessions of their own, so the terminal's signals
reach the demo alone: SIGTERM or SIGHUP used to end it at once and leave the five
backends, `slaguard serve` and its audit writer running, ports open. A second Ctrl-C
during the stop skipped the SIGKILL fallback while the CLI said every process stopped.
Two demos in one work directory emptied each other's, and both exited 0. The start
printed nothing for its first ~10 s.
"""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import wait_for
from rich.console import Console

import slaguard
from slaguard.emulator.demo import CARDS, DemoPlan, running_stack
from slaguard.emulator.stack import GRACE_S, Interrupted, Stack, StopSignals, group_running

pytestmark = pytest.mark.slow  # real processes
ROOT = str(Path(slaguard.__file__).resolve().parents[1])


def _stat(pid: int) -> list[str] | None:
    """State, ppid, pgrp, ... of a process, None once gone."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _running(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"  # an orphan's zombie may never be reaped


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        fields = _stat(int(entry.name)) if entry.name.isdigit() else None
        if fields is not None and fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    out: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.add(child)
            todo.append(child)
    return out


def _demo(workdir: Path, leftovers: set[int]) -> subprocess.Popen[str]:
    """`slaguard demo` of this checkout, in a process of its own."""
    demo = subprocess.Popen(
        [sys.executable, "-m", "slaguard", "demo", "--workdir", str(workdir)],
        cwd=workdir.parent,
        env={**os.environ, "PYTHONPATH": ROOT},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    leftovers.add(demo.pid)
    return demo


def _all_started(demo: subprocess.Popen[str]) -> set[int] | None:
    """5 backends, serve and serve's audit writer."""
    assert demo.poll() is None, demo.communicate()
    found = _descendants(demo.pid)
    return found if len(found) >= 7 else None


@pytest.fixture
def leftovers() -> Iterator[set[int]]:
    """Pids to SIGKILL after the test, so a failing one leaves nothing behind."""
    pids: set[int] = set()
    yield pids
    for pid in pids:
        if _running(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads Linux's /proc")
@pytest.mark.parametrize("signo", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_stop_every_process_the_demo_started(
    signo: signal.Signals, tmp_path: Path, leftovers: set[int]
) -> None:
    demo = _demo(tmp_path / "wd", leftovers)
    started = wait_for("the demo's 7 processes", lambda: _all_started(demo), timeout_s=120)
    leftovers.update(started)
    demo.send_signal(signo)
    out, err = demo.communicate(timeout=60)
    assert demo.returncode == 128 + signo, (out, err)
    assert "stopped the 6 processes the demo started" in out
    db = tmp_path / "wd" / "audit.db"
    assert err == f"error: interrupted by {signo.name}; a partial audit DB is left in {db}\n"
    assert [pid for pid in started if _running(pid)] == []


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads Linux's /proc")
def test_a_second_demo_in_the_same_work_directory_is_refused_and_the_first_runs_on(
    tmp_path: Path, leftovers: set[int]
) -> None:
    work = tmp_path / "wd"
    first = _demo(work, leftovers)
    leftovers.update(wait_for("the first demo", lambda: _all_started(first), timeout_s=120))
    db = work / "audit.db"
    wait_for("its audit DB", db.exists)
    inode = db.stat().st_ino
    second = _demo(work, leftovers)
    try:
        answer = second.communicate(timeout=60)
    finally:
        leftovers.update(_descendants(second.pid))
    assert (second.returncode, answer) == (
        2,
        ("", f"error: another demo (pid {first.pid}) is using {work}; fix: wait for it or "
         "pass --workdir DIR\n"),
    )  # fmt: skip
    assert first.poll() is None and db.stat().st_ino == inode
    first.terminate()
    assert first.wait(timeout=60) == 128 + signal.SIGTERM


def _second_ctrl_c(marker: Path) -> None:
    wait_for("SIGTERM to reach the child", marker.exists)
    os.kill(os.getpid(), signal.SIGINT)


def test_a_second_ctrl_c_while_stopping_kills_at_once_and_the_stop_is_verified(
    tmp_path: Path, leftovers: set[int]
) -> None:
    """A child that outlasts SIGTERM and has a child of its own (as serve has its audit
    writer): the second Ctrl-C hurries the stop instead of aborting it."""
    marker = tmp_path / "got-sigterm"
    script = (
        "import pathlib, signal, subprocess, time\n"
        f"signal.signal(signal.SIGTERM, lambda *_: pathlib.Path({str(marker)!r}).touch())\n"
        "print(subprocess.Popen(['sleep', '60']).pid, flush=True)\n"
        "while True: time.sleep(1)\n"
    )
    stubborn = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, start_new_session=True
    )
    assert stubborn.stdout is not None
    grandchild = int(stubborn.stdout.readline())
    leftovers.update({stubborn.pid, grandchild})
    signals = StopSignals()
    stack = Stack(tmp_path, signals, procs={"stubborn": stubborn})
    hurry = threading.Thread(target=_second_ctrl_c, args=(marker,))
    with signals.installed(), pytest.raises(Interrupted):
        try:
            signal.raise_signal(signal.SIGINT)  # the first Ctrl-C: the way out...
        finally:
            hurry.start()  # ...stops the stack, and a second Ctrl-C comes meanwhile
            began = time.monotonic()
            left = stack.stop()
            hurry.join()
    assert left == {}
    assert time.monotonic() - began < GRACE_S / 3
    assert stubborn.returncode == -signal.SIGKILL
    assert not _running(grandchild)


def test_an_unreaped_zombie_is_not_a_running_process() -> None:
    """What kill() still finds after a SIGKILL where init does not reap orphans."""
    child = subprocess.Popen(["true"], start_new_session=True)
    wait_for("the child to exit", lambda: (_stat(child.pid) or ["Z"])[0] == "Z")
    try:
        os.killpg(child.pid, 0)  # still there for kill()
        assert not group_running(child.pid)
    finally:
        child.wait()
    sleeper = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        assert group_running(sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait()


def test_the_start_says_each_process_ready_as_it_comes(tmp_path: Path) -> None:
    out = io.StringIO()
    console = Console(file=out, width=200)
    with running_stack(tmp_path, DemoPlan(), console, StopSignals()) as stack:
        lines = out.getvalue().splitlines()
    assert lines[0] == (
        f"starting 5 emulated backends ({', '.join(CARDS)}), then slaguard serve; logs in "
        f"{tmp_path}"
    )
    ready = [re.fullmatch(r"  (.+) ready \((\d+\.\d)s\)", line) for line in lines[1:]]
    assert [m and m[1] for m in ready] == [
        *(f"backend {card}-8b on {stack.emulators[f'{card}-8b']}" for card in CARDS),
        f"slaguard serve (gateway) on {stack.service_url}",
    ]
    seconds = [float(m[2]) for m in ready if m]
    assert seconds == sorted(seconds)
    assert out.getvalue().splitlines()[-1] == (
        "stopped the 6 processes the demo started and the ones they started"
    )


def test_a_stop_signal_while_spawning_waits_until_the_child_is_recorded(
    tmp_path: Path, leftovers: set[int]
) -> None:
    """A Ctrl-C between the fork and `procs[name] = ...` left a child no stop knew of
    (255 of 300 tries with the signal sent 0-4 ms into a spawn)."""
    signals = StopSignals()
    stack = Stack(tmp_path, signals)
    with signals.installed(), pytest.raises(Interrupted):
        with signals.deferred_while():
            signal.raise_signal(signal.SIGINT)  # as if it came mid-spawn
            stack.procs["child"] = subprocess.Popen(["sleep", "60"], start_new_session=True)
        raise AssertionError("the deferred signal was not raised")
    leftovers.add(stack.procs["child"].pid)
    assert stack.stop() == {} and stack.procs["child"].returncode == -signal.SIGTERM
