"""Invariants that hold for any state and request (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from slaguard.fleet import Priority, Request, load_fleet
from slaguard.scheduler.core import Scheduler
from slaguard.scheduler.explain import Outcome, Reason
from slaguard.scheduler.rollout import LEARNED, ROUND_ROBIN, FleetMode, ModeKind

FLEET = load_fleet()
MODELS = sorted({t.model.id for t in FLEET})

target_state = st.tuples(
    st.floats(0, 1.2),
    st.floats(0, 80),
    st.floats(-2, 6),
    st.booleans(),
    st.booleans(),
    st.floats(0, 3),
)
requests = st.builds(
    Request,
    request_id=st.text("abcdef0123456789", min_size=1, max_size=12),
    prompt_tokens=st.integers(0, 140_000),
    max_new_tokens=st.integers(0, 4096),
    model_id=st.sampled_from(MODELS),
    priority=st.sampled_from(list(Priority)),
    deadline_s=st.floats(0.1, 30),
    prefix_id=st.one_of(st.none(), st.sampled_from(["p1", "p2"])),
)
modes = st.sampled_from([ROUND_ROBIN, LEARNED, FleetMode(ModeKind.ROLLOUT, 50)])


def _apply(sched: Scheduler, states: list[tuple[float, float, float, bool, bool, float]]) -> None:
    for t, (kv_frac, queue, z, healthy, demoted, age) in zip(FLEET, states, strict=False):
        sched.state.refresh(
            t.index, 10.0 - age, kv_used_gb=kv_frac * t.kv_budget_gb, queue_depth=queue
        )
        sched.state.set_jitter({t.index: z})
        sched.state.set_healthy(t.index, healthy)
        sched.state.set_demoted(t.index, demoted)


@settings(max_examples=300, deadline=None)
@given(
    states=st.lists(target_state, min_size=19, max_size=19),
    batch=st.lists(requests, min_size=1, max_size=8),
    mode=modes,
)
def test_chosen_target_is_eligible_and_fits_memory(
    states: list[tuple[float, float, float, bool, bool, float]],
    batch: list[Request],
    mode: FleetMode,
) -> None:
    sched = Scheduler(FLEET)
    _apply(sched, states)
    for r in batch:
        d = sched.decide(r, 10.0, mode)
        # contracts are never rewritten
        assert d.request is r and d.request.priority == r.priority
        assert d.request.deadline_s == r.deadline_s and d.request.model_id == r.model_id
        if d.target is None:
            assert d.outcome is Outcome.NO_CAPACITY
            continue
        t = d.target
        pos = list(d.explanation.candidates).index(t.index)
        assert d.explanation.reasons[pos] == Reason.ELIGIBLE
        assert t.priorities >= {r.priority}
        v_h = t.static_gb + sched.state.picture(t.index).kv_used_gb
        v_peak = t.model.kv_bytes_per_token * (r.prompt_tokens + r.max_new_tokens) / 1e9
        assert v_h + v_peak <= 0.92 * t.memory_gb + 1e-9
        assert sched.state.picture(t.index).healthy
        assert r.prompt_tokens + r.max_new_tokens <= t.model.context_window
        if d.outcome is Outcome.DEGRADED:
            assert t.model.id == FLEET.models[r.model_id].degrade_to
        else:
            assert t.model.id == r.model_id


@settings(max_examples=50, deadline=None)
@given(
    model=st.sampled_from(MODELS), prio=st.sampled_from(list(Priority)), rounds=st.integers(1, 5)
)
def test_round_robin_is_even_over_eligible_targets(model: str, prio: Priority, rounds: int) -> None:
    sched = Scheduler(FLEET)
    group = sched.router.groups[(model, prio)]
    n = len(group.indices)
    counts: dict[int, int] = {}
    for i in range(n * rounds):
        d = sched.decide(Request(f"r{i}", 100, 10, model, prio, 5.0), 0.0, ROUND_ROBIN)
        assert d.target is not None
        counts[d.target.index] = counts.get(d.target.index, 0) + 1
    assert set(counts.values()) == {rounds} and len(counts) == n
