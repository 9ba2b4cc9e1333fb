"""The guard lease on SQLite (one host, `leader.py`): an exclusive `flock` on
`<database file>.guard-leader`, released by the kernel when the holder dies; the
holder's replica id is written into the file. A stopped process keeps the lock (no
lease): SQLite is for a single host. Router inputs: a file beside the lock file,
replaced atomically; forwarded samples: a spool directory beside it.
"""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path

from slaguard.guard.forward import SpoolDir

log = logging.getLogger(__name__)


class FileLeaderLease:
    """An exclusive flock on a file beside the SQLite database."""

    kind = "file lock"

    def __init__(self, path: Path, replica_id: str) -> None:
        self.path = path
        self.replica_id = replica_id
        self.router_path = path.with_name(path.name.removesuffix("-leader") + "-router")
        self.spool = SpoolDir(path.with_name(path.name.removesuffix("-leader") + "-samples"),
                              replica_id)  # fmt: skip
        self._fd: int | None = None
        self._latest: str | None = None
        self._vacant = False

    @property
    def held(self) -> bool:
        return self._fd is not None

    @property
    def vacant(self) -> bool:
        return self._vacant

    def publish(self, text: str) -> None:
        tmp = self.router_path.with_name(f"{self.router_path.name}.{os.getpid()}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.replace(tmp, self.router_path)
        except OSError as exc:
            log.debug("router inputs not published: %s", exc)

    def latest(self) -> str | None:
        return self._latest

    def forward(self, texts: list[str]) -> None:
        self.spool.put(texts)

    def take_forwarded(self) -> list[str]:
        return self.spool.take() if self._fd is not None else []

    def _read_published(self) -> None:
        try:
            self._latest = self.router_path.read_text()
        except OSError:
            self._latest = None

    def poll(self, *, take: bool = True) -> bool:
        self._vacant = False
        if self._fd is not None:
            return True
        if not take:
            self._read_published()
            self._vacant = current_leader_in(self.path) is None
            return False
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)  # a reader could flock it
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            self._read_published()
            return False
        os.ftruncate(fd, 0)
        os.pwrite(fd, self.replica_id.encode(), 0)
        self._fd = fd
        # The last leader's inputs, for its demotions: a replica that takes the lock at its
        # first poll (a restart of the only one) had read none and led without them.
        self._read_published()
        return True

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.close(self._fd)
            self._fd = None

    def close(self) -> None:
        self.release()


def current_leader_in(lock_file: Path) -> str | None:
    """The replica id in a held lock file ("unknown" if it holds none yet), None if the
    lock is free."""
    if not lock_file.is_file():
        return None
    with lock_file.open("rb") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return handle.read().decode(errors="replace") or "unknown"
        fcntl.flock(handle, fcntl.LOCK_UN)
    return None
