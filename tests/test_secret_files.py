"""Secrets read from the files `..._FILE` variables name, and blank notifier variables:
each mistake is one line naming the variable and the file, never the secret."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from slaguard.cli.main import app
from slaguard.notify.console import ConsoleNotifier
from slaguard.notify.factory import (
    SECRET_MAX_BYTES,
    NotifyConfigError,
    choose_notifier,
    notifier_from_env,
)
from slaguard.service.config import ServiceConfigError
from slaguard.service.credentials import admin_token, backend_api_key

SECRET = "-token-abcdefghijklmnop"
READERS: list[tuple[str, Callable[[dict[str, str]], object], type[Exception]]] = [
    ("SLAGUARD_ADMIN_TOKEN_FILE", admin_token, ServiceConfigError),
    ("SLAGUARD_BACKEND_API_KEY_FILE", backend_api_key, ServiceConfigError),
    (
        "SLAGUARD_SLACK_BOT_TOKEN_FILE",
        lambda env: notifier_from_env({**env, "SLAGUARD_SLACK_CHANNEL": "C1"}),
        NotifyConfigError,
    ),
    ("SLAGUARD_SLACK_WEBHOOK_URL_FILE", notifier_from_env, NotifyConfigError),
]


@pytest.mark.timeout(20)  # before the fix, a FIFO waited for a writer for ever
@pytest.mark.parametrize(("variable", "read", "error"), READERS)
def test_a_secrets_file_that_is_not_a_small_utf8_file_is_one_line(
    variable: str, read: Callable[[dict[str, str]], object], error: type[Exception], tmp_path: Path
) -> None:
    """Bytes that are not UTF-8 were a UnicodeDecodeError traceback, /dev/zero a
    MemoryError, and a FIFO hung the start."""
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe" + SECRET.encode())
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    huge = tmp_path / "huge"
    with huge.open("wb") as sparse:
        sparse.truncate(SECRET_MAX_BYTES + 1)
    pipe = "not a regular file (a device, pipe or socket); fix: pass a secrets file saved on disk"
    cases = [
        (binary, "not UTF-8 text; fix: save the secrets file as UTF-8"),
        (fifo, pipe),
        (Path("/dev/zero"), pipe),
        (tmp_path, "is a directory; fix: pass a secrets file, not a folder"),
        (
            huge,
            "larger than 64 KB, not a secret; fix: point it at the file holding only the secret",
        ),
        (tmp_path / "absent", "file not found; fix: pass an existing secrets file"),
    ]
    for path, problem in cases:
        with pytest.raises(error) as info:
            read({variable: str(path)})
        assert str(info.value) == f"{variable}: {path}: {problem}"


def test_serve_refuses_a_binary_secrets_file_in_one_line(tmp_path: Path) -> None:
    """It exited 1 with a UnicodeDecodeError traceback."""
    binary = tmp_path / "token"
    binary.write_bytes(b"\xff\xfe" + SECRET.encode())
    db = tmp_path / "audit.db"
    for env in (
        {"SLAGUARD_ADMIN_TOKEN_FILE": str(binary)},
        {"SLAGUARD_SLACK_BOT_TOKEN_FILE": str(binary), "SLAGUARD_SLACK_CHANNEL": "C1"},
    ):
        result = CliRunner().invoke(app, ["serve", "--db", str(db), "--port", "0"], env=env)
        variable = next(iter(env))
        assert result.exit_code == 2 and result.stdout == "", result.output
        assert result.stderr == f"error: {variable}: {binary}: not UTF-8 text; fix: save the " + (
            "secrets file as UTF-8\n"
        )
    assert not db.exists()


@pytest.mark.parametrize(
    "variable",
    [
        "SLAGUARD_SLACK_BOT_TOKEN",
        "SLAGUARD_SLACK_BOT_TOKEN_FILE",
        "SLAGUARD_SLACK_WEBHOOK_URL",
        "SLAGUARD_SLACK_WEBHOOK_URL_FILE",
        "SLAGUARD_SLACK_BASE_URL",
        "SLAGUARD_NOTIFY_FILE",
    ],
)
@pytest.mark.parametrize("blank", ["", "  "])
def test_a_blank_notifier_variable_is_refused_not_the_console(variable: str, blank: str) -> None:
    """`SLAGUARD_SLACK_BOT_TOKEN= SLAGUARD_SLACK_CHANNEL=C123` sent every incident to the
    console without a word (a blank admin token was refused already)."""
    env = {"SLAGUARD_SLACK_CHANNEL": "C123", variable: blank}
    if variable == "SLAGUARD_SLACK_BASE_URL":
        env["SLAGUARD_SLACK_BOT_TOKEN"] = "xoxb-0123456789"
    with pytest.raises(NotifyConfigError) as info:
        notifier_from_env(env)
    assert str(info.value) == f"{variable}: set but blank; fix: give it its value, or unset it"


def test_a_blank_admin_token_file_variable_is_refused() -> None:
    """It left the admin endpoints disabled with only a warning."""
    with pytest.raises(ServiceConfigError) as info:
        admin_token({"SLAGUARD_ADMIN_TOKEN_FILE": " "})
    assert str(info.value) == (
        "SLAGUARD_ADMIN_TOKEN_FILE: set but blank; fix: name the file holding the token, or "
        "unset it to leave the admin endpoints disabled"
    )


def test_where_messages_go_is_said_without_the_secret(tmp_path: Path) -> None:
    token = "xoxb-never-print-me"
    bot = choose_notifier({"SLAGUARD_SLACK_BOT_TOKEN": token, "SLAGUARD_SLACK_CHANNEL": "C123"})
    hook = choose_notifier({"SLAGUARD_SLACK_WEBHOOK_URL": f"https://hooks.example/{token}"})
    path = tmp_path / "n.jsonl"
    assert [bot[1], hook[1], choose_notifier({"SLAGUARD_NOTIFY_FILE": str(path)})[1]] == [
        "Slack channel C123 (bot token)",
        "a Slack incoming webhook",
        f"the file {path}",
    ]
    console, where = choose_notifier({})
    assert isinstance(console, ConsoleNotifier) and where == (
        "the console (stdout): no SLAGUARD_SLACK_BOT_TOKEN, SLAGUARD_SLACK_WEBHOOK_URL or "
        "SLAGUARD_NOTIFY_FILE set"
    )


@pytest.mark.parametrize(("variable", "read", "error"), READERS)
def test_a_secret_in_both_its_variable_and_its_file_is_refused(
    variable: str, read: Callable[[dict[str, str]], object], error: type[Exception], tmp_path: Path
) -> None:
    """The variable won and the file was ignored without a word: a token rotated in the
    mounted file went unused while an old one left in the environment stayed in force."""
    name = variable.removesuffix("_FILE")
    rotated = tmp_path / "secret"
    rotated.write_text(f"https://hooks.example/new{SECRET}\n")
    with pytest.raises(error) as info:
        read({name: f"https://hooks.example/old{SECRET}", variable: str(rotated)})
    assert str(info.value) == (
        f"{name}: set, and so is {variable}: only one of them may hold the secret; fix: "
        f"unset {name} to read {rotated}, or unset {variable}"
    )
