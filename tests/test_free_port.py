"""`free_port` picks below the kernel's ephemeral range: a port from `bind(0)` could be
taken by any outgoing connection (a database client, another test worker's HTTP pool)
between the pick and the child process's bind, a rare failure of a whole test."""

from __future__ import annotations

import socket

import pytest

from slaguard.service import local
from slaguard.service.local import LOWEST_PICKED_PORT, free_port


def test_the_port_is_below_the_ephemeral_range_and_bindable() -> None:
    low = local._ephemeral_low()
    picked = {free_port() for _ in range(20)}
    assert all(LOWEST_PICKED_PORT <= p < low for p in picked), (sorted(picked), low)
    assert len(picked) >= 15  # random, not the same few
    for port in picked:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_taken_pick_is_skipped_and_the_kernel_asked_when_none_is_free(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        monkeypatch.setattr(local.random, "randrange", lambda lo, hi: taken)
        port = free_port()
    assert port != taken and port >= local._ephemeral_low()
