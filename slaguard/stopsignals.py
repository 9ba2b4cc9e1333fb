"""Ctrl-C, SIGTERM and SIGHUP taken over for a long command (`demo`, `simulate`).

One place for the rule both follow: a signal ignored when the command started stays
ignored (`nohup` ignores SIGHUP: that run is meant to outlive its terminal).
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

Handler = Callable[[int, FrameType | None], None]


@contextlib.contextmanager
def taken_over(handler: Handler) -> Iterator[None]:
    """`handler` for each stop signal not ignored on entry; the old handlers after."""
    old = {
        s: signal.signal(s, handler)
        for s in STOP_SIGNALS
        if signal.getsignal(s) is not signal.SIG_IGN
    }
    try:
        yield
    finally:
        for s, previous in old.items():
            signal.signal(s, previous)
