"""A local Alertmanager webhook receiver: a real HTTP server on 127.0.0.1 in a thread.

Every `POST` is recorded with its path (the end-to-end test points each Alertmanager
receiver at `/<receiver name>`, so the path says which route delivered it) and its JSON
body (webhook payload version 4). `wait_for` blocks until a matching notification
arrives or the deadline passes: no sleeping and hoping.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Notification:
    """One webhook call: which receiver path, and Alertmanager's payload."""

    receiver: str
    payload: dict[str, Any]

    def alerts(self, status: str | None = None) -> Iterator[dict[str, Any]]:
        """The payload's alerts, optionally only those with `status` (firing/resolved)."""
        for alert in self.payload.get("alerts", []):
            if status is None or alert.get("status") == status:
                yield alert


@dataclass
class WebhookReceiver:
    """Start with `with WebhookReceiver() as hooks:`; read `hooks.received()`."""

    _received: list[Notification] = field(default_factory=list)
    _changed: threading.Condition = field(default_factory=threading.Condition)

    def __enter__(self) -> WebhookReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length).decode("utf-8")
                try:
                    payload = json.loads(raw or "{}")
                except json.JSONDecodeError:
                    payload = {"unparsed": raw}
                receiver._record(Notification(self.path.lstrip("/"), payload))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

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
    def base_url(self) -> str:
        return f"http://127.0.0.1:{int(self._server.server_address[1])}"

    def url_for(self, receiver: str) -> str:
        """The URL an Alertmanager receiver named `receiver` should post to."""
        return f"{self.base_url}/{receiver}"

    def received(self) -> list[Notification]:
        """Every notification so far, in arrival order."""
        with self._changed:
            return list(self._received)

    def wait_for(
        self, matches: Callable[[Notification], bool], timeout_s: float
    ) -> Notification | None:
        """The first notification `matches` accepts, waiting up to `timeout_s`; else None."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                for note in self._received:
                    if matches(note):
                        return note
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._changed.wait(left)

    def _record(self, note: Notification) -> None:
        with self._changed:
            self._received.append(note)
            self._changed.notify_all()
