"""The demo's processes. They run in sessions of their own, so the terminal's signals
reach the demo alone: SIGTERM or SIGHUP used to end it at once and leave the five
backends, `slaguard serve` and its audit writer running, ports open. A second Ctrl-C
during the stop skipped the SIGKILL fallback while the CLI said every process stopped.
Two demos in one work directory emptied each other's, and both exited 0. The start
printed nothing for its first ~10 s. A process that outlived the stop, SIGKILL included,
was a line on stdout naming its process group, and the demo exited as if all had stopped.
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
from child_processes import cmdline, descendants, running, stat_fields
from demo_procs import all_started, kill_all, start_demo
from held_exit import held_at_exit
from helpers import wait_for
from rich.console import Console

from slaguard.emulator.demo import CARDS, DemoPlan, run_demo, running_stack
from slaguard.emulator.stack import (
    GRACE_S,
    Interrupted,
    LeftRunning,
    Stack,
    StopSignals,
    group_members,
)

pytestmark = pytest.mark.slow  # real processes


@pytest.fixture
def leftovers() -> Iterator[set[int]]:
    """Pids to SIGKILL after the test, so a failing one leaves nothing behind."""
    pids: set[int] = set()
    yield pids
    kill_all(pids)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads Linux's /proc")
@pytest.mark.parametrize("signo", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_stop_every_process_the_demo_started(
    signo: signal.Signals, tmp_path: Path, leftovers: set[int]
) -> None:
    demo = start_demo(tmp_path / "wd", leftovers)
    started = wait_for("the demo's 7 processes", lambda: all_started(demo), timeout_s=120)
    leftovers.update(started)
    demo.send_signal(signo)
    out, err = demo.communicate(timeout=60)
    assert demo.returncode == 128 + signo, (out, err)
    assert "stopped the 6 processes the demo started" in out
    db = tmp_path / "wd" / "audit.db"
    assert err == f"error: interrupted by {signo.name}; a partial audit DB is left in {db}\n"
    assert [pid for pid in started if running(pid)] == []


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads Linux's /proc")
def test_a_second_demo_in_the_same_work_directory_is_refused_and_the_first_runs_on(
    tmp_path: Path, leftovers: set[int]
) -> None:
    work = tmp_path / "wd"
    first = start_demo(work, leftovers)
    leftovers.update(wait_for("the first demo", lambda: all_started(first), timeout_s=120))
    db = work / "audit.db"
    wait_for("its audit DB", db.exists)
    inode = db.stat().st_ino
    second = start_demo(work, leftovers)
    try:
        answer = second.communicate(timeout=60)
    finally:
        leftovers.update(descendants(second.pid))
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
    assert left == [] == stack.left
    assert time.monotonic() - began < GRACE_S / 3
    assert stubborn.returncode == -signal.SIGKILL
    assert not running(grandchild)


def test_an_unreaped_zombie_is_not_a_running_process() -> None:
    """What kill() still finds after a SIGKILL where init does not reap orphans."""
    child = subprocess.Popen(["true"], start_new_session=True)
    wait_for("the child to exit", lambda: (stat_fields(child.pid) or ["Z"])[0] == "Z")
    try:
        os.killpg(child.pid, 0)  # still there for kill()
        assert group_members(child.pid) == []
    finally:
        child.wait()
    sleeper = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        assert group_members(sleeper.pid) == [sleeper.pid]
    finally:
        sleeper.kill()
        sleeper.wait()


def test_the_start_says_each_process_ready_as_it_comes(tmp_path: Path) -> None:
    out = io.StringIO()
    console = Console(file=out, width=200)
    with running_stack(Stack(tmp_path), DemoPlan(), console) as stack:
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
    assert stack.stop() == [] and stack.procs["child"].returncode == -signal.SIGTERM


def _audit_writer(pid: int) -> int | None:
    """serve's audit writer among the descendants of `pid` (a test process may have
    writers of its own: under pytest-xdist one from an earlier test in the worker)."""
    for child in descendants(pid):
        fields = stat_fields(child)
        if (
            fields is not None
            and b"slaguard.audit.writer_process" in cmdline(child)
            and b"slaguard\x00serve\x00" in cmdline(fields[1])
        ):
            return child
    return None


WRITER = f"{Path(sys.executable).name} -m slaguard.audit.writer_process"
"""How a survivor line names serve's audit writer."""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads Linux's /proc")
def test_a_process_that_outlives_the_stop_fails_the_demo_naming_it(
    tmp_path: Path, leftovers: set[int]
) -> None:
    """SIGKILL does not end a process blocked in the kernel (state D, a hung disk): the
    demo said "could not stop serve" on stdout and exited as after any stop (143 here, 0
    at the end of a run), so a script never learnt that a process was left."""
    demo = start_demo(tmp_path / "wd", leftovers)
    leftovers.update(wait_for("the demo's 7 processes", lambda: all_started(demo), timeout_s=120))
    writer = _audit_writer(demo.pid)
    assert writer is not None
    fields = stat_fields(writer)
    assert fields is not None
    serve = int(fields[1])  # the writer's parent
    with held_at_exit(writer):
        demo.send_signal(signal.SIGTERM)
        wait_for("serve's exit", lambda: not running(serve), timeout_s=30)
        demo.send_signal(signal.SIGTERM)  # a second signal: SIGKILL now, not after GRACE_S
        out, err = demo.communicate(timeout=60)
        assert running(writer)
    assert demo.returncode == 1, (out, err)
    db = tmp_path / "wd" / "audit.db"
    assert err == (
        f"error: interrupted by SIGTERM; a partial audit DB is left in {db}\n"
        f"error: pid {writer} ({WRITER}; started by serve) still runs after the demo's "
        f"SIGKILL; fix: kill -KILL {writer}, and if it stays, `ps -o stat,wchan -p {writer}` "
        "shows what it is blocked on\n"
    )
    assert "stopped the" not in out


def _hold_the_writer(found: list[int], release: threading.Event, errors: list[str]) -> None:
    """From a thread of its own (ptrace belongs to one thread): hold serve's audit writer
    at its exit until `release`."""
    try:
        writer = wait_for("serve's audit writer", lambda: _audit_writer(os.getpid()), 120)
        found.append(writer)
        with held_at_exit(writer):
            release.wait()
    except (AssertionError, OSError) as exc:
        errors.append(repr(exc))


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads Linux's /proc")
def test_a_run_that_ends_with_a_process_left_fails_after_its_report(tmp_path: Path) -> None:
    """The end of a run exited 0 with a process left; the report still comes first."""
    found: list[int] = []
    errors: list[str] = []
    release = threading.Event()
    holder = threading.Thread(target=_hold_the_writer, args=(found, release, errors))
    out = io.StringIO()
    plan = DemoPlan(duration_s=2.0, drain_s=1.0, slow_at_s=60.0, hot_at_s=60.0)
    holder.start()
    try:
        with pytest.raises(LeftRunning) as caught:
            run_demo(tmp_path / "wd", plan, Console(file=out, width=200))
    finally:
        release.set()
        holder.join()
    assert errors == [] and len(found) == 1
    assert caught.value.__context__ is None  # nothing else went wrong
    assert [str(s) for s in caught.value.survivors] == [
        f"pid {found[0]} ({WRITER}; started by serve) still runs after the demo's SIGKILL; "
        f"fix: kill -KILL {found[0]}, and if it stays, `ps -o stat,wchan -p {found[0]}` shows "
        "what it is blocked on"
    ]
    assert "\nwhere to look\n" in out.getvalue() and "stopped the" not in out.getvalue()
