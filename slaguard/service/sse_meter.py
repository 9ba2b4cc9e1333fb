"""Metering an OpenAI-style SSE stream as it is relayed: first token, tokens, usage.

The relay forwards the backend's bytes unchanged; the meter only reads them. Each
`data:` event is decoded by msgspec into the three fields it needs (choices' delta
content or text, usage), skipping everything else; an event it cannot read is ignored,
never an error for the stream. A line is held until its end arrives, up to
`MAX_LINE_BYTES`: a longer one is dropped unread (a backend sending a 100 MB line without a
newline had the meter re-copy all it held at each chunk: 11 s of CPU and 260 MB, the
event loop stalled for a second at a time; an endless one grew without bound).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import msgspec

from slaguard.service.schemas import MAX_TOKENS


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

MAX_LINE_BYTES = 1 << 20
"""An SSE line longer than this is skipped (an OpenAI stream event is a few hundred bytes,
a few KiB with logprobs)."""


@dataclass(slots=True)
class StreamMeter:
    """Watches the SSE bytes going by: first token time, token count, backend usage."""

    started: float
    first_token_at: float | None = None
    events: int = 0
    usage: dict[str, Any] | None = None
    _tail: bytearray = field(default_factory=bytearray)
    _overlong: bool = False

    def since_start(self) -> float:
        """Seconds since the request reached the gateway."""
        return time.perf_counter() - self.started

    @property
    def held(self) -> int:
        """Bytes of an unfinished line held until its end arrives."""
        return len(self._tail)

    def feed(self, chunk: bytes) -> None:
        end = chunk.rfind(b"\n")
        if end < 0:
            self._hold(chunk)
            return
        lines = chunk[:end].split(b"\n")
        if self._overlong:
            lines[0] = b""  # the end of a line too long to read
        elif self._tail:
            lines[0] = bytes(self._tail) + lines[0]
        self._tail.clear()
        self._overlong = False
        self._hold(chunk[end + 1 :])
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

    def _hold(self, part: bytes) -> None:
        """Keep `part` of an unfinished line, unless the line is already too long."""
        if self._overlong:
            return
        self._tail += part
        if len(self._tail) > MAX_LINE_BYTES:
            self._tail.clear()
            self._overlong = True


def usage_count(usage: object, key: str) -> int | None:
    """A count of a backend's `usage` (`prompt_tokens`, `completion_tokens`), None unless
    it is one: a string, a negative or a float there crashed the outcome's record, and
    the client's answer with it."""
    value = usage.get(key) if isinstance(usage, dict) else None
    return value if type(value) is int and 0 <= value <= MAX_TOKENS else None


def _has_token(event: _Event) -> bool:
    for choice in event.choices or ():
        text = choice.text if choice.delta is None else choice.delta.content
        if text:
            return True
    return False
