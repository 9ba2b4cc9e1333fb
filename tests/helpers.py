"""Small builders and a poll helper shared by the tests."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import httpx
from sqlalchemy import Engine

from slaguard.audit.service import UnknownRequestError, explain
from slaguard.fleet import Fleet, Priority, Request, build_fleet

_T = TypeVar("_T")

FAST_GUARD = {
    "ttft_zscore": {
        "window_s": 6.0,
        "slice_s": 1.0,
        "tier_window_s": 6.0,
        "min_samples": 10,
        "demote_after_s": 2.0,
    }
}
"""Guard settings on a seconds time scale (TTFT p99 over 6 s, demotion after 2 s)."""


def wait_for(what: str, check: Callable[[], _T | None], timeout_s: float = 15.0) -> _T:
    """Poll `check` every 10 ms until it returns something truthy (returned), or fail."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout_s}s waiting for {what}"
        time.sleep(0.01)


def wait_serving(url: str, proc: subprocess.Popen[Any], timeout_s: float = 30.0) -> bool:
    """Poll `url`/readyz every 0.1 s until it answers 200 (True), or the process ends or
    `timeout_s` passes (False: the caller's assertions then show why)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return True
        time.sleep(0.1)
    return False


def stored_outcome(engine: Engine, decision_id: str, timeout_s: float = 10.0) -> Any:
    """The decision as `audit explain` reads it, once the writer has stored its outcome."""

    def found() -> Any:
        try:
            stored = explain(engine, decision_id)
        except UnknownRequestError:
            return None
        return stored if stored.outcome is not None else None

    return wait_for(f"the stored outcome of {decision_id}", found, timeout_s)


def fleet_of(*targets: dict[str, Any], **extra: Any) -> Fleet:
    """A fleet from target dicts, validated exactly like a fleet file."""
    return build_fleet({"targets": list(targets), **extra}, "<test>")


def req(
    rid: str = "r1",
    prompt: int = 1000,
    gen: int = 100,
    model: str = "llama3.1-8b",
    priority: Priority = Priority.NORMAL,
    deadline: float = 4.0,
    **kw: Any,
) -> Request:
    return Request(rid, prompt, gen, model, priority, deadline, **kw)


@contextmanager
def usual_umask() -> Iterator[None]:
    """Umask 022 (the common default) meanwhile: a file created with no mode of its own is
    then world-readable, which is what the file-mode tests must rule out."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)
