"""Small builders shared by the scheduler tests."""

from __future__ import annotations

from typing import Any

from slaguard.fleet import Fleet, Priority, Request, build_fleet


def fleet_of(*targets: dict[str, Any], **extra: Any) -> Fleet:
    """A fleet from target dicts, validated exactly like a fleet file."""
    return build_fleet({"targets": list(targets), **extra}, "<test>")


def req(
    rid: str = "r1",
    prompt: int = 1000,
    gen: int = 100,
    model: str = "llama3.1-8b",
    priority: Priority = Priority.NORMAL,
    deadline: float = 4.0,
    **kw: Any,
) -> Request:
    return Request(rid, prompt, gen, model, priority, deadline, **kw)
