"""A PromQL z-score alert rule's arithmetic, applied to a simulated TTFT series.

The rule an SRE would write without slaguard's in-process guard, per target:

    p99 = histogram_quantile(0.99,
            sum by (target, le) (rate(vllm:time_to_first_token_seconds_bucket[1m])))
    alert: (p99 - on() group_left() avg(p99)) / on() group_left() stddev(p99) > 3
    for: 1m            (evaluation_interval: 15s)

or the same with the 1-minute mean (`rate(_sum[1m]) / rate(_count[1m])`) for the p99, or
with avg and stddev taken per model (`avg by (model)`, matched `on (model)`).
Used by bench/guard_efficacy.py; tested in tests/test_sim_guard_promql.py.
"""

from __future__ import annotations

import numpy as np

from slaguard.sim.results import Results


def promql_zscore_firings(
    results: Results,
    n_targets: int,
    stat: str = "p99",
    threshold: float = 3.0,
    eval_s: float = 15.0,
    window_s: float = 60.0,
    for_s: float = 60.0,
    groups: list[str] | None = None,
) -> list[tuple[float, int]]:
    """When `(x - avg(x)) / stddev(x) > threshold` with `for: 1m` fires, per target.

    `groups` (one label per target, e.g. its model) makes avg and stddev run within each
    group (`avg by (model)` with `on (model) group_left`); None is the whole fleet.

    x is each target's TTFT p99 (or mean) over the last `window_s`, from the samples whose
    first token arrived in (t - window_s, t], evaluated every `eval_s` (Prometheus
    `histogram_quantile` over `rate(...[1m])`, here on exact samples: bucket interpolation
    would only blur it). avg and stddev (population, as PromQL's) run over the targets that
    have samples. An alert is pending from its first true evaluation and fires once it has
    been true at every evaluation for `for_s`. Returns (firing time, target index).
    """
    ok = np.isfinite(results.first_token_s) & (results.target >= 0)
    order = np.argsort(results.first_token_s[ok], kind="stable")
    when = results.first_token_s[ok][order]
    ttft, target = results.ttft_s[ok][order], results.target[ok][order]
    per_target = [(when[target == i], ttft[target == i]) for i in range(n_targets)]
    end = float(when[-1]) if len(when) else 0.0
    pending: dict[int, float] = {}
    firings: list[tuple[float, int]] = []
    for k in range(1, int(end // eval_s) + 2):
        t = k * eval_s
        values: dict[int, float] = {}
        for i, (w, v) in enumerate(per_target):
            lo, hi = np.searchsorted(w, [t - window_s, t], side="right")
            if hi > lo:
                chunk = v[lo:hi]
                values[i] = float(np.percentile(chunk, 99) if stat == "p99" else chunk.mean())
        label = groups or [""] * n_targets
        true_now: set[int] = set()
        for group in set(label):
            members = {i: x for i, x in values.items() if label[i] == group}
            xs = np.array(list(members.values()))
            sd = float(xs.std()) if len(xs) > 1 else 0.0
            true_now |= {
                i for i, x in members.items() if sd > 0 and (x - xs.mean()) / sd > threshold
            }
        for i in [i for i in pending if i not in true_now]:
            del pending[i]
        for i in true_now:
            since = pending.setdefault(i, t)
            if t - since == for_s:
                firings.append((t, i))
    return firings
