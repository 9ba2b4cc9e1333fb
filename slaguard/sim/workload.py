"""Give trace requests what real traces lack: a priority, a TTFT deadline and a model.

The rule is deterministic and documented (docs/workloads.md): a 64-bit mix (splitmix64) of
the request's `row_id` gives a uniform number; cumulative priority shares from the fleet's
`sla` (default 20 % high / 60 % normal / 20 % low) turn it into a priority whose `ttft_s` is
the deadline. A second, independent mix picks the model, weighted by each model's serving
capacity in the fleet (or by an explicit `model_mix`). Replays, A/B arms and fault runs
therefore see the same request with the same contract.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from slaguard.fleet import Fleet, Priority, Request
from slaguard.sim.trace import Trace, prefix_id_text

PRIORITY_ORDER: tuple[Priority, ...] = (Priority.HIGH, Priority.NORMAL, Priority.LOW)
PRIORITY_SALT = 0x5EED_0001
MODEL_SALT = 0x5EED_0002
_MASK64 = np.uint64(0xFFFF_FFFF_FFFF_FFFF)


class WorkloadError(ValueError):
    """A bad assignment input (unknown model, all-zero shares), as one line with the fix."""


def splitmix64(values: npt.NDArray[np.int64], salt: int) -> npt.NDArray[np.uint64]:
    """The splitmix64 finaliser: a well-mixed, platform-independent 64-bit hash per value."""
    z = values.astype(np.uint64) ^ np.uint64(salt)
    z = (z + np.uint64(0x9E3779B97F4A7C15)) & _MASK64
    z = ((z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK64
    z = ((z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK64
    return z ^ (z >> np.uint64(31))


def uniform_from_hash(values: npt.NDArray[np.int64], salt: int) -> npt.NDArray[np.float64]:
    """Deterministic U[0, 1) per value: the top 53 bits of its splitmix64 hash."""
    return (splitmix64(values, salt) >> np.uint64(11)).astype(np.float64) * 2.0**-53


def model_capacity(fleet: Fleet) -> dict[str, float]:
    """Relative serving capacity per model: sum over its targets of TFLOPS / parameters.

    A prefill-throughput proxy (tokens/s scale with compute over model size); it sends
    most traffic to the small model on a mixed fleet, as production routers do.
    """
    capacity: dict[str, float] = {}
    for target in fleet.targets:
        share = target.tflops / target.model.params_b
        capacity[target.model.id] = capacity.get(target.model.id, 0.0) + share
    return capacity


@dataclass(frozen=True, slots=True)
class _Columns:
    request_ids: list[str]
    prompt: list[int]
    output: list[int]
    arrival: list[float]
    priority: list[int]
    model: list[int]
    prefix_ids: list[str | None]
    offsets: list[int]
    blocks: list[int]


@dataclass(frozen=True, eq=False)
class Workload:
    """A trace plus per-request priority and model codes; `requests()` builds objects lazily."""

    trace: Trace
    priority_code: npt.NDArray[np.int8]
    deadlines_s: tuple[float, ...]
    model_ids: tuple[str, ...]
    model_code: npt.NDArray[np.int16]

    def __len__(self) -> int:
        return len(self.trace)

    @cached_property
    def _columns(self) -> _Columns:
        """Plain Python lists of every column: indexing numpy per request is 10x slower."""
        trace = self.trace
        return _Columns(
            request_ids=[f"{trace.name}-{r}" for r in trace.row_id.tolist()],
            prompt=trace.prompt_tokens.tolist(),
            output=trace.output_tokens.tolist(),
            arrival=trace.arrival_s.tolist(),
            priority=self.priority_code.tolist(),
            model=self.model_code.tolist(),
            prefix_ids=[prefix_id_text(k) for k in trace.prefix_key.tolist()],
            offsets=trace.block_offsets.tolist(),
            blocks=trace.blocks.tolist(),
        )

    def request_id(self, i: int) -> str:
        return self._columns.request_ids[i]

    def request(self, i: int) -> Request:
        """The i-th request (in arrival order) as the scheduler sees it."""
        c = self._columns
        code = c.priority[i]
        return Request(
            request_id=c.request_ids[i],
            prompt_tokens=c.prompt[i],
            max_new_tokens=c.output[i],
            model_id=self.model_ids[c.model[i]],
            priority=PRIORITY_ORDER[code],
            deadline_s=self.deadlines_s[code],
            arrival_s=c.arrival[i],
            prefix_id=c.prefix_ids[i],
            prefix_blocks=tuple(c.blocks[c.offsets[i] : c.offsets[i + 1]]),
        )

    def requests(self) -> Iterator[Request]:
        """All requests in arrival order, one object at a time."""
        for i in range(len(self.trace)):
            yield self.request(i)

    def priority_counts(self) -> dict[Priority, int]:
        counts = np.bincount(self.priority_code, minlength=len(PRIORITY_ORDER))
        return {p: int(counts[k]) for k, p in enumerate(PRIORITY_ORDER)}

    def model_counts(self) -> dict[str, int]:
        counts = np.bincount(self.model_code, minlength=len(self.model_ids))
        return {m: int(counts[k]) for k, m in enumerate(self.model_ids)}


def _pick(u: npt.NDArray[np.float64], weights: list[float]) -> npt.NDArray[np.int64]:
    """Index into `weights` for each uniform draw, proportionally to the weights."""
    cumulative = np.cumsum(weights) / sum(weights)
    cumulative[-1] = 1.0
    return np.searchsorted(cumulative, u, side="right").astype(np.int64)


def assign_workload(
    trace: Trace, fleet: Fleet, model_mix: Mapping[str, float] | None = None
) -> Workload:
    """Priority from `fleet.sla` shares, deadline = that priority's `ttft_s`, model by capacity.

    `model_mix` (model id -> weight) replaces the capacity weighting; every model in it
    must be served by at least one fleet target.
    """
    served = model_capacity(fleet)
    mix = dict(model_mix) if model_mix is not None else served
    for model_id, weight in mix.items():
        if model_id not in served:
            raise WorkloadError(
                f"model_mix: model {model_id!r} is not served by fleet {fleet.name!r}; "
                f"fix: use one of {sorted(served)}"
            )
        if not weight >= 0:
            raise WorkloadError(f"model_mix: {model_id}: weight {weight} < 0; fix: use >= 0")
    model_ids = tuple(sorted(m for m, w in mix.items() if w > 0))
    if not model_ids:
        raise WorkloadError("model_mix: all weights are 0; fix: give one model a weight > 0")
    shares = [fleet.sla[p].share if p in fleet.sla else 0.0 for p in PRIORITY_ORDER]
    if sum(shares) <= 0:
        raise WorkloadError(f"{fleet.source}: sla: all shares are 0; fix: give shares > 0")
    deadlines = tuple(fleet.sla[p].ttft_s if p in fleet.sla else 1.0 for p in PRIORITY_ORDER)
    priority = _pick(uniform_from_hash(trace.row_id, PRIORITY_SALT), shares)
    model = _pick(uniform_from_hash(trace.row_id, MODEL_SALT), [mix[m] for m in model_ids])
    return Workload(trace, priority.astype(np.int8), deadlines, model_ids, model.astype(np.int16))


def iter_requests(
    trace: Trace, fleet: Fleet, model_mix: Mapping[str, float] | None = None
) -> Iterator[Request]:
    """Shortcut: assign the workload and yield its requests lazily."""
    return assign_workload(trace, fleet, model_mix).requests()
