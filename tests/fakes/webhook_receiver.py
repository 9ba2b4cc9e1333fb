"""A local Alertmanager webhook receiver, on the shared recording server.

The end-to-end test points each Alertmanager receiver at `/<receiver name>`, so the path
says which route delivered a notification; the body is the JSON webhook payload (version 4).
`fail_next` / `down` make Alertmanager's retries testable; only answered (200) posts count.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from fakes.recording_server import Recorded, RecordingServer


@dataclass(frozen=True)
class Notification:
    """One webhook call: which receiver path, and Alertmanager's payload."""

    receiver: str
    payload: dict[str, Any]

    @classmethod
    def of(cls, request: Recorded) -> Notification:
        return cls(request.path.lstrip("/"), request.body)

    def alerts(self, status: str | None = None) -> Iterator[dict[str, Any]]:
        """The payload's alerts, optionally only those with `status` (firing/resolved)."""
        for alert in self.payload.get("alerts", []):
            if status is None or alert.get("status") == status:
                yield alert


class WebhookReceiver(RecordingServer):
    """Start with `with WebhookReceiver() as hooks:`; read `hooks.received()`."""

    def url_for(self, receiver: str) -> str:
        """The URL an Alertmanager receiver named `receiver` should post to."""
        return f"{self.url}/{receiver}"

    def received(self) -> list[Notification]:
        """Every delivered notification so far, in arrival order."""
        return [Notification.of(r) for r in self.requests if r.status == 200]

    def wait_for(
        self, matches: Callable[[Notification], bool], timeout_s: float
    ) -> Notification | None:
        """The first delivered notification `matches` accepts, waiting up to `timeout_s`."""
        found = self.wait_for_request(
            lambda r: r.status == 200 and matches(Notification.of(r)), timeout_s
        )
        return None if found is None else Notification.of(found)
