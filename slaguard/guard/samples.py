"""What the guard is fed: a routed request's first token, and its decision and outcome."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from slaguard.scheduler.rollout import Arm

_KEY_MASK = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class GuardSample:
    """A finished request as the detectors see it.

    `ttft_s` is None (or NaN) when no first token was measured: such a sample still counts
    for the SLA outcome but never enters TTFT statistics (a missing value is not 0 s).
    `prefix_id` is the full prefix identity (a hash of all prefix block ids, or of the
    prompt); see `prefix_identity`. `model_deployed_at_s` is the rollout time of the
    model version (the catalogue's timestamp); None means an established model.
    `prompt_tokens` is the request's prompt length (the prefill work its TTFT pays for,
    and the kind of request a learned router steers to a card): when given, the card-tier
    test compares TTFT per prompt token, so a tier handed longer prompts is not a slow
    tier (see `tier_shift`). None keeps plain TTFT; a feed passes it for every sample or
    for none.
    """

    at_s: float
    target_id: str
    card_type: str
    model_id: str
    sla_met: bool
    deadline_s: float
    ttft_s: float | None = None
    arm: Arm | None = None
    model_version: str = ""
    model_deployed_at_s: float | None = None
    prefix_id: str | None = None
    prompt_tokens: int | None = None
    ttft_observed: bool = False
    """The TTFT was already fed at the first token (`FirstToken`): the TTFT detectors do
    not count it again; the SLA outcome and the other detectors still take this sample."""

    @property
    def has_ttft(self) -> bool:
        """True when the TTFT is a real measurement (not None, not NaN)."""
        return self.ttft_s is not None and not math.isnan(self.ttft_s)

    @property
    def model_key(self) -> str:
        """`model@version` (or just the model when no version is known)."""
        return f"{self.model_id}@{self.model_version}" if self.model_version else self.model_id


@dataclass(frozen=True, slots=True)
class FirstToken:
    """A request's first token, fed when it arrives: the TTFT is known then, and a slow
    card's answers take several times longer to finish than to start, so waiting for the
    completion would delay the TTFT detectors by the slowed decode (the finished
    request's `GuardSample` then carries `ttft_observed=True`). `prompt_tokens` as in
    `GuardSample`."""

    at_s: float
    target_id: str
    card_type: str
    model_id: str
    ttft_s: float
    prompt_tokens: int | None = None


Handed = tuple[str, str, int]
"""A routed request's chosen target's card type and model, and the request's prompt tokens:
the work handed to that card tier at the routing decision (`Guard.observe_arrival`)."""


def prefix_identity(prefix_blocks: tuple[int, ...], prompt_hash: str | None = None) -> str | None:
    """Identity of the whole prefix: all block ids, never the first block alone.

    In real traces block 0 is often a system prompt shared by every request; keying on it
    would make every request look like one hot prompt. The text is the same as the
    simulator's `Request.prefix_id` (63-bit blake2b of the little-endian int64 block ids).
    """
    if prefix_blocks:
        raw = b"".join(b.to_bytes(8, "little", signed=True) for b in prefix_blocks)
        key = int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "little") & _KEY_MASK
        return f"{key:016x}"
    return prompt_hash or None
