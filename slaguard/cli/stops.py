"""Ctrl-C, SIGTERM and SIGHUP during a long `slaguard simulate`: stop between two steps.

Raised wherever the run happened to be, a signal could land between the audit writer's
journal append and its count of waiting rows (the count went to -1, the drain misjudged
what was left). While a run lasts, the handler only notes the signal and the run checks
it between simulated steps; while the writer drains, a further signal raises at once, so
a second Ctrl-C ends a slow drain.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType

from slaguard.stopsignals import taken_over


class Stopped(Exception):
    """A stop signal took effect; exit 128 + its number."""

    def __init__(self, signo: int) -> None:
        super().__init__(signal.Signals(signo).name)
        self.signo = signo


class StopSignals:
    """The first stop signal, noted; `check()` raises it at a safe point. After
    `raise_at_once()` every stop signal raises where it lands."""

    def __init__(self) -> None:
        self.signo: int | None = None
        self._at_once = False

    def _on_signal(self, signo: int, _frame: FrameType | None) -> None:
        if self._at_once:
            raise Stopped(signo)
        self.signo = self.signo or signo

    def check(self) -> None:
        """Raise `Stopped` if a stop signal came since installation."""
        if self.signo is not None:
            raise Stopped(self.signo)

    def raise_at_once(self) -> None:
        """From now on (a drain: nothing half-written to protect) a signal raises."""
        self._at_once = True

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopSignals]:
        with taken_over(self._on_signal):
            yield self
