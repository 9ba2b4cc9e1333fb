"""A fake Slack HTTP server for the real slack-sdk, on the shared recording server.

Answers `POST /api/chat.postMessage` like Slack (ok, channel, ts) and incoming webhooks on
`POST /services/...` with `ok`; failures (`fail_next`, `down`) carry Slack's error bodies.
"""

from __future__ import annotations

import json
from typing import Any

from fakes.recording_server import Answer, Recorded, RecordingServer

_JSON = {"Content-Type": "application/json"}


def _error(status: int, error: str) -> Answer:
    return status, _JSON, json.dumps({"ok": False, "error": error})


class FakeSlack(RecordingServer):
    """Start with `with FakeSlack() as slack:`; read `slack.requests` or `slack.posts()`."""

    def __init__(self) -> None:
        super().__init__()
        self._ts = 0

    @property
    def base_url(self) -> str:
        """Web API base URL (with the trailing slash slack-sdk needs)."""
        return f"{self.url}/api/"

    @property
    def webhook_url(self) -> str:
        return f"{self.url}/services/T000/B000/secret"

    def posts(self) -> list[Recorded]:
        """Successful chat.postMessage calls."""
        return [r for r in self.requests if r.path.endswith("chat.postMessage") and r.status == 200]

    def respond(self, path: str, body: dict[str, Any], status: int) -> Answer:
        """Slack's answers; called under the server's lock, so `ts` values are unique."""
        if status == 429:
            return _error(429, "ratelimited")
        if status != 200:
            return _error(status, "fatal_error")
        if path.startswith("/services/"):
            return 200, {"Content-Type": "text/plain"}, "ok"
        if not path.endswith("chat.postMessage"):
            return _error(404, "unknown_method")
        self._ts += 1
        message = {
            "ok": True,
            "channel": body.get("channel"),
            "ts": f"1700000000.{self._ts:06d}",
            "message": {"text": body.get("text")},
        }
        return 200, _JSON, json.dumps(message)
