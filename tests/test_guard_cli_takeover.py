"""`rollback` on a fleet the guard tripped takes it over from the guard; `status`'s
per-arm counts read as counts."""

from __future__ import annotations

import json
import time

from sqlalchemy import Engine
from test_guard_cli import change, ok, trip_the_rollout, url_of

from slaguard.cli.status import _column


def test_a_rollback_on_a_tripped_fleet_takes_it_over_from_the_guard(
    audit_engine: Engine,
) -> None:
    """`rollback` after a trip said "nothing to roll back": with `breaker.auto_return`
    the guard then returned the fleet to the rollout, undoing the on-call's decision."""
    now = time.time()
    trip_the_rollout(audit_engine, now)
    said = change(audit_engine, "rollback", "--reason", "keep it", "--actor", "ana")
    assert said == (
        "fleet stays on round_robin by ana (keep it): taken over from the guard's trip, so no "
        "automatic return undoes it"
    )
    db = ["--db", url_of(audit_engine)]
    status = json.loads(ok("status", *db, "--json"))
    assert (status["mode"], status["entered_by"]) == ("round_robin", "manual_rollback")
    assert "stays until `slaguard resume`\n" in ok("status", *db)
    again = change(audit_engine, "rollback", "--reason", "again", "--actor", "ana")
    assert again == "fleet already on round_robin; nothing to roll back"
    (open_one,) = json.loads(ok("incidents", "--open", *db, "-f", "json"))
    assert open_one["detector"] == "rollout_compare", "the trip's incident stays open"


def test_status_counts_of_one_are_singular_and_stay_aligned() -> None:
    """`status` printed "1 violations"."""
    one, many = _column(1, 7, "violation"), _column(24, 7, "violation")
    assert (one, many) == ("      1 violation ", "     24 violations")
