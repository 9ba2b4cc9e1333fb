"""Card-tier test at like load: prompt lengths and served work on synthetic series."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
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
    return _l40s_trip_seconds(det, det, _stream(seed, **kw))


def _l40s_trip_seconds(det: TtftZscoreDetector, fed: object, items: Iterable[object]) -> list[int]:
    """The seconds at which `det`, fed `items` through `fed`, trips the L40S tier."""
    reports = run_seconds(fed, items, 1, END, det.evaluate)  # type: ignore[arg-type]
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


@dataclass(frozen=True)
class _Handed:
    """A request routed to a tier (its prompt tokens handed to it), at its routing."""

    at_s: float
    card_type: str
    model_id: str
    prompt_tokens: int


class _Feed:
    """Finished requests to `observe`, routing decisions to `observe_handed`."""

    def __init__(self, det: TtftZscoreDetector) -> None:
        self.det = det

    def observe(self, item: GuardSample | _Handed) -> None:
        if isinstance(item, GuardSample):
            self.det.observe(item)
        else:
            self.det.observe_handed(item.at_s, item.card_type, item.model_id, item.prompt_tokens)


def _handed_stream(seed: int, *, slow: float, handed: float, ramp_s: float) -> Iterator[object]:
    """Every request is handed to its tier as it arrives and answered with a 1,000-token
    prompt; from FAULT_AT the L40S tier is handed `handed` times its usual work (extra
    requests it never answers within the run: a saturated tier serves no more, its served
    work stays flat) and its TTFT reaches `slow` times over `ramp_s`."""
    extra = 0.0
    for s in _stream(seed, slow=slow, longer=1.0, copies=1, tokens=True, ramp_s=ramp_s):
        copies = 1
        if _l40s_after_fault(s):
            extra += handed
            copies = int(extra)
            extra -= copies
        for k in range(copies):
            yield _Handed(s.at_s - 0.001 * (k + 1), s.card_type, s.model_id, PROMPT)
        yield s


def _handed_trips(items: Iterable[object]) -> list[int]:
    det = TtftZscoreDetector()
    return _l40s_trip_seconds(det, _Feed(det), items)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_saturated_tier_handed_2_5x_its_usual_work_is_loaded_not_slow(seed: int) -> None:
    """A surge hands the tier 2.5x its usual work; saturated, it serves no more than usual
    (served work flat) while its queue and TTFT grow 3x over 20 s: the work handed to it
    excuses it (the load_spike scenario's H100 trip, served work 1.12x its usual)."""
    assert _handed_trips(_handed_stream(seed, slow=3.0, handed=2.5, ramp_s=20.0)) == []


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("handed", [1.0, 0.5])
def test_3x_slowdown_handed_the_same_or_less_work_trips(seed: int, handed: float) -> None:
    """A 3x slower tier is handed the same work (round-robin) or less (the learned router
    moves load away): the handed work excuses nothing, found within 25 evaluations."""
    trips = _handed_trips(_handed_stream(seed, slow=3.0, handed=handed, ramp_s=0.0))
    assert trips and FAULT_AT <= trips[0] <= FAULT_AT + 25


def _surge_then_its_queue(seed: int) -> Iterator[object]:
    """The L40S tier is handed 2.5x its usual work for 40 s from FAULT_AT while it serves
    no more than usual (its TTFT 3x as the queue builds); for the 30 s after, the router
    hands it half its usual work and it answers 0.8x its usual requests, a quarter of
    the usual on time and the rest the surge's queued ones, 5-40 s late (the `load_spike`
    scenario's H100 tier after the surge); then its usual work again."""
    end = FAULT_AT + 40
    drained = end + 30
    rng = np.random.default_rng(seed + 200)
    extra = 0.0
    items: list[tuple[float, int, object]] = []
    for i, s in enumerate(_stream(seed, slow=1.0, longer=1.0, copies=1, tokens=True)):
        hit = s.card_type == "l40s" and FAULT_AT <= s.at_s < drained
        if not hit:
            items.append(
                (s.at_s - 0.001, i, _Handed(s.at_s - 0.001, s.card_type, s.model_id, PROMPT))
            )
            items.append((s.at_s, i, s))
            continue
        extra += 2.5 if s.at_s < end else 0.5
        for k in range(int(extra)):
            items.append(
                (s.at_s - 0.001 * (k + 1), i, _Handed(s.at_s, s.card_type, s.model_id, PROMPT))
            )
        extra -= int(extra)
        if s.at_s < end:
            queue = 1.0 + 2.0 * min(1.0, (s.at_s - FAULT_AT) / 20.0)
            items.append((s.at_s, i, dataclasses.replace(s, ttft_s=s.ttft_s * queue)))
            continue
        draw = rng.random()
        if draw < 0.25:  # a new request, on time
            items.append((s.at_s, i, s))
        elif draw < 0.8:  # a queued one of the surge
            late = float(rng.uniform(5.0, min(40.0, s.at_s - FAULT_AT)))
            items.append((s.at_s, i, dataclasses.replace(s, ttft_s=late, sla_met=False)))
    yield from (item for _, _, item in sorted(items, key=lambda x: (x[0], x[1])))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_tier_answering_the_queue_of_its_load_late_stays_excused(seed: int) -> None:
    """After the surge the tier's handed and served work fall below usual, yet it is still
    answering the surge's queued requests: it stays loaded while it does (within a slice
    of the last such answer after a wait of at least a slice), so no trip verdict comes
    while it works the queue off (without the rule seeds 1 and 2 have 5 and 11 in that
    time, each holding for the breaker's 3 evaluations; seed 3 none). What it does not
    cover: once the last late answer is out, the window still holds the late ones for a
    while (seed 2 has one trip verdict 4 s after the queue's end; docs/guard.md)."""
    trips = _handed_trips(_surge_then_its_queue(seed))
    assert not [sec for sec in trips if sec < FAULT_AT + 70]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_load_excuse_holds_a_window_and_ends_when_served_work_falls_below_usual(seed: int) -> None:
    """A 40 s burst (3x the requests), then a third of the usual requests: the tier is
    excused from the first evaluation its served work reaches `tier_max_load_ratio` x its
    usual rate, stays excused while the work is above usual (a backlog drains; at most a
    window after the last such reading), and the excuse ends at the first evaluation that
    sees the work below usual, not a whole window later. Before the burst the steady tier
    (~5 requests/s) is excused by Poisson noise alone in at most 8 % of evaluations (0 %
    with the limit at 1.5, 3-7 % at 1.25, 5-13 % at 1.2: the price of excusing the clean
    Mooncake hour's overload, docs/guard.md)."""
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
    steady = [loaded for sec, _, loaded in rows if sec < FAULT_AT - 30]
    assert len(steady) > 1000 and sum(steady) <= 0.08 * len(steady)
    known = [(sec, load, loaded) for sec, load, loaded in rows if load is not None]
    limit = det.config.tier_max_load_ratio
    first = next(sec for sec, load, _ in known if sec > FAULT_AT and load >= limit)
    assert FAULT_AT < first < FAULT_AT + 15
    assert all(loaded for sec, load, loaded in known if first <= sec and load >= 1.0)
    drained = next(sec for sec, load, _ in known if sec > first and load < 1.0)
    assert turn < drained < turn + 30
    assert not any(loaded for sec, _, loaded in rows if sec >= drained)


def _rest_faster_tier_noisier(seed: int) -> Iterator[GuardSample]:
    """From FAULT_AT the rest of the fleet answers 2.5x faster (prefix-cache hits) and the
    L40S tier's TTFT spreads wide (lognormal sigma 1.2 instead of 0.5, overloaded queues)
    around 1.8x its old median: the tier is far above the rest (~4.5x) and its median a
    little over `tier_min_ratio` times its own, well inside its own spread."""
    noise = np.random.default_rng(seed + 100)

    def factor(s: GuardSample) -> float:
        if s.at_s < FAULT_AT:
            return 1.0
        if s.card_type != "l40s":
            return 0.4
        return 1.8 * float(np.exp(noise.normal(0.0, 1.2)))

    yield from Workload(seed=seed).samples(0, END, factor)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_tier_left_behind_by_a_faster_fleet_is_not_slow_within_its_own_noise(
    seed: int,
) -> None:
    """Its own shift must be significant too (the Mooncake hour's false trip, once the
    simulator cached prefixes from the first token: L40S 1.79x its own, the rest 0.44x).
    Effect sizes and the Z against the rest say "slow" in 14-56 evaluations per seed;
    the Z of the tier against its own baseline, on its own spread, never does."""
    det = TtftZscoreDetector()
    reports = list(run_seconds(det, _rest_faster_tier_noisier(seed), 1, END, det.evaluate))
    tiers = [r.evidence["tiers"].get("l40s/llama3.1-8b") for _, r in reports]
    looks_slow = [
        t
        for t in tiers
        if t is not None
        and min(t["ratio_vs_rest"], t["tier_ratio_to_baseline"]) >= 1.75
        and t["z"] >= 4.5
        and not t["loaded"]
    ]
    assert len(looks_slow) >= 10
    assert max(t["z_own"] for t in looks_slow) < 4.5
    assert [v for _, r in reports for v in r.verdicts if v.action is Action.TRIP] == []
