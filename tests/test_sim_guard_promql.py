"""The PromQL z-score rules of bench/guard_efficacy.py on series with known answers."""

from __future__ import annotations

import importlib.util
import math
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from slaguard.fleet import load_fleet
from slaguard.sim.results import Results

_PATH = Path(__file__).resolve().parents[1] / "bench" / "guard_promql.py"
_SPEC = importlib.util.spec_from_file_location("guard_promql", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
promql = importlib.util.module_from_spec(_SPEC)
sys.modules["guard_promql"] = promql
_SPEC.loader.exec_module(promql)

TARGETS = 19
IDS = [str(i) for i in range(TARGETS)]
CARDS = ["slow"] * 6 + ["fast"] * 13
"""Six targets of one card type (the fleet's six L40S), thirteen of others."""


def series(ttft: Callable[[int, int], float], seconds: int = 400) -> Results:
    """One sample per target per second (first token at t + 0.5), TTFT from `ttft(i, t)`."""
    rows = [(t + 0.5, i, ttft(i, t)) for t in range(seconds) for i in range(TARGETS)]
    res = Results.empty(len(rows), load_fleet())
    res.first_token_s[:] = [r[0] for r in rows]
    res.target[:] = [r[1] for r in rows]
    res.ttft_s[:] = [r[2] for r in rows]
    return res


def test_one_outlier_fires_one_minute_after_its_first_true_evaluation() -> None:
    """From 100 s target 0 is 10x slower: its 1-minute p99 is the outlier at the 105 s
    evaluation (z = sqrt(18) = 4.24 > 3 with one outlier of 19), so it fires at 165 s."""
    res = series(lambda i, t: 1.0 if i == 0 and t >= 100 else 0.1)
    assert promql.cross_zscore_firings(res, IDS, "p99") == [(165.0, "0")]
    assert promql.cross_zscore_firings(res, IDS, "mean") == [(165.0, "0")]
    assert promql.cross_zscore_firings(res, IDS, "p99", threshold=4.3) == []


def test_a_shifted_tier_never_stands_out_of_the_fleet() -> None:
    """Six of 19 targets 3x slower: each is z = sqrt(13/6) = 1.47 from the fleet."""
    res = series(lambda i, t: 0.3 if i < 6 and t >= 100 else 0.1)
    assert promql.cross_zscore_firings(res, IDS, "p99") == []
    z = (0.3 - (6 * 0.3 + 13 * 0.1) / 19) / np.std([0.3] * 6 + [0.1] * 13)
    assert math.isclose(z, math.sqrt(13 / 6))


def test_a_condition_shorter_than_for_never_fires_and_the_clock_restarts() -> None:
    """Target 3 has one slow request at 100.5 s: true while it is in the 1-minute window
    (evaluations 105-150 s, 45 s < for: 1m), so it stays pending and resolves; slow again
    from 300.5 s, it fires once at 375 s (pending since the 315 s evaluation)."""
    res = series(lambda i, t: 1.0 if i == 3 and (t == 100 or t >= 300) else 0.1)
    assert promql.cross_zscore_firings(res, IDS, "p99") == [(375.0, "3")]
    assert promql.cross_zscore_firings(res, IDS, "mean") == [(375.0, "3")]


def test_a_step_against_its_own_history_fires_one_minute_after_it_shows() -> None:
    """The six slow-card targets 3x slower from 1,000 s. The 1,005 s evaluation is the
    first whose window holds slow samples (1000.5-1004.5 s: 5 of 60, above the p99's
    rank); before it 66 values (15-990 s) of 0.1. With k stepped values among 66 + k the
    step scores sqrt(66 / k): 8.1, 5.7, 4.7, 4.1, 3.6 at 1,005-1,065 s, so it is pending
    from 1,005 s and fires at 1,065 s, per target and pooled per card type alike."""
    res = series(lambda i, t: 0.3 if i < 6 and t >= 1000 else 0.1, seconds=1200)
    fired = promql.history_zscore_firings(res, IDS, "p99")
    assert fired == [(1065.0, str(i)) for i in range(6)]
    assert promql.history_zscore_firings(res, CARDS, "p99") == [(1065.0, "slow")]
    assert math.sqrt(66 / 5) > 3 > math.sqrt(66 / 8)


def test_a_step_is_absorbed_by_a_history_too_short_for_it() -> None:
    """The same step against 690 s of history (46 values): the fifth stepped value scores
    sqrt(41 / 5) = 2.86 < 3 at 1,065 s, so the alert resolves before `for: 1m`; against
    765 s (51 values) it scores sqrt(46 / 5) = 3.03 and fires at 1,065 s. Started
    at 100 s, the step has 6 values before it: sqrt(6) = 2.45 < 3, never true at all."""
    late = series(lambda i, t: 0.3 if i < 6 and t >= 1000 else 0.1, seconds=1200)
    assert promql.history_zscore_firings(late, CARDS, "p99", history_s=690.0) == []
    assert promql.history_zscore_firings(late, CARDS, "p99", history_s=765.0) == [(1065.0, "slow")]
    early = series(lambda i, t: 0.3 if i < 6 and t >= 100 else 0.1)
    assert promql.history_zscore_firings(early, CARDS, "p99") == []


def test_a_clean_series_never_fires_against_its_own_history() -> None:
    """Constant TTFT: stddev_over_time is 0 and PromQL's 0/0 is NaN, never > 3. One slow
    request on target 0 at 837.5 s lifts its 1-minute p99 at the four evaluations whose
    window holds it (840-885 s; against 55 values of 0.1 it scores sqrt(55 / k) >= 3.7):
    pending for 45 s < for: 1m, it resolves; with `for: 45s` it would fire at 885 s."""
    flat = series(lambda i, t: 0.1, seconds=1200)
    assert promql.history_zscore_firings(flat, IDS, "p99") == []
    spike = series(lambda i, t: 1.0 if i == 0 and t == 837 else 0.1, seconds=1200)
    assert promql.history_zscore_firings(spike, IDS, "p99") == []
    assert promql.history_zscore_firings(spike, IDS, "p99", for_s=45.0) == [(885.0, "0")]


def test_a_warm_history_lets_an_early_step_fire() -> None:
    """The step from 100 s that a fresh recording absorbs (6 values of history) fires with
    a clean run's values standing in for the hour before: at 105 s one stepped value among
    240 scores sqrt(239) > 3, and k of them keep scoring sqrt((240 - k) / k) > 3 while k <
    24, so it is pending from 105 s and fires at 165 s, per target and per card type."""
    early = series(lambda i, t: 0.3 if i < 6 and t >= 100 else 0.1)
    clean = series(lambda i, t: 0.1 + 0.001 * (t % 7), seconds=438)
    assert promql.history_zscore_firings(early, CARDS, "p99") == []
    assert promql.history_zscore_firings(early, CARDS, "p99", prior=clean) == [(165.0, "slow")]
    fired = promql.history_zscore_firings(early, IDS, "p99", prior=clean)
    assert fired == [(165.0, str(i)) for i in range(6)]
    assert promql.history_zscore_firings(clean, IDS, "p99", prior=clean) == []
