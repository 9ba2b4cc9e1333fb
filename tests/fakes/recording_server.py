"""The one recording HTTP server behind the fakes: a real server on 127.0.0.1 in a thread.

Every `POST` is parsed (JSON, or form fields), answered by `respond` (which a fake overrides
to speak its protocol) and recorded with the status it was sent. `fail_next(status, times)`
queues error answers and `down()` / `up()` toggle a 500 outage, so retry paths run over
real HTTP; a 429 carries `Retry-After: 1` (or the value `retry_after` is set to).
`wait_for_request` blocks until a matching request arrives or the deadline passes: no
sleeping and hoping.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs

Answer = tuple[int, dict[str, str], str]
"""(status, headers, body text) to send back."""


@dataclass(frozen=True)
class Recorded:
    """One request as the server saw it, and the status it answered."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    status: int


def parse_body(raw: str, content_type: str) -> dict[str, Any]:
    """JSON bodies as JSON (unparseable ones kept raw, for the assertion message); else form."""
    if "json" not in content_type:
        return {key: values[0] for key, values in parse_qs(raw).items()}
    try:
        parsed: dict[str, Any] = json.loads(raw or "{}")
    except json.JSONDecodeError:
        return {"unparsed": raw}
    return parsed


class RecordingServer:
    """Start with `with RecordingServer() as server:`; read `server.requests`."""

    def __init__(self) -> None:
        self._requests: list[Recorded] = []
        self._script: deque[int] = deque()
        self._down = False
        self.retry_after = "1"
        self._changed = threading.Condition()

    def respond(self, path: str, body: dict[str, Any], status: int) -> Answer:
        """The answer to one request; `status` is 200 or the scripted failure. Empty body."""
        return status, {}, ""

    def __enter__(self) -> Self:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length).decode("utf-8")
                body = parse_body(raw, self.headers.get("Content-Type", ""))
                status, headers, text = server._answer(self.path, dict(self.headers), body)
                data = text.encode()
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
    def url(self) -> str:
        """The server's root URL, without a trailing slash."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def requests(self) -> list[Recorded]:
        """Every request so far, in the order they were answered."""
        with self._changed:
            return list(self._requests)

    def fail_next(self, status: int, times: int = 1) -> None:
        """Answer the next `times` requests with `status`."""
        with self._changed:
            self._script.extend([status] * times)

    def down(self) -> None:
        """Answer 500 to everything until `up()`."""
        self._down = True

    def up(self) -> None:
        self._down = False

    def wait_for_request(
        self, matches: Callable[[Recorded], bool], timeout_s: float
    ) -> Recorded | None:
        """The first request `matches` accepts, waiting up to `timeout_s`; else None."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                for request in self._requests:
                    if matches(request):
                        return request
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._changed.wait(left)

    def _answer(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> Answer:
        """Pick the status, let the fake answer, record: one lock, so records keep answer order."""
        with self._changed:
            scripted = self._script.popleft() if self._script else (500 if self._down else 200)
            status, sent, text = self.respond(path, body, scripted)
            if status == 429:
                sent = {**sent, "Retry-After": self.retry_after}
            self._requests.append(Recorded(path, headers, body, status))
            self._changed.notify_all()
        return status, sent, text
