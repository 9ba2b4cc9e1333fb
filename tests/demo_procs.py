"""Looking at a real `slaguard demo` and its processes through Linux's /proc."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import slaguard

ROOT = str(Path(slaguard.__file__).resolve().parents[1])


def stat(pid: int) -> list[str] | None:
    """State, ppid, pgrp, ... of a process, None once gone."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def running(pid: int) -> bool:
    fields = stat(pid)
    return fields is not None and fields[0] != "Z"  # an orphan's zombie may never be reaped


def descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        fields = stat(int(entry.name)) if entry.name.isdigit() else None
        if fields is not None and fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    out: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.add(child)
            todo.append(child)
    return out


def cmdline(pid: int | str) -> bytes:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    return b""


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
    """5 backends, serve and serve's audit writer."""
    assert demo.poll() is None, demo.communicate()
    found = descendants(demo.pid)
    return found if len(found) >= 7 else None


def kill_all(pids: set[int]) -> None:
    """SIGKILL to those still running: what a failing test must not leave behind."""
    for pid in pids:
        if running(pid):
            os.kill(pid, signal.SIGKILL)
