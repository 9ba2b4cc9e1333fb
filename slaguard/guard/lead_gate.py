"""Whether a replica may hold the guard lease: only one that is ready and can store what
the guard decides. A leader that cannot write (a read-only role, a schema behind) turned
the guard off for the whole fleet: its trips reached no other replica and no incident."""

from __future__ import annotations

import logging
import math

log = logging.getLogger(__name__)

WRITE_FAILURES_TO_STEP_DOWN = 3
"""Failed guard writes in a row (a refused batch, then its retries at each sync) after
which the leader gives its lease up: a replica that can write takes over within a poll."""
LEAD_AGAIN_AFTER_S = 10.0
"""How long a replica that gave the lease up for failed writes leaves it to the others;
then it may take it again (after checking that it can write)."""


class LeadGate:
    """One replica's guard writes, counted, and its reason not to lead (no I/O)."""

    def __init__(self) -> None:
        self.write_failures = 0
        self._hold_off_until_s = -math.inf
        self._logged: str | None = None

    def why_not(self, now_s: float, not_ready: str | None, last_error: str | None) -> str | None:
        """Why this replica must not lead now; None if it may. `not_ready`: why it is
        not ready (the service's `/readyz`), which keeps it from taking the lease."""
        if not_ready is not None:
            return f"not ready: {not_ready}"
        if self.write_failures >= WRITE_FAILURES_TO_STEP_DOWN:
            return f"its guard writes failed {self.write_failures} times in a row: {last_error}"
        if now_s < self._hold_off_until_s:
            return self._logged or "its guard writes failed"
        return None

    def wrote(self, ok: bool) -> None:
        """A guard write succeeded or failed."""
        self.write_failures = 0 if ok else self.write_failures + 1

    def gave_up(self, why: str, now_s: float) -> None:
        """Leadership given up for failed writes: the lease is left to the others for a
        while; logged once per reason (a read-only replica checks again every
        `LEAD_AGAIN_AFTER_S`, and would otherwise say it every time)."""
        self.write_failures = 0
        self._hold_off_until_s = now_s + LEAD_AGAIN_AFTER_S
        if why != self._logged:
            log.error("guard leadership given up: %s; another replica leads meanwhile", why)
        self._logged = why

    def can_write(self) -> None:
        """The write check on gaining the lease passed: a later refusal is logged again."""
        self._logged = None
