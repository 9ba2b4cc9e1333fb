"""Which manual command queues which incident message, held to the table in docs/guard.md
("What a manual command sends"): only a command that ends an open incident's episode (a
hold, a resume) queues one, its `[resolved]`; a resume after a hold queues nothing, since
the hold already resolved the incident in its thread (an on-call walk-through read that
as a lost message)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from fakes.slack_server import FakeSlack
from sqlalchemy import Engine, select
from test_guard_cli import change
from test_guard_store import start_rollout, trip, tripping_guard
from test_guard_store_incidents import replica

from slaguard.audit.models import Incident
from slaguard.guard import modes
from slaguard.guard.guard import Guard
from slaguard.guard.incident_store import OUTBOX_KEY, IncidentStore
from slaguard.guard.persist import EventPersister
from slaguard.guard.store import GuardStore
from slaguard.guard.verdicts import Action, Severity, Verdict
from slaguard.scheduler.rollout import RolloutPlan

DOC = Path(__file__).resolve().parents[1] / "docs" / "guard.md"
ROW = re.compile(
    r"^\| `(?P<command>(?:rollback|resume)[^`]*)` \| (?P<fleet>[^|]+) \| (?P<open>yes|no|either)"
    r"[^|]* \| (?P<message>[^|]+) \| (?P<adds>[^|]+) \|$"
)
RESOLVED = "; incident N resolved (message queued for the guard)"


def documented() -> list[dict[str, str]]:
    """The rows of the table: command, the modes in its fleet cell, open, message, adds."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("### What a manual command sends") :]
    section = section[: section.index("\n#")]
    return [m.groupdict() for line in section.splitlines() if (m := ROW.match(line))]


def _tripped(engine: Engine) -> None:
    """The guard tripped a rollout(50) onto round-robin: an incident is open."""
    now = time.time()
    store = GuardStore(engine)
    start_rollout(store, at_s=now - 60)
    guard = tripping_guard(store.load(now - 50))
    EventPersister(store, IncidentStore(engine)).persist(guard, trip(guard, now - 50), now - 40)


def _held(engine: Engine) -> None:
    change(engine, "rollback", "--hold", "--reason", "freeze")


def _tripped_while_held(engine: Engine) -> None:
    """A trip on a held fleet switches nothing and opens an incident (`Guard._on_trip`)."""
    _held(engine)
    now = time.time()
    store = GuardStore(engine)
    guard = Guard(state=store.load(now))
    flood = Verdict("hot_spot", Action.TRIP, "prefix:9f3a", Severity.CRITICAL, "flood", now)
    label = guard.state.mode.label
    opened = guard.incidents.tripped(now, [flood], label, label)
    EventPersister(store, IncidentStore(engine)).persist(guard, [opened], now)


def _tripped_then_held(engine: Engine) -> None:
    """The hold resolved the trip's incident: none is open."""
    _tripped(engine)
    _held(engine)


def _rollout(engine: Engine) -> None:
    start_rollout(GuardStore(engine), at_s=time.time() - 60)


def _learned(engine: Engine) -> None:
    """The plan took the fleet through its one stage to `learned`."""
    store = GuardStore(engine)
    plan = RolloutPlan(baseline_s=0.0, stage_s=1.0, stages_pct=(50,))
    now = time.time()  # the fresh row's round-robin began at its migration, moments ago
    for at in (now + 1, now + 3):  # round_robin -> rollout(50) -> learned
        advanced = modes.advance(store.load(at), at, plan)
        assert advanced.transition is not None and store.save(advanced.transition, at).saved


def _nothing(engine: Engine) -> None:
    """A fresh database: round-robin, no incident ever."""


Setup = Callable[[Engine], None]
CASES: list[tuple[str, Setup, str, bool]] = [
    # command, how the fleet got there, its mode, an incident open
    ("rollback", _rollout, "rollout(p)", False),
    ("rollback", _learned, "learned", False),
    ("rollback", _tripped, "round_robin", True),
    ("rollback", _nothing, "round_robin", False),
    ("rollback", _tripped_while_held, "held_round_robin", True),
    ("rollback", _held, "held_round_robin", False),
    ("rollback --hold", _rollout, "rollout(p)", False),
    ("rollback --hold", _learned, "learned", False),
    ("rollback --hold", _tripped, "round_robin", True),
    ("rollback --hold", _nothing, "round_robin", False),
    ("rollback --hold", _tripped_while_held, "held_round_robin", True),
    ("rollback --hold", _held, "held_round_robin", False),
    ("resume", _tripped, "round_robin", True),
    ("resume", _tripped_while_held, "held_round_robin", True),
    ("resume", _nothing, "round_robin", False),
    ("resume", _tripped_then_held, "held_round_robin", False),
    ("resume", _rollout, "rollout(p)", False),
    ("resume", _learned, "learned", False),
]


def _row(command: str, mode: str, is_open: bool) -> dict[str, str]:
    rows = [
        r
        for r in documented()
        if r["command"] == command
        and f"`{mode}`" in r["fleet"]
        and r["open"] in ("either", "yes" if is_open else "no")
    ]
    assert len(rows) == 1, (command, mode, is_open, rows)
    return rows[0]


def _outbox(engine: Engine) -> list[tuple[int, str, str]]:
    """Every message waiting: (incident id, state, summary)."""
    with engine.connect() as conn:
        rows = conn.execute(select(Incident.id, Incident.evidence)).all()
    return [
        (i, m["event"]["state"], m["event"]["summary"])
        for i, evidence in rows
        for m in evidence.get(OUTBOX_KEY) or []
    ]


def _summary(cell: str) -> re.Pattern[str]:
    """The message cell's quoted summary, ACTOR, REASON and P filled in as this test does."""
    (quoted,) = re.findall(r'"([^"]+)"', cell)
    pattern = re.escape(quoted).replace("ACTOR", "ana").replace("REASON", "drill")
    return re.compile(pattern.replace(r"\(P\)", r"\(\d+\)"))


@pytest.mark.parametrize(("command", "setup", "mode", "is_open"), CASES)
def test_each_manual_command_queues_what_the_guide_says(
    audit_engine: Engine, command: str, setup: Setup, mode: str, is_open: bool
) -> None:
    setup(audit_engine)
    stored = GuardStore(audit_engine).load(time.time()).mode
    assert ("rollout(p)" if stored.kind.value == "rollout" else stored.label) == mode
    assert (IncidentStore(audit_engine).restore() is not None) is is_open
    before = _outbox(audit_engine)
    said = change(audit_engine, *command.split(), "--reason", "drill", "--actor", "ana")
    queued = [m for m in _outbox(audit_engine) if m not in before]
    row = _row(command, mode, is_open)
    if row["message"].startswith("none"):
        assert queued == [] and "resolved" not in said, said
    else:
        assert row["message"].startswith("`[resolved]`"), row
        ((incident, state, summary),) = queued
        assert state == "resolved" and IncidentStore(audit_engine).restore() is None
        assert _summary(row["message"]).fullmatch(summary), (row, summary)
        assert row["adds"] == f"`{RESOLVED}`", row
        assert said.endswith(RESOLVED.replace(" N ", f" {incident} ")), said


def test_every_row_of_the_table_is_a_case_here() -> None:
    """Each mode a row names, with and without an incident open where it says either."""
    rows = documented()
    assert len(rows) == 8
    for row in rows:
        for mode in re.findall(r"`([^`]+)`", row["fleet"]):
            for is_open in {"yes": [True], "no": [False], "either": [True, False]}[row["open"]]:
                assert (row["command"], mode, is_open) in {(c, m, o) for c, _, m, o in CASES}, row


def test_hold_then_resume_is_two_messages_in_one_thread_then_none(audit_engine: Engine) -> None:
    """The walk-through: a trip, `rollback --hold`, `resume`, with a leader delivering to
    Slack after each. The hold's `[resolved]` replies in the trip's thread and is broadcast
    to the channel; the resume finds no incident open and sends nothing."""
    _tripped(audit_engine)
    with FakeSlack() as slack:
        leader = replica(audit_engine, slack, "a", time.time())
        leader.deliver(time.time())
        held = change(audit_engine, "rollback", "--hold", "--reason", "investigating")
        leader.sync(time.time())
        leader.deliver(time.time())
        resumed = change(audit_engine, "resume", "--actor", "ana")
        leader.sync(time.time())
        assert leader.deliver(time.time()) == []
        posts = [p.body for p in slack.posts()]
    assert held.endswith("; incident 1 resolved (message queued for the guard)"), held
    assert resumed == "fleet resumed at rollout(10) by ana (manual resume)"
    assert [p["text"].split()[:2] for p in posts] == [["[opened]", "1"], ["[resolved]", "1"]]
    assert posts[1]["thread_ts"] == "1700000000.000001" and posts[1]["reply_broadcast"] is True
    assert "fleet held on round-robin by " in posts[1]["text"]
