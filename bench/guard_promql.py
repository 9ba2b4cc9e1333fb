"""PromQL z-score alert rules' arithmetic, applied to a simulated TTFT series.

The rules an SRE would write without slaguard's in-process guard. Each starts from a
recording rule evaluated every 15 s over a 1-minute window, per target or per card type:

    job:ttft_p99:1m = histogram_quantile(0.99,
        sum by (target, le) (rate(vllm:time_to_first_token_seconds_bucket[1m])))
                                  (or `sum by (card_type, le)`; or the 1-minute mean,
                                   `rate(_sum[1m]) / rate(_count[1m])`)

Cross-sectional (`cross_zscore_firings`): each series against the fleet at that instant,
    (x - on() group_left() avg(x)) / on() group_left() stddev(x) > 3
or with avg and stddev per model (`avg by (model)`, matched `on (model)`).

Against its own history (`history_zscore_firings`, the usual anomaly-detection pattern):
    (x - avg_over_time(x[1h])) / stddev_over_time(x[1h]) > 3

Every alert has `for: 1m` (evaluation_interval: 15s). `promql_firings` applies every rule
to a simulated run of a fleet, `promql_summary` judges them against a fault's window.
Used by bench/guard_efficacy.py; tested in tests/test_sim_guard_promql.py.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from slaguard.fleet import Fleet
from slaguard.sim.results import Results

Firing = tuple[float, str]
"""(firing time, series label)."""


@dataclass(frozen=True)
class Recorded:
    """A recording rule's output: one value per evaluation (rows) and series (columns),
    NaN where the window held no sample (the series is absent at that evaluation)."""

    times: np.ndarray
    labels: tuple[str, ...]
    values: np.ndarray


def record(
    results: Results,
    series: Sequence[str],
    stat: str = "p99",
    eval_s: float = 15.0,
    window_s: float = 60.0,
) -> Recorded:
    """The recording rule: every `eval_s`, the TTFT p99 (or mean) of the samples whose first
    token arrived in (t - window_s, t], pooled by label (`series[i]` labels target i; targets
    sharing a label are summed, as `sum by (card_type, le)`). Exact samples stand in for
    `histogram_quantile` over buckets, whose interpolation would only blur them.
    Evaluations run from `eval_s` to just past the last first token."""
    labels = tuple(dict.fromkeys(series))
    column = np.array([labels.index(s) for s in series])
    ok = np.isfinite(results.first_token_s) & (results.target >= 0)
    order = np.argsort(results.first_token_s[ok], kind="stable")
    when = results.first_token_s[ok][order]
    ttft, col = results.ttft_s[ok][order], column[results.target[ok][order]]
    end = float(when[-1]) if len(when) else 0.0
    times = eval_s * np.arange(1, int(end // eval_s) + 2)
    values = np.full((len(times), len(labels)), np.nan)
    for j in range(len(labels)):
        w, v = when[col == j], ttft[col == j]
        lo = np.searchsorted(w, times - window_s, side="right")
        hi = np.searchsorted(w, times, side="right")
        for k in np.flatnonzero(hi > lo):
            chunk = v[lo[k] : hi[k]]
            values[k, j] = np.percentile(chunk, 99) if stat == "p99" else chunk.mean()
    return Recorded(times, labels, values)


def zscore_above(x: np.ndarray, pool: np.ndarray, threshold: float) -> np.ndarray:
    """`(x - avg(pool)) / stddev(pool) > threshold` along axis 0 of `pool`, skipping NaN
    (absent samples); stddev is the population one, as PromQL's. A zero stddev makes
    PromQL divide 0 by 0 (NaN, never > threshold): false here too, with a relative
    tolerance so that float rounding of a constant series is not read as spread."""
    present = np.isfinite(pool)
    n = np.maximum(present.sum(axis=0), 1)
    mean = np.where(present, pool, 0.0).sum(axis=0) / n
    var = np.where(present, (pool - mean) ** 2, 0.0).sum(axis=0) / n
    sd = np.sqrt(var)
    spread = sd > 1e-9 * np.abs(mean)
    z = (x - mean) / np.where(spread, sd, 1.0)
    return np.asarray(np.isfinite(x) & spread & (z > threshold), dtype=bool)


def alert_firings(recorded: Recorded, condition: np.ndarray, for_s: float = 60.0) -> list[Firing]:
    """Prometheus `for`: an alert is pending from its first true evaluation, fires once it
    has been true at every evaluation for `for_s`, and a false (or absent) evaluation
    resets it. One firing per pending episode, sorted by time then label."""
    firings: list[Firing] = []
    for j, label in enumerate(recorded.labels):
        since: float | None = None
        fired = False
        for t, now in zip(recorded.times, condition[:, j], strict=True):
            if not now:
                since, fired = None, False
                continue
            since = float(t) if since is None else since
            if not fired and t - since >= for_s - 1e-9:
                firings.append((float(t), label))
                fired = True
    order = {label: j for j, label in enumerate(recorded.labels)}
    return sorted(firings, key=lambda f: (f[0], order[f[1]]))


def cross_zscore_firings(
    results: Results,
    series: Sequence[str],
    stat: str = "p99",
    threshold: float = 3.0,
    eval_s: float = 15.0,
    window_s: float = 60.0,
    for_s: float = 60.0,
    groups: Mapping[str, str] | None = None,
) -> list[Firing]:
    """Each series z-scored against the others at the same evaluation. `groups` (label ->
    group, e.g. the target's model) makes avg and stddev run within each group (`avg by
    (model)` with `on (model) group_left`); None is the whole fleet."""
    rec = record(results, series, stat, eval_s, window_s)
    group = [groups[label] if groups else "" for label in rec.labels]
    condition = np.zeros(rec.values.shape, dtype=bool)
    for g in set(group):
        cols = [j for j, h in enumerate(group) if h == g]
        x = rec.values[:, cols]
        condition[:, cols] = zscore_above(x.T, x.T, threshold).T
    return alert_firings(rec, condition, for_s)


def history_zscore_firings(
    results: Results,
    series: Sequence[str],
    stat: str = "p99",
    threshold: float = 3.0,
    eval_s: float = 15.0,
    window_s: float = 60.0,
    history_s: float = 3600.0,
    for_s: float = 60.0,
    prior: Results | None = None,
) -> list[Firing]:
    """Each series z-scored against its own recorded values over (t - history_s, t], the
    current one included (as `avg_over_time(x[1h])` includes it). Without `prior` the
    recording starts with the simulation, so until `history_s` has passed the history is
    what exists so far, as in a Prometheus started with the fleet: with n values, one of
    them scores at most sqrt(n - 1) (Samuelson), so no evaluation is true before the 11th
    (165 s). `prior`, a clean run of the same fleet, stands for the hours before: its
    recorded values, repeated, fill the history the run has not recorded yet (a
    Prometheus that has watched this fleet for a while)."""
    rec = record(results, series, stat, eval_s, window_s)
    rows = round(history_s / eval_s)
    warm = np.empty((0, len(rec.labels)))
    if prior is not None:
        before = record(prior, series, stat, eval_s, window_s)
        assert before.labels == rec.labels, "the prior run must record the same series"
        reps = -(-rows // max(len(before.times), 1))
        warm = np.tile(before.values, (reps, 1))[-rows:]
    condition = np.zeros(rec.values.shape, dtype=bool)
    for k, t in enumerate(rec.times):
        lo = int(np.searchsorted(rec.times, t - history_s, side="right"))
        own = rec.values[lo : k + 1]
        need = min(rows - len(own), len(warm))
        pool = np.vstack((warm[len(warm) - need :], own)) if need > 0 else own
        condition[k] = zscore_above(rec.values[k], pool, threshold)
    return alert_firings(rec, condition, for_s)


def promql_firings(
    results: Results, fleet: Fleet, prior: Results | None = None
) -> dict[str, list[Firing]]:
    """Every PromQL rule's firings (bench/guard_promql.py; z > 3, 15 s evaluations, 1-minute
    windows, for: 1m): per target against the fleet (p99, mean) and against its model's
    targets; per target and per card type against its own last hour (p99), recorded from
    the start of the run and, with `prior` (a clean run of the same policy), with that
    run's values as the hour before ("warm")."""
    ids, cards = fleet.target_ids, fleet.card_ids
    models = {t.id: t.model.id for t in fleet}
    rules = {
        "p99>3": cross_zscore_firings(results, ids, "p99"),
        "mean>3": cross_zscore_firings(results, ids, "mean"),
        "p99>3 by model": cross_zscore_firings(results, ids, "p99", groups=models),
        "p99>3 vs own 1h": history_zscore_firings(results, ids, "p99"),
        "p99>3 vs own 1h by card": history_zscore_firings(results, cards, "p99"),
    }
    if prior is not None:
        rules["p99>3 vs own 1h, warm"] = history_zscore_firings(results, ids, "p99", prior=prior)
        rules["p99>3 vs own 1h by card, warm"] = history_zscore_firings(
            results, cards, "p99", prior=prior
        )
    return rules


def promql_summary(
    results: Results,
    fleet: Fleet,
    start_s: float = math.inf,
    end_s: float = math.inf,
    targets: str = "",
    prior: Results | None = None,
) -> dict[str, Any]:
    """Each rule's firings before `start_s`, and its first firing in [start, end] on a
    series covering a target whose id contains `targets` (a card type's series covers
    its targets; an alert on another series detects nothing)."""
    covers = {t.id: [t.id] for t in fleet} | {
        card: [t.id for t in fleet if t.card.id == card] for card in fleet.card_types()
    }
    out: dict[str, Any] = {}
    for name, fires in promql_firings(results, fleet, prior).items():
        first = next(
            (
                t
                for t, label in fires
                if start_s <= t <= end_s and any(targets in i for i in covers[label])
            ),
            None,
        )
        out[name] = {
            "firings_before": [(t, label) for t, label in fires if t < start_s],
            "first_in_window_s": first,
            "delay_s": None if first is None else first - start_s,
        }
    return out
