"""The PromQL z-score rule of bench/guard_efficacy.py on series with known answers."""

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
    assert promql.promql_zscore_firings(res, TARGETS, "p99") == [(165.0, 0)]
    assert promql.promql_zscore_firings(res, TARGETS, "mean") == [(165.0, 0)]
    assert promql.promql_zscore_firings(res, TARGETS, "p99", threshold=4.3) == []


def test_a_shifted_tier_never_stands_out_of_the_fleet() -> None:
    """Six of 19 targets 3x slower: each is z = sqrt(13/6) = 1.47 from the fleet."""
    res = series(lambda i, t: 0.3 if i < 6 and t >= 100 else 0.1)
    assert promql.promql_zscore_firings(res, TARGETS, "p99") == []
    z = (0.3 - (6 * 0.3 + 13 * 0.1) / 19) / np.std([0.3] * 6 + [0.1] * 13)
    assert math.isclose(z, math.sqrt(13 / 6))


def test_a_condition_shorter_than_for_never_fires_and_the_clock_restarts() -> None:
    """Target 3 has one slow request at 100.5 s: true while it is in the 1-minute window
    (evaluations 105-150 s, 45 s < for: 1m), so it stays pending and resolves; slow again
    from 300.5 s, it fires once at 375 s (pending since the 315 s evaluation)."""
    res = series(lambda i, t: 1.0 if i == 3 and (t == 100 or t >= 300) else 0.1)
    assert promql.promql_zscore_firings(res, TARGETS, "p99") == [(375.0, 3)]
    assert promql.promql_zscore_firings(res, TARGETS, "mean") == [(375.0, 3)]
