"""Time arguments for `slaguard audit`: ISO 8601 or relative to now (`-2h`, `-30m`, `-7d`).

Times are parsed by pandas' `Timestamp`; durations, whose grammar the regex below already
pins down (a number and a unit, repeated), are summed from their parts. This module adds
the leading-minus convention, UTC for zone-less input, one-line errors naming the option,
and the forms let through to pandas: ISO 8601 only (pandas read `02/03/2026` US-style as 3 February,
silently, and words like `today` in the machine's local time).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from slaguard.audit.isotime import iso_utc

_BARE_DURATION = re.compile(r"(\d+(\.\d+)?\s*[a-zA-Z]+\s*)+")
_DURATION = re.compile(r"(\d+(\.\d+)?\s*(w|d|h|min|m|s)\s*)+")
_DURATION_PART = re.compile(r"(\d+(\.\d+)?)\s*(w|d|h|min|m|s)")
_UNIT_S = {"w": 604_800.0, "d": 86_400.0, "h": 3_600.0, "min": 60.0, "m": 60.0, "s": 1.0}
"""A duration is summed from its parts here: `status --window` then needs no pandas."""
_ISO_TIME = re.compile(
    r"\d{4}-\d{2}-\d{2}"  # date; then optional hours, minutes, seconds, fraction, zone
    r"([Tt ]\d{2}(:\d{2}(:\d{2}([.,]\d+)?)?)?([Zz]|[+-]\d{2}(:?\d{2})?)?)?"
)
TIME_HELP = "ISO 8601 (2026-11-29T14:00Z; no zone means UTC), 'now', or relative: -2h, -30m, -7d"


MAX_DURATION_DAYS = 36_500
"""Durations and relative times go up to 100 years: far past any retention or postmortem,
and far inside what a datetime holds (`-99999999d` was an OverflowError traceback)."""
_MAX_DURATION_S = MAX_DURATION_DAYS * _UNIT_S["d"]
_MAX_TEXT = f"{MAX_DURATION_DAYS}d (100 years)"


def _duration_seconds(text: str) -> float | None:
    """The seconds of a duration in the grammar above (zero and huge ones included), or None."""
    if not _DURATION.fullmatch(text.strip()):
        return None
    return sum(float(number) * _UNIT_S[unit] for number, _, unit in _DURATION_PART.findall(text))


def parse_duration(text: str, option: str) -> timedelta:
    """A positive duration like `30d`, `2h`, `1h30m`, `90s`: every number has a unit of a
    second or more (pandas reads a bare `30` as 30 ns, so `prune --older-than 30` would
    have deleted everything)."""
    seconds = _duration_seconds(text)
    if seconds is None:
        raise ValueError(
            f"{option}: cannot read {text!r} as a duration; fix: write a number and a unit "
            "(s, m, h, d, w), e.g. 30d, 2h, 1h30m, 90s"
        )
    if seconds <= 0:
        raise ValueError(
            f"{option}: cannot read {text!r} as a positive duration; fix: use e.g. 30d, 2h, "
            "30m, 90s"
        )
    if seconds > _MAX_DURATION_S:
        raise ValueError(
            f"{option}: {text!r} is too long; durations go up to {_MAX_TEXT}; fix: give a "
            "shorter one"
        )
    return timedelta(seconds=seconds)


def parse_time(text: str, option: str, now: datetime) -> datetime:
    """An aware UTC datetime from ISO text, `now`, or `-<duration>` before `now` (`-0h` is
    now: zero hours before it)."""
    stripped = text.strip()
    if stripped == "now":
        return now
    if stripped.startswith("-"):
        seconds = _duration_seconds(stripped[1:])
        if seconds is None:
            raise ValueError(f"{option}: cannot read {text!r}; fix: use {TIME_HELP}")
        if seconds > _MAX_DURATION_S:
            raise ValueError(
                f"{option}: {text!r} is too far back; relative times go back at most "
                f"-{_MAX_TEXT}; fix: write an older time as an ISO date, e.g. 1900-01-01"
            )
        return now - timedelta(seconds=seconds)
    if _BARE_DURATION.fullmatch(stripped) and _duration_seconds(stripped) is not None:
        # pandas reads "1h" as 01:00 on 1 January of year 1: refuse rather than misread
        raise ValueError(
            f"{option}: {text!r} is a duration, not a time; fix: write -{stripped} for "
            f"{stripped} before now"
        )
    if not _ISO_TIME.fullmatch(stripped):
        slashes = "; dates are YYYY-MM-DD (slashes put day and month in either order)"
        raise ValueError(
            f"{option}: cannot read {text!r} as a time; fix: use {TIME_HELP}"
            f"{slashes if '/' in text else ''}"
        )
    import pandas as pd  # type: ignore[import-untyped]  # here: `status` parses no times

    try:
        stamp = pd.Timestamp(stripped)
    except (ValueError, TypeError):
        stamp = pd.NaT
    if stamp is pd.NaT:
        raise ValueError(f"{option}: cannot read {text!r} as a time; fix: use {TIME_HELP}")
    try:
        stamp = stamp.tz_localize(UTC) if stamp.tzinfo is None else stamp.tz_convert(UTC)
        moment: datetime = stamp.to_pydatetime()
    except (ValueError, OverflowError):  # 0001-01-01 in UTC+5 is in year 0
        raise ValueError(
            f"{option}: {text!r} falls outside years 1-9999 in UTC; fix: give a time within them"
        ) from None
    return moment


def parse_range(
    since: str, until: str, now: datetime, since_defaulted: bool = False
) -> tuple[datetime, datetime]:
    """(since, until), refusing an empty or inverted range. `since_defaulted`: --since was
    not given, so the command's default is named as such when it is after --until
    (`history --until -3h` read "swap them", with no --since given to swap)."""
    start = parse_time(since, "--since", now)
    end = parse_time(until, "--until", now)
    if end == start:
        raise ValueError(
            f"--since {since!r} and --until {until!r} are the same time "
            f"({iso_utc(start)}); fix: widen the range"
        )
    if end < start and since_defaulted:
        raise ValueError(
            f"--until {until!r} ({iso_utc(end)}) is not after --since {since!r} "
            f"({iso_utc(start)}), the default when --since is not given; fix: give an "
            "earlier --since as well"
        )
    if end < start:
        raise ValueError(
            f"--since {since!r} ({iso_utc(start)}) is not before --until {until!r} "
            f"({iso_utc(end)}); fix: swap them or widen the range"
        )
    return start, end


def span_title(start: datetime, end: datetime) -> str:
    """A time range for a table title: the end's date only when it differs from the start's."""
    end_format = "%H:%M:%S" if end.date() == start.date() else "%Y-%m-%d %H:%M:%S"
    return f"{start:%Y-%m-%d %H:%M:%S} .. {end.strftime(end_format)} UTC"
