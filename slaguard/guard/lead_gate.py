"""Whether a replica may hold the guard lease: only one that is ready and can store what
the guard decides. A leader that cannot write (a read-only role, a schema behind) turned
the guard off for the whole fleet: its trips reached no other replica and no incident."""

from __future__ import annotations

import logging
import math
from typing import Literal

log = logging.getLogger(__name__)

WRITE_FAILURES_TO_STEP_DOWN = 3
"""Failed guard writes in a row (a refused batch, then its retries at each sync) after
which the leader gives its lease up: a replica that can write takes over within a poll."""
LEAD_AGAIN_AFTER_S = 10.0
"""How long a replica that gave the lease up, or found it cannot write, checks that it
can write before it takes a free lease (it takes none another replica holds). Past that
it takes a free lease first and checks then, as any replica does."""


Lease = Literal["released", "not taken", "kept"]
_SAID: dict[Lease, tuple[str, str]] = {
    "released": (
        "guard leadership given up",
        "it takes the lease again once it can write and no other replica holds it",
    ),
    "not taken": (
        "guard leadership not taken",
        "it takes the lease once it can write and no other replica holds it",
    ),
    "kept": ("guard writes failing", "this replica leads on: it is the only one"),
}


class LeadGate:
    """One replica's guard writes, counted, and its reason not to lead (no I/O)."""

    def __init__(self) -> None:
        self.write_failures = 0
        self._hold_off_until_s = -math.inf
        self._logged: str | None = None

    def why_not(self, not_ready: str | None, last_error: str | None) -> str | None:
        """Why this replica must not lead now; None if it may. `not_ready`: why it is
        not ready (the service's `/readyz`), which keeps it from taking the lease."""
        if not_ready is not None:
            return f"not ready: {not_ready}"
        if self.write_failures >= WRITE_FAILURES_TO_STEP_DOWN:
            return f"its guard writes failed {self.write_failures} times in a row: {last_error}"
        return None

    def holding_off(self, now_s: float) -> bool:
        """Whether this replica checks that it can write before taking a free lease."""
        return now_s < self._hold_off_until_s

    def wrote(self, ok: bool) -> None:
        """A guard write succeeded or failed."""
        self.write_failures = 0 if ok else self.write_failures + 1

    def gave_up(self, why: str, now_s: float, *, lease: Lease = "released") -> None:
        """Leadership given up for `why` (`lease` "released"), or not taken ("not taken"):
        this replica takes a free lease again once it can write; another replica's lease
        it leaves alone. Logged once per reason (a read-only replica checks at every poll
        while nobody leads, and would otherwise say it every time). A lease that cannot
        be given up ("kept": the only process of an in-memory database) is said so."""
        self.write_failures = 0
        if lease != "kept":
            self._hold_off_until_s = now_s + LEAD_AGAIN_AFTER_S
        if why != self._logged:
            what, then = _SAID[lease]
            log.error("%s: %s; %s", what, why, then)
        self._logged = why

    def can_write(self) -> None:
        """The write check passed: a later refusal is logged again."""
        self._logged = None
        self._hold_off_until_s = -math.inf
