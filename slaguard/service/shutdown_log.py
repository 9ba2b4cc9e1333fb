"""uvicorn's account of answers a stop cut short, in one line instead of a traceback.

When its graceful-shutdown timeout passes, uvicorn cancels the requests still in flight
(long streams), says so at ERROR, and logs each as an ERROR "Exception in ASGI
application" with the CancelledError's traceback: routine deploys then look like crashes
to log-based alerting. The gateway records those requests as failed; the log says so at
WARNING, one line per request."""

from __future__ import annotations

import asyncio
import logging

UVICORN_ERROR_LOGGER = "uvicorn.error"


class CutByShutdown(logging.Filter):
    """Turns uvicorn's record of a request cancelled by the stop into one WARNING line."""

    def filter(self, record: logging.LogRecord) -> bool:
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
