"""Outbox: dedup, per-incident order, backoff; local notifiers and the factory."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from fakes.incidents import incident

from slaguard.guard.events import IncidentState
from slaguard.notify.console import ConsoleNotifier
from slaguard.notify.dispatcher import IncidentDispatcher
from slaguard.notify.factory import NotifyConfigError, notifier_from_env
from slaguard.notify.file import FileNotifier
from slaguard.notify.outbox import Outbox
from slaguard.notify.slack_web import SlackWebNotifier
from slaguard.notify.slack_webhook import SlackWebhookNotifier

TOKEN = "xoxb-never-print-me"


def test_duplicates_are_dropped_before_and_after_delivery() -> None:
    box = Outbox()
    opened = incident()
    assert box.enqueue(opened, 0.0) and not box.enqueue(opened, 1.0)
    box.delivered(opened.dedup_key)
    assert not box.enqueue(opened, 2.0) and len(box) == 0


def test_an_update_never_overtakes_its_opening_message() -> None:
    box = Outbox()
    opened, update = incident(), incident(IncidentState.UPDATED, 1)
    other = incident(incident_id="inc-9-2")
    for e in (opened, update, other):
        box.enqueue(e, 0.0)
    assert [i.key for i in box.due(0.0)] == [opened.dedup_key, other.dedup_key]
    box.failed(opened.dedup_key, 0.0, "HTTP 500")
    assert [i.key for i in box.due(1.0)] == [other.dedup_key]  # opened waits 2 s, update behind it
    assert [i.key for i in box.due(2.0)] == [opened.dedup_key, other.dedup_key]


def test_backoff_doubles_and_respects_retry_after() -> None:
    box = Outbox(base_backoff_s=2.0, max_backoff_s=10.0)
    event = incident()
    box.enqueue(event, 0.0)
    schedule = []
    for now in (0.0, 10.0, 20.0, 30.0, 40.0):
        box.failed(event.dedup_key, now, "down")
        schedule.append(box.pending()[0].next_attempt_s - now)
    assert schedule == [2.0, 4.0, 8.0, 10.0, 10.0]
    box.failed(event.dedup_key, 50.0, "429", retry_after_s=30.0)
    assert box.pending()[0].next_attempt_s == 80.0


def test_bounded_queue_counts_what_it_drops() -> None:
    box = Outbox(max_items=2)
    for i in range(3):
        box.enqueue(incident(incident_id=f"inc-{i}"), 0.0)
    assert len(box) == 2 and box.dropped == 1


def test_file_and_console_notifiers_write_the_message_json(tmp_path: Path) -> None:
    path = tmp_path / "incidents.jsonl"
    dispatcher = IncidentDispatcher(FileNotifier(path))
    dispatcher.submit(incident(), 0.0)
    dispatcher.submit(incident(IncidentState.UPDATED, 1), 0.0)
    assert [r.ok for r in dispatcher.deliver_pending(0.0)] == [True]
    assert [r.ok for r in dispatcher.deliver_pending(0.0)] == [True]
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["incident"]["state"] for line in lines] == ["opened", "updated"]
    assert lines[0]["blocks"][0]["type"] == "header"
    stream = io.StringIO()
    assert ConsoleNotifier(stream=stream).send(incident()).ok
    assert json.loads(stream.getvalue())["incident"]["incident_id"] == "inc-300-1"


def test_file_write_errors_are_retried_later(tmp_path: Path) -> None:
    dispatcher = IncidentDispatcher(FileNotifier(tmp_path / "missing-dir" / "x.jsonl"))
    dispatcher.submit(incident(), 0.0)
    [result] = dispatcher.deliver_pending(0.0)
    assert not result.ok and result.retryable and len(dispatcher.outbox) == 1


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
            "SLAGUARD_SLACK_BOT_TOKEN_FILE: cannot read",
        ),
        ({"SLAGUARD_SLACK_WEBHOOK_URL": TOKEN}, "SLAGUARD_SLACK_WEBHOOK_URL: not an http(s) URL"),
    ],
)
def test_factory_errors_name_the_variable_never_the_secret(
    env: dict[str, str], message: str
) -> None:
    with pytest.raises(NotifyConfigError) as info:
        notifier_from_env(env)
    assert str(info.value).startswith(message) and "fix:" in str(info.value)
    assert TOKEN not in str(info.value)
