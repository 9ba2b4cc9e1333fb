"""A service built for in-process tests: a small fleet, a settable clock, a SQLite file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from slaguard.fleet import Priority, Request
from slaguard.service.bootstrap import Service, build_service
from slaguard.service.config import load_config
from slaguard.service.runtime import ServiceRuntime

FLEET = {
    "name": "api-test",
    "targets": [
        {"id": "h100-8b", "model": "llama3.1-8b", "card": "h100"},
        {"id": "l40s-8b", "model": "llama3.1-8b", "card": "l40s", "count": 2},
        {"id": "a100-70b", "model": "llama3.1-70b", "card": "a100", "tp": 4},
    ],
}


@dataclass
class Clock:
    """A settable wall clock (unix seconds)."""

    now: float

    def __call__(self) -> float:
        return self.now


def build_test_service(
    tmp: Path, clock: Clock, replica_id: str | None = None, **extra: Any
) -> Service:
    fleet = tmp / "fleet.yaml"
    fleet.write_text(yaml.safe_dump(FLEET))
    cfg = load_config(
        None,
        {
            "fleet": fleet,
            "db": str(tmp / "audit.db"),
            "spill_dir": tmp / "spill",  # a PostgreSQL db would put it in the working dir
            "telemetry": {"scrape": False, "stale_after_s": 1.0},
            "notify_file": tmp / "incidents.jsonl",
            **extra,
        },
    )
    return build_service(cfg, clock=clock, replica_id=replica_id)


def route_request(rt: ServiceRuntime, request_id: str, prefix_id: str | None = None) -> Request:
    """A small 8B request with the given id."""
    return rt.request(
        model="llama3.1-8b", prompt_tokens=10, max_new_tokens=5, priority=Priority.NORMAL,
        deadline_s=None, request_id=request_id, prefix_id=prefix_id,
    )  # fmt: skip
