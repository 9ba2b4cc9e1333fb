"""Runbook commands run as written on the state their alert describes, and runbook logic
holds against the guard's documented semantics: a hold resolves the open incident.

Every `slaguard` command a runbook gives to paste is parsed by the real CLI (its options,
their values, its arguments), and the read-only ones run on a scratch SQLite database the
way runbooks/README.md says (`export SLAGUARD_DB=...`) and exit 0. That the command and
option names exist at all, in every document, is test_docs_cli.py's."""

from __future__ import annotations

import functools
import json
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine
from test_docs_cli import LEADING, quoted_lines
from test_guard_cli import url_of
from test_guard_store import arm_samples, insert_arm_rows, start_rollout, trip, tripping_guard
from test_runbooks import RUNBOOKS, runbooks
from typer._click.exceptions import UsageError
from typer.testing import CliRunner

from slaguard.audit.engine import create_audit_engine
from slaguard.audit.migrate import upgrade
from slaguard.cli.main import COMMANDS, app, load_command
from slaguard.cli.usage import usage_line
from slaguard.guard.events import IncidentState
from slaguard.guard.guard import Guard
from slaguard.guard.incident_store import IncidentStore
from slaguard.guard.manual import ManualAction, apply_manual
from slaguard.guard.persist import EventPersister
from slaguard.guard.store import GuardStore


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


READ_ONLY = {
    ("status",),
    ("history",),
    ("incidents",),
    ("audit", "decisions"),
    ("audit", "explain"),
    ("audit", "incident"),
    ("audit", "summary"),
    ("db", "current"),
    ("fleet", "show"),
}
"""Commands that only read: run on the scratch database, they must exit 0."""
CHANGES = {("rollback",), ("resume",), ("audit", "prune"), ("db", "upgrade")}
"""Commands that change the database: parsed only. A command in neither set is a problem
until it is put in one."""
PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]*")
"""A word a runbook leaves for the operator to fill in (`ID`, `TARGET`)."""


def placeholders(incident: int) -> dict[str, str]:
    """What the runbooks' placeholders stand for, as the scratch database has it:
    `ID` an incident id (from `slaguard history` or Slack): the incident there;
    `TARGET` a target id (from the alert's labels): the one its decisions went to.
    `FLEET` and `INSTANCE` stand in PromQL and curl lines only; in a `slaguard` command
    they, like any other, are a problem until given a value here."""
    return {"ID": str(incident), "TARGET": arm_samples(0.0, 1)[0].target_id}


def runbook_commands(text: str) -> list[tuple[int, str]]:
    """The `slaguard ...` commands `text` gives to run, with their line: each line of its
    shell blocks, and each inline span with arguments (`slaguard resume --stage 10`; one
    naming a command alone, `slaguard audit incident`, or eliding, `slaguard audit ...`,
    is text about it)."""
    found: list[tuple[int, str]] = []
    for number, line, shell in quoted_lines(text):
        leading = LEADING.match(line)
        if leading is None:
            continue
        words = line[leading.end() :].split()
        if shell or (len(words) > len(command_path(words)) and "..." not in words):
            found.append((number, line[leading.end() :].strip()))
    return found


@functools.cache
def cli(name: str) -> Any:
    """The click command behind `slaguard name`, as `slaguard` builds it."""
    return load_command(name, COMMANDS[name])


def command_path(words: list[str]) -> tuple[str, ...]:
    """`("audit", "incident")` for `audit incident ID`: the words naming the command."""
    if not words or words[0] not in COMMANDS:
        return tuple(words[:1])
    subs = getattr(cli(words[0]), "commands", None) or {}
    return tuple(words[:2]) if len(words) > 1 and words[1] in subs else (words[0],)


def usage_problem(words: list[str]) -> str | None:
    """The CLI's own usage error for `words` (None: they parse), without running them."""
    path = command_path(words)
    if path[0] not in COMMANDS:
        return f"no command {path[0]!r}"
    command = cli(path[0])
    if len(path) == 2:
        command = command.commands[path[1]]
    try:
        command.make_context(" ".join(("slaguard", *path)), words[len(path) :])
    except UsageError as exc:
        return usage_line(exc)
    return None


def run(command: str, db: str, values: dict[str, str]) -> tuple[str | None, str]:
    """One runbook command on `db` (`$SLAGUARD_DB`), a `| jq ...` tail run if jq is
    there: the problem (None: exit 0) and what it printed."""
    head, _, pipe = command.partition(" | ")
    args = [values.get(word, word) for word in shlex.split(head)]
    result = CliRunner().invoke(app, args, env={"SLAGUARD_DB": db})
    if result.exit_code != 0:
        said = (result.stderr or result.stdout).strip().splitlines()
        return f"exit {result.exit_code}: {said[0] if said else ''}", result.stdout
    jq = shutil.which("jq")
    if not pipe or jq is None:
        return None, result.stdout
    tail = shlex.split(pipe)
    if tail[0] != "jq":
        return f"piped into {tail[0]!r}, not jq", result.stdout
    done = subprocess.run([jq, *tail[1:]], input=result.stdout, capture_output=True, text=True)
    if done.returncode != 0:
        return f"jq: exit {done.returncode}: {done.stderr.strip()}", done.stdout
    return None, done.stdout


def problems(name: str, text: str, db: str, values: dict[str, str]) -> list[str]:
    """`name:line: slaguard ...: what is wrong` for each command of a runbook that does
    not parse, or is read-only and does not run."""
    wrong: list[str] = []
    for number, command in runbook_commands(text):
        where = f"{name}:{number}: slaguard {command}"
        head = shlex.split(command.partition(" | ")[0])
        unknown = sorted({w for w in head if PLACEHOLDER.fullmatch(w) and w not in values})
        if unknown:
            wrong.append(f"{where}: placeholder {', '.join(unknown)} has no value in the test")
            continue
        path = command_path(head)
        problem = usage_problem([values.get(word, word) for word in head])
        if problem is None and path in READ_ONLY:
            problem, _ = run(command, db, values)
        elif problem is None and path not in CHANGES:
            problem = f"{' '.join(path)} is neither READ_ONLY nor CHANGES in the test"
        if problem is not None:
            wrong.append(f"{where}: {problem}")
    return wrong


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, str]]:
    """A SQLite audit database with what the runbooks' commands look up: an incident
    (tripped, announced, then held) and the last hour's decisions; the database's URL and
    the placeholders' values."""
    engine = create_audit_engine(f"sqlite:///{tmp_path_factory.mktemp('runbooks') / 'a.db'}")
    upgrade(engine)
    incident = held_with_a_failing_resolution(engine)
    insert_arm_rows(engine, time.time() - 600)
    engine.dispose()
    return url_of(engine), placeholders(incident)


@pytest.mark.parametrize("path", sorted(RUNBOOKS.glob("*.md")), ids=lambda p: p.stem)
def test_every_runbook_command_parses_and_the_read_only_ones_run(
    path: Path, scratch: tuple[str, dict[str, str]]
) -> None:
    db, values = scratch
    assert problems(path.name, path.read_text(encoding="utf-8"), db, values) == []


def test_the_runbooks_without_a_command_to_run_are_the_log_and_promql_ones() -> None:
    """The check above sees the commands: only these runbooks have none."""
    none = [
        p.stem for p in sorted(RUNBOOKS.glob("*.md")) if not runbook_commands(p.read_text("utf-8"))
    ]
    assert none == ["README", "SlaguardAuditRecordsUnreadable", "SlaguardAuditSpillGrowing"]


def test_the_check_finds_bad_values_missing_arguments_placeholders_and_failures(
    scratch: tuple[str, dict[str, str]],
) -> None:
    """The guard itself: what the CLI would refuse, or what fails to run, is one line each;
    a span naming a command alone is text, a span with arguments a command."""
    db, values = scratch
    text = (
        "Give `slaguard audit incident` `--fleet F`, then `slaguard resume --stage`.\n"
        "```sh\n"
        "slaguard audit decisions --since -1h --target TARGET   # fine\n"
        "slaguard status --window\n"
        "slaguard audit incident\n"
        "slaguard audit incident ID extra\n"
        "slaguard history --since yesterday\n"
        "slaguard audit decisions --since -1h --target INSTANCE\n"
        "slaguard rollback --hold --reason x\n"
        "slaguard dashboards build\n"
        "```\n"
    )
    assert problems("probe.md", text, db, values) == [
        "probe.md:1: slaguard resume --stage: option '--stage' requires an argument; see "
        "'slaguard resume --help'",
        "probe.md:4: slaguard status --window: option '--window' requires an argument; see "
        "'slaguard status --help'",
        "probe.md:5: slaguard audit incident: missing argument 'incident_id'; see "
        "'slaguard audit incident --help'",
        "probe.md:6: slaguard audit incident ID extra: got unexpected extra argument(s) "
        "(extra); see 'slaguard audit incident --help'",
        "probe.md:7: slaguard history --since yesterday: exit 2: error: --since: cannot read "
        "'yesterday' as a time; fix: use ISO 8601 (2026-11-29T14:00Z; no zone means UTC), 'now', "
        "or relative: -2h, -30m, -7d",
        "probe.md:8: slaguard audit decisions --since -1h --target INSTANCE: placeholder "
        "INSTANCE has no value in the test",
        "probe.md:10: slaguard dashboards build: dashboards build is neither READ_ONLY nor "
        "CHANGES in the test",
    ]


def test_slack_delivery_runbook_finds_a_failed_resolution(audit_engine: Engine) -> None:
    """Its Confirm led with `slaguard status`, which lists open incidents only: a failed
    resolution (`retrying:r1`) belongs to a resolved one and was not there."""
    inc = held_with_a_failing_resolution(audit_engine)
    confirm = section(runbooks()["SlaguardSlackDeliveryFailing"], "## Confirm")
    commands = [command for _, command in runbook_commands(confirm)]
    said = [run(c, url_of(audit_engine), placeholders(inc)) for c in commands]
    assert [problem for problem, _ in said] == [None] * len(commands)
    assert "retrying:r1" in said[0][1] and f'"id": {inc}' in said[0][1], said
    for command, (_, out) in zip(commands, said, strict=True):
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
