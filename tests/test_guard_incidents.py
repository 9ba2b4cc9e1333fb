"""The incident tracker's thread: each message reports the switch it is about, if any."""

from __future__ import annotations

from slaguard.guard.events import IncidentState
from slaguard.guard.incidents import IncidentTracker
from slaguard.guard.verdicts import Action, Severity, Verdict


def _trip(subject: str, at_s: float) -> Verdict:
    return Verdict("hot_spot", Action.TRIP, subject, Severity.CRITICAL, f"{subject} hot", at_s)


def test_updates_say_the_fleet_stayed_on_round_robin_not_the_opening_switch_again() -> None:
    """ "also: ..." and "fault is back: ..." repeated `rollout(10) -> round_robin` from the
    opening while the fleet was already on round-robin: on call, a second rollback."""
    tracker = IncidentTracker()
    opened = tracker.tripped(10.0, [_trip("prefix:a", 10.0)], "rollout(10)", "round_robin")
    joined = tracker.joined(12.0, [_trip("prefix:b", 12.0)], "round_robin")
    cleared = tracker.cleared(60.0, "round_robin", "resume when ready")
    back = tracker.tripped(90.0, [_trip("prefix:a", 90.0)], "round_robin", "round_robin")
    assert joined is not None and cleared is not None
    assert [e.state for e in (opened, joined, cleared, back)] == [
        IncidentState.OPENED,
        *[IncidentState.UPDATED] * 3,
    ]
    assert (opened.mode_before, opened.mode_after) == ("rollout(10)", "round_robin")
    for update in (joined, cleared, back):
        assert (update.mode_before, update.mode_after) == ("round_robin", "round_robin")
    assert back.summary.startswith("fault is back: ")
