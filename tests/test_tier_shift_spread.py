"""The tier test's standard errors: each median on its own spread, capped from outside."""

from __future__ import annotations

import math

import numpy as np
import pytest

from slaguard.guard.config import TtftZscoreConfig
from slaguard.guard.tier_shift import TierShift

TIER, REST = ("l40s", "m"), ("h100", "m")


def _window(tier_sigma: float, rest_sigma: float, shift: float) -> TierShift:
    """A 30 s window holding 200 baseline-normalised ratios per side: the rest lognormal
    around 1 with `rest_sigma`, the tier around `shift` with `tier_sigma`."""
    window = TierShift(TtftZscoreConfig(), "ttft_zscore")
    rng = np.random.default_rng(5)
    for i in range(200):
        at = 1.0 + i * 0.1
        window.add(f"l40s-{i % 2}", TIER, at, shift * math.exp(rng.normal(0, tier_sigma)), None)
        window.add(f"h100-{i % 2}", REST, at, math.exp(rng.normal(0, rest_sigma)), None)
    return window


def _row(window: TierShift, caps: dict[tuple[str, str], float] | None = None) -> dict:
    _, evidence = window.evaluate(25.0, caps)
    return evidence["tiers"]["l40s/m"]


def test_a_narrow_tier_is_scored_on_its_own_spread_not_the_rests() -> None:
    """Tier sigma 0.3 against the rest's 0.6: the tier's half of the SE uses 0.3, so the Z
    against the rest is larger than on the pooled 0.6 by sqrt(2 / (0.25 + 1)) = 1.26."""
    row = _row(_window(0.3, 0.6, 1.5))
    assert row["log_spread"] == pytest.approx(0.3, rel=0.15)
    assert row["rest_log_spread"] == pytest.approx(0.6, rel=0.15)
    n, m = row["samples"], row["rest_samples"]
    diff = math.log(row["ratio_vs_rest"])
    own, rest = row["log_spread"], row["rest_log_spread"]
    assert row["z"] == pytest.approx(
        diff / (1.2533 * math.sqrt(own**2 / n + rest**2 / m)), rel=0.02
    )
    pooled = diff / (1.2533 * rest * math.sqrt(1 / n + 1 / m))
    assert row["z"] / pooled == pytest.approx(1.26, rel=0.1)


def test_a_tier_wider_than_the_rest_is_scored_on_the_rests_spread() -> None:
    """The tier's spread counts at most the rest's: a wide tier is judged as before."""
    row = _row(_window(0.9, 0.4, 1.5))
    n, m = row["samples"], row["rest_samples"]
    diff, rest = math.log(row["ratio_vs_rest"]), row["rest_log_spread"]
    assert row["log_spread"] > 1.5 * rest
    assert row["z"] == pytest.approx(diff / (1.2533 * rest * math.sqrt(1 / n + 1 / m)), rel=0.02)


def test_a_spread_cap_from_a_longer_window_raises_z_own_by_the_ratio_of_spreads() -> None:
    """A cap below the window's own spread replaces it in `z_own` (and the evidence); a
    cap above it changes nothing."""
    window = _window(0.6, 0.6, 2.0)
    wide = _row(window)
    own = window.own_spreads[TIER]
    narrow = _row(window, {TIER: own / 2})
    assert narrow["log_spread"] == pytest.approx(own / 2, rel=1e-3)
    assert narrow["z_own"] == pytest.approx(2 * wide["z_own"], rel=1e-3)
    assert narrow["z"] > wide["z"]
    assert _row(window, {TIER: own * 2}) == wide
