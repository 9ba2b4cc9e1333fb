"""The shared recording server behind the fakes: scripted failures, parsing, waiting."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

from fakes.recording_server import RecordingServer
from fakes.webhook_receiver import WebhookReceiver


def _post(url: str, data: bytes, content_type: str) -> tuple[int, dict[str, str]]:
    request = urllib.request.Request(url, data=data, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, dict(answer.headers)
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers)


def test_scripted_failures_come_first_then_the_outage_then_success() -> None:
    with RecordingServer() as server:
        server.fail_next(429)
        server.fail_next(500, times=2)
        answers = [_post(f"{server.url}/x", b"{}", "application/json") for _ in range(4)]
        server.down()
        answers.append(_post(f"{server.url}/x", b"{}", "application/json"))
        server.up()
        answers.append(_post(f"{server.url}/x", b"{}", "application/json"))
    assert [status for status, _ in answers] == [429, 500, 500, 200, 500, 200]
    assert answers[0][1]["Retry-After"] == "1"
    assert [r.status for r in server.requests] == [429, 500, 500, 200, 500, 200]


def test_json_form_and_unparseable_bodies_are_recorded() -> None:
    with RecordingServer() as server:
        _post(f"{server.url}/j", json.dumps({"a": [1, 2]}).encode(), "application/json")
        _post(f"{server.url}/f", b"channel=C1&text=hi", "application/x-www-form-urlencoded")
        _post(f"{server.url}/bad", b"{not json", "application/json")
    assert [(r.path, r.body) for r in server.requests] == [
        ("/j", {"a": [1, 2]}),
        ("/f", {"channel": "C1", "text": "hi"}),
        ("/bad", {"unparsed": "{not json"}),
    ]


def test_wait_for_returns_none_at_the_deadline_and_only_delivered_notifications_count() -> None:
    with WebhookReceiver() as hooks:
        started = time.monotonic()
        assert hooks.wait_for(lambda note: True, timeout_s=0.2) is None
        assert 0.2 <= time.monotonic() - started < 2.0
        hooks.fail_next(500)
        payload = json.dumps({"version": "4", "alerts": [{"status": "firing"}]}).encode()
        _post(hooks.url_for("slack-sre"), payload, "application/json")
        _post(hooks.url_for("slack-sre"), payload, "application/json")
        note = hooks.wait_for(lambda note: note.receiver == "slack-sre", timeout_s=5)
    assert note is not None and len(list(note.alerts("firing"))) == 1
    assert [r.status for r in hooks.requests] == [500, 200]
    assert len(hooks.received()) == 1
