"""Text clients and operators wrote (request ids, prefix ids, reasons) is shown as plain
text by every command that prints audit rows: never parsed as rich markup (`[/x]` was a
MarkupError traceback) and its control characters written out, never sent raw to the
terminal (an ESC sequence cleared the screen or drew a fake link; CR/LF forged a line)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from slaguard.audit.engine import create_audit_engine
from slaguard.audit.migrate import upgrade
from slaguard.audit.sample import load_run, synthetic_run
from slaguard.cli.main import app
from slaguard.plaintext import visible

REQUEST_ID = "[/x]\x1b]8;;http://evil/\x07click\x1b]8;;\x07"
PREFIX = "prefix:[/bold]\x1b[2J\r\nfake: line"
REASON = "TTFT [/bold] doubled\x1b[31m"
RAW = ("\x1b", "\x07", "\r", "fake: line\n")
"""What must never reach the terminal: ESC, BEL, CR, and a forged line of its own."""
runner = CliRunner()


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A run whose first request id, incident subject and evidence came from a hostile
    client, the incident still open."""
    tmp = tmp_path_factory.mktemp("plain")
    run = synthetic_run(60, start_s=time.time() - 1800, duration_s=1200, seed=5)
    first = dataclasses.replace(run.decisions[0], request_id=REQUEST_ID)
    outcome = dataclasses.replace(run.outcomes[0], request_id=REQUEST_ID)
    incident = dataclasses.replace(
        run.incident, subject=PREFIX, evidence={"prefix": PREFIX}, resolved_at_s=None
    )
    run = dataclasses.replace(
        run,
        decisions=[first, *run.decisions[1:]],
        outcomes=[outcome, *run.outcomes[1:]],
        incident=incident,
    )
    engine = create_audit_engine(f"sqlite:///{tmp / 'audit.db'}")
    upgrade(engine)
    load_run(engine, run, tmp / "spill")
    engine.dispose()
    return str(tmp / "audit.db")


def shown(*args: str) -> str:
    """A command's stdout, wide enough that no cell is cut; nothing raw in it."""
    result = runner.invoke(app, list(args), env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    for raw in RAW:
        assert raw not in result.output, (raw, result.output)
    return result.stdout


def test_written_out_controls_are_the_only_change() -> None:
    assert visible(PREFIX) == "prefix:[/bold]\\x1b[2J\\r\\nfake: line"
    assert visible("a\tb\x9b1m\u202egnp.exe\x7f") == "a\\tb\\x9b1m\\u202egnp.exe\\x7f"
    assert visible("h200-8b é ✓ [bold]") == "h200-8b é ✓ [bold]"


def test_audit_tables_show_the_text_as_written(db: str) -> None:
    decisions = shown("audit", "decisions", "--db", db, "--since", "-1h")
    assert f"│ {visible(REQUEST_ID)} │" in decisions and "(60 rows)" in decisions
    explained = shown("audit", "explain", REQUEST_ID, "--db", db)
    assert f"decision {visible(REQUEST_ID)}" in explained
    assert explained.count(visible(REQUEST_ID)) == 3  # title, decision and outcome rows
    incident = shown("audit", "incident", "1", "--db", db)
    assert f"│ {visible(PREFIX)} " in incident
    assert '│ {"prefix":"prefix:[/bold]\\u001b[2J\\r\\nfake: line"} │' in incident  # JSON


def test_guard_commands_show_the_text_as_written(db: str) -> None:
    said = shown("rollback", "--reason", REASON, "--actor", "ops", "--db", db)
    assert (
        said.startswith(
            f"rollout 'rollout(50)' aborted: fleet on round_robin by ops ({visible(REASON)}); "
            "database sqlite:///"
        )
        and said.count("\n") == 1
    )
    history = shown("history", "--db", db, "--since", "-1h")
    assert f"│ ops   │ {visible(REASON)} " in history
    incidents = shown("incidents", "--db", db)
    assert f"│ {visible(PREFIX)} │" in incidents
    status = shown("status", "--db", db).splitlines()[1:]  # after the database line
    assert status[1] == f"why:          {visible(REASON)} (manual_rollback)"
    assert status[2] == "who:          ops (version 4)"  # after the run's three switches
    assert status[7].startswith(f"  #1 ttft_zscore on {visible(PREFIX)} (page), opened ")


def test_an_error_quoting_data_stays_one_inert_line(tmp_path: Path) -> None:
    missing = f"{tmp_path}/a\r\nfake: line.db"
    result = runner.invoke(app, ["status", "--db", missing])
    assert result.exit_code == 2
    assert result.stderr.startswith(
        f"error: --db: SQLite file {tmp_path}/a\\r\\nfake: line.db does not exist; "
    )
    assert result.stderr.count("\n") == 1 and "\r" not in result.stderr


def test_fleet_show_prints_ids_as_written(tmp_path: Path) -> None:
    """Rich markup in an id is shown as written (an escape character is refused by the
    fleet file's checks since 2026-12-01: tests/test_fleet_validation.py)."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text('targets:\n  - {id: "h[/x][bold]2", model: llama3.1-8b, card: h200}\n')
    table = shown("fleet", "show", "--fleet", str(fleet))
    assert "│ h[/x][bold]2 │ llama3.1-8b │ h200 │" in table
