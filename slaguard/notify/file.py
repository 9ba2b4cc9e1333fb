"""File notifier: appends the message JSON to a local file (one line per message)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from slaguard.guard.events import IncidentEvent
from slaguard.notify.base import DeliveryResult
from slaguard.notify.console import message_record
from slaguard.notify.messaging import MessageLinks


class FileNotifier:
    """JSON lines in `path`; a write error (disk full, permissions) is retried later."""

    name = "file"

    def __init__(self, path: Path, links: MessageLinks | None = None) -> None:
        self.path = path
        self.links = links or MessageLinks()

    def send(self, event: IncidentEvent) -> DeliveryResult:
        """Append one line; a file we create is the owner's only (incidents carry the
        fleet's evidence; it was world-readable under the usual umask)."""
        line = json.dumps(message_record(event, self.links)) + "\n"
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            with open(fd, "a", encoding="utf-8") as out:
                out.write(line)
        except OSError as exc:
            return DeliveryResult(False, f"{self.path}: {exc.strerror or exc}", retryable=True)
        return DeliveryResult(True, f"appended to {self.path}")

    def __repr__(self) -> str:
        return f"FileNotifier(path={str(self.path)!r})"
