"""What a client may ask this fleet for: an unknown model or priority, or one no target
serves, is refused before the decision; a request no target could ever take, after it.
Each is a client error (422) to fix, never a capacity problem to retry."""

from __future__ import annotations

import math

from slaguard.fleet import Fleet, Priority, Request, Target
from slaguard.scheduler.explain import Decision, Reason


class FieldError(ValueError):
    """A request value the fleet cannot serve: answered as 422 naming `field`."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class NeverFitsError(ValueError):
    """No target serving the request's model could ever take it: its prompt and new tokens
    together are above `limit`, the most any of them holds (`bound` says what sets it). A
    client error to fix, not a capacity problem to retry; nothing is recorded."""

    def __init__(self, request: Request, limit: int, bound: str) -> None:
        self.tokens = request.prompt_tokens + request.max_new_tokens
        self.limit = limit
        self.over = f"above {limit}, the most any {request.model_id} target takes ({bound})"
        """The limit and what sets it, for a message that counts the tokens its own way."""
        super().__init__(f"{self.tokens} tokens (prompt and new) are {self.over}")


class RequestChecks:
    """The fleet's models and priorities, as a request may name them."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self._routable = fleet.servable_priorities
        """What a request may name: per model, the priorities some target serves it at,
        itself or through the models it degrades to."""
        self._models = sorted(self._routable)

    def priority(self, value: str, field: str = "priority") -> Priority:
        try:
            return Priority(value)
        except ValueError:
            raise FieldError(
                field, f"unknown priority {value!r}; use one of {[p.value for p in Priority]}"
            ) from None

    def model(self, model: str, field: str = "model") -> None:
        if model not in self._routable:
            known = "not served by this fleet" if model in self.fleet.models else "unknown"
            raise FieldError(field, f"model {model!r} is {known}; use one of {self._models}")

    def served(self, model: str, priority: Priority, field: str = "priority") -> None:
        """A priority no target serves the model at is a client error, not a capacity
        problem: it was admitted and answered no_capacity (a 503) for ever."""
        served = self._routable.get(model, frozenset())
        if priority not in served:
            raise FieldError(
                field,
                f"no target serves {model} at priority {priority.value!r}; use one of "
                f"{[p.value for p in Priority if p in served]}",
            )

    def never_fits(self, decision: Decision) -> NeverFitsError | None:
        """Why no target serving the request's model could ever take it (its tokens past
        every context window or KV cache budget), or None."""
        e = decision.explanation
        if decision.target is not None or len(e.candidates) == 0:
            return None
        for index, reason in zip(e.candidates.tolist(), e.reasons.tolist(), strict=True):
            target = self.fleet.targets[index]
            if reason != Reason.CONTEXT and e.v_peak_gb <= target.kv_budget_gb:
                return None
        limit, bound = max(_token_limit(self.fleet.targets[i]) for i in e.candidates.tolist())
        return NeverFitsError(decision.request, limit, bound)


def _token_limit(target: Target) -> tuple[int, str]:
    """The most tokens (prompt and new) one request may hold on an idle `target`, and what
    sets it: the router's context and KV tests (`Router._eligibility`), solved for tokens."""
    per_token = target.model.kv_bytes_per_token
    kv_tokens = math.floor(target.kv_budget_gb * 1e9 / per_token)
    while per_token * (kv_tokens + 1) / 1e9 <= target.kv_budget_gb:  # float rounding
        kv_tokens += 1
    while per_token * kv_tokens / 1e9 > target.kv_budget_gb:
        kv_tokens -= 1
    if target.model.context_window <= kv_tokens:
        return target.model.context_window, "its context window"
    return kv_tokens, f"its KV cache budget, {target.kv_budget_gb:.2f} GB"
