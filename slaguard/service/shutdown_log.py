"""uvicorn's account of answers a stop or a broken backend cut short, as slaguard words it.

When its graceful-shutdown timeout passes, uvicorn cancels the requests still in flight
(long streams), says so at ERROR, and logs each as an ERROR "Exception in ASGI
application" with the CancelledError's traceback: routine deploys then look like crashes
to log-based alerting. The gateway records those requests as failed; the log says so at
WARNING, one line per request.

A stream whose backend broke after the first byte is cut on purpose (the client must not
take it for a whole answer); the gateway logs it at WARNING, and uvicorn would add an
ERROR "ASGI callable returned without completing response" for each: that one is dropped.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Any

UVICORN_ERROR_LOGGER = "uvicorn.error"
_INCOMPLETE = "ASGI callable returned without completing response"
_cut_by_us: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()
"""Request tasks whose stream slaguard cut and logged itself: uvicorn logs its notice in
the same task as soon as the app returns (none if the client left first)."""


def announce_cut() -> None:
    """Called in the request's task as the app returns from a stream it cut on purpose."""
    task = asyncio.current_task()
    if task is not None:
        _cut_by_us.add(task)


def _in_cut_task() -> bool:
    try:
        task = asyncio.current_task()
    except RuntimeError:  # logged outside any event loop
        return False
    return task is not None and task in _cut_by_us


class CutByShutdown(logging.Filter):
    """Turns uvicorn's record of a request cancelled by the stop into one WARNING line,
    and drops its notice of a stream slaguard cut and logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith(_INCOMPLETE) and _in_cut_task():
            return False
        if str(record.msg).startswith("Cancel %s running task(s)"):  # the stop's own notice
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            return True
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, asyncio.CancelledError) and str(record.msg).startswith(
            "Exception in ASGI application"
        ):
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.msg = "a request still in flight was cut by the stop (its grace period passed)"
            record.args, record.exc_info, record.exc_text = None, None, None
        return True


def quiet_shutdown_cancellations() -> None:
    """Install the filter on uvicorn's error logger (once; after uvicorn set its logging)."""
    logger = logging.getLogger(UVICORN_ERROR_LOGGER)
    if not any(isinstance(f, CutByShutdown) for f in logger.filters):
        logger.addFilter(CutByShutdown())
