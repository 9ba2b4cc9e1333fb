"""Metering an OpenAI-style SSE stream as it is relayed: first token, tokens, usage.

The relay forwards the backend's bytes unchanged; the meter only reads them. Each
`data:` event is decoded by msgspec into the three fields it needs (choices' delta
content or text, usage), skipping everything else; an event it cannot read is ignored,
never an error for the stream.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import msgspec


class _Delta(msgspec.Struct):
    content: Any = None


class _Choice(msgspec.Struct):
    delta: _Delta | None = None
    text: Any = None


class _Event(msgspec.Struct):
    """The fields of an OpenAI stream event the meter reads (the rest is skipped)."""

    choices: list[_Choice] | None = None
    usage: dict[str, Any] | None = None


_decode_event = msgspec.json.Decoder(_Event).decode


@dataclass(slots=True)
class StreamMeter:
    """Watches the SSE bytes going by: first token time, token count, backend usage."""

    started: float
    first_token_at: float | None = None
    events: int = 0
    usage: dict[str, Any] | None = None
    _tail: bytes = b""

    def since_start(self) -> float:
        """Seconds since the request reached the gateway."""
        return time.perf_counter() - self.started

    def feed(self, chunk: bytes) -> None:
        data = self._tail + chunk
        lines = data.split(b"\n")
        self._tail = lines.pop()
        for line in lines:
            if not line.startswith(b"data:") or line.strip() == b"data: [DONE]":
                continue
            try:
                event = _decode_event(line[5:])
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            if event.usage:
                self.usage = event.usage
            if _has_token(event):
                self.events += 1
                if self.first_token_at is None:
                    self.first_token_at = time.perf_counter()


def _has_token(event: _Event) -> bool:
    for choice in event.choices or ():
        text = choice.text if choice.delta is None else choice.delta.content
        if text:
            return True
    return False
