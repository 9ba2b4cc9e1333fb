"""A backend that misbehaves on purpose, speaking raw HTTP/1.1 on 127.0.0.1 in a thread.

The gateway forwards the client's body unchanged, so each request says how to misbehave:
its first message's content (or its prompt) is the name of a `HostileBackend` answer,
e.g. `"long_line"`. `GET /metrics` answers an idle vLLM page, so the scraper keeps the
target fresh. Raw bytes rather than a framework: the point is answers no framework sends.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Self

METRICS = (
    b"vllm:gpu_cache_usage_perc 0.1\nvllm:num_requests_running 0\nvllm:num_requests_waiting 0\n"
)
SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)
HTML_PAGE = b"<html><body>Sign in to continue</body></html>"
HTML_PAGE = b"<html><body>Sign in to continue</body></html>"
LONG_LINE_BYTES = 64 << 20
"""The `long_line` answer's line without a newline: 64 MiB, 1024 chunks of 64 KiB."""


def event(text: str) -> bytes:
    """One OpenAI chat stream event carrying `text`."""
    return b"data: " + json.dumps({"choices": [{"delta": {"content": text}}]}).encode() + b"\n\n"


def chunk(data: bytes) -> bytes:
    """`data` as one HTTP chunk."""
    return b"%x\r\n%s\r\n" % (len(data), data)


Writer = asyncio.StreamWriter


class HostileBackend:
    """Start with `with HostileBackend() as backend:`; point a target's url at `url`."""

    def __init__(self) -> None:
        self.modes: list[str] = []
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._stop: asyncio.Event | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Self:
        self._thread.start()
        assert self._ready.wait(10), "the hostile backend did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        stop = self._stop
        assert stop is not None
        self._loop.call_soon_threadsafe(stop.set)
        self._thread.join(10)

    def _run(self) -> None:
        self._loop.run_until_complete(self._serve())
        self._loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stop.wait()
            server.close()
            for task in asyncio.all_tasks() - {asyncio.current_task()}:
                task.cancel()

    async def _connection(self, reader: asyncio.StreamReader, w: Writer) -> None:
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                fields = dict(line.split(":", 1) for line in head[1:] if ":" in line)
                length = {k.lower(): v.strip() for k, v in fields.items()}.get("content-length")
                body = await reader.readexactly(int(length or 0))
                if head[0].startswith("GET"):
                    w.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(METRICS))
                    w.write(METRICS)
                    await w.drain()
                    continue
                doc = json.loads(body)
                mode, _, arg = _mode(doc).partition(" ")
                self.modes.append(mode)
                answer: Callable[[Writer, str, bool], Awaitable[None]] = getattr(self, mode)
                await answer(w, arg, bool(doc.get("stream")))
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            w.close()

    async def never(self, w: Writer, arg: str, stream: bool) -> None:
        """Accept the request, never answer."""
        await asyncio.Event().wait()

    async def long_line(self, w: Writer, arg: str, stream: bool) -> None:
        """A stream whose first line never ends (`LONG_LINE_BYTES`), then one token."""
        w.write(SSE_HEAD)
        piece = chunk(b"x" * (64 << 10))
        for _ in range(LONG_LINE_BYTES >> 16):
            w.write(piece)
            await w.drain()
        w.write(chunk(b"\n\n" + event("tok") + b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await w.drain()

    async def html(self, w: Writer, arg: str, stream: bool) -> None:
        """200 with an HTML page, as a proxy's login or error page comes."""
        body = HTML_PAGE
        w.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s"
            % (len(body), body)
        )
        await w.drain()

    async def usage(self, w: Writer, arg: str, stream: bool) -> None:
        """A whole answer, or a stream of one token, whose `usage` is `arg` (JSON)."""
        if stream:
            last = b'data: {"choices": [], "usage": %s}\n\n' % arg.encode()
            w.write(SSE_HEAD + chunk(event("a")) + chunk(last + b"data: [DONE]\n\n"))
            w.write(b"0\r\n\r\n")
        else:
            body = b'{"choices": [{"message": {"content": "a"}}], "usage": %s}' % arg.encode()
            _json_answer(w, b"200 OK", body)
        await w.drain()

    async def too_many(self, w: Writer, arg: str, stream: bool) -> None:
        """429 with `Retry-After: 7`, as a loaded vLLM behind a rate limiter answers."""
        body = b'{"error": {"message": "slow down"}}'
        _json_answer(w, b"429 Too Many Requests", body, b"Retry-After: 7\r\n")
        await w.drain()

    async def not_allowed(self, w: Writer, arg: str, stream: bool) -> None:
        """405, as a server that is not an OpenAI-style backend answers a POST there."""
        _json_answer(
            w, b"405 Method Not Allowed", b'{"detail": "Method Not Allowed"}', b"Allow: GET\r\n"
        )
        await w.drain()


def _json_answer(w: Writer, status: bytes, body: bytes, headers: bytes = b"") -> None:
    """A whole JSON answer with `status` (e.g. b"429 Too Many Requests") and extra
    `headers` (CRLF-terminated lines)."""
    w.write(
        b"HTTP/1.1 %s\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
        % (status, headers, len(body), body)
    )


def _mode(body: dict[str, Any]) -> str:
    if "messages" in body:
        return str(body["messages"][0]["content"])
    return str(body["prompt"])
