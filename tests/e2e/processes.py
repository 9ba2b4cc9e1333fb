"""Child processes for end-to-end tests: each in its own process group, always stopped.

`ProcessGroup.spawn` starts a command in a new session (so its group id is its pid) with
stdout and stderr in a log file; `stop` sends SIGTERM to every group, waits, then
SIGKILLs what is left. `wait_http_ok` polls a readiness URL with a deadline and fails
early, with the log's tail, when the process it waits for has exited.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

STOP_GRACE_S = 10.0
"""How long a process group gets to exit after SIGTERM before SIGKILL."""


def require_binaries(*names: str) -> dict[str, str]:
    """Paths of the named executables; skip without them, but fail under CI=true."""
    found = {name: shutil.which(name) for name in names}
    missing = sorted(name for name, path in found.items() if path is None)
    if missing:
        message = f"missing executables {missing}: install Debian's prometheus packages"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return {name: path for name, path in found.items() if path is not None}


@dataclass
class Child:
    """One started process and where its output goes."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 15) -> str:
        """The last lines of the log, for failure messages."""
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "<no log>"
        return "\n".join(text.splitlines()[-lines:])


@dataclass
class ProcessGroup:
    """Every process a test started; `stop()` ends them all, in reverse start order."""

    workdir: Path
    children: dict[str, Child] = field(default_factory=dict)

    def spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> Child:
        log = self.workdir / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                args,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.workdir,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
        child = Child(name, proc, log)
        self.children[name] = child
        return child

    def exited(self) -> list[Child]:
        """Children that are no longer running."""
        return [c for c in self.children.values() if c.proc.poll() is not None]

    def stop(self) -> None:
        running = [c for c in reversed(self.children.values()) if c.proc.poll() is None]
        for child in running:
            _signal_group(child.proc, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for child in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.proc.wait(max(0.1, deadline - time.monotonic()))
            if child.proc.poll() is None:
                _signal_group(child.proc, signal.SIGKILL)
                child.proc.wait(5)

    def wait_http_ok(self, child: Child, url: str, timeout_s: float) -> None:
        """Poll `url` until it answers 200; fail naming `child` if it exits or times out."""
        deadline = time.monotonic() + timeout_s
        last = "no answer yet"
        with httpx.Client(timeout=1.0) as client:
            while time.monotonic() < deadline:
                if child.proc.poll() is not None:
                    pytest.fail(
                        f"{child.name} exited with {child.proc.returncode} during start; "
                        f"log tail:\n{child.tail()}"
                    )
                try:
                    answer = client.get(url)
                    if answer.status_code == 200:
                        return
                    last = f"HTTP {answer.status_code}"
                except httpx.HTTPError as exc:
                    last = type(exc).__name__
                time.sleep(0.1)
        pytest.fail(f"{child.name}: {url} not ready in {timeout_s:.0f}s ({last}):\n{child.tail()}")


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)
