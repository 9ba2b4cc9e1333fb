"""Drive a detector or guard over a synthetic stream, one evaluation per simulated second."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Protocol, TypeVar

from slaguard.guard.samples import GuardSample

R = TypeVar("R")


class Observer(Protocol):
    def observe(self, sample: GuardSample) -> None: ...


def run_seconds(
    subject: Observer,
    samples: Iterable[GuardSample],
    start_s: int,
    end_s: int,
    evaluate: Callable[[float], R],
) -> Iterator[tuple[int, R]]:
    """Feed samples up to each whole second, then yield (second, evaluate(second))."""
    it = iter(samples)
    pending = next(it, None)
    for sec in range(start_s, end_s):
        while pending is not None and pending.at_s <= sec:
            subject.observe(pending)
            pending = next(it, None)
        yield sec, evaluate(float(sec))
