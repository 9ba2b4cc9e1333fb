"""The demo's processes: started as `slaguard` subcommands, each logging to a file in the
work directory, and stopped together.

Each runs in a session of its own, so the terminal's Ctrl-C and hangup reach the demo
alone, which stops them in order (load first). That makes the demo's own signals the way
they are stopped: SIGINT, SIGTERM and SIGHUP all take the same way out (`StopSignals`),
and a stop is only reported done once it was seen done. A demo that dies without its
stop (SIGKILL, a crash) takes them with it on Linux: each gets SIGTERM (`tether`).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import httpx

from slaguard.emulator.tether import tethered
from slaguard.stopsignals import taken_over

GRACE_S = 15.0
"""How long the processes have to exit after SIGTERM (serve drains its audit writer)."""
KILL_WAIT_S = 5.0
"""How long SIGKILLed processes have to disappear before they are reported as left."""
POLL_S = 0.05


class Interrupted(KeyboardInterrupt):
    """The demo was stopped by `signo`; a KeyboardInterrupt, so that asyncio and every
    `finally` treat SIGTERM and SIGHUP exactly like Ctrl-C."""

    def __init__(self, signo: int) -> None:
        super().__init__(signal.Signals(signo).name)
        self.signo = signo


class StopSignals:
    """While installed, the first of `STOP_SIGNALS` raises `Interrupted` wherever the demo
    is. A later one, or one while a `Stack` stops, only sets `hurry`: it used to raise
    inside the stop itself and leave the processes running."""

    def __init__(self) -> None:
        self.raised = False
        self.stopping = False
        self.hurry = False
        self.deferring = False
        self.deferred: int | None = None

    def _on_signal(self, signo: int, _frame: FrameType | None) -> None:
        if self.raised or self.stopping:
            self.hurry = True
            return
        if self.deferring:  # raised once the spawn is recorded
            self.deferred = self.deferred or signo
            return
        self.raised = True
        raise Interrupted(signo)

    @contextlib.contextmanager
    def deferred_while(self) -> Iterator[None]:
        """A stop signal inside raises at the end: between a fork and its record, the
        raise left a child no stop knew of (its own session, so the terminal's signals
        never reached it). Not a blocked signal mask: the children would inherit it."""
        self.deferring = True
        try:
            yield
        finally:
            self.deferring = False
            if self.deferred is not None and not self.raised:
                self.raised = True
                raise Interrupted(self.deferred)

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopSignals]:
        """Take the stop signals over (`stopsignals.taken_over`: one ignored at start
        stays ignored)."""
        with taken_over(self._on_signal):
            yield self


@dataclass
class Stack:
    """The processes of one demo run, by name."""

    workdir: Path
    signals: StopSignals = field(default_factory=StopSignals)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    emulators: dict[str, str] = field(default_factory=dict)
    service_url: str = ""
    left: list[Survivor] = field(default_factory=list)
    """What the last `stop()` could not end."""
    lock_fd: int | None = None
    """The work directory's lock (`workdir.claimed_workdir`), inherited by each process:
    the directory stays locked until the last exits, not only the demo."""

    def spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        """Start one process, recorded before a stop signal takes effect, and on Linux
        ended by SIGTERM if the demo dies without its stop (`tether`). The death signal
        comes when the forking thread exits: the demo spawns from its main thread (its
        stop signals need that thread anyway), which lasts as long as the demo."""
        with self.signals.deferred_while(), (self.workdir / f"{name}.log").open("wb") as log:
            self.procs[name] = subprocess.Popen(
                tethered([sys.executable, "-m", "slaguard", *args]),
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                start_new_session=True,
                pass_fds=() if self.lock_fd is None else (self.lock_fd,),
            )

    def stop(self) -> list[Survivor]:
        """SIGTERM to each process, up to `GRACE_S` for them and what they started (serve's
        audit writer) to exit, then SIGKILL to each process group left: at once on a
        further signal. Returns the processes still running after that, also kept in
        `left`; empty only once every group was seen empty."""
        self.signals.stopping = True
        try:
            for proc in self.procs.values():
                if proc.poll() is None:
                    proc.terminate()
            for name in self._wait(GRACE_S, may_hurry=True):
                # EPERM (a member that is not ours to kill) leaves it listed below
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.procs[name].pid, signal.SIGKILL)
            left = self._wait(KILL_WAIT_S, may_hurry=False)
            self.left = [
                Survivor(pid, name, self.procs[name].pid, command_of(pid))
                for name, pids in left.items()
                for pid in pids
            ]
            return self.left
        finally:
            self.signals.stopping = False

    def _running(self) -> dict[str, list[int]]:
        # a leader not yet reaped holds its group id, and so do live members: never reused
        running = {}
        for name, proc in self.procs.items():
            if pids := group_members(proc.pid):
                running[name] = pids
            proc.poll()  # after the look: a leader it found gone is reaped, its code kept
        return running

    def _wait(self, timeout_s: float, *, may_hurry: bool) -> dict[str, list[int]]:
        deadline = time.monotonic() + timeout_s
        while (left := self._running()) and time.monotonic() < deadline:
            if may_hurry and self.signals.hurry:
                break
            time.sleep(POLL_S)
        return left


@dataclass(frozen=True, slots=True)
class Survivor:
    """A process of the demo still running after its stop, SIGKILL included: blocked in
    the kernel (state D), or not the demo's to kill."""

    pid: int
    name: str
    """The demo's process whose group it is in."""
    leader: int
    command: str
    """Its command line; empty where there is no /proc to read it from."""

    def __str__(self) -> str:
        what = self.name if self.pid == self.leader else f"started by {self.name}"
        command = f"{self.command}; " if self.command else ""
        return (
            f"pid {self.pid} ({command}{what}) still runs after the demo's SIGKILL; fix: kill "
            f"-KILL {self.pid}, and if it stays, `ps -o stat,wchan -p {self.pid}` shows what "
            "it is blocked on"
        )


class LeftRunning(Exception):
    """The demo's stop left processes running: whatever else ended the run (the
    exception's `__context__`), the demo fails, naming each."""

    def __init__(self, survivors: list[Survivor]) -> None:
        super().__init__("; ".join(map(str, survivors)))
        self.survivors = survivors


def group_members(pgid: int) -> list[int]:
    """The processes of group `pgid` that still run. kill() finds zombies too, and an
    orphan's zombie can stay for good where init does not reap (some containers): on
    Linux /proc tells them apart; elsewhere the group stands for its leader."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []
    except PermissionError:  # there, but not ours to signal
        pass
    proc = Path("/proc")
    if not proc.is_dir():
        return [pgid]
    members = []
    for stat_file in proc.glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            state, _ppid, group = stat_file.read_text().rsplit(")", 1)[1].split()[:3]
            if state != "Z" and int(group) == pgid:
                members.append(int(stat_file.parent.name))
    return sorted(members)


def command_of(pid: int) -> str:
    """`pid`'s command line, its program without the directory; empty if unreadable."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return ""
    args = [a for a in args if a]
    return shlex.join([Path(args[0]).name, *args[1:]]) if args else ""


def wait_ok(url: str, timeout_s: float, stack: Stack) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in stack.procs.values()):
            raise RuntimeError(f"a process exited during start; see the logs in {stack.workdir}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1).status_code == 200:
                return
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {timeout_s:.0f}s; see {stack.workdir}")
