"""`slaguard serve` refuses, in one line, what would make two replicas trample each other."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from slaguard.service.local import free_port


def test_second_replica_on_the_same_spill_journal_is_one_line_exit_2(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'audit.db'}"
    env = {**os.environ, "SLAGUARD_SERVE_SPILL_DIR": str(tmp_path / "spill")}
    port = free_port()
    first = subprocess.Popen(
        [sys.executable, "-m", "slaguard", "serve", "--db", db, "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            raise AssertionError("first replica never became healthy")
        second = subprocess.run(
            [sys.executable, "-m", "slaguard", "serve", "--db", db, "--port", str(free_port())],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        first.terminate()
        first.wait(timeout=20)
    assert second.returncode == 2
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in second.stderr
    assert lines[0].startswith("error: audit spill journal:") and "spill_dir" in lines[0]
