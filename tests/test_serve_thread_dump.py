"""`kill -USR1` on `slaguard serve` writes every thread's stack to stderr and the service
goes on: the runbook of a stalled loop (`SlaguardSchedulerJobStalled`) asks for a thread
dump before the restart, and slaguard had none of its own (SIGUSR1 ended the process)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from helpers import wait_for, wait_serving

from slaguard.service.local import free_port

pytestmark = pytest.mark.slow  # a real process


def test_sigusr1_dumps_every_thread_and_the_service_goes_on(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "stderr.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "slaguard", "serve", "--db", "audit.db", "--port", str(port)],
            cwd=tmp_path, env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
        try:
            url = f"http://127.0.0.1:{port}"
            assert wait_serving(url, proc), log.read_text()
            proc.send_signal(signal.SIGUSR1)
            wait_for("the thread dump", lambda: "Current thread" in log.read_text(), 20)
            assert proc.poll() is None, log.read_text()
            assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200
        finally:
            proc.terminate()
            code = proc.wait(timeout=30)
    text = log.read_text()
    assert code == -signal.SIGTERM, text
    threads = text.count("Thread 0x") + text.count("Current thread 0x")
    assert threads >= 2, text  # the event loop's and at least one worker's
    assert "uvicorn" in text or "asyncio" in text, text  # the event loop's stack is shown
