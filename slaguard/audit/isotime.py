"""The one form of a time in what the commands write: ISO 8601 in UTC to the
microsecond, with `T` and `Z` (`2026-11-29T14:00:05.250000Z`).

csv, json, the terminal tables and `prune` wrote four forms (a space or `T`, `Z` or
`+00:00`, milliseconds or microseconds). Its own module so `status` gets it without
pandas; table titles keep their human form (`2026-11-29 14:00:05 UTC`).
"""

from __future__ import annotations

from datetime import UTC, datetime

ISO_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
"""The same form as a `strftime` pattern, for pandas columns."""


def iso_utc(moment: datetime) -> str:
    """`moment` (aware) as ISO 8601 UTC with `T` and `Z`, to the microsecond."""
    return moment.astimezone(UTC).strftime(ISO_FORMAT)
