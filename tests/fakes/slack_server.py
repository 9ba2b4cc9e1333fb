"""A fake Slack HTTP server: a real server on 127.0.0.1 in a thread, for the real slack-sdk.

Answers `POST /api/chat.postMessage` like Slack (ok, channel, ts) and incoming webhooks on
`POST /services/...` with `ok`. Records every request. `fail_next(status, times)` queues
error answers (429 carries `Retry-After: 1`); `down()` / `up()` toggle a 500 outage.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs


@dataclass
class Recorded:
    """One request as the server saw it."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    status: int


@dataclass
class FakeSlack:
    """Start with `with FakeSlack() as slack:`; read `slack.requests`."""

    requests: list[Recorded] = field(default_factory=list)
    _script: deque[int] = field(default_factory=deque)
    _down: bool = False
    _ts: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __enter__(self) -> FakeSlack:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length).decode()
                ctype = self.headers.get("Content-Type", "")
                body: dict[str, Any]
                if "json" in ctype:
                    body = json.loads(raw or "{}")
                else:
                    body = {k: v[0] for k, v in parse_qs(raw).items()}
                status, headers, payload = fake._answer(self.path, body)
                with fake._lock:
                    fake.requests.append(Recorded(self.path, dict(self.headers), body, status))
                data = payload.encode()
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """Web API base URL (with the trailing slash slack-sdk needs)."""
        return f"http://127.0.0.1:{self.port}/api/"

    @property
    def webhook_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/services/T000/B000/secret"

    def fail_next(self, status: int, times: int = 1) -> None:
        """Answer the next `times` requests with `status`."""
        with self._lock:
            self._script.extend([status] * times)

    def down(self) -> None:
        """Answer 500 to everything until `up()`."""
        self._down = True

    def up(self) -> None:
        self._down = False

    def posts(self) -> list[Recorded]:
        """Successful chat.postMessage calls."""
        return [r for r in self.requests if r.path.endswith("chat.postMessage") and r.status == 200]

    def _answer(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, str], str]:
        with self._lock:
            status = self._script.popleft() if self._script else (500 if self._down else 200)
            self._ts += 1
            ts = f"1700000000.{self._ts:06d}"
        if status == 429:
            err = {"ok": False, "error": "ratelimited"}
            return 429, {"Retry-After": "1", "Content-Type": "application/json"}, json.dumps(err)
        if status != 200:
            return (
                status,
                {"Content-Type": "application/json"},
                json.dumps({"ok": False, "error": "fatal_error"}),
            )
        if path.startswith("/services/"):
            return 200, {"Content-Type": "text/plain"}, "ok"
        if path.endswith("chat.postMessage"):
            payload = {
                "ok": True,
                "channel": body.get("channel"),
                "ts": ts,
                "message": {"text": body.get("text")},
            }
            return 200, {"Content-Type": "application/json"}, json.dumps(payload)
        return (
            404,
            {"Content-Type": "application/json"},
            json.dumps({"ok": False, "error": "unknown_method"}),
        )
