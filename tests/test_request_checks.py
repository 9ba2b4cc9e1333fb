"""A request no target could ever take: the exact token limit it is past, and which of
the target's bounds sets it (context window or KV cache budget), at the boundary."""

from __future__ import annotations

import pytest

from slaguard.fleet import Fleet, Priority, Request, build_fleet
from slaguard.scheduler.core import Scheduler
from slaguard.scheduler.rollout import LEARNED
from slaguard.service.request_checks import NeverFitsError, RequestChecks

SMALL_8B = {"targets": [{"id": "l40s-8b", "model": "llama3.1-8b", "card": "l40s"}]}
"""An 8B on one L40S: 199,127 tokens of KV cache, a 131,072-token context window."""
TIGHT_70B = {
    "targets": [
        {"id": "l40s-70b", "model": "llama3.1-70b", "card": "l40s", "tp": 4},
        {"id": "ascend-70b", "model": "llama3.1-70b", "card": "ascend910b", "tp": 3},
    ]
}
"""70Bs whose KV cache holds fewer tokens than the context window: 83,740 on the L40Ss,
89,843 on the Ascends (29.44 GB at 327,680 bytes a token)."""


def _refusal(fleet: Fleet, prompt: int, new: int) -> NeverFitsError | None:
    model = fleet.targets[0].model.id
    request = Request("r", prompt, new, model, Priority.NORMAL, 5.0)
    decision = Scheduler(fleet).decide(request, 0.0, LEARNED)
    return RequestChecks(fleet).never_fits(decision)


@pytest.mark.parametrize(
    ("doc", "limit", "bound"),
    [
        (SMALL_8B, 131_072, "its context window"),
        (TIGHT_70B, 89_843, "its KV cache budget, 29.44 GB"),
    ],
)
def test_the_limit_is_exact_and_names_its_bound(
    doc: dict[str, object], limit: int, bound: str
) -> None:
    """The message said "~N tokens" and "context window or KV budget", giving only the
    context window: a request past the KV budget was told a limit it was under."""
    fleet = build_fleet(doc, "fleet.yaml")
    assert _refusal(fleet, limit - 100, 100) is None, "at the limit it fits"
    refusal = _refusal(fleet, limit - 99, 100)
    assert refusal is not None
    assert (refusal.tokens, refusal.limit) == (limit + 1, limit)
    model = fleet.targets[0].model.id
    assert str(refusal) == (
        f"{limit + 1} tokens (prompt and new) are above {limit}, the most any {model} target "
        f"takes ({bound})"
    )
