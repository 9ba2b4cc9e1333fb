"""The demo's processes: started as `slaguard` subcommands, each logging to a file in the
work directory, and stopped together."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx


@dataclass
class Stack:
    """The processes of one demo run."""

    workdir: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    emulators: dict[str, str] = field(default_factory=dict)
    service_url: str = ""

    def spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        log = (self.workdir / f"{name}.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "slaguard", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
        self.procs.append(proc)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + 15
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.1, deadline - time.monotonic()))
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def wait_ok(url: str, timeout_s: float, stack: Stack) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in stack.procs):
            raise RuntimeError(f"a process exited during start; see the logs in {stack.workdir}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1).status_code == 200:
                return
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {timeout_s:.0f}s; see {stack.workdir}")
