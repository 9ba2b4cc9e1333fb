"""`slaguard status` on a database a simulated run wrote: its switches are history only,
not this fleet's (not counted against the switch cap), and status says how many it left out
of its count beside the ones `history` lists."""

from __future__ import annotations

import json
import time

from sqlalchemy import Engine
from test_guard_cli import ok, url_of
from test_guard_store import start_rollout

from slaguard.audit.records import ModeChangeRecord
from slaguard.audit.store import log_mode_change
from slaguard.guard.store import GuardStore


def _simulated(engine: Engine, at_s: float, from_mode: str, to_mode: str) -> None:
    """A mode change as `simulate --audit-db` writes it (`sim/audit_sink.py`)."""
    log_mode_change(
        engine,
        ModeChangeRecord(
            at_s, from_mode, to_mode, "ttft_zscore: trip", "simulator", {"simulated": True}
        ),
    )


def test_status_says_how_many_simulated_switches_it_did_not_count(audit_engine: Engine) -> None:
    """It said "0 policy switches" while `history` showed a learned -> round_robin trip
    minutes earlier."""
    now = time.time()
    db = ["--db", url_of(audit_engine)]
    _simulated(audit_engine, now - 2 * 3600, "round_robin", "learned")  # over an hour ago
    _simulated(audit_engine, now - 600, "rollout(10)", "rollout(50)")  # a stage step
    _simulated(audit_engine, now - 300, "learned", "round_robin")
    _simulated(audit_engine, now - 200, "round_robin", "rollout(10)")
    history = json.loads(ok("history", *db, "--since", "-1h", "-f", "json"))
    assert [(h["kind"], h["to_mode"]) for h in history] == [
        ("simulated", "rollout(50)"),
        ("simulated", "round_robin"),
        ("simulated", "rollout(10)"),
    ]
    said = ok("status", *db)
    assert (
        "switches:     0 policy switches (learned <-> round-robin) in the last hour "
        "(2 simulated switches not counted)\n"
    ) in said
    start_rollout(GuardStore(audit_engine), at_s=now - 100)
    _simulated(audit_engine, now - 5 * 3600, "learned", "round_robin")
    assert (
        "switches:     1 policy switch (learned <-> round-robin) in the last hour "
        "(2 simulated switches not counted)\n"
    ) in ok("status", *db)
    status = json.loads(ok("status", *db, "--json"))
    assert (status["switches_last_hour"], status["simulated_switches_last_hour"]) == (1, 2)


def test_status_says_nothing_of_simulated_switches_when_there_are_none(
    audit_engine: Engine,
) -> None:
    now = time.time()
    _simulated(audit_engine, now - 2 * 3600, "learned", "round_robin")
    _simulated(audit_engine, now - 60, "rollout(10)", "rollout(50)")
    db = ["--db", url_of(audit_engine)]
    assert ("switches:     0 policy switches (learned <-> round-robin) in the last hour\n") in ok(
        "status", *db
    )
    assert json.loads(ok("status", *db, "--json"))["simulated_switches_last_hour"] == 0
    _simulated(audit_engine, now - 30, "learned", "round_robin")
    assert (
        "switches:     0 policy switches (learned <-> round-robin) in the last hour "
        "(1 simulated switch not counted)\n"
    ) in ok("status", *db)
