"""Arrival-side faults (load_spike, hot_prompt), applied to the trace before the run.

They change which requests arrive, not how targets behave, so they are applied once up
front, deterministically for a seed; the engine then replays the changed trace.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from slaguard.sim.faults import FaultSchedule, HotPromptFault, LoadSpikeFault
from slaguard.sim.trace import BLOCK_TOKENS, Trace, concat_traces, gather_rows, prefix_key_of

HOT_BLOCK_BASE = 1 << 40
"""Block ids of injected hot prompts start here, far above any real trace's ids."""


def hot_prompt_blocks(fault_index: int, prompt_tokens: int) -> list[int]:
    """The injected prompt's block ids: one per 512 tokens, unique to this fault entry."""
    first = HOT_BLOCK_BASE + (fault_index << 24)
    return list(range(first, first + -(-prompt_tokens // BLOCK_TOKENS)))


def _window_rows(trace: Trace, start_s: float, end_s: float) -> np.ndarray[Any, Any]:
    lo, hi = np.searchsorted(trace.arrival_s, [start_s, end_s], side="left")
    return np.arange(lo, hi, dtype=np.int64)


def _load_spike(trace: Trace, f: LoadSpikeFault, rng: np.random.Generator) -> Trace:
    rows = _window_rows(trace, f.start_s, f.end_s)
    if len(rows) == 0 or f.factor == 1.0:
        return trace
    if f.factor < 1.0:
        dropped = rows[rng.random(len(rows)) >= f.factor]
        return trace.take(np.setdiff1d(np.arange(len(trace)), dropped))
    extra = round((f.factor - 1.0) * len(rows))
    end = min(f.end_s, float(trace.arrival_s[-1]))
    copies = trace.take(rng.choice(rows, extra))
    first_new = int(trace.row_id.max()) + 1
    copies = replace(
        copies,
        arrival_s=np.sort(rng.uniform(f.start_s, end, extra)),
        row_id=np.arange(first_new, first_new + extra, dtype=np.int64),
    )
    return concat_traces(trace, copies)


def _hot_prompt(trace: Trace, f: HotPromptFault, index: int, rng: np.random.Generator) -> Trace:
    rows = _window_rows(trace, f.start_s, f.end_s)
    chosen = rows[rng.random(len(rows)) < f.share]
    if len(chosen) == 0:
        return trace
    n = len(trace)
    hot = np.asarray(hot_prompt_blocks(index, f.prompt_tokens), dtype=np.int64)
    offsets = np.append(trace.block_offsets, trace.block_offsets[-1] + len(hot))
    source_row = np.arange(n, dtype=np.int64)
    source_row[chosen] = n
    new_offsets, blocks = gather_rows(offsets, np.concatenate([trace.blocks, hot]), source_row)
    prompt = trace.prompt_tokens.copy()
    prompt[chosen] = f.prompt_tokens
    output = trace.output_tokens.copy()
    if f.output_tokens is not None:
        output[chosen] = f.output_tokens
    keys = trace.prefix_key.copy()
    keys[chosen] = prefix_key_of(hot)
    return replace(
        trace,
        prompt_tokens=prompt,
        output_tokens=output,
        prefix_key=keys,
        block_offsets=new_offsets,
        blocks=blocks,
    )


def apply_arrival_faults(trace: Trace, schedule: FaultSchedule, seed: int = 0) -> Trace:
    """The trace with load spikes and hot prompts applied, in file order, for a given seed.

    load_spike: factor > 1 adds round((factor - 1) x n) arrivals uniformly in the window,
    each a copy (lengths, prefix) of a random request of the window, with new row ids after
    the trace's; factor < 1 keeps each arrival with probability factor. hot_prompt: each
    arrival in the window becomes, with probability share, the one hot prompt (same
    `prompt_tokens`, same prefix blocks and prefix id); its output length is kept unless
    the fault sets `output_tokens`.
    """
    rng = np.random.default_rng(seed)
    out = trace
    for index, fault in enumerate(schedule.faults):
        if isinstance(fault, LoadSpikeFault):
            out = _load_spike(out, fault, rng)
        elif isinstance(fault, HotPromptFault):
            out = _hot_prompt(out, fault, index, rng)
    return out
