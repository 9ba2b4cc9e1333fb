"""The local notifiers (file, console) and picking a notifier from the environment."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from fakes.incidents import incident
from helpers import usual_umask

from slaguard.guard.events import IncidentState
from slaguard.notify.console import ConsoleNotifier
from slaguard.notify.factory import NotifyConfigError, notifier_from_env
from slaguard.notify.file import FileNotifier
from slaguard.notify.slack_web import SlackWebNotifier
from slaguard.notify.slack_webhook import SlackWebhookNotifier

TOKEN = "xoxb-never-print-me"


def test_file_and_console_notifiers_write_the_message_json(tmp_path: Path) -> None:
    path = tmp_path / "incidents.jsonl"
    notifier = FileNotifier(path)
    assert notifier.send(incident()).ok and notifier.send(incident(IncidentState.UPDATED, 1)).ok
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["incident"]["state"] for line in lines] == ["opened", "updated"]
    assert lines[0]["blocks"][0]["type"] == "header"
    stream = io.StringIO()
    assert ConsoleNotifier(stream=stream).send(incident()).ok
    assert json.loads(stream.getvalue())["incident"]["incident_id"] == "inc-300-1"


def test_the_notify_file_is_created_for_its_owner_only(tmp_path: Path) -> None:
    """It followed the umask: incidents, with the fleet's evidence, readable by anyone."""
    created, existing = tmp_path / "incidents.jsonl", tmp_path / "shared.jsonl"
    existing.touch()
    existing.chmod(0o644)
    with usual_umask():
        assert FileNotifier(created).send(incident()).ok
        assert FileNotifier(existing).send(incident()).ok
    assert created.stat().st_mode & 0o777 == 0o600
    assert existing.stat().st_mode & 0o777 == 0o644  # a file we did not create keeps its mode
    assert len(existing.read_text().splitlines()) == 1


def test_file_write_errors_are_worth_retrying(tmp_path: Path) -> None:
    result = FileNotifier(tmp_path / "missing-dir" / "x.jsonl").send(incident())
    assert not result.ok and result.retryable


def test_factory_picks_by_environment_and_keeps_secrets_out_of_reprs(tmp_path: Path) -> None:
    secret_file = tmp_path / "token"
    secret_file.write_text(TOKEN + "\n")
    web = notifier_from_env(
        {
            "SLAGUARD_SLACK_BOT_TOKEN_FILE": str(secret_file),
            "SLAGUARD_SLACK_CHANNEL": "C1",
            "SLAGUARD_SLACK_BASE_URL": "http://127.0.0.1:9/api",
        }
    )
    assert (
        isinstance(web, SlackWebNotifier)
        and TOKEN not in repr(web)
        and TOKEN not in repr(vars(web))
    )
    hook = notifier_from_env(
        {"SLAGUARD_SLACK_WEBHOOK_URL": "https://hooks.example/services/T/B/" + TOKEN}
    )
    assert isinstance(hook, SlackWebhookNotifier) and TOKEN not in repr(hook)
    assert isinstance(
        notifier_from_env({"SLAGUARD_NOTIFY_FILE": str(tmp_path / "n.jsonl")}), FileNotifier
    )
    assert isinstance(notifier_from_env({}), ConsoleNotifier)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SLAGUARD_SLACK_BOT_TOKEN": TOKEN}, "SLAGUARD_SLACK_CHANNEL: missing"),
        (
            {"SLAGUARD_SLACK_BOT_TOKEN_FILE": "/nonexistent/token"},
            "SLAGUARD_SLACK_BOT_TOKEN_FILE: /nonexistent/token: file not found",
        ),
        ({"SLAGUARD_SLACK_WEBHOOK_URL": TOKEN}, "SLAGUARD_SLACK_WEBHOOK_URL: not an http(s) URL"),
        # these two started, then retried every message for ever
        (
            {
                "SLAGUARD_SLACK_BOT_TOKEN": TOKEN,
                "SLAGUARD_SLACK_CHANNEL": "C1",
                "SLAGUARD_SLACK_BASE_URL": "127.0.0.1:9/api",
            },
            "SLAGUARD_SLACK_BASE_URL: '127.0.0.1:9/api' is not an http(s) URL",
        ),
        (
            {"SLAGUARD_NOTIFY_FILE": "/nonexistent-dir/incidents.jsonl"},
            "SLAGUARD_NOTIFY_FILE: directory /nonexistent-dir does not exist",
        ),
        # the token's secret mount missing: incidents went to stdout without a word
        (
            {"SLAGUARD_SLACK_CHANNEL": "C1"},
            "SLAGUARD_SLACK_CHANNEL: set, but no SLAGUARD_SLACK_BOT_TOKEN (or _FILE)",
        ),
    ],
)
def test_factory_errors_name_the_variable_never_the_secret(
    env: dict[str, str], message: str
) -> None:
    with pytest.raises(NotifyConfigError) as info:
        notifier_from_env(env)
    assert str(info.value).startswith(message) and "fix:" in str(info.value)
    assert TOKEN not in str(info.value)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("SLAGUARD_SLACK_BOT_TOKEN", f"{TOKEN}\n# prod bot", "the token has whitespace"),
        ("SLAGUARD_SLACK_BOT_TOKEN", f"{TOKEN} x", "the token has whitespace"),
        ("SLAGUARD_SLACK_BOT_TOKEN", f"{TOKEN}\x07", "the token has whitespace"),
        ("SLAGUARD_SLACK_BOT_TOKEN", f"{TOKEN}ä", "the token has whitespace"),
        ("SLAGUARD_SLACK_WEBHOOK_URL", f"https://h.example/s/{TOKEN} x", "the URL has whitespace"),
    ],
)
def test_secrets_slack_sdk_cannot_send_are_refused_at_start(
    tmp_path: Path, name: str, value: str, message: str
) -> None:
    """They started, then failed at every delivery with the secret in the error."""
    secret_file = tmp_path / "secret"
    secret_file.write_text(value + "\n")
    for env, source in [
        ({name: value}, f"{name}: "),
        ({f"{name}_FILE": str(secret_file)}, f"{name}_FILE: {secret_file}: "),
    ]:
        with pytest.raises(NotifyConfigError) as info:
            notifier_from_env({**env, "SLAGUARD_SLACK_CHANNEL": "C1"})
        error = str(info.value)
        assert error.startswith(source) and message in error and "fix:" in error
        assert "\n" not in error and TOKEN not in error


def test_the_configs_notify_file_is_checked_and_gets_the_links(tmp_path: Path) -> None:
    """`notify_file` in the service config skipped the environment's links and was first
    found unwritable at the first incident."""
    env = {"SLAGUARD_DASHBOARD_URL": "https://grafana.example/d/slaguard"}
    chosen = notifier_from_env(env, notify_file=tmp_path / "n.jsonl")
    assert isinstance(chosen, FileNotifier)
    assert chosen.links.dashboard_url == "https://grafana.example/d/slaguard"
    with pytest.raises(NotifyConfigError, match=r"notify_file: directory .* does not exist"):
        notifier_from_env(env, notify_file=tmp_path / "nowhere" / "n.jsonl")
