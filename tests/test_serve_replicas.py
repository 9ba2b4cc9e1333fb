"""Two real `slaguard serve` processes on one PostgreSQL database share one guard.

Exactly one of them leads (runs the detectors, sends incident messages), a manual switch
made through one reaches the other's router within a second, and when the leader is
killed with SIGKILL the other takes over within five.
"""

from __future__ import annotations

import secrets
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e.serve import ServeReplica, leaders, serve_pair
from helpers import wait_for
from sqlalchemy.engine import URL

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
PROPAGATION_S = 1.0
FAILOVER_S = 5.0
FLEET = {"targets": [{"id": "l40s-8b", "model": "llama3.1-8b", "card": "l40s", "count": 2}]}


@pytest.fixture
def pair(pg_url: URL, tmp_path: Path) -> Iterator[tuple[ServeReplica, ServeReplica]]:
    with serve_pair(pg_url, tmp_path, FLEET, admin_token=secrets.token_hex(16)) as replicas:
        yield replicas


def test_one_leader_shared_mode_and_failover(pair: tuple[ServeReplica, ServeReplica]) -> None:
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
