"""The listen port, checked in the same words wherever it is given: `serve`'s flag,
variable and config file, `emulate`'s flag."""

from __future__ import annotations

HIGHEST_PORT = 65535


def port_problem(port: int, *, any_free: bool) -> str | None:
    """What is wrong with `port` as a listen port, with the fix (None: nothing). With
    `any_free`, 0 asks for any free port (serve logs the one it got)."""
    if 1 <= port <= HIGHEST_PORT or (any_free and port == 0):
        return None
    fix = f"use a port from 1 to {HIGHEST_PORT}" + (", or 0 for any free port" if any_free else "")
    return f"{port} is out of range; fix: {fix}"
