"""Hot-spot detector: Space-Saving guarantees, a 0.3-share flood, a shared system prefix."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from fakes.drive import run_seconds

from slaguard.guard.hot_spot import HotSpotDetector
from slaguard.guard.samples import GuardSample, prefix_identity
from slaguard.guard.space_saving import DecayedSpaceSaving
from slaguard.guard.verdicts import Action, Status

MOONCAKE = (
    Path(__file__).resolve().parents[1]
    / ".."
    / "shared"
    / "data"
    / "mooncake"
    / "conversation_trace.jsonl"
)


def _sample(at_s: float, prefix: str | None) -> GuardSample:
    return GuardSample(at_s, "t0", "h100", "m", True, 4.0, 0.2, prefix_id=prefix)


def _stream(
    rate: float, seconds: float, hot_share: float, hot_from_s: float, seed: int = 1
) -> list[GuardSample]:
    """Unique prompts at `rate`; from `hot_from_s` one prompt is `hot_share` of all arrivals."""
    rng = np.random.default_rng(seed)
    out: list[GuardSample] = []
    t = 0.0
    n = 0
    while True:
        t += float(rng.exponential(1.0 / rate))
        if t >= seconds:
            return out
        n += 1
        hot = t >= hot_from_s and rng.random() < hot_share
        blocks = (0, 7, 7, 7) if hot else (0, 1_000_000 + n)  # block 0: shared system prefix
        out.append(_sample(t, prefix_identity(blocks)))


def test_space_saving_bounds_hold_against_exact_counts() -> None:
    rng = np.random.default_rng(4)
    items = [f"p{int(z)}" for z in rng.zipf(1.3, 20_000) if z < 10_000]
    sketch = DecayedSpaceSaving(k=50, tau_s=1e9)  # no decay: plain counts
    for i, item in enumerate(items):
        sketch.add(item, i * 1e-3)
    exact = Counter(items)
    top = sketch.top(now_s=len(items) * 1e-3, n=10)
    assert top[0].item == exact.most_common(1)[0][0]
    for hitter in top:
        true = exact[hitter.item]
        assert hitter.lower_bound <= true * (1 + 1e-6) and true <= hitter.count * (1 + 1e-6)
    assert sketch.total(len(items) * 1e-3) == pytest.approx(len(items), rel=1e-6)


def test_decay_halves_weight_after_tau_ln2() -> None:
    sketch = DecayedSpaceSaving(k=4, tau_s=10.0)
    for _ in range(100):
        sketch.add("x", 0.0)
    assert sketch.total(10.0 * np.log(2)) == pytest.approx(50.0)
    # far-future arrivals rescale the landmark instead of overflowing
    sketch.add("y", 1e5)
    assert np.isfinite(sketch.total(1e5)) and sketch.top(1e5)[0].item == "y"


def test_hot_prompt_share_0_3_trips_within_10_s_and_not_before() -> None:
    det = HotSpotDetector()
    stream = _stream(rate=5.4, seconds=400, hot_share=0.3, hot_from_s=300)
    reports = list(run_seconds(det, stream, 1, 400, det.evaluate))
    trips = [(sec, v) for sec, r in reports for v in r.verdicts if v.action is Action.TRIP]
    assert trips, "the flood was not detected"
    first, verdict = trips[0]
    assert 300 <= first <= 310
    assert verdict.evidence["share"] >= 0.2 and verdict.evidence["trip_share"] == 0.2
    assert verdict.subject == "prefix:" + str(prefix_identity((0, 7, 7, 7)))


def test_shared_system_prefix_does_not_trip_on_the_real_mooncake_hour() -> None:
    if not MOONCAKE.exists():
        pytest.skip("shared Mooncake trace not present")
    rows = [json.loads(line) for line in MOONCAKE.read_text().splitlines() if line.strip()]
    samples = [
        _sample(r["timestamp"] / 1000.0, prefix_identity(tuple(r["hash_ids"]))) for r in rows
    ]
    assert Counter(r["hash_ids"][0] for r in rows).most_common(1)[0][1] == len(
        rows
    )  # block 0 everywhere
    det = HotSpotDetector()
    reports = list(run_seconds(det, samples, 1, int(samples[-1].at_s) + 1, det.evaluate))
    assert [v for _, r in reports for v in r.verdicts] == []
    assert sum(r.status is Status.OK for _, r in reports) > 2500  # judged most of the hour
    first_block_only = HotSpotDetector()
    for s, r in zip(samples[:500], rows[:500], strict=True):
        first_block_only.observe(_sample(s.at_s, str(r["hash_ids"][0])))
    assert (
        first_block_only.evaluate(samples[499].at_s).status is Status.ANOMALOUS
    )  # why we key on all blocks


def test_thin_traffic_never_trips() -> None:
    det = HotSpotDetector()
    stream = [_sample(float(t), "same") for t in range(0, 600, 2)]  # 0.5 req/s, all one prompt
    reports = list(run_seconds(det, stream, 1, 600, det.evaluate))
    assert {r.status for _, r in reports} == {Status.INSUFFICIENT}


def test_requests_without_prefix_dilute_the_share() -> None:
    det = HotSpotDetector()
    for i in range(600):
        det.observe(_sample(i * 0.1, "hot" if i % 10 == 0 else None))  # 10 % of traffic
    report = det.evaluate(60.0)
    assert report.status is Status.OK
    assert report.evidence["top_prefixes"][0]["share_upper_bound"] == pytest.approx(0.1, abs=0.03)
