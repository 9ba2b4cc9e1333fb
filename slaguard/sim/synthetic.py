"""Seeded synthetic traces for tests: Poisson or Gamma arrivals, lognormal lengths.

Gamma inter-arrival gaps with coefficient of variation `cv` (shape 1/cv^2) give burstier
(cv > 1) or smoother (cv < 1) traffic than Poisson (cv = 1) at the same mean rate. Optional
shared prefixes reuse Mooncake's convention: 512-token blocks, equal block ids = equal
prefix.
"""

from __future__ import annotations

from enum import StrEnum

import numpy as np

from slaguard.sim.trace import BLOCK_TOKENS, Trace


class ArrivalProcess(StrEnum):
    POISSON = "poisson"
    GAMMA = "gamma"


def synthetic_trace(
    requests: int,
    rate_per_s: float,
    *,
    arrivals: ArrivalProcess | str = ArrivalProcess.POISSON,
    cv: float = 1.0,
    prompt_median: float = 1020.0,
    prompt_sigma: float = 1.0,
    output_median: float = 129.0,
    output_sigma: float = 1.0,
    max_tokens: int = 32_768,
    shared_prefix_share: float = 0.0,
    shared_prefixes: int = 8,
    shared_prefix_blocks: int = 2,
    seed: int = 0,
    name: str = "synthetic",
) -> Trace:
    """`requests` arrivals at `rate_per_s` on average; lengths lognormal around the medians.

    Defaults follow the Azure conversation trace's medians (prompt 1,020, output 129). With
    `shared_prefix_share` > 0 that share of requests starts with one of `shared_prefixes`
    common prefixes of `shared_prefix_blocks` blocks; all other blocks are unique.
    """
    if requests < 0 or not rate_per_s > 0 or not cv > 0:
        raise ValueError("need requests >= 0, rate_per_s > 0 and cv > 0")
    if not 0.0 <= shared_prefix_share <= 1.0:
        raise ValueError(f"shared_prefix_share must be in [0, 1], got {shared_prefix_share}")
    rng = np.random.default_rng(seed)
    process = ArrivalProcess(arrivals)
    if process is ArrivalProcess.POISSON:
        gaps = rng.exponential(1.0 / rate_per_s, requests)
    else:
        shape = 1.0 / (cv * cv)
        gaps = rng.gamma(shape, 1.0 / (rate_per_s * shape), requests)
    arrival_s = np.cumsum(gaps) - (gaps[0] if requests else 0.0)
    prompt = np.clip(
        np.rint(rng.lognormal(np.log(prompt_median), prompt_sigma, requests)), 1, max_tokens
    ).astype(np.int64)
    output = np.clip(
        np.rint(rng.lognormal(np.log(output_median), output_sigma, requests)), 1, max_tokens
    ).astype(np.int64)
    block_lists = None
    if shared_prefix_share > 0:
        block_lists = _prefix_blocks(
            rng, prompt, shared_prefix_share, shared_prefixes, shared_prefix_blocks
        )
    return Trace.build(name, f"synthetic(seed={seed})", arrival_s, prompt, output, block_lists)


def _prefix_blocks(
    rng: np.random.Generator, prompt: np.ndarray, share: float, pool: int, pool_blocks: int
) -> list[list[int]]:
    """Block ids per request: a shared pool prefix for `share` of them, then unique blocks."""
    shared = rng.random(len(prompt)) < share
    which = rng.integers(0, pool, len(prompt))
    next_id = pool * pool_blocks
    out: list[list[int]] = []
    for i, tokens in enumerate(prompt):
        count = -(-int(tokens) // BLOCK_TOKENS)
        head = min(pool_blocks, count) if shared[i] else 0
        first = int(which[i]) * pool_blocks
        own = count - head
        out.append(list(range(first, first + head)) + list(range(next_id, next_id + own)))
        next_id += own
    return out
