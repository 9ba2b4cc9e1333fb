"""Runbook commands run as written on the state their alert describes, and runbook logic
holds against the guard's documented semantics: a hold resolves the open incident."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import time

from sqlalchemy import Engine
from test_guard_cli import url_of
from test_guard_store import start_rollout, trip, tripping_guard
from test_runbooks import runbooks
from typer.testing import CliRunner

from slaguard.cli.main import app
from slaguard.guard.events import IncidentState
from slaguard.guard.guard import Guard
from slaguard.guard.incident_store import IncidentStore
from slaguard.guard.manual import ManualAction, apply_manual
from slaguard.guard.persist import EventPersister
from slaguard.guard.store import GuardStore

SH_BLOCK = re.compile(r"```sh\n(.*?)```", re.DOTALL)


def section(text: str, title: str) -> str:
    start = text.index(title)
    end = text.find("\n## ", start + len(title))
    return text[start : end if end != -1 else None]


def held_with_a_failing_resolution(engine: Engine) -> int:
    """A trip announced in Slack, then held by an operator: the hold resolves the incident
    and its resolution message fails (retrying); the incident's audit id."""
    now = time.time()
    store, incidents = GuardStore(engine), IncidentStore(engine)
    persister = EventPersister(store, incidents)
    start_rollout(store, at_s=now - 60)
    guard = tripping_guard(store.load(now - 50))
    inc = persister.persist(guard, trip(guard, now - 50), now - 40).incident_id
    assert inc is not None
    (opened,) = incidents.due(now - 39)
    incidents.delivered(opened, slack_channel=None, slack_ts=None)
    why = f"investigating incident {inc}"
    held = apply_manual(Guard(), persister, ManualAction.HOLD, now - 30, actor="ops", reason=why)
    assert [e.state for e in held.queued] == [IncidentState.RESOLVED]
    (resolution,) = incidents.due(now - 29)
    incidents.failed(resolution, now - 29, "HTTP 503")
    return inc


def confirm_commands(name: str) -> list[str]:
    """The `slaguard ...` lines of a runbook's Confirm shell blocks, comments cut."""
    confirm = section(runbooks()[name], "## Confirm")
    lines = [x for block in SH_BLOCK.findall(confirm) for x in block.splitlines()]
    return [re.sub(r"\s+#\s.*$", "", x).strip() for x in lines if x.startswith("slaguard ")]


def run(command: str, db: str, incident: int) -> str:
    """One runbook line (`ID` is the incident), a `| jq ...` tail run if jq is there."""
    head, _, pipe = command.partition(" | ")
    args = shlex.split(head.replace(" ID", f" {incident}"))[1:]
    result = CliRunner().invoke(app, [*args, "--db", db])
    assert result.exit_code == 0, (command, result.output)
    jq = shutil.which("jq")
    if not pipe or jq is None:
        return result.stdout
    tail = shlex.split(pipe)
    assert tail[0] == "jq", command
    done = subprocess.run([jq, *tail[1:]], input=result.stdout, capture_output=True, text=True)
    assert done.returncode == 0, (command, done.stderr)
    return done.stdout


def test_slack_delivery_runbook_finds_a_failed_resolution(audit_engine: Engine) -> None:
    """Its Confirm led with `slaguard status`, which lists open incidents only: a failed
    resolution (`retrying:r1`) belongs to a resolved one and was not there."""
    inc = held_with_a_failing_resolution(audit_engine)
    commands = confirm_commands("SlaguardSlackDeliveryFailing")
    said = [run(c, url_of(audit_engine), inc) for c in commands]
    assert "retrying:r1" in said[0] and f'"id": {inc}' in said[0], said
    for command, out in zip(commands, said, strict=True):
        assert out.strip(), command


def test_no_runbook_resumes_because_the_incident_is_resolved(audit_engine: Engine) -> None:
    """A hold resolves the incident (Slack gets "[resolved]"), so the held-too-long
    runbook's "if the incident behind the rollback is resolved, resume" always sent the
    operator to resume, cause fixed or not."""
    inc = held_with_a_failing_resolution(audit_engine)
    listed = CliRunner().invoke(app, ["incidents", "-f", "json", "--db", url_of(audit_engine)])
    (row,) = [r for r in json.loads(listed.stdout) if r["id"] == inc]
    assert row["resolved_at"] is not None  # held, cause unknown: resolved all the same
    for name, text in runbooks().items():
        steps = re.split(r"\n(?=\d+\. )", section(text, "## Mitigate"))
        for step in (s for s in steps if "slaguard resume" in s):
            assert "resolved" not in step, (name, step)
        assert "resolved?" not in section(text, "## Confirm"), name
