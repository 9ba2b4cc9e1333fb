"""The test process's children, read from Linux's /proc, and the guard that fails a module
leaving one running.

A child a module leaves behind (an audit writer of an `AuditWriter` never closed, a
server, an emulator) wastes CPU, holds files and ports, and was found by a later module's
process-counting test in the same pytest-xdist worker.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

LEFT_RUNNING_GRACE_S = 5.0
"""How long a module's children get to finish exiting after its teardown."""


def stat_fields(pid: int) -> list[str] | None:
    """State, ppid, pgrp, ... of a process, None once gone."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def running(pid: int) -> bool:
    fields = stat_fields(pid)
    return fields is not None and fields[0] != "Z"  # an orphan's zombie may never be reaped


def descendants(pid: int) -> set[int]:
    """Every running process below `pid` (zombies left out: they hold nothing but a pid)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        fields = stat_fields(int(entry.name)) if entry.name.isdigit() else None
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


def _shown(pid: int) -> str:
    args = cmdline(pid).replace(b"\0", b" ").decode(errors="replace").strip()
    return f"pid {pid} ({args})"


@pytest.fixture(scope="module", autouse=True)
def no_child_left_running() -> Iterator[None]:
    """Fail the module (at its last teardown) naming each child it left running; what ran
    before the module is not its doing."""
    if not Path("/proc/self/stat").exists():
        yield
        return
    before = descendants(os.getpid())
    yield
    deadline = time.monotonic() + LEFT_RUNNING_GRACE_S
    while (left := descendants(os.getpid()) - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    if left:
        pytest.fail(
            f"{len(left)} child process(es) still running {LEFT_RUNNING_GRACE_S:.0f}s after "
            f"this module's teardown: {'; '.join(_shown(pid) for pid in sorted(left))}; fix: "
            "stop them in a fixture's teardown or a `with` block (AuditWriter, Service, Popen)",
            pytrace=False,
        )
