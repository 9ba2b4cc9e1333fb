"""Console notifier: the message JSON on stdout, for when no Slack is configured."""

from __future__ import annotations

import json
import sys
from typing import TextIO

from slaguard.guard.events import IncidentEvent
from slaguard.notify.base import DeliveryResult
from slaguard.notify.messaging import MessageLinks, build_message


def message_record(event: IncidentEvent, links: MessageLinks) -> dict[str, object]:
    """The JSON a local notifier writes: the Slack message and the incident itself."""
    message = build_message(event, links)
    return {"text": message.text, "blocks": message.blocks, "incident": event.to_dict()}


class ConsoleNotifier:
    """Writes one JSON line per message to a stream (stdout by default)."""

    name = "console"

    def __init__(self, links: MessageLinks | None = None, stream: TextIO | None = None) -> None:
        self.links = links or MessageLinks()
        self.stream = stream

    def send(self, event: IncidentEvent) -> DeliveryResult:
        """Print the message; a closed or broken stream is a retryable failure."""
        stream = self.stream or sys.stdout
        try:
            stream.write(json.dumps(message_record(event, self.links)) + "\n")
            stream.flush()
        except (OSError, ValueError) as exc:
            return DeliveryResult(False, f"console write failed: {exc}", retryable=True)
        return DeliveryResult(True, "written to console")
