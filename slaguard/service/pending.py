"""A decision between `ServiceRuntime.decide` and `finish`, and the SLA judgement.

The pending entries live for minutes (up to `max_pending_decisions`, 200k), so they hold
no per-decision object the garbage collector tracks: with the scheduler's `Decision` in
them (five tracked objects each) a full collection would walk a million objects at the
cap, stopping the service for ~0.7 s on the 2-core box.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
import numpy as np

from slaguard.audit.records import UNJUDGED_STATUSES, RequestStatus
from slaguard.fleet import Priority
from slaguard.scheduler.explain import Decision, Outcome
from slaguard.scheduler.rollout import Arm


class Pending(msgspec.Struct, gc=False):
    """A decision waiting for its outcome: what `finish` and a repeated request id need,
    in a struct the garbage collector never walks (see the module docstring)."""

    decision_id: str
    mode: str
    decided_at_s: float
    target_index: int | None
    """The target serving it (the gateway moves it on a retry); None: no capacity."""
    arm: Arm
    outcome: Outcome
    served_model: str
    priority: Priority
    deadline_s: float
    prompt_tokens: int
    prefix_id: str | None
    alternatives: tuple[int, ...]
    """Other eligible targets, best first (the gateway's retry order)."""
    learner_components: np.ndarray | None
    """The chosen target's score components when the learned arm chose it."""
    done: bool = False
    sla_met: bool | None = None
    first_ttft_s: float | None = None
    """The TTFT `first_token` already gave the guard (None: not given): a later
    `finish` without a TTFT of its own is judged and recorded with it."""
    not_served_s: float = 0.0
    """Seconds of the request spent on gateway attempts that failed before the answering
    target had it: left out of the TTFT the guard and the learner judge that target on."""


@dataclass(slots=True)
class Routed:
    """A fresh decision on its request's path: the scheduler's whole `Decision`
    (explanation included, for the audit record) and the entry that outlives it."""

    decision: Decision
    entry: Pending


@dataclass(frozen=True, slots=True)
class Finished:
    """What `finish` did."""

    recorded: bool
    duplicate: bool
    sla_met: bool | None


def sla_met(
    status: RequestStatus, ttft_s: float | None, e2e_s: float | None, deadline_s: float
) -> bool | None:
    """The SLA judgement: an `ok` request whose first token came by its deadline; with
    no first-token time (a whole answer) its end, an upper bound, must. A `client_error`
    (the request itself refused) is judged by none: None. A `cancelled` one (the client
    left before the end) is judged on what the card did before: its first token as an
    `ok` one's; without one, a miss only once the client had waited (`e2e_s`) past the
    deadline (it gave up on a slow card), else None (it left before anyone could say)."""
    if status in UNJUDGED_STATUSES:
        return None
    if status == "cancelled":
        if ttft_s is not None:
            return ttft_s <= deadline_s
        return False if e2e_s is not None and e2e_s > deadline_s else None
    if status != "ok":
        return False
    if ttft_s is not None:
        return ttft_s <= deadline_s
    return e2e_s is not None and e2e_s <= deadline_s
