"""Looking at a real `slaguard demo` and its processes through Linux's /proc."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from child_processes import cmdline, descendants, running

import slaguard

ROOT = str(Path(slaguard.__file__).resolve().parents[1])


def start_demo(workdir: Path, leftovers: set[int]) -> subprocess.Popen[str]:
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


def all_started(demo: subprocess.Popen[str]) -> set[int] | None:
    """5 backends, serve and serve's audit writer. The writer is looked for by name: a
    short-lived child of serve's start could make up the count before the writer ran."""
    assert demo.poll() is None, demo.communicate()
    found = descendants(demo.pid)
    writer_up = any(b"slaguard.audit.writer_process" in cmdline(pid) for pid in found)
    return found if len(found) >= 7 and writer_up else None


def kill_all(pids: set[int]) -> None:
    """SIGKILL to those still running: what a failing test must not leave behind."""
    for pid in pids:
        if running(pid):
            os.kill(pid, signal.SIGKILL)
