"""Router mechanisms with their numbers pinned: pre-filter, memory bound, components."""

from __future__ import annotations

import pytest
from helpers import fleet_of, req

from slaguard.fleet import Priority, load_fleet
from slaguard.fleet.catalogue import builtin_models
from slaguard.scheduler.config import SchedulerConfig
from slaguard.scheduler.core import Scheduler
from slaguard.scheduler.explain import Outcome, Reason
from slaguard.scheduler.rollout import LEARNED, ROUND_ROBIN, Arm, FleetMode
from slaguard.scheduler.router import DEMOTED_FALLBACK_NOTE


@pytest.fixture()
def sched() -> Scheduler:
    return Scheduler(load_fleet())


def test_prefilter_is_a_table_by_model_and_priority(sched: Scheduler) -> None:
    high = sched.router.groups[("llama3.1-8b", Priority.HIGH)]
    low = sched.router.groups[("llama3.1-8b", Priority.LOW)]
    ids = {sched.fleet.targets[i].id for i in high.indices}
    assert "mlu-8b" not in ids  # the MLU takes normal and low only
    assert len(high.indices) == 12 and high.prefiltered_out == 7
    assert len(low.indices) == 13
    d = sched.decide(req(priority=Priority.HIGH), 0.0, LEARNED)
    assert d.explanation.prefiltered_out == 7


def test_memory_bound_rejects_above_92_percent(sched: Scheduler) -> None:
    t = sched.fleet.target("h200-8b")
    r = req(prompt=4000, gen=1000)
    v_peak = 131_072 * 5000 / 1e9
    # exactly at the bound: v_h + v_peak == 0.92 V_h -> still eligible
    sched.state.refresh(t.index, 0.0, kv_used_gb=t.kv_budget_gb - v_peak)
    d = sched.decide(r, 0.0, LEARNED)
    assert t.id not in {x for x, _ in d.explanation.rejected()}
    sched.state.refresh(t.index, 0.0, kv_used_gb=t.kv_budget_gb - v_peak + 0.01)
    d = sched.decide(r, 0.0, LEARNED)
    assert (t.id, "memory bound: v_h + v_peak > 0.92 x V_h") in d.explanation.rejected()
    entry = next(
        c
        for c in sched.decide(req(), 0.0, LEARNED).explanation.to_dict()["candidates"]
        if c["target"] == "h100-8b-0"
    )
    assert entry["limit_gb"] == pytest.approx(0.92 * 80)


def test_the_shown_memory_figures_obey_the_rule_they_explain(sched: Scheduler) -> None:
    """`audit explain` showed the model's weights in v_h as well as in v_peak: an eligible
    h100-70b read 168.5 + 149.3 GB against a 294.4 GB limit. As in the scheduler spec's
    formula, v_peak holds the weights (and activation buffers) and v_h the KV in use."""
    t = sched.fleet.target("h200-8b")
    r = req(prompt=4000, gen=1000)
    v_peak = 131_072 * 5000 / 1e9
    sched.state.refresh(t.index, 0.0, kv_used_gb=t.kv_budget_gb - v_peak)  # at the bound
    shown = sched.decide(r, 0.0, LEARNED).explanation.to_dict()["candidates"]
    entry = next(c for c in shown if c["target"] == t.id)
    assert entry["v_h_gb"] == pytest.approx(t.kv_budget_gb - v_peak, abs=1e-3)
    assert entry["v_peak_gb"] == pytest.approx(t.static_gb + v_peak, abs=1e-3)
    assert entry["v_h_gb"] + entry["v_peak_gb"] == pytest.approx(entry["limit_gb"], abs=2e-3)
    for c in shown:
        assert c["v_h_gb"] + c["v_peak_gb"] <= c["limit_gb"] + 2e-3, c


def test_long_prompt_prefers_compute_and_nvlink(sched: Scheduler) -> None:
    d = sched.decide(req(prompt=30_000, gen=200, model="llama3.1-70b"), 0.0, LEARNED)
    assert d.target is not None and d.target.card.id == "h100"
    comps = {c["target"]: c["components"] for c in d.explanation.to_dict()["candidates"]}
    assert comps["h100-70b-0"]["compute"] == pytest.approx(1.0)
    assert comps["a100-70b"]["compute"] == pytest.approx(0.9 * 1248 / 3956, rel=1e-3)
    assert comps["ascend-70b"]["interconnect"] == pytest.approx(0.9 * 392 / 900, rel=1e-3)


def test_short_prompt_follows_load(sched: Scheduler) -> None:
    for t in sched.fleet:
        if t.model.id == "llama3.1-8b" and t.id != "ascend-8b-1":
            sched.state.refresh(t.index, 0.0, queue_depth=30)
    d = sched.decide(req(prompt=200, gen=50), 0.0, LEARNED)
    assert d.target is not None and d.target.id == "ascend-8b-1"
    comps = d.explanation.to_dict()["candidates"]
    loads = {c["target"]: c["components"]["load"] for c in comps}
    assert loads["ascend-8b-1"] == 1.0
    assert loads["h100-8b-0"] < 0.25


def test_jitter_term_and_demotion(sched: Scheduler) -> None:
    t = sched.fleet.target("h100-8b-0")
    sched.state.set_jitter({t.index: 3.5})
    d = sched.decide(req(), 0.0, LEARNED)
    comps = {c["target"]: c["components"] for c in d.explanation.to_dict()["candidates"]}
    assert comps[t.id]["jitter"] == 0.0
    # dead band: below demote_z (3.0) a Z is noise and changes nothing; it falls to 0 at 3.5
    for z, term in ((-2.0, 1.0), (1.5, 1.0), (2.99, 1.0), (3.25, 0.5), (9.0, 0.0)):
        sched.state.set_jitter({t.index: z})
        d = sched.decide(req(), 0.0, LEARNED)
        comps = {c["target"]: c["components"] for c in d.explanation.to_dict()["candidates"]}
        assert comps[t.id]["jitter"] == pytest.approx(term)
    sched.state.set_jitter({t.index: float("nan")})  # no data is not an anomaly
    assert sched.state.picture(t.index).jitter_z == 0.0
    sched.state.set_demoted(t.index, True)
    for prio in (Priority.HIGH, Priority.NORMAL):
        d = sched.decide(req(priority=prio), 0.0, LEARNED)
        assert (t.id, "demoted for persistent TTFT jitter: takes low priority only") in (
            d.explanation.rejected()
        )
    d = sched.decide(req(priority=Priority.LOW), 0.0, LEARNED)
    assert t.id not in {x for x, _ in d.explanation.rejected()}  # demoted, never removed


@pytest.mark.parametrize("arm", [LEARNED, ROUND_ROBIN])
def test_demoted_targets_are_the_fallback_never_removed(sched: Scheduler, arm: FleetMode) -> None:
    """Every target of a model demoted: a high/normal request still goes to one of them (it
    was degraded to another model, or refused under round-robin, before)."""
    seventy = [t for t in sched.fleet if t.model.id == "llama3.1-70b"]
    for t in seventy:
        sched.state.set_demoted(t.index, True)
    r = req(model="llama3.1-70b", priority=Priority.NORMAL, deadline=60.0)
    d = sched.decide(r, 0.0, arm)
    assert d.outcome is Outcome.ROUTED and d.target in seventy
    assert d.served_model == "llama3.1-70b" and d.explanation.rejected() == []
    assert DEMOTED_FALLBACK_NOTE in d.explanation.notes
    # one target not demoted but over its memory bound: the demoted ones still take it
    spare = seventy[0]
    sched.state.set_demoted(spare.index, False)
    sched.state.refresh(spare.index, 0.0, kv_used_gb=spare.kv_budget_gb)
    d = sched.decide(r, 0.0, arm)
    assert d.target in seventy[1:] and DEMOTED_FALLBACK_NOTE in d.explanation.notes
    # once it has room again it takes the request alone; the demoted ones are rejected
    sched.state.refresh(spare.index, 0.0, kv_used_gb=0.0)
    d = sched.decide(r, 0.0, arm)
    assert d.target == spare and DEMOTED_FALLBACK_NOTE not in d.explanation.notes
    assert {t for t, _ in d.explanation.rejected()} == {t.id for t in seventy[1:]}


def test_stale_picture_is_saturated_not_idle(sched: Scheduler) -> None:
    for t in sched.fleet:
        sched.state.refresh(t.index, 10.0, queue_depth=20)
    idle = sched.fleet.target("l40s-8b-0")
    sched.state.refresh(idle.index, 8.5, queue_depth=0)  # 1.5 s old > 1.0 s
    d = sched.decide(req(), 10.0, LEARNED)
    assert d.target is not None and d.target.id != idle.id
    assert (idle.id, "stale hardware picture: treated as saturated") in d.explanation.rejected()


def test_no_capacity_is_a_result_not_an_exception(sched: Scheduler) -> None:
    d = sched.decide(req(model="gpt-9"), 0.0, LEARNED)
    assert d.outcome is Outcome.NO_CAPACITY and d.target is None
    assert d.explanation.to_dict()["notes"] == ["unknown model 'gpt-9'"]
    d = sched.decide(req(prompt=200_000), 0.0, ROUND_ROBIN)
    assert d.outcome is Outcome.NO_CAPACITY
    assert all(r == Reason.CONTEXT for r in d.explanation.reasons)


def test_explanation_carries_every_candidate_weights_and_rejections(sched: Scheduler) -> None:
    sched.state.set_healthy(sched.fleet.target("l40s-8b-3").index, False)
    e = sched.decide(req(), 0.0, LEARNED).explanation.to_dict()
    assert len(e["candidates"]) == 12 and e["rejected"] == [
        {"target": "l40s-8b-3", "reason": "target marked unhealthy"}
    ]
    assert e["weights"] == {
        "compute": 0.15,
        "interconnect": 0.05,
        "memory": 0.2,
        "load": 0.45,
        "jitter": 0.15,
    }
    assert e["weights_version"].startswith("eg-0-") and e["policy"] == "learned"
    best = max(e["candidates"], key=lambda c: c["score"])
    assert e["chosen"] == best["target"]
    assert set(best["components"]) == {"compute", "interconnect", "memory", "load", "jitter"}


def test_alternatives_are_ranked_for_retry(sched: Scheduler) -> None:
    d = sched.decide(req(), 0.0, LEARNED)
    assert d.target is not None and d.target.index not in d.alternatives
    scores = {c["target"]: c["score"] for c in d.explanation.to_dict()["candidates"]}
    ranked = [scores[sched.fleet.targets[i].id] for i in d.alternatives]
    assert ranked == sorted(ranked, reverse=True) and len(ranked) == 12  # 13 serve normal


def test_degrades_to_smaller_variant_when_no_target_meets_deadline(sched: Scheduler) -> None:
    for t in sched.fleet:
        if t.model.id == "llama3.1-70b":
            sched.state.refresh(t.index, 0.0, queue_depth=200)
    r = req(prompt=2000, model="llama3.1-70b", priority=Priority.HIGH, deadline=1.5)
    d = sched.decide(r, 0.0, LEARNED)
    assert d.outcome is Outcome.DEGRADED and d.served_model == "llama3.1-8b"
    assert d.target is not None and d.target.model.id == "llama3.1-8b"
    e = d.explanation.to_dict()
    assert e["degraded_from"] == "llama3.1-70b" and "degraded to llama3.1-8b" in e["notes"][-1]
    assert d.request.model_id == "llama3.1-70b" and d.request.deadline_s == 1.5
    strict = Scheduler(sched.fleet, SchedulerConfig(degrade=False))
    strict.state.rows[:] = sched.state.rows
    assert strict.decide(r, 0.0, LEARNED).outcome is Outcome.ROUTED


@pytest.mark.parametrize("mode", [ROUND_ROBIN, LEARNED])
def test_a_model_no_target_serves_goes_to_the_model_it_degrades_to(mode: FleetMode) -> None:
    """The service admits a model whose `degrade_to` the fleet serves; the router answered
    every request for it `no_capacity` (a 503 retried for ever), under either arm."""
    fleet = fleet_of(
        {"id": "h100-8b", "model": "llama3.1-8b", "card": "h100"},
        {"id": "l40s-8b", "model": "llama3.1-8b", "card": "l40s"},
    )
    sched = Scheduler(fleet)
    for t in fleet:
        sched.state.refresh(t.index, 0.0, queue_depth=0)
    targets = set()
    for i in range(4):
        d = sched.decide(req(f"r{i}", model="llama3.1-70b"), 0.0, mode)
        assert d.outcome is Outcome.DEGRADED and d.served_model == "llama3.1-8b"
        assert d.request.model_id == "llama3.1-70b" and d.target is not None
        e = d.explanation.to_dict()
        assert e["degraded_from"] == "llama3.1-70b"
        assert "no target serves llama3.1-70b at priority normal" in e["notes"][-1]
        targets.add(d.target.id)
    if mode == ROUND_ROBIN:
        assert targets == {"h100-8b", "l40s-8b"}  # turns among the 8B targets
    strict = Scheduler(fleet, SchedulerConfig(degrade=False))
    assert strict.decide(req("x", model="llama3.1-70b"), 0.0, mode).outcome is Outcome.NO_CAPACITY


def test_a_request_degraded_twice_names_the_model_its_target_serves() -> None:
    """70b (no target) -> qwen2.5-32b (too slow for the deadline) -> 8b: the answer named
    the first step's model, and the gateway sent the 8b target a qwen request."""
    models = {m: dict(spec) for m, spec in builtin_models().items()}
    models["llama3.1-70b"]["degrade_to"] = "qwen2.5-32b"
    models["qwen2.5-32b"]["degrade_to"] = "llama3.1-8b"
    fleet = fleet_of(
        {"id": "l40s-32b", "model": "qwen2.5-32b", "card": "l40s", "tp": 2},
        {"id": "h100-8b", "model": "llama3.1-8b", "card": "h100"},
        models=models,
    )
    sched = Scheduler(fleet)
    sched.state.refresh(0, 0.0, queue_depth=200)
    sched.state.refresh(1, 0.0, queue_depth=0)
    d = sched.decide(req(prompt=2000, model="llama3.1-70b", deadline=0.5), 0.0, LEARNED)
    assert d.outcome is Outcome.DEGRADED and d.target is not None
    assert d.served_model == d.target.model.id == "llama3.1-8b"
    assert d.request.model_id == "llama3.1-70b"


def test_prefix_home_keeps_prompts_together(sched: Scheduler) -> None:
    first = sched.decide(req("a", prefix_id="p1"), 0.0, LEARNED)
    assert first.target is not None
    sched.state.add_queue(first.target.index, 1)  # now slightly busier than its twins
    second = sched.decide(req("b", prefix_id="p1"), 0.0, LEARNED)
    assert second.target == first.target
    assert "prefix home: reuses cached prefix blocks" in second.explanation.notes


def test_spill_from_saturated_home(sched: Scheduler) -> None:
    blocks = tuple(range(8))  # 4096 tokens of shared prefix
    first = sched.decide(req("a", prompt=4096, prefix_id="p", prefix_blocks=blocks), 0.0, LEARNED)
    assert first.target is not None
    home = first.target
    sched.state.refresh(home.index, 0.0, kv_used_gb=home.kv_budget_gb)  # saturated
    r = req("b", prompt=4096, prefix_id="p", prefix_blocks=blocks, priority=Priority.HIGH)
    d = sched.decide(r, 0.0, LEARNED)
    assert d.outcome is Outcome.SPILLED and d.target != home
    assert d.transfer_s == pytest.approx(4096 * 131_072 / 64e9)
    assert d.explanation.spill is not None and d.explanation.spill["from"] == home.id
    # the destination is nearly full: a low-priority request may not spill
    for t in sched.fleet:
        if t.model.id == "llama3.1-8b" and t != home:
            sched.state.refresh(t.index, 0.0, kv_used_gb=0.95 * t.kv_budget_gb)
    low = sched.decide(
        req("c", prompt=400, gen=10, prefix_id="p", prefix_blocks=blocks, priority=Priority.LOW),
        0.0,
        LEARNED,
    )
    assert low.outcome is Outcome.NO_CAPACITY
    assert low.explanation.spill is not None and not low.explanation.spill["allowed"]


def test_round_robin_visits_evenly_and_skips_ineligible(sched: Scheduler) -> None:
    counts: dict[str, int] = {}
    for i in range(12 * 10):
        d = sched.decide(req(f"r{i}", priority=Priority.HIGH), 0.0, ROUND_ROBIN)
        assert d.arm is Arm.ROUND_ROBIN and d.target is not None
        counts[d.target.id] = counts.get(d.target.id, 0) + 1
    assert len(counts) == 12 and set(counts.values()) == {10}
    sched.state.set_healthy(sched.fleet.target("h100-8b-1").index, False)
    seen = {
        sched.decide(req(f"s{i}", priority=Priority.HIGH), 0.0, ROUND_ROBIN).target
        for i in range(22)
    }
    assert sched.fleet.target("h100-8b-1") not in seen and len(seen) == 11
