"""Requests as the scheduler sees them: business contracts it must never rewrite."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Priority(StrEnum):
    """Business priority; the order matters for preemption (high beats normal beats low)."""

    HIGH = "high"
    NORMAL = "normal"
    LOW = "low"

    @property
    def rank(self) -> int:
        """0 for high, 2 for low: lower rank is served first."""
        return _RANK[self]


_RANK = {Priority.HIGH: 0, Priority.NORMAL: 1, Priority.LOW: 2}


@dataclass(frozen=True, slots=True)
class Request:
    """(prompt_length, generation_length, model_id, priority, deadline) plus identity.

    `deadline_s` is the TTFT deadline relative to arrival. `prefix_id` identifies the
    prompt prefix (prefix-cache block ids or a prompt hash) for reuse and hot-spot detection.
    """

    request_id: str
    prompt_tokens: int
    max_new_tokens: int
    model_id: str
    priority: Priority
    deadline_s: float
    arrival_s: float = 0.0
    prefix_id: str | None = None
    prefix_blocks: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.prompt_tokens < 0 or self.max_new_tokens < 0:
            raise ValueError("token counts must be >= 0")
        if self.deadline_s <= 0:
            raise ValueError("deadline_s must be > 0")
