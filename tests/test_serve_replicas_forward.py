"""Two real `slaguard serve` processes on one PostgreSQL database: traffic that reaches
only the follower still trips the leader's detectors.

The follower forwards its arrivals (and finished requests) to the leader at each 500 ms
sync through a NOTIFY channel only the leader LISTENs on. Here every request goes
through the follower and half of them carry one prompt: the leader's hot-spot detector,
which never saw a request of its own, trips (3 bad evaluations, 1 s apart) and the
incident and the switch to round-robin land in the database.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e.serve import ServeReplica, leaders, serve_pair
from helpers import wait_for
from sqlalchemy import select
from sqlalchemy.engine import URL

from slaguard.audit.engine import create_audit_engine
from slaguard.audit.models import FleetState, Incident, ModeChange

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
FLEET = {"targets": [{"id": "l40s-8b", "model": "llama3.1-8b", "card": "l40s", "count": 2}]}
TRIP_S = 8.0
"""Forwarding (<= 0.5 s) + 3 bad evaluations (2-3 s) + the hot share building up."""


@pytest.fixture
def pair(pg_url: URL, tmp_path: Path) -> Iterator[tuple[ServeReplica, ServeReplica]]:
    with serve_pair(pg_url, tmp_path, FLEET, admin_token=secrets.token_hex(16)) as replicas:
        yield replicas


def _traffic(follower: ServeReplica, stop: threading.Event) -> int:
    """Requests through the follower only, every other one with the same prompt."""
    sent = 0
    while not stop.is_set():
        for _ in range(10):
            prompt = "hot" if sent % 2 else f"cold-{sent}"
            body = {"model": "llama3.1-8b", "prompt_tokens": 300, "max_new_tokens": 20,
                    "prompt_hash": prompt}  # fmt: skip
            assert follower.client.post("/v1/route", json=body).status_code == 200
            sent += 1
        time.sleep(0.01)
    return sent


def test_a_hot_prompt_seen_only_by_the_follower_trips_the_leader(
    pair: tuple[ServeReplica, ServeReplica], pg_url: URL
) -> None:
    (leader,) = wait_for("one leader", lambda: len(leaders(pair)) == 1 and leaders(pair), 5.0)
    follower = pair[1] if leader is pair[0] else pair[0]
    resumed = follower.mode("resume", stage_pct=50)
    assert resumed["mode"] == "rollout(50)"
    wait_for("the leader routes rollout(50)",
             lambda: leader.status()["mode"]["version"] == resumed["version"], 1.0)  # fmt: skip
    engine = create_audit_engine(pg_url)
    stop = threading.Event()
    counts: list[int] = []
    sender = threading.Thread(target=lambda: counts.append(_traffic(follower, stop)))
    started = time.monotonic()
    sender.start()
    try:

        def tripped() -> tuple[Incident, ModeChange] | None:
            with engine.connect() as conn:
                inc = conn.execute(select(Incident).where(Incident.detector == "hot_spot")).first()
                change = conn.execute(
                    select(ModeChange).where(ModeChange.to_mode == "round_robin")
                ).first()
            return None if inc is None or change is None else (inc, change)  # type: ignore[return-value]

        incident, change = wait_for("the leader trips on hot_spot", tripped, TRIP_S)
        trip_s = time.monotonic() - started
    finally:
        stop.set()
        sender.join()
    with engine.connect() as conn:
        state = conn.execute(select(FleetState.mode, FleetState.version)).one()
    engine.dispose()
    assert incident.subject == "prefix:hot"
    assert change.from_mode == "rollout(50)" and change.incident_id == incident.id
    assert tuple(state) == ("round_robin", resumed["version"] + 1)
    assert follower.status()["guard"]["leader"] is False
    assert leader.status()["guard"]["leader"] is True
    print(f"tripped {trip_s:.2f} s after the first request ({counts[0]} requests sent)")
