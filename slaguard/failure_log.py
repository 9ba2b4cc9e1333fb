"""Log a loop's failures once per distinct error, a reminder a minute, and the recovery.

The guard's loops run every 500 ms to 1 s and the telemetry scraper every 250 ms by
default; during a database outage a warning per tick wrote ~1,200 identical lines in ten
minutes and buried everything else in the log.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

REMIND_EVERY_S = 60.0


class FailureLog:
    """One loop's failure state: the error logged last, and since when it fails."""

    def __init__(self, logger: logging.Logger, what: str) -> None:
        self.logger = logger
        self.what = what
        self.failures = 0
        self._message: str | None = None
        self._since_s = 0.0
        self._logged_s = 0.0

    def failed(self, message: str, now_s: float) -> None:
        """A failure: logged when its message is new, else once a minute with a count."""
        self.failures += 1
        if self.failures == 1:
            self._since_s = now_s
        if message != self._message:
            self.logger.warning("%s failed: %s", self.what, message)
        elif now_s - self._logged_s >= REMIND_EVERY_S:
            since = datetime.fromtimestamp(self._since_s, UTC).strftime("%H:%M:%S")
            self.logger.warning(
                "%s still failing (%d times since %s UTC): %s",
                self.what, self.failures, since, message,
            )  # fmt: skip
        else:
            return
        self._message, self._logged_s = message, now_s

    def succeeded(self, now_s: float) -> None:
        """A success: logs the recovery if the loop was failing."""
        if self.failures:
            self.logger.info(
                "%s recovered after %d failures in %.0fs",
                self.what, self.failures, now_s - self._since_s,
            )  # fmt: skip
        self.failures, self._message = 0, None
