"""Learned router weights: exponentiated gradient on the simplex, smoothed (section 5).

Each routed request's feedback is a subgradient of a linear (hence convex) loss
`L(w) = (loss - mean loss) * (w . x)`, where `x` are the chosen target's score components
and `loss = min(TTFT / deadline, cap) / cap`: components that scored high on decisions that
went badly lose weight. Feedback accumulates and is applied once per update period
(default hourly). One outlier batch cannot jump the weights: gradients are an exponential
moving average, clipped per component, and the result is mixed with the uniform vector so
no weight reaches 0. EG keeps weights on the simplex and has O(sqrt(T log n)) regret.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from slaguard.scheduler.config import COMPONENTS, LearningConfig


@dataclass(frozen=True, slots=True)
class Weights:
    """A weight vector on the simplex with the version recorded in every decision."""

    values: tuple[float, ...]
    version: str

    def as_array(self) -> np.ndarray:
        return np.asarray(self.values, dtype=np.float64)

    def as_dict(self) -> dict[str, float]:
        return dict(zip(COMPONENTS, self.values, strict=True))


@dataclass(slots=True)
class WeightLearner:
    """Accumulates feedback and updates the weights at most once per period."""

    weights: Weights
    cfg: LearningConfig = field(default_factory=LearningConfig)
    started_s: float = 0.0
    _grad_sum: np.ndarray = field(init=False)
    _loss_sum: float = field(init=False, default=0.0)
    _x_sum: np.ndarray = field(init=False)
    _n: int = field(init=False, default=0)
    _ema: np.ndarray = field(init=False)
    _last_update_s: float = field(init=False)
    _generation: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        k = len(self.weights.values)
        self._grad_sum = np.zeros(k)
        self._x_sum = np.zeros(k)
        self._ema = np.zeros(k)
        self._last_update_s = self.started_s
        self._generation = generation_of(self.weights.version)

    def restart_from(self, weights: Weights) -> None:
        """Continue from stored weights: the next update is their generation + 1."""
        self.weights = weights
        self._generation = generation_of(weights.version)

    @property
    def pending(self) -> int:
        """Feedback samples waiting for the next update."""
        return self._n

    def observe(self, components: np.ndarray, ttft_s: float, deadline_s: float) -> None:
        """Record one routed request's outcome (learned arm only; NaN TTFT is ignored)."""
        if not np.isfinite(ttft_s) or deadline_s <= 0:
            return
        loss = min(ttft_s / deadline_s, self.cfg.loss_cap) / self.cfg.loss_cap
        self._grad_sum += loss * components
        self._x_sum += components
        self._loss_sum += loss
        self._n += 1

    def observe_failure(self, components: np.ndarray) -> None:
        """A failed request counts as the worst loss."""
        self._grad_sum += components
        self._x_sum += components
        self._loss_sum += 1.0
        self._n += 1

    def maybe_update(self, now_s: float) -> Weights | None:
        """Apply accumulated feedback if a period has passed; returns the new weights."""
        if now_s - self._last_update_s < self.cfg.update_period_s:
            return None
        return self.update(now_s)

    def update(self, now_s: float) -> Weights | None:
        """Apply accumulated feedback now (a caller that keeps its own period); the new
        weights, or None with fewer than `min_feedback` samples."""
        self._last_update_s = now_s
        if self._n < self.cfg.min_feedback:
            return None
        n = self._n
        mean_loss = self._loss_sum / n
        # mean of (loss - mean_loss) * x, from the running sums
        grad = self._grad_sum / n - mean_loss * (self._x_sum / n)
        self._grad_sum[:] = 0.0
        self._x_sum[:] = 0.0
        self._loss_sum = 0.0
        self._n = 0
        self.weights = self._step(grad)
        return self.weights

    def _step(self, grad: np.ndarray) -> Weights:
        cfg = self.cfg
        self._ema = cfg.smoothing * self._ema + (1.0 - cfg.smoothing) * grad
        g = np.clip(self._ema, -cfg.gradient_clip, cfg.gradient_clip)
        # scale so the largest component moves by at most the clip, whatever the loss scale
        w = self.weights.as_array() * np.exp(-cfg.learning_rate * g / cfg.gradient_clip)
        w /= w.sum()
        w = (1.0 - cfg.floor) * w + cfg.floor / len(w)
        self._generation += 1
        values = tuple(float(x) for x in w)
        return Weights(values, version_of(self._generation, values))


def initial_weights(values: tuple[float, ...]) -> Weights:
    """The configured starting weights, generation 0."""
    return Weights(tuple(float(v) for v in values), version_of(0, values))


def version_of(generation: int, values: tuple[float, ...]) -> str:
    """`eg-<generation>-<digest of the values>`: a version names one weight set for good.
    As `eg-<generation>` alone, a restarted service (or a second replica) stored its own
    `eg-1` under an id the audit DB already held for other weights, and `audit explain`
    showed the first run's weights for the second run's decisions."""
    digest = hashlib.blake2b(repr(tuple(float(v) for v in values)).encode(), digest_size=4)
    return f"eg-{generation}-{digest.hexdigest()}"


_GENERATION = re.compile(r"eg-(\d+)(?:-[0-9a-f]+)?")


def generation_of(version: str) -> int:
    """The generation a version counts from (0 for a name not of this learner's)."""
    found = _GENERATION.fullmatch(version)
    return int(found.group(1)) if found else 0


def stored_weights(version: str, values: Mapping[str, float]) -> Weights | None:
    """A stored weight set to start from, if it names exactly the router's components
    with weights on the simplex (None otherwise: the configured start is used)."""
    if not isinstance(values, Mapping) or set(values) != set(COMPONENTS):
        return None
    try:
        ordered = tuple(float(values[c]) for c in COMPONENTS)
    except (TypeError, ValueError):  # a null or a string in a hand-edited row
        return None
    if not all(math.isfinite(v) and v >= 0 for v in ordered) or abs(sum(ordered) - 1) > 1e-6:
        return None
    return Weights(ordered, version)
