"""`slaguard serve` logs as text (the default, unchanged) or as one JSON object a line
(`log_format: json`), for log shippers (Loki, Elasticsearch)."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import msgspec
import pytest
from helpers import wait_serving
from typer.testing import CliRunner

from slaguard.audit.isotime import iso_utc
from slaguard.audit.writer import open_writer
from slaguard.audit.writer_process import ChildConfig
from slaguard.cli.main import app
from slaguard.logjson import JsonLineFormatter
from slaguard.service.local import free_port

ADMIN_TOKEN = "admin-token-never-logged-0123456789"
BACKEND_KEY = "backend-key-never-logged-42"
ISO_Z = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")
TEXT_LINE = re.compile(  # slaguard's own lines (the writer process's), then uvicorn's
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"([\w.]+:|audit-writer-process\[\d+\]) \S|(DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+\S"
)


def _serve(tmp_path: Path, log_format: str | None) -> tuple[int, str]:
    """Start `slaguard serve` with an unreadable line left in its spill journal (so the
    audit writer process logs too), route 5 requests, stop it with SIGTERM: (exit, stderr)."""
    spill = tmp_path / "audit.db.spill"
    spill.mkdir()
    (spill / f"{0:020d}.journal").write_bytes(b"D{not json\n")
    port = free_port()
    env = {
        **os.environ,
        "SLAGUARD_ADMIN_TOKEN": ADMIN_TOKEN,
        "SLAGUARD_BACKEND_API_KEY": BACKEND_KEY,
    }
    if log_format is not None:
        env["SLAGUARD_SERVE_LOG_FORMAT"] = log_format
    log = tmp_path / "stderr.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "slaguard", "serve", "--db", "audit.db", "--port", str(port)],
            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
        try:
            url = f"http://127.0.0.1:{port}"
            assert wait_serving(url, proc), log.read_text()
            body = {"model": "llama3.1-8b", "prompt_tokens": 100, "max_new_tokens": 10}
            routed = [httpx.post(f"{url}/v1/route", json=body).status_code for _ in range(5)]
            assert routed == [200] * 5, log.read_text()
            deadline = time.monotonic() + 10  # the writer process's line comes on its replay
            while b"unreadable" not in log.read_bytes() and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            proc.terminate()
            code = proc.wait(timeout=30)
    return code, log.read_text()


def test_json_format_writes_every_stderr_line_as_one_json_object(tmp_path: Path) -> None:
    code, text = _serve(tmp_path, "json")
    assert code == -signal.SIGTERM, text
    lines = text.splitlines()
    records = [json.loads(line) for line in lines]
    assert len(records) == len(lines) >= 10, text
    for record in records:
        assert isinstance(record, dict)
        assert {"time", "level", "logger", "message"} <= record.keys(), record
        assert ISO_Z.fullmatch(record["time"]), record
        assert record["level"] in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}, record
        assert "color_message" not in record, record  # uvicorn's terminal copy, ANSI codes
    said = {(r["logger"], r["message"]) for r in records}
    assert ("uvicorn.error", f"Started server process [{_pid(records)}]") in said
    assert ("uvicorn.error", "Application startup complete.") in said
    drained = [m for logger, m in said if m.startswith("audit writer drained in ")]
    assert len(drained) == 1 and drained[0].endswith(": 5 rows written, 0 write errors"), said
    child = [r for r in records if r["logger"] == "slaguard.audit.lines_decode"]
    assert [r["level"] for r in child] == ["ERROR"], text  # the writer process, in JSON too
    assert child[0]["process"].startswith("audit-writer-process[")
    assert ADMIN_TOKEN not in text and BACKEND_KEY not in text


def _pid(records: list[dict[str, str]]) -> str:
    started = next(r["message"] for r in records if r["message"].startswith("Started server"))
    return started.removeprefix("Started server process [").removesuffix("]")


def test_text_format_is_the_default_and_unchanged(tmp_path: Path) -> None:
    code, text = _serve(tmp_path, None)
    assert code == -signal.SIGTERM, text
    lines = text.splitlines()
    assert len(lines) >= 10 and all(TEXT_LINE.match(line) for line in lines), text
    assert re.search(r"^INFO: {5}Started server process \[\d+\]$", text, re.MULTILINE), text
    assert " ERROR audit-writer-process[" in text and "{" not in text
    assert ADMIN_TOKEN not in text and BACKEND_KEY not in text


def test_a_json_line_carries_the_exception_and_extra_fields() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonLineFormatter())
    log = logging.getLogger("slaguard.test_log_format")
    log.addHandler(handler)
    log.propagate = False
    try:
        try:
            _ = 1 / 0
        except ZeroDivisionError:
            log.exception("refit failed for %s", "l40s-8b-0", extra={"target": "l40s-8b-0"})
        log.warning("plain")
    finally:
        log.removeHandler(handler)
    failed, plain = (json.loads(line) for line in stream.getvalue().splitlines())
    assert list(failed)[:4] == ["time", "level", "logger", "message"]
    assert failed["level"] == "ERROR" and failed["logger"] == "slaguard.test_log_format"
    assert failed["message"] == "refit failed for l40s-8b-0" and failed["target"] == "l40s-8b-0"
    assert failed["exception"].startswith("Traceback (most recent call last):")
    assert failed["exception"].endswith("ZeroDivisionError: division by zero")
    moment = datetime.strptime(plain["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    assert abs(moment.timestamp() - time.time()) < 60 and plain["time"] == iso_utc(moment)
    assert set(plain) == {"time", "level", "logger", "message"}


@pytest.mark.parametrize(
    ("where", "line"),
    [
        ("file", "{config}: log_format: Input should be 'text' or 'json' (got 'jsn'); fix: "),
        ("env", "$SLAGUARD_SERVE_LOG_FORMAT: log_format: Input should be 'text' or 'json' "),
    ],
)
def test_a_log_format_typo_is_one_line_naming_the_field_and_the_choices(
    tmp_path: Path, where: str, line: str
) -> None:
    config = tmp_path / "serve.yaml"
    config.write_text("log_format: jsn\n" if where == "file" else "")
    env = {"SLAGUARD_SERVE_LOG_FORMAT": "jsn"} if where == "env" else {}
    result = CliRunner().invoke(
        app, ["serve", "--config", str(config), "--db", str(tmp_path / "a.db")], env=env
    )
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("error: " + line.replace("{config}", str(config)))
    assert not (tmp_path / "a.db").exists()


def test_a_refusal_after_the_log_format_is_set_is_a_json_line_too(tmp_path: Path) -> None:
    """A second replica on the same spill journal is refused after logging started: in
    json mode its one line was plain `error: ...` text among the JSON lines."""
    spill = tmp_path / "audit.db.spill"
    with open_writer(f"sqlite:///{tmp_path / 'audit.db'}", spill_dir=spill, migrate=True):
        result = subprocess.run(
            [sys.executable, "-m", "slaguard", "serve", "--db", "audit.db",
             "--port", str(free_port())],
            cwd=tmp_path, env={**os.environ, "SLAGUARD_SERVE_LOG_FORMAT": "json"},
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert result.returncode == 2 and result.stdout == "", result.stderr
    records = [json.loads(line) for line in result.stderr.splitlines()]
    refusal = records[-1]
    assert refusal["level"] == "ERROR" and refusal["logger"] == "slaguard.cli.serve", records
    assert (
        refusal["message"].startswith("audit spill journal: ") and "spill_dir" in refusal["message"]
    )
    assert "Traceback" not in result.stderr


def _json_records(stderr: str) -> list[dict[str, str]]:
    """Every stderr line as a JSON object (a plain line fails the test, naming it)."""
    records = []
    for line in stderr.splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            pytest.fail(f"a plain line among the JSON ones: {line!r}\n{stderr}")
    return records


def test_a_crash_of_the_audit_writer_process_is_one_json_record(tmp_path: Path) -> None:
    """Its traceback was Python's plain text, one line each, among the JSON lines."""
    config = ChildConfig(
        "nosuchdb://x", str(tmp_path), 0, 0, 100, 0.05, 1000, 0.1, 1.0, 0, 15.0, None, True
    )
    done = subprocess.run(
        [sys.executable, "-m", "slaguard.audit.writer_process"],
        input=msgspec.json.encode(config) + b"\n",
        capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1 and done.stdout == b"", done.stderr
    records = _json_records(done.stderr.decode())
    assert len(records) == 1, records
    crash = records[0]
    assert crash["level"] == "CRITICAL" and crash["logger"] == "slaguard", crash
    assert crash["message"] == "uncaught exception; the process ends", crash
    assert crash["process"].startswith("audit-writer-process[")
    assert crash["exception"].startswith("Traceback (most recent call last):")
    assert "DatabaseUrlError: --db: backend 'nosuchdb' is not supported" in crash["exception"]


def test_an_exception_a_thread_leaves_uncaught_is_one_json_record() -> None:
    code = (
        "import threading\n"
        "from slaguard.logjson import log_json_to_stderr\n"
        "log_json_to_stderr('INFO')\n"
        "def work():\n"
        "    raise RuntimeError('scrape broke')\n"
        "t = threading.Thread(target=work, name='scraper')\n"
        "t.start()\n"
        "t.join()\n"
        "threading.Thread(target=lambda: exit(3)).start()\n"  # SystemExit: silent, as before
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    records = _json_records(done.stderr)
    assert len(records) == 1, records
    crash = records[0]
    assert crash["level"] == "ERROR" and crash["logger"] == "slaguard", crash
    assert crash["message"] == "uncaught exception in thread scraper", crash
    assert crash["exception"].endswith("RuntimeError: scrape broke")
