"""Run an ASGI app on a free loopback port in a background thread (tests, bench, demo).

`uvicorn.Server` in its own thread with its own event loop; `start()` returns once the
socket listens, `stop()` asks it to exit and joins. Only 127.0.0.1 is ever bound.
"""

from __future__ import annotations

import random
import socket
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import uvicorn

LOWEST_PICKED_PORT = 15000


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago, for a process started next.

    Picked at random below the kernel's ephemeral range (where that range starts above
    16,024, as Linux's default 32,768 does): a port the kernel hands out (`bind` to 0) is
    one every outgoing connection may take too (a database client, an HTTP pool) in the
    seconds before the new process binds it. From the range only when no port below it
    is free."""
    ephemeral_low = _ephemeral_low()
    for _ in range(64):
        port = random.randrange(LOWEST_PICKED_PORT, ephemeral_low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        picked: int = s.getsockname()[1]
        return picked


def _ephemeral_low() -> int:
    """The first port of Linux's ephemeral range (32768 where it cannot be read)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768
    return max(low, LOWEST_PICKED_PORT + 1024)


class ServerThread:
    """One uvicorn server on 127.0.0.1 in a daemon thread."""

    def __init__(self, app: Any, port: int | None = None, *, fast: bool = True) -> None:
        self.port = port or free_port()
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            access_log=False,
            loop="uvloop" if fast else "asyncio",
            http="httptools" if fast else "h11",
            lifespan="on",
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name=f"uvicorn-{self.port}")
        self.thread.daemon = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 15.0) -> ServerThread:
        """Start and wait until the server accepts connections."""
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError(f"server on port {self.port} exited during start")
            if time.monotonic() > deadline:
                raise TimeoutError(f"server on port {self.port} did not start in {timeout_s}s")
            time.sleep(0.01)
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout_s)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
