"""Real `slaguard serve` processes on one audit database, for the multi-replica tests."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml
from helpers import wait_for
from sqlalchemy.engine import URL

from slaguard.service.local import free_port

START_TIMEOUT_S = 60.0


class ServeReplica:
    """One `slaguard serve` process (gateway and scraping off) and its HTTP client."""

    def __init__(
        self,
        name: str,
        db: URL,
        tmp: Path,
        config: Mapping[str, Any] | None = None,
        admin_token: str | None = None,
    ) -> None:
        self.name = name
        self.auth = {"Authorization": f"Bearer {admin_token}"} if admin_token else {}
        self.port = free_port()
        cfg = {
            "fleet": str(tmp / "fleet.yaml"),
            "db": db.render_as_string(hide_password=False),
            "port": self.port,
            "telemetry": {"scrape": False},
            "gateway": {"enabled": False},
            "notify_file": str(tmp / "incidents.jsonl"),
            "log_level": "warning",
            **(config or {}),
        }
        (tmp / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
        child_env = {k: v for k, v in os.environ.items() if not k.startswith("SLAGUARD_")}
        if admin_token:
            child_env["SLAGUARD_ADMIN_TOKEN"] = admin_token
        # Its own working directory, as on its own host: the audit writer's spill
        # directory (named after the database) must not be shared.
        workdir = tmp / name
        workdir.mkdir()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "slaguard", "serve", "--config", str(tmp / f"{name}.yaml")],
            stdout=subprocess.DEVNULL,
            stderr=(tmp / f"{name}.err").open("w"),
            env=child_env,
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

    def demoted(self) -> list[str]:
        return [t["target"] for t in self.status()["targets"] if t["demoted"]]

    def jitter(self, target: str) -> float:
        """The target's TTFT Z-score; NaN while the guard has not scored it (null)."""
        z = next(t for t in self.status()["targets"] if t["target"] == target)["jitter_z"]
        return math.nan if z is None else float(z)

    def mode(self, action: str, **extra: Any) -> dict[str, Any]:
        """`POST /v1/mode` with the admin token (the replica must have been given one)."""
        r = self.client.post(
            "/v1/mode", json={"action": action, "reason": "test", **extra}, headers=self.auth
        )
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(20)
        self.client.close()


@contextmanager
def serve_pair(
    db: URL,
    tmp: Path,
    fleet: Mapping[str, Any],
    config: Mapping[str, Any] | None = None,
    admin_token: str | None = None,
) -> Iterator[tuple[ServeReplica, ServeReplica]]:
    """Replicas "a" and "b", started one after the other (the first migrates the schema),
    both ready; stopped on exit."""
    (tmp / "fleet.yaml").write_text(yaml.safe_dump(dict(fleet)))
    started: list[ServeReplica] = []
    try:
        for name in ("a", "b"):
            replica = ServeReplica(name, db, tmp, config, admin_token)
            started.append(replica)
            wait_for(f"{name} ready", replica.ready, START_TIMEOUT_S)
        yield started[0], started[1]
    finally:
        for replica in started:
            replica.stop()


def leaders(replicas: tuple[ServeReplica, ...]) -> list[ServeReplica]:
    return [r for r in replicas if r.status()["guard"]["leader"]]
