"""`slaguard serve` refuses, in one line, what would make two replicas trample each other."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from helpers import wait_serving
from typer.testing import CliRunner

from slaguard.audit.engine import create_audit_engine
from slaguard.audit.migrate import upgrade
from slaguard.cli.main import app
from slaguard.cli.serve import _listen_source
from slaguard.service.bootstrap import build_service
from slaguard.service.config import load_config
from slaguard.service.local import free_port


def test_second_replica_on_the_same_spill_journal_is_one_line_exit_2(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'audit.db'}"
    env = {**os.environ, "SLAGUARD_SERVE_SPILL_DIR": str(tmp_path / "spill")}
    port = free_port()
    first = subprocess.Popen(
        [sys.executable, "-m", "slaguard", "serve", "--db", db, "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            raise AssertionError("first replica never became healthy")
        second = subprocess.run(
            [sys.executable, "-m", "slaguard", "serve", "--db", db, "--port", str(free_port())],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        first.terminate()
        first.wait(timeout=20)
    assert second.returncode == 2
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in second.stderr
    assert lines[0].startswith("error: audit spill journal:") and "spill_dir" in lines[0]


def test_sigterm_drains_the_audit_writer_and_logs_it(tmp_path: Path) -> None:
    """systemd and Kubernetes stop a service with SIGTERM. uvicorn re-raises it once the
    server has stopped, so the drain must happen in the app's shutdown, not after
    `uvicorn.run` (where it never ran: no drain, no log line, leadership not given up)."""
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "slaguard", "serve", "--db", "audit.db", "--port", str(port)],
            cwd=tmp_path,
            stdout=err,
            stderr=subprocess.STDOUT,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            assert wait_serving(url, proc), log.read_text()
            body = {"model": "llama3.1-8b", "prompt_tokens": 100, "max_new_tokens": 10}
            routed = [httpx.post(f"{url}/v1/route", json=body).status_code for _ in range(25)]
            assert routed == [200] * 25
        finally:
            proc.terminate()
            code = proc.wait(timeout=30)
    text = log.read_text()
    assert code == -signal.SIGTERM, text  # uvicorn re-raises the signal it stopped on
    assert "audit writer drained in" in text and "25 rows written, 0 write errors" in text, text
    assert [p.name for p in (tmp_path / "audit.db.spill").iterdir()] == ["LOCK"]
    with sqlite3.connect(tmp_path / "audit.db") as conn:
        assert conn.execute("select count(*) from decisions").fetchone() == (25,)


def test_a_taken_port_or_foreign_address_is_one_line_before_anything_starts(
    tmp_path: Path,
) -> None:
    """Refused before the database is migrated or the writer spawned (uvicorn found the
    port taken only after both, then exited 3 with its own log line)."""
    db = tmp_path / "audit.db"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(app, ["serve", "--db", str(db), "--port", str(port)])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == (
        f"error: cannot listen on 127.0.0.1:{port}: Address already in use; fix: pick a free "
        "port (--port) or stop what listens there\n"
    )
    foreign = CliRunner().invoke(app, ["serve", "--db", str(db), "--host", "192.0.2.1"])
    assert foreign.exit_code == 2 and foreign.stderr.endswith(
        "fix: use an address of this machine (--host)\n"
    )
    assert not db.exists()


def test_a_listen_refusal_names_where_the_address_came_from(tmp_path: Path) -> None:
    """`host: 192.0.2.1` in the file said `fix: use an address of this machine (--host or
    SLAGUARD_SERVE_HOST)`, neither of which had been given; a taken port likewise."""
    db, config = tmp_path / "audit.db", tmp_path / "serve.yaml"
    config.write_text("host: 192.0.2.1\n")
    args = ["serve", "--db", str(db), "--config", str(config)]
    runner = CliRunner()
    from_file = runner.invoke(app, args)
    assert from_file.exit_code == 2 and from_file.stdout == ""
    assert from_file.stderr.startswith("error: cannot listen on 192.0.2.1:8080: ")
    assert from_file.stderr.endswith(f"; fix: use an address of this machine ({config}: host)\n")
    from_env = runner.invoke(app, args, env={"SLAGUARD_SERVE_HOST": "203.0.113.7"})
    assert from_env.exit_code == 2 and from_env.stderr.endswith(
        "; fix: use an address of this machine ($SLAGUARD_SERVE_HOST)\n"
    )
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config.write_text(f"port: {port}\n")
        file_port = runner.invoke(app, args)
        env_port = runner.invoke(
            app, ["serve", "--db", str(db)], env={"SLAGUARD_SERVE_PORT": str(port)}
        )
    assert file_port.exit_code == 2 and file_port.stderr == (
        f"error: cannot listen on 127.0.0.1:{port}: Address already in use; fix: pick a free "
        f"port ({config}: port) or stop what listens there\n"
    )
    assert env_port.exit_code == 2 and env_port.stderr.endswith(
        "fix: pick a free port ($SLAGUARD_SERVE_PORT) or stop what listens there\n"
    )
    assert not db.exists()


def test_emulate_refuses_a_taken_or_impossible_port_in_one_line() -> None:
    """uvicorn printed its own `[Errno 98]` and exited 3 on a taken port, and listened on
    port - 65536 for a port above 65535."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(app, ["emulate", "--card", "l40s", "--port", str(port)])
    assert result.exit_code == 2 and result.stderr == (
        f"error: cannot listen on 127.0.0.1:{port}: Address already in use; fix: pick a free "
        "port (--port) or stop what listens there\n"
    )
    huge = CliRunner().invoke(app, ["emulate", "--card", "l40s", "--port", "99999"])
    assert huge.exit_code == 2 and huge.stderr == (
        "error: --port: 99999 is out of range; fix: use a port from 1 to 65535\n"
    )


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--card", "h900"], "--card: unknown card type 'h900'; fix: use one of ['a100', "),
        (["--card", "l40s", "--model", "gpt"], "--model: unknown model 'gpt'; fix: use one of ["),
        (
            ["--card", "l40s", "--model", "llama3.1-70b"],
            "--tp: model llama3.1-70b needs 143 GB for weights and buffers; 1 x l40s gives",
        ),
    ],
)
def test_emulate_names_the_flag_not_the_fleet_field(args: list[str], line: str) -> None:
    """It said `--card/--model/--tp: targets[0].card: ... or add it under 'cards:'`."""
    result = CliRunner().invoke(app, ["emulate", *args, "--port", "1"])
    assert result.exit_code == 2 and result.stderr.startswith(f"error: {line}")
    assert "targets[0]" not in result.stderr and "under '" not in result.stderr


def test_a_notifier_mistake_is_one_line_before_the_database_is_touched(tmp_path: Path) -> None:
    """A bot token without a channel: refused before migrating and spawning the writer
    (it was found after both, leaving a database and a spill journal behind)."""
    db = tmp_path / "audit.db"
    env = {"SLAGUARD_SLACK_BOT_TOKEN": "xoxb-not-a-real-token", "SLAGUARD_SLACK_CHANNEL": ""}
    result = CliRunner().invoke(app, ["serve", "--db", str(db), "--port", "0"], env=env)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith("error: SLAGUARD_SLACK_CHANNEL: missing; fix: ")
    assert result.stderr.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_database_from_a_newer_slaguard_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """The CLI refused it; `serve` handed it to Alembic's upgrade, which raised an
    unknown-revision traceback."""
    db = tmp_path / "audit.db"
    assert CliRunner().invoke(app, ["db", "upgrade", "--db", str(db)]).exit_code == 0
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0099_from_the_future'")
    result = CliRunner().invoke(app, ["serve", "--db", str(db), "--port", "0"])
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr == (
        f"error: database sqlite:///{db} is at schema revision 0099_from_the_future, which "
        "this slaguard (head 0004_guard_router_inputs) does not know: either a newer slaguard "
        "migrated it (fix: upgrade slaguard, `pip install -U slaguard`) or it is another "
        "application's database (fix: give slaguard a database, or a schema, of its own)\n"
    )
    assert not (tmp_path / "audit.db.spill").exists()


def test_a_writer_process_that_cannot_start_is_one_line(tmp_path: Path) -> None:
    """A Python the serving user may not execute (a venv under another user's home) made
    the start die with a PermissionError traceback."""
    nowhere = tmp_path / "python-not-here"
    start = (
        "import sys; sys.executable = sys.argv.pop(1); "
        "from slaguard.cli.main import app; app(prog_name='slaguard')"
    )
    result = subprocess.run(
        [sys.executable, "-c", start, str(nowhere), "serve", "--db", str(tmp_path / "a.db"),
         "--port", str(free_port())],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert (
        line.startswith("error: cannot start the audit writer process (") and str(nowhere) in line
    )


def test_a_schema_behind_with_migrate_off_is_logged_once_at_start(tmp_path: Path) -> None:
    """Starting unready is meant (a rolling upgrade waits for the migration job), but the
    log only said `guard mode sync failed: UndefinedTable ...`, over and over; and nothing
    said where incident messages would go."""
    db = tmp_path / "audit.db"
    upgrade(create_audit_engine(f"sqlite:///{db}"), "0001_audit_log")
    port = free_port()
    (tmp_path / "serve.yaml").write_text(f"db: {db}\nmigrate: false\nport: {port}\n")
    token = "xoxb-never-print-me"
    env = {
        **os.environ,
        "SLAGUARD_SLACK_BOT_TOKEN": token,
        "SLAGUARD_SLACK_CHANNEL": "C123",
        "SLAGUARD_SLACK_BASE_URL": "http://127.0.0.1:9/api/",
    }
    log = tmp_path / "serve.log"
    ready: httpx.Response | None = None
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "slaguard", "serve", "--config", "serve.yaml"],
            cwd=tmp_path, env=env, stdout=err, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1)
                    break
                except httpx.HTTPError:
                    time.sleep(0.1)
            time.sleep(1.5)  # a few mode syncs
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    text = log.read_text()
    fix = f"run `slaguard db upgrade --db sqlite:///{db}`"
    assert ready is not None and ready.status_code == 503 and fix in ready.json()["error"], text
    errors = [line for line in text.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and errors[0].endswith(
        f"not ready: database sqlite:///{db} is at schema revision 0001_audit_log, this "
        f"slaguard needs 0004_guard_router_inputs; fix: {fix}; serving meanwhile, with /readyz "
        "503 and "
        "decisions in the spill journal until the schema is current"
    ), text
    assert " INFO slaguard.service.bootstrap: incident messages go to Slack channel C123 " in text
    assert token not in text


def test_a_sqlite_file_in_a_missing_directory_is_one_line_before_anything_starts(
    tmp_path: Path,
) -> None:
    """`serve` logged "unable to open database file", then "deleted while in use" for a
    file that never existed, served unready, and its spill journal made the directory
    (0755), where a later connection made the database (0644) and left it unmigrated."""
    missing = tmp_path / "nd"
    (tmp_path / "serve.yaml").write_text(f"db: {missing}/c.db\n")
    config = ["serve", "--config", str(tmp_path / "serve.yaml")]
    with socket.socket() as taken:  # without the check: refused for the port, not served
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = ["--port", str(taken.getsockname()[1])]
        from_flag = CliRunner().invoke(app, [*config, "--db", f"sqlite:///{missing}/c.db", *port])
        from_file = CliRunner().invoke(app, [*config, *port])
        from_env = CliRunner().invoke(
            app, [*config, *port], env={"SLAGUARD_SERVE_DB": f"{missing}/d.db"}
        )
    assert from_flag.exit_code == 2 and from_flag.stdout == "", from_flag.output
    assert from_flag.stderr == (
        f"error: --db: {missing} does not exist; fix: create the directory or pick another path\n"
    )
    assert from_file.exit_code == 2
    assert from_file.stderr.startswith(f"error: {tmp_path / 'serve.yaml'}: db: {missing} does not")
    assert from_env.stderr.startswith(f"error: $SLAGUARD_SERVE_DB: {missing} does not exist")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["serve.yaml"]


def test_a_spill_dir_that_cannot_be_a_directory_is_one_line_naming_its_source(
    tmp_path: Path,
) -> None:
    """A file in the way, or a path the kernel refuses (`/proc/x`), was a FileExistsError
    or FileNotFoundError traceback from the audit writer, after the database was made."""
    in_the_way = tmp_path / "spill"
    in_the_way.write_text("")
    (tmp_path / "serve.yaml").write_text("spill_dir: /proc/slaguard-nope/spill\n")
    db = ["--db", str(tmp_path / "a.db"), "--port", "0"]
    fix = "fix: name a directory this user may create or write, one per replica"
    from_env = CliRunner().invoke(
        app, ["serve", *db], env={"SLAGUARD_SERVE_SPILL_DIR": str(in_the_way)}
    )
    assert from_env.exit_code == 2 and from_env.stdout == "", from_env.output
    assert from_env.stderr.startswith(
        f"error: $SLAGUARD_SERVE_SPILL_DIR: {in_the_way} is not a directory; {fix}"
    )
    assert from_env.stderr.count("\n") == 1
    below = CliRunner().invoke(
        app, ["serve", *db], env={"SLAGUARD_SERVE_SPILL_DIR": str(in_the_way / "sub")}
    )
    assert below.stderr.startswith(
        f"error: $SLAGUARD_SERVE_SPILL_DIR: {in_the_way} (a parent of {in_the_way / 'sub'}) "
        "is not a directory; "
    )
    from_file = CliRunner().invoke(app, ["serve", "--config", str(tmp_path / "serve.yaml"), *db])
    assert from_file.exit_code == 2 and from_file.stdout == "", from_file.output
    assert from_file.stderr.startswith(
        f"error: {tmp_path / 'serve.yaml'}: spill_dir: cannot create /proc/slaguard-nope: "
    )
    (tmp_path / "a.db.spill").write_text("")
    default = CliRunner().invoke(app, ["serve", *db])
    assert default.exit_code == 2 and default.stderr.startswith(
        f"error: spill_dir (default {tmp_path / 'a.db.spill'}, beside the database): "
        f"{tmp_path / 'a.db.spill'} is not a directory; {fix}"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.db.spill", "serve.yaml", "spill"]


def test_a_database_down_at_start_is_one_error_line_with_its_fix(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """It was two lines: a WARNING `could not migrate the audit database:
    (psycopg.OperationalError) ...` and the ERROR `not ready: ...`, without a fix."""
    overrides = {
        "db": "postgresql://slaguard@127.0.0.1:9/audit",  # discard: nothing listens
        "spill_dir": tmp_path / "spill",
        "telemetry": {"scrape": False},
        "notify_file": tmp_path / "incidents.jsonl",
    }
    with caplog.at_level(logging.INFO):
        service = build_service(load_config(None, overrides))
    try:
        said = [
            r
            for r in caplog.records
            if r.name.startswith("slaguard") and r.levelno >= logging.WARNING
        ]
        asyncio.run(service.readiness())  # what /readyz answers from the first mode sync
        problem = service.runtime.ready_problem
    finally:
        service.close()
    assert [r.levelname for r in said] == ["ERROR"], caplog.text
    line = said[0].getMessage()
    assert line.startswith("not ready: audit database unreachable: connection failed: "), line
    assert "Connection refused; fix: start the database" in line and "psycopg" not in line
    assert problem is not None and "fix: start the database" in problem  # /readyz says it too


def test_a_default_listen_address_names_where_to_change_it(tmp_path: Path) -> None:
    config = tmp_path / "serve.yaml"
    config.write_text("host: 0.0.0.0\n")
    assert _listen_source("port", None, config, load_config(config)) == (
        "the default; set --port, $SLAGUARD_SERVE_PORT or the config's port"
    )
    assert _listen_source("host", None, config, load_config(config)) == f"{config}: host"
