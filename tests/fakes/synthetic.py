"""Synthetic guard samples with known answers: a mixed fleet, seeded noise, injected faults."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from slaguard.guard.samples import GuardSample
from slaguard.scheduler.rollout import Arm

# (target id, card type, model, median TTFT s): a heterogeneous fleet like the default one.
FLEET: tuple[tuple[str, str, str, float], ...] = (
    *((f"h100-70b-{i}", "h100", "llama3.1-70b", 0.45) for i in range(2)),
    *((f"h200-70b-{i}", "h200", "llama3.1-70b", 0.40) for i in range(2)),
    ("a100-70b-0", "a100", "llama3.1-70b", 0.9),
    ("ascend-70b-0", "ascend910b", "llama3.1-70b", 1.0),
    *((f"h100-8b-{i}", "h100", "llama3.1-8b", 0.12) for i in range(2)),
    ("h200-8b-0", "h200", "llama3.1-8b", 0.11),
    ("a100-8b-0", "a100", "llama3.1-8b", 0.2),
    *((f"l40s-8b-{i}", "l40s", "llama3.1-8b", 0.3) for i in range(6)),
    *((f"ascend-8b-{i}", "ascend910b", "llama3.1-8b", 0.28) for i in range(2)),
    ("mlu-8b-0", "mlu370", "llama3.1-8b", 0.5),
)

Slowdown = Callable[[GuardSample], float]


@dataclass(frozen=True)
class Workload:
    """Poisson arrivals spread uniformly over `FLEET`, lognormal TTFT around each median."""

    rate_per_s: float = 5.4
    sigma: float = 0.5
    deadline_s: float = 4.0
    seed: int = 7
    sigma_by_card: tuple[tuple[str, float], ...] = ()
    """Card types whose TTFT spreads by another sigma than `sigma`."""

    def samples(
        self, start_s: float, end_s: float, slowdown: Slowdown | None = None
    ) -> Iterator[GuardSample]:
        """Samples in arrival order; `slowdown(sample)` multiplies a sample's TTFT."""
        rng = np.random.default_rng(self.seed)
        sigmas = dict(self.sigma_by_card)
        t = start_s
        while True:
            t += float(rng.exponential(1.0 / self.rate_per_s))
            if t >= end_s:
                return
            target, card, model, median = FLEET[int(rng.integers(len(FLEET)))]
            ttft = median * float(np.exp(rng.normal(0.0, sigmas.get(card, self.sigma))))
            base = GuardSample(t, target, card, model, True, self.deadline_s, ttft, Arm.ROUND_ROBIN)
            factor = slowdown(base) if slowdown else 1.0
            ttft *= factor
            yield GuardSample(
                t,
                target,
                card,
                model,
                ttft <= self.deadline_s,
                self.deadline_s,
                ttft,
                Arm.ROUND_ROBIN,
            )


def flood_stream(
    seconds: float = 900.0,
    flood: tuple[float, float] = (300.0, 400.0),
    share: float = 0.3,
    seed: int = 3,
) -> list[GuardSample]:
    """5.4 req/s of unique prompts over 4 targets; during `flood` one prompt is `share` of them."""
    rng = np.random.default_rng(seed)
    out: list[GuardSample] = []
    t, n = 0.0, 0
    while (t := t + float(rng.exponential(1 / 5.4))) < seconds:
        n += 1
        hot = flood[0] <= t < flood[1] and rng.random() < share
        prefix = "hot" if hot else f"p{n}"
        out.append(GuardSample(t, f"t{n % 4}", "h100", "m", True, 4.0, 0.3, prefix_id=prefix))
    return out
