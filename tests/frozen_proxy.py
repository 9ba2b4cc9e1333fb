"""A TCP proxy to PostgreSQL that can freeze: it stops relaying but keeps every socket
open, so the client's kernel sees its bytes acknowledged and its keepalives answered,
and no answer ever comes (a frozen pooler or proxy; `kill -STOP` of a real one)."""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType


class FrozenProxy:
    """Relays 127.0.0.1:`port` to `target` until `freeze()`; a context manager."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._running = threading.Event()
        self._running.set()
        self._closed = False
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def freeze(self) -> None:
        self._running.clear()

    def thaw(self) -> None:
        self._running.set()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            self._sockets += [client, server]
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._relay, args=(src, dst), daemon=True).start()

    def _relay(self, src: socket.socket, dst: socket.socket) -> None:
        while not self._closed:
            self._running.wait()
            try:
                data = src.recv(65536)
                if not data:
                    break
                self._running.wait()  # frozen meanwhile: hold what was read
                dst.sendall(data)
            except OSError:
                break
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._closed = True
        self._running.set()
        self._listener.close()
        for s in self._sockets:
            s.close()

    def __enter__(self) -> FrozenProxy:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
