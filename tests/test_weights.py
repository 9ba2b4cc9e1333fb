"""Online exponentiated-gradient weights: period, smoothing, simplex."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slaguard.scheduler.config import LearningConfig
from slaguard.scheduler.weights import (
    WeightLearner,
    Weights,
    generation_of,
    initial_weights,
    stored_weights,
    version_of,
)

START = initial_weights((0.2, 0.2, 0.2, 0.2, 0.2))
CFG = LearningConfig(update_period_s=60.0, min_feedback=10)


def feed(learner: WeightLearner, n: int, bad_component: int, rng: np.random.Generator) -> None:
    """Decisions whose `bad_component` scored high went badly (TTFT 2x deadline)."""
    for _ in range(n):
        x = rng.uniform(0, 1, 5)
        ttft = 2.0 if x[bad_component] > 0.5 else 0.5
        learner.observe(x, ttft, 1.0)


def test_no_update_before_the_period_or_on_thin_feedback() -> None:
    rng = np.random.default_rng(1)
    learner = WeightLearner(START, CFG)
    feed(learner, 100, 0, rng)
    assert learner.maybe_update(59.9) is None and learner.pending == 100
    thin = WeightLearner(START, CFG)
    feed(thin, 9, 0, rng)
    assert thin.maybe_update(60.0) is None


def test_weight_moves_away_from_the_component_blamed_by_feedback() -> None:
    rng = np.random.default_rng(2)
    learner = WeightLearner(START, CFG)
    feed(learner, 500, 3, rng)
    new = learner.maybe_update(60.0)
    assert new is not None and new.version == version_of(1, new.values)
    w = new.as_array()
    assert w[3] == pytest.approx(0.1925, abs=0.002)  # smoothed: a small first step
    assert w.sum() == pytest.approx(1.0)
    assert all(w[i] > 0.2 for i in (0, 1, 2, 4))
    assert learner.pending == 0
    for k in range(2, 8):  # the same evidence, period after period, keeps pushing
        feed(learner, 500, 3, rng)
        learner.maybe_update(60.0 * k)
    assert learner.weights.values[3] < 0.11 and generation_of(learner.weights.version) == 7


def test_one_outlier_batch_cannot_jump_the_weights() -> None:
    learner = WeightLearner(START, CFG)
    for _ in range(50):  # a single catastrophic batch, all blamed on component 0
        learner.observe(np.array([1.0, 0, 0, 0, 0]), 1e6, 1.0)
    for _ in range(50):
        learner.observe(np.array([0.0, 0, 0, 0, 1.0]), 0.0, 1.0)
    new = learner.maybe_update(60.0)
    assert new is not None
    # smoothed (EMA 0.7) and clipped: the weight moves by a bounded factor, not to zero
    assert 0.12 < new.values[0] < 0.2


def test_failures_count_as_the_worst_loss() -> None:
    learner = WeightLearner(START, CFG)
    for _ in range(20):
        learner.observe_failure(np.array([0, 0, 0, 1.0, 0]))
        learner.observe(np.array([1.0, 0, 0, 0, 0]), 0.1, 1.0)
    new = learner.maybe_update(60.0)
    assert new is not None and new.values[3] < 0.2 < new.values[0]


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(
        st.lists(
            st.tuples(st.lists(st.floats(0, 1), min_size=5, max_size=5), st.floats(0, 100)),
            min_size=10,
            max_size=30,
        ),
        min_size=1,
        max_size=6,
    )
)
def test_weights_stay_on_the_simplex_with_a_floor(
    batches: list[list[tuple[list[float], float]]],
) -> None:
    learner = WeightLearner(START, CFG)
    for k, batch in enumerate(batches, start=1):
        for x, ttft in batch:
            learner.observe(np.array(x), ttft, 1.0)
        learner.maybe_update(60.0 * k)
        w = learner.weights.as_array()
        assert w.sum() == pytest.approx(1.0)
        assert (w >= CFG.floor / 5 - 1e-12).all()


def test_a_version_names_its_weights_and_the_generation_counts_on() -> None:
    """`eg-1` alone named different weights in each run (and in each replica); the audit
    DB kept the first and showed it for every later run's decisions."""
    a, b = (0.2, 0.2, 0.2, 0.2, 0.2), (0.3, 0.1, 0.2, 0.2, 0.2)
    assert version_of(1, a) != version_of(1, b) and version_of(1, a) == version_of(1, a)
    assert version_of(1, a).startswith("eg-1-") and generation_of(version_of(12, a)) == 12
    assert generation_of("eg-3") == 3 and generation_of("w-2026-11-29T13") == 0
    learner = WeightLearner(Weights(b, version_of(4, b)), CFG)
    feed(learner, 500, 3, np.random.default_rng(2))
    new = learner.maybe_update(60.0)
    assert new is not None and generation_of(new.version) == 5
    assert stored_weights(new.version, new.as_dict()) == new
    assert stored_weights("x", {"compute": 1.0}) is None  # not the router's components
    assert stored_weights("x", dict.fromkeys(new.as_dict(), 0.5)) is None  # not on the simplex
    # a hand-edited row stopped the service from starting (TypeError)
    assert stored_weights("x", dict.fromkeys(new.as_dict())) is None  # type: ignore[arg-type]
    assert stored_weights("x", [0.2] * 5) is None  # type: ignore[arg-type]
