"""Real replica processes (`python -m slaguard.guard.runner`) on one real database.

Measured from the processes' own JSON lines, with deadlines and polling (no sleeps):
* a mode written by the CLI reaches every replica within 1 s;
* exactly one replica leads at any time; after SIGKILL another leads within 5 s, and a
  stopped (SIGSTOP) leader loses its lease to another within `lease_s` + a poll;
* a fault in the audit rows trips the fleet once: one incident, one linked mode change,
  one message from the leader only; a new leader does not resend it, and the resolution
  after a CLI resume is sent exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import create_scratch_database, drop_database
from helpers import wait_for
from sqlalchemy import Engine, func, select
from sqlalchemy.engine import URL, make_url
from sqlalchemy.orm import Session
from test_guard_store import insert_arm_rows
from typer.testing import CliRunner

from slaguard.audit.engine import create_audit_engine
from slaguard.audit.migrate import upgrade
from slaguard.audit.models import Incident, ModeChange
from slaguard.cli.main import app
from slaguard.guard.store import GuardStore

pytestmark = pytest.mark.slow
START_TIMEOUT_S = 90.0
PROPAGATION_S = 1.0
FAILOVER_S = 5.0
READ_TO_END_S = 10.0
"""How long an exited replica's last lines may take to reach its reader thread."""


@dataclass
class Replica:
    """One runner process and the JSON lines it printed."""

    name: str
    proc: subprocess.Popen[str]
    lines: list[dict[str, Any]] = field(default_factory=list)
    died_at: float | None = None
    reader: threading.Thread | None = None

    def start_reader(self) -> None:
        def read() -> None:
            assert self.proc.stdout is not None
            for raw in self.proc.stdout:
                self.lines.append(json.loads(raw))

        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()

    def read_to_end(self) -> None:
        """Wait for the reader to take every line the exited process printed: its exit can
        be seen before the reader thread has read its last line (its `stop`)."""
        assert self.reader is not None
        self.reader.join(READ_TO_END_S)
        assert not self.reader.is_alive(), f"{self.name}'s stdout still open after its exit"

    def events(self, kind: str, after: float = 0.0) -> list[dict[str, Any]]:
        return [x for x in list(self.lines) if x["event"] == kind and x["t"] >= after]

    def last_status(self) -> dict[str, Any] | None:
        found = self.events("status")
        return found[-1] if found else None

    @property
    def alive(self) -> bool:
        return self.died_at is None

    def kill(self, sig: int) -> float:
        at = time.time()
        self.proc.send_signal(sig)
        if sig == signal.SIGKILL:
            self.proc.wait(10)
            self.died_at = at
        return at


def start(url: URL, names: list[str], tmp: Path, *extra: str) -> list[Replica]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLAGUARD_")}
    env["SLAGUARD_NOTIFY_FILE"] = str(tmp / "notify.jsonl")
    db = url.render_as_string(hide_password=False)
    replicas = []
    for name in names:
        cmd = [sys.executable, "-m", "slaguard.guard.runner", "--db", db, "--replica-id", name]
        err = (tmp / f"{name}.err").open("w")
        proc = subprocess.Popen(
            [*cmd, *extra], stdout=subprocess.PIPE, stderr=err, text=True, env=env
        )
        replica = Replica(name, proc)
        replica.start_reader()
        replicas.append(replica)
    try:
        wait_for("every replica's first status", lambda: all(r.last_status() for r in replicas),
                 START_TIMEOUT_S)  # fmt: skip
    except BaseException:
        for r in replicas:  # a failed start leaves none running for the next test
            r.proc.kill()
            r.proc.wait(10)
        raise
    return replicas


def stop(replicas: list[Replica], tmp: Path | None = None) -> None:
    """SIGTERM every replica (clean exit expected); keep their lines for a postmortem.
    Every one is waited for (killed after 20 s) before any exit is judged."""
    for r in replicas:
        if r.proc.poll() is None:
            r.proc.send_signal(signal.SIGCONT)
            r.proc.terminate()
    codes: dict[str, int] = {}
    for r in replicas:
        if r.alive:
            try:
                codes[r.name] = r.proc.wait(20)
            except subprocess.TimeoutExpired:
                r.proc.kill()
                codes[r.name] = r.proc.wait(10)
    for r in replicas:
        r.read_to_end()
    for r in replicas:
        if r.name in codes:
            assert codes[r.name] == 0, f"{r.name} exited with {codes[r.name]}"
            assert r.events("stop"), f"{r.name} did not stop cleanly"
    if tmp is not None:
        lines = sorted((x for r in replicas for x in r.lines), key=lambda x: x["t"])
        (tmp / "lines.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def the_leader(replicas: list[Replica], after: float = 0.0) -> Replica | None:
    """The one alive replica whose latest status (polled after `after`) says it leads,
    once every alive replica has such a status; None before that or if not exactly one."""
    latest = [r.events("status", after) for r in replicas if r.alive]
    if not all(latest):
        return None
    leading = [r for r in replicas if r.alive and r.events("status", after)[-1]["leader"]]
    return leading[0] if len(leading) == 1 else None


def leadership_periods(replica: Replica) -> list[tuple[float, float]]:
    """Spans where the replica provably held the lock: from the end of the first poll
    that verified it to the start of the last one, with no step-down in between (the
    lock lives on one session: losing it is always reported before it is retaken)."""
    periods: list[tuple[float, float]] = []
    first: dict[str, Any] | None = None
    last: dict[str, Any] | None = None
    for line in replica.lines:
        if line["event"] == "status" and line["leader"]:
            first = first or line
            last = line
        elif line["event"] == "leader" and not line["leader"] and first and last:
            periods.append((first["done"], last["t"]))
            first = last = None
    if first and last:
        periods.append((first["done"], last["t"]))
    return periods


def assert_never_two_leaders(replicas: list[Replica]) -> None:
    """No replica verified the lock (a `leader: true` status, checked between its `t`
    and `done`) while another provably held it."""
    for b in replicas:
        for held_from, held_to in leadership_periods(b):
            for a in replicas:
                if a is b:
                    continue
                clash = [s for s in a.events("status") if s["leader"]
                         and held_from < s["t"] and s["done"] < held_to]  # fmt: skip
                assert not clash, f"{a.name} claimed leadership while {b.name} led: {clash[0]}"


def senders(replicas: list[Replica]) -> list[str]:
    """Who sent each message, in time order."""
    sent = sorted((x["t"], r.name) for r in replicas for x in r.events("sent"))
    return [name for _, name in sent]


def cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def propagation(engine: Engine, replicas: list[Replica], *args: str) -> float:
    """Run a CLI mode command; seconds until the last alive replica uses the new mode
    (from the switch's own timestamp, taken before it was written)."""
    cli(*args)
    stored = GuardStore(engine).load(time.time())

    def adopted() -> list[float] | None:
        times = []
        for r in replicas:
            if r.alive:
                hit = [x for x in r.events("adopted") if x["version"] == stored.version]
                if not hit:
                    return None
                times.append(hit[0]["t"])
        return times

    return max(wait_for(f"version {stored.version} everywhere", adopted)) - stored.since_s


def notify_lines(tmp: Path) -> list[dict[str, Any]]:
    path = tmp / "notify.jsonl"
    if not path.is_file():
        return []
    return [json.loads(x)["incident"] for x in path.read_text().splitlines() if x.strip()]


@pytest.fixture(scope="module")
def pg_cluster(pg_url: URL, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    engine = create_audit_engine(pg_url)
    upgrade(engine)
    tmp = tmp_path_factory.mktemp("replicas")
    replicas = start(pg_url, ["r1", "r2", "r3"], tmp)
    try:
        yield engine, replicas, tmp
    finally:
        stop(replicas, tmp)
        engine.dispose()


def test_cli_changes_reach_every_replica_within_a_second(pg_cluster: Any) -> None:
    engine, replicas, _ = pg_cluster
    wait_for("exactly one leader", lambda: the_leader(replicas))
    db = ["--db", engine.url.render_as_string(hide_password=False)]
    cli("status", *db)  # warm this process's first database use out of the measurement
    delays = [
        propagation(engine, replicas, "resume", "--stage", "50", "--actor", "ops", *db),
        propagation(engine, replicas, "rollback", "--reason", "drill", *db),
        propagation(engine, replicas, "rollback", "--hold", "--reason", "freeze", *db),
        propagation(engine, replicas, "resume", "--reason", "thaw", *db),
        propagation(engine, replicas, "rollback", "--reason", "restart at 50", *db),
        propagation(engine, replicas, "resume", "--stage", "50", "--reason", "go", *db),
    ]
    print(f"\npropagation (s): {', '.join(f'{d:.3f}' for d in delays)}")
    assert max(delays) < PROPAGATION_S
    assert all(r.last_status()["mode"] == "rollout(50)" for r in replicas)  # type: ignore[index]


def test_trip_notifies_once_and_failover_neither_resends_nor_loses(pg_cluster: Any) -> None:
    engine, replicas, tmp = pg_cluster
    leader = wait_for("exactly one leader", lambda: the_leader(replicas))
    before = GuardStore(engine).load(time.time())
    assert before.mode.label == "rollout(50)"
    insert_arm_rows(engine, time.time() - 3.0, n=250, prefix="fault-")  # learned 40 % misses
    trip = wait_for("the trip", lambda: leader.events("mode_changed"), 20.0)[0]
    assert (trip["from_mode"], trip["to_mode"], trip["kind"]) == (
        "rollout(50)",
        "round_robin",
        "trip",
    )
    stored = GuardStore(engine).load(time.time())
    assert stored.version == before.version + 1
    reached = []
    for r in replicas:
        hit = wait_for(f"{r.name} on round_robin", lambda r=r: [
            x for x in r.lines if x["event"] in ("adopted", "mode_changed")
            and x["version"] == stored.version])  # fmt: skip
        reached.append(hit[0]["t"] - stored.since_s)
    print(f"\ntrip reached the replicas after (s): {', '.join(f'{d:.3f}' for d in reached)}")
    assert max(reached) < PROPAGATION_S
    first = wait_for("the incident message", lambda: notify_lines(tmp))
    assert [(m["state"], m["detector"]) for m in first] == [("opened", "rollout_compare")]
    with Session(engine) as session:
        inc = session.scalars(select(Incident)).one()
        change = session.scalars(select(ModeChange).order_by(ModeChange.id.desc())).first()
    assert first[0]["incident_id"] == str(inc.id)
    assert change is not None and change.incident_id == inc.id
    learned = inc.evidence["verdicts"][0]["evidence"]["learned"]
    assert (learned["requests"], learned["violations"]) == (250, 100)
    assert senders(replicas) == [leader.name]

    killed_at = leader.kill(signal.SIGKILL)
    survivors = [r for r in replicas if r.alive]
    gains = wait_for("a new leader", lambda: [
        (r, x) for r in survivors for x in r.events("leader", killed_at) if x["leader"]
    ])  # fmt: skip
    new_leader, gain = gains[0]
    failover = gain["done"] - killed_at
    print(f"\nfailover after SIGKILL: {failover:.3f} s")
    assert len(gains) == 1 and failover < FAILOVER_S
    wait_for("one leader among the survivors", lambda: the_leader(replicas, gain["done"]))
    wait_for("three more syncs of the new leader",
             lambda: len(new_leader.events("status", gain["done"])) >= 6)  # fmt: skip
    assert len(notify_lines(tmp)) == 1  # not resent by the new leader

    db = ["--db", engine.url.render_as_string(hide_password=False)]
    said = cli("resume", "--reason", f"incident {inc.id} reviewed", "--actor", "carol", *db)
    assert f"incident {inc.id} resolved" in said
    final = wait_for("the resolution message", lambda: notify_lines(tmp)[1:])
    assert [(m["state"], m["incident_id"]) for m in final] == [("resolved", str(inc.id))]
    seen_at = time.time()
    wait_for("three more syncs", lambda: len(new_leader.events("status", seen_at)) >= 6)
    assert len(notify_lines(tmp)) == 2
    assert senders(replicas) == [leader.name, new_leader.name]
    with Session(engine) as session:
        assert session.scalar(select(func.count()).select_from(Incident)) == 1
        assert session.scalars(select(Incident)).one().resolved_at is not None
    assert_never_two_leaders(replicas)


def test_a_stopped_leader_loses_its_lease(pg_url: URL, tmp_path: Path) -> None:
    """SIGSTOP (a frozen process keeps its socket): the server ends its idle session
    after `lease_s`, another replica leads, and the thawed one steps down."""
    url = create_scratch_database("slaguard_lease")  # its own lock, apart from pg_cluster
    engine = create_audit_engine(url)
    upgrade(engine)
    engine.dispose()
    pair = start(url, ["s1", "s2"], tmp_path, "--lease-s", "2")
    try:
        leader = wait_for("exactly one leader", lambda: the_leader(pair))
        other = next(r for r in pair if r is not leader)
        stopped_at = leader.kill(signal.SIGSTOP)
        gain = wait_for("the other replica leads", lambda: [
            x for x in other.events("leader", stopped_at) if x["leader"]])[0]  # fmt: skip
        took = gain["done"] - stopped_at
        print(f"\ntakeover from a stopped leader: {took:.3f} s (lease 2 s)")
        assert 1.5 < took < FAILOVER_S
        resumed_at = leader.kill(signal.SIGCONT)
        wait_for("the thawed replica steps down", lambda: [
            x for x in leader.events("leader", resumed_at - 3.0) if not x["leader"]])  # fmt: skip
        assert_never_two_leaders(pair)
        thawed = time.time()
        assert wait_for("one leader", lambda: the_leader(pair, thawed)) is other
    finally:
        stop(pair, tmp_path)
        drop_database(url)


def test_sqlite_replicas_share_the_mode_and_fail_over(tmp_path: Path) -> None:
    url = make_url(f"sqlite:///{tmp_path / 'audit.db'}")
    engine = create_audit_engine(url)
    upgrade(engine)
    pair = start(url, ["q1", "q2"], tmp_path)
    try:
        leader = wait_for("exactly one leader", lambda: the_leader(pair))
        delay = propagation(engine, pair, "resume", "--db", str(tmp_path / "audit.db"))
        assert delay < PROPAGATION_S
        killed_at = leader.kill(signal.SIGKILL)
        other = next(r for r in pair if r is not leader)
        gain = wait_for("the other replica leads", lambda: [
            x for x in other.events("leader", killed_at) if x["leader"]])[0]  # fmt: skip
        assert gain["done"] - killed_at < FAILOVER_S
        assert_never_two_leaders(pair)
    finally:
        stop(pair, tmp_path)
        engine.dispose()
