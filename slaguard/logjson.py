"""Log lines as one JSON object each (`log_format: json`), for shippers such as Loki or
Elasticsearch that would otherwise split a traceback into lines and guess at fields.

Each object starts with `time` (ISO 8601 UTC with `Z`, as `audit/isotime.py` writes
times), `level`, `logger` and `message`, then `exception` (the traceback's text) when
there is one and any `extra=` fields; an uncaught exception is a record too. Its own
module, without uvicorn or FastAPI, so the audit writer process logs the same form.
"""

from __future__ import annotations

import logging
import sys
import threading
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

from slaguard.audit.isotime import iso_utc

TERMINAL_ONLY = ("color_message",)
"""uvicorn's copy of a message with ANSI colour codes, for a terminal: not a field."""


class JsonLineFormatter(JsonFormatter):
    """python-json-logger with slaguard's field names and time form."""

    def __init__(self, static_fields: dict[str, Any] | None = None) -> None:
        super().__init__(
            "%(asctime)s %(levelname)s %(name)s %(message)s",
            rename_fields={
                "asctime": "time",
                "levelname": "level",
                "name": "logger",
                "exc_info": "exception",
                "stack_info": "stack",
            },
            reserved_attrs=[*RESERVED_ATTRS, *TERMINAL_ONLY],
            static_fields=static_fields,
        )

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return iso_utc(datetime.fromtimestamp(record.created, UTC))


CRASH_LOGGER = "slaguard"
"""The logger an uncaught exception is logged on."""


def _log_uncaught(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    logging.getLogger(CRASH_LOGGER).critical(
        "uncaught exception; the process ends", exc_info=(kind, exc, tb)
    )


def _log_uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:  # silent, as Python's own hook leaves it
        return
    name = "?" if args.thread is None else args.thread.name
    logging.getLogger(CRASH_LOGGER).error(
        "uncaught exception in thread %s",
        name,
        exc_info=(args.exc_type, args.exc_value, args.exc_traceback),  # type: ignore[arg-type]
    )


def log_json_to_stderr(level: int | str, static_fields: dict[str, Any] | None = None) -> None:
    """Every record that reaches the root logger, Python's warnings and an exception left
    uncaught (in the main thread or another) as JSON lines on stderr (replacing the root's
    handlers): Python's own traceback for it is plain text, one line each."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLineFormatter(static_fields))
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(level)
    logging.captureWarnings(True)
    sys.excepthook = _log_uncaught
    threading.excepthook = _log_uncaught_in_thread
