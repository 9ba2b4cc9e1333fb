"""Two real `slaguard serve` processes on one PostgreSQL database share one guard.

Exactly one of them leads (runs the detectors, sends incident messages), a manual switch
made through one reaches the other's router within a second, and when the leader is
killed with SIGKILL the other takes over within five.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from helpers import wait_for
from sqlalchemy.engine import URL

from slaguard.service.local import free_port

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
START_TIMEOUT_S = 60.0
PROPAGATION_S = 1.0
FAILOVER_S = 5.0
TOKEN = secrets.token_hex(16)
AUTH = {"Authorization": f"Bearer {TOKEN}"}
FLEET = {"targets": [{"id": "l40s-8b", "model": "llama3.1-8b", "card": "l40s", "count": 2}]}


class Serve:
    """One `slaguard serve` process and its HTTP client."""

    def __init__(self, name: str, db: URL, tmp: Path) -> None:
        self.name = name
        self.port = free_port()
        cfg = {
            "fleet": str(tmp / "fleet.yaml"),
            "db": db.render_as_string(hide_password=False),
            "port": self.port,
            "telemetry": {"scrape": False},
            "gateway": {"enabled": False},
            "notify_file": str(tmp / "incidents.jsonl"),
            "log_level": "warning",
        }
        (tmp / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLAGUARD_")}
        env["SLAGUARD_ADMIN_TOKEN"] = TOKEN
        # Its own working directory, as on its own host: the audit writer's spill
        # directory (named after the database) must not be shared.
        workdir = tmp / name
        workdir.mkdir()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "slaguard", "serve", "--config", str(tmp / f"{name}.yaml")],
            stdout=subprocess.DEVNULL,
            stderr=(tmp / f"{name}.err").open("w"),
            env=env,
            cwd=workdir,
        )
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=5)

    def ready(self) -> bool:
        assert self.proc.poll() is None, f"{self.name} exited with {self.proc.returncode}"
        try:
            return self.client.get("/readyz").status_code == 200
        except httpx.TransportError:
            return False

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = self.client.get("/v1/status").json()
        return body

    def mode(self, action: str, **extra: Any) -> dict[str, Any]:
        r = self.client.post(
            "/v1/mode", json={"action": action, "reason": "test", **extra}, headers=AUTH
        )
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(20)
        self.client.close()


@pytest.fixture
def pair(pg_url: URL, tmp_path: Path) -> Iterator[tuple[Serve, Serve]]:
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(FLEET))
    started: list[Serve] = []
    try:
        for name in ("a", "b"):  # one after the other: the first one migrates the schema
            serve = Serve(name, pg_url, tmp_path)
            started.append(serve)
            wait_for(f"{name} ready", serve.ready, START_TIMEOUT_S)
        yield started[0], started[1]
    finally:
        for serve in started:
            serve.stop()


def leaders(replicas: tuple[Serve, ...]) -> list[Serve]:
    return [r for r in replicas if r.status()["guard"]["leader"]]


def test_one_leader_shared_mode_and_failover(pair: tuple[Serve, Serve]) -> None:
    a, b = pair
    (leader,) = wait_for("exactly one leader", lambda: len(leaders(pair)) == 1 and leaders(pair),
                         FAILOVER_S)  # fmt: skip
    other = b if leader is a else a
    for _ in range(2):  # it holds: leadership stays put, nobody else claims it
        time.sleep(0.6)
        assert [x.name for x in leaders(pair)] == [leader.name]
    st = other.status()["guard"]
    assert (
        st["lease"] == "postgresql advisory lock"
        and st["replica_id"] != (leader.status()["guard"]["replica_id"])
    )

    # A switch made through the non-leader reaches the leader's router within a second...
    resumed = other.mode("resume", stage_pct=50)
    assert resumed["changed"] and resumed["mode"] == "rollout(50)"
    t0 = time.monotonic()
    wait_for(
        "the leader routes rollout(50)",
        lambda: leader.status()["mode"]["version"] == resumed["version"],
        PROPAGATION_S,
    )
    # ...and a rollback through the leader reaches the other within a second.
    rolled = leader.mode("rollback")
    assert rolled["changed"] and rolled["mode"] == "round_robin"
    assert rolled["version"] == resumed["version"] + 1
    t1 = time.monotonic()
    seen = wait_for("the other routes round_robin",
                    lambda: (s := other.status()["mode"])["version"] == rolled["version"] and s,
                    PROPAGATION_S)  # fmt: skip
    propagation_s = time.monotonic() - t1
    assert seen["mode"] == "round_robin" and seen["actor"] == "api:api"
    assert propagation_s < PROPAGATION_S and t1 - t0 < PROPAGATION_S

    # SIGKILL the leader: the other leads within five seconds and keeps the mode.
    killed_at = time.monotonic()
    leader.proc.send_signal(signal.SIGKILL)
    leader.proc.wait(10)
    wait_for("the survivor leads", lambda: other.status()["guard"]["leader"], FAILOVER_S)
    failover_s = time.monotonic() - killed_at
    assert failover_s < FAILOVER_S
    after = other.status()["mode"]
    assert (after["mode"], after["version"]) == ("round_robin", rolled["version"])
    print(f"propagation {propagation_s:.3f} s, failover {failover_s:.3f} s")
