"""Card-tier test at like load: prompt lengths and served work on synthetic series."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from fakes.drive import run_seconds
from fakes.synthetic import Workload

from slaguard.guard.samples import GuardSample
from slaguard.guard.sliding_sum import SlidingSum
from slaguard.guard.tier_shift import tier_statistic
from slaguard.guard.ttft_zscore import TtftZscoreDetector
from slaguard.guard.verdicts import Action

FAULT_AT = 1200
END = FAULT_AT + 120
PROMPT = 1000


def _l40s_after_fault(s: GuardSample) -> bool:
    return s.card_type == "l40s" and s.at_s >= FAULT_AT


def _stream(
    seed: int, *, slow: float, longer: float, copies: int, tokens: bool, ramp_s: float = 0.0
) -> Iterator[GuardSample]:
    """Every sample has a 1,000-token prompt; from FAULT_AT the L40S tier's TTFT is `slow`
    times longer (reached linearly over `ramp_s`), its prompts `longer` times longer, and
    it gets `copies` times the requests."""

    def slowdown(s: GuardSample) -> float:
        if not _l40s_after_fault(s):
            return 1.0
        return 1.0 + (slow - 1.0) * min(1.0, (s.at_s - FAULT_AT) / ramp_s if ramp_s else 1.0)

    for s in Workload(seed=seed).samples(0, END, slowdown):
        hit = _l40s_after_fault(s)
        prompt = round(PROMPT * (longer if hit else 1.0)) if tokens else None
        for k in range(copies if hit else 1):
            yield dataclasses.replace(s, at_s=s.at_s + 0.01 * k, prompt_tokens=prompt)


def _tier_trips(seed: int, **kw: float | bool) -> list[int]:
    det = TtftZscoreDetector()
    reports = run_seconds(det, _stream(seed, **kw), 1, END, det.evaluate)  # type: ignore[arg-type]
    return [
        sec
        for sec, r in reports
        for v in r.verdicts
        if v.action is Action.TRIP and v.subject == "card:l40s"
    ]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_tier_handed_3x_longer_prompts_is_not_slow(seed: int) -> None:
    """TTFT 3x because the prompts are 3x longer: per prompt token nothing moved."""
    assert _tier_trips(seed, slow=3.0, longer=3.0, copies=1, tokens=True) == []


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_tier_handed_3x_the_work_is_loaded_not_slow(seed: int) -> None:
    """A burst sends the tier 3x the requests and its TTFT goes 3x as the queue builds (over
    20 s: waiting grows with the backlog, it does not jump with the first extra request)."""
    assert _tier_trips(seed, slow=3.0, longer=1.0, copies=3, tokens=True, ramp_s=20.0) == []


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_same_burst_without_prompt_lengths_trips_as_before(seed: int) -> None:
    """Without the load signal (prompt_tokens None) the tier test sees only TTFT."""
    trips = _tier_trips(seed, slow=3.0, longer=1.0, copies=3, tokens=False, ramp_s=20.0)
    assert trips and FAULT_AT <= trips[0] <= FAULT_AT + 35


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_3x_slowdown_at_equal_load_trips(seed: int) -> None:
    """Same prompts, same request rate, TTFT 3x: a slow tier, found within 25 evaluations."""
    trips = _tier_trips(seed, slow=3.0, longer=1.0, copies=1, tokens=True)
    assert trips and FAULT_AT <= trips[0] <= FAULT_AT + 25


def test_tier_statistic_is_ttft_per_thousand_prompt_tokens_with_a_floor() -> None:
    assert tier_statistic(0.4, None, 256) == 0.4
    assert tier_statistic(0.4, 4000, 256) == pytest.approx(0.1)
    assert tier_statistic(0.4, 10, 256) == pytest.approx(0.4 * 1000 / 256)


def test_sliding_sum_keeps_only_the_window() -> None:
    work = SlidingSum(5.0, 6)  # 30 s
    for sec in range(60):
        work.add("t", float(sec), 100.0)
    assert work.total("t", 59.0) == 3000.0  # slices 6..11: seconds 30..59
    assert work.total("t", 70.0) == 1500.0  # slices 9..14: seconds 45..59 still in
    work.add("t", 10.0, 1e6)  # older than the window: ignored
    assert work.total("t", 70.0) == 1500.0
    assert work.total("t", 200.0) == 0.0 and work.total("other", 0.0) == 0.0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_load_excuse_holds_a_window_and_ends_when_served_work_falls_below_usual(seed: int) -> None:
    """A 40 s burst (3x the requests), then a third of the usual requests: the tier is
    excused from the first evaluation its served work reaches 1.5x its usual rate, stays
    excused while the work is above usual (a backlog drains; at most a window after the
    last 1.5x reading), and the excuse ends at the first evaluation that sees the work
    below usual, not a whole window later."""
    turn = FAULT_AT + 40

    def stream() -> Iterator[GuardSample]:
        for i, s in enumerate(Workload(rate_per_s=16.0, seed=seed).samples(0, END)):
            s = dataclasses.replace(s, prompt_tokens=PROMPT)
            if s.card_type != "l40s" or s.at_s < FAULT_AT:
                yield s
            elif s.at_s < turn:
                yield from (dataclasses.replace(s, at_s=s.at_s + 0.01 * k) for k in range(3))
            elif i % 3 == 0:
                yield s

    det = TtftZscoreDetector()
    rows = [
        (sec, tier["load_ratio_to_baseline"], tier["loaded"])
        for sec, r in run_seconds(det, stream(), 1, END, det.evaluate)
        if (tier := r.evidence["tiers"].get("l40s/llama3.1-8b")) is not None
    ]
    assert all(not loaded for sec, _, loaded in rows if sec < FAULT_AT)
    known = [(sec, load, loaded) for sec, load, loaded in rows if load is not None]
    first = next(sec for sec, load, _ in known if load >= 1.5)
    assert FAULT_AT < first < FAULT_AT + 15
    assert all(loaded for sec, load, loaded in known if first <= sec and load >= 1.0)
    drained = next(sec for sec, load, _ in known if sec > first and load < 1.0)
    assert turn < drained < turn + 30
    assert not any(loaded for sec, _, loaded in rows if sec >= drained)
