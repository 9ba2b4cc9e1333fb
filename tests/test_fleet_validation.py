"""Fleet-file validation: suggestions that hold, and mistakes refused in one line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from slaguard.fleet import FleetError, Priority, Request, build_fleet, load_fleet
from slaguard.scheduler.core import Scheduler
from slaguard.scheduler.rollout import LEARNED, ROUND_ROBIN


def _one_target(model: str, card: str, tp: int) -> dict[str, object]:
    return {"targets": [{"id": "a", "model": model, "card": card, "tp": tp}]}


@pytest.mark.parametrize(
    ("model", "card"),
    [
        ("llama3.1-70b", "l4"),  # said tp >= 7, and 7 x L4 then asked for 8
        ("llama3.1-70b", "h100"),
        ("llama3.1-70b", "l40s"),
        ("llama2-70b", "mlu370"),
        ("qwen2.5-32b", "l4"),
        ("qwen2.5-32b", "l40s"),
    ],
)
def test_the_suggested_tp_is_the_least_that_fits(model: str, card: str) -> None:
    """The per-card activation buffer grows with tp: the suggestion counts it."""
    with pytest.raises(FleetError) as err:
        build_fleet(_one_target(model, card, 1), "fleet.yaml")
    found = re.search(r"fix: set tp >= (\d+) ", str(err.value))
    assert found, str(err.value)
    tp = int(found.group(1))
    assert build_fleet(_one_target(model, card, tp)).targets[0].kv_budget_gb > 0
    with pytest.raises(FleetError, match=f"fix: set tp >= {tp} "):
        build_fleet(_one_target(model, card, tp - 1), "fleet.yaml")


def test_a_card_too_small_at_any_tp_asks_for_a_larger_card() -> None:
    doc = {
        "cards": {
            "tiny": {
                "name": "Tiny",
                "generation": "g",
                "memory_gb": 2,
                "memory_bandwidth_gbps": 1,
                "bf16_tflops": 1,
                "interconnect": "pcie",
                "interconnect_gbps": 1,
                "failure_rate_per_hour": 0,
            }
        },
        "targets": [{"id": "a", "model": "llama3.1-8b", "card": "tiny", "tp": 8}],
    }
    with pytest.raises(FleetError, match=r"GB usable; fix: place it on a larger card$"):
        build_fleet(doc, "fleet.yaml")


_LLAMA_8B = {
    "params_b": 8.03,
    "layers": 32,
    "kv_heads": 8,
    "head_dim": 128,
    "dtype_bytes": 2,
    "context_window": 131072,
}


def test_a_model_degrading_to_itself_is_refused() -> None:
    doc = {
        "models": {"llama3.1-8b": {**_LLAMA_8B, "degrade_to": "llama3.1-8b"}},
        "targets": [{"id": "a", "model": "llama3.1-8b", "card": "h100"}],
    }
    with pytest.raises(FleetError) as err:
        build_fleet(doc, "fleet.yaml")
    assert str(err.value) == (
        "fleet.yaml: models.llama3.1-8b.degrade_to: llama3.1-8b degrades to itself; "
        "fix: name the model its requests fall back to, or remove degrade_to"
    )


def test_models_degrading_to_each_other_by_priority_route_every_request() -> None:
    """70B serves high and normal and degrades to 8B; 8B serves low and normal and
    degrades to 70B: refused for a while as a loop, though each request takes one hop."""
    doc = {
        "models": {"llama3.1-8b": {**_LLAMA_8B, "degrade_to": "llama3.1-70b"}},
        "targets": [
            {"id": "big", "model": "llama3.1-70b", "card": "h100", "tp": 4,
             "priorities": ["high", "normal"]},
            {"id": "small", "model": "llama3.1-8b", "card": "h100", "count": 2,
             "priorities": ["low", "normal"]},
        ],
    }  # fmt: skip
    fleet = build_fleet(doc, "fleet.yaml")
    assert fleet.notes == ()
    sched = Scheduler(fleet)
    served = {}
    for mode in (LEARNED, ROUND_ROBIN):
        for model, priority in [("llama3.1-70b", Priority.LOW), ("llama3.1-8b", Priority.HIGH)]:
            request = Request(f"{model}-{priority}-{mode.label}", 500, 50, model, priority, 5.0)
            decision = sched.decide(request, 0.0, mode)
            assert decision.target is not None, decision.explanation
            served[(model, priority.value, mode.label)] = decision.target.id.split("-")[0]
    assert served == {
        ("llama3.1-70b", "low", "learned"): "small",
        ("llama3.1-8b", "high", "learned"): "big",
        ("llama3.1-70b", "low", "round_robin"): "small",
        ("llama3.1-8b", "high", "round_robin"): "big",
    }


def test_a_degrade_chain_that_ends_is_accepted() -> None:
    doc = {
        "models": {"qwen2.5-32b": {**_LLAMA_8B, "params_b": 32.8, "degrade_to": "llama3.1-70b"}},
        "targets": [{"id": "a", "model": "llama3.1-8b", "card": "h100"}],
    }
    assert build_fleet(doc).models["qwen2.5-32b"].degrade_to == "llama3.1-70b"


def _card(**override: object) -> dict[str, object]:
    card: dict[str, object] = {
        "name": "X",
        "generation": "g",
        "memory_gb": 80,
        "memory_bandwidth_gbps": 1,
        "bf16_tflops": 1,
        "interconnect": "pcie",
        "interconnect_gbps": 1,
        "failure_rate_per_hour": 0,
    }
    return {**card, **override}


def _sla(**high: object) -> dict[str, object]:
    return {
        "high": {"ttft_s": 1.5, "share": 0.2, **high},
        "normal": {"ttft_s": 4.0, "share": 0.6},
        "low": {"ttft_s": 12.0, "share": 0.2},
    }


_TARGET = {"id": "a", "model": "llama3.1-8b", "card": "h100"}


@pytest.mark.parametrize(
    ("doc", "expected"),
    [  # each was accepted: true as 1, "4" as 4, .inf as a deadline never missed
        ({"targets": [{**_TARGET, "count": True}]}, "targets[0].count: Input should be a valid"),
        ({"targets": [{**_TARGET, "count": "4"}]}, "targets[0].count: Input should be a valid"),
        ({"targets": [{**_TARGET, "tp": 2.0}]}, "targets[0].tp: Input should be a valid integer"),
        ({"sla": _sla(ttft_s=float("inf")), "targets": [_TARGET]}, "sla.high.ttft_s: Input"),
        ({"sla": _sla(ttft_s=float("nan")), "targets": [_TARGET]}, "sla.high.ttft_s: Input"),
        ({"sla": _sla(share=True), "targets": [_TARGET]}, "sla.high.share: Input should be a"),
        (
            {"cards": {"x": _card(memory_gb=float("inf"))}, "targets": [_TARGET]},
            "cards.x.memory_gb: Input should be a finite number",
        ),
        (
            {"models": {"m": {**_LLAMA_8B, "layers": "32"}}, "targets": [_TARGET]},
            "models.m.layers: Input should be a valid integer",
        ),
        (
            {"targets": [{**_TARGET, "priorities": ["high", "low", "high"]}]},
            "targets[0].priorities: high listed twice",
        ),
        (  # accepted: the newline went into metric labels and the database as is
            {"targets": [{**_TARGET, "id": "a\nb"}]},
            "targets[0].id: a space or control character, '\\n' at position 1 (got 'a\\nb'); fix:",
        ),
        (
            {"targets": [{**_TARGET, "id": "h100 8b"}]},
            "targets[0].id: a space or control character, ' ' at position 4 (got 'h100 8b'); fix:",
        ),
        (  # accepted: every gateway answer from it was a 500 (x-slaguard-target is latin-1)
            {"targets": [{**_TARGET, "id": "h100-日本"}]},
            "targets[0].id: a character outside ASCII, '日' at position 5, which the "
            "x-slaguard-target header cannot carry (got 'h100-日本'); fix:",
        ),
        (
            {"targets": [{**_TARGET, "id": "h100-é"}]},
            "targets[0].id: a character outside ASCII, 'é' at position 5, ",
        ),
    ],
)
def test_loose_values_are_refused(doc: dict[str, object], expected: str) -> None:
    with pytest.raises(FleetError) as err:
        build_fleet(doc, "fleet.yaml")
    assert str(err.value).startswith(f"fleet.yaml: {expected}")


_NAN = float("nan")


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"sla": _sla(ttft_s=_NAN)}, "sla.high.ttft_s"),
        ({"sla": _sla(share=_NAN)}, "sla.high.share"),
        ({"cards": {"x": _card(memory_gb=_NAN)}}, "cards.x.memory_gb"),
        ({"cards": {"x": _card(failure_rate_per_hour=_NAN)}}, "cards.x.failure_rate_per_hour"),
        ({"models": {"m": {**_LLAMA_8B, "params_b": _NAN}}}, "models.m.params_b"),
        (
            {"models": {"m": {**_LLAMA_8B, "activation_buffer_gb": _NAN}}},
            "models.m.activation_buffer_gb",
        ),
    ],
)
def test_a_nan_is_refused_as_not_finite_before_any_bound(
    doc: dict[str, object], field: str, tmp_path: Path
) -> None:
    """`ttft_s: .nan` said `Input should be greater than 0 (got nan); fix: use a number
    above 0`, `share: .nan` "at most 1": the bound was checked before finiteness."""
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump({**doc, "targets": [_TARGET]}))  # nan written as `.nan`
    with pytest.raises(FleetError) as err:
        load_fleet(path)
    assert str(err.value) == (
        f"{path}: {field}: Input should be a finite number (got nan); fix: write a finite number"
    )


def test_numbers_as_yaml_writes_them_still_pass() -> None:
    """PyYAML reads `1e-5` (no dot) as a string; an int is a fine float."""
    doc = {"cards": {"x": _card(failure_rate_per_hour="1e-5")}, "targets": [_TARGET]}
    assert build_fleet(doc).cards["x"].failure_rate_per_hour == 1e-5
    with pytest.raises(FleetError, match=r"cards.x.memory_gb: Input should be greater than 0"):
        build_fleet({"cards": {"x": _card(memory_gb=-1)}, "targets": [_TARGET]}, "fleet.yaml")


@pytest.mark.parametrize(
    ("doc", "expected"),
    [  # each said "fix: correct the value"
        (
            {
                "models": {"qwen2.5-32b": {**_LLAMA_8B, "degrade": "llama3.1-8b"}},
                "targets": [_TARGET],
            },
            "models.qwen2.5-32b.degrade: unknown key; fix: remove it, or use one of "
            "activation_buffer_gb, context_window, degrade_to, dtype_bytes, head_dim, kv_heads, "
            "layers, params_b (did you mean 'degrade_to'?)",
        ),
        (
            {"targets": [{**_TARGET, "prioritys": ["high"]}]},
            "targets[0].prioritys: unknown key; fix: remove it, or use one of card, count, id, "
            "model, priorities, tp, url (did you mean 'priorities'?)",
        ),
        (
            {"targets": [_TARGET], "colour": "red"},
            "colour: unknown key; fix: remove it, or use one of cards, models, name, sla, targets",
        ),
        (
            {"targetz": [_TARGET]},
            "targets: Field required; fix: add it (the key 'targetz' here is probably a typo "
            "of it)",
        ),
        (
            {"targets": [{"id": "a", "model": "llama3.1-8b", "cards": "h100"}]},
            "targets[0].card: Field required; fix: add it (the key 'cards' here is probably a "
            "typo of it)",
        ),
        (
            {"targets": [{"id": "a", "card": "h100"}]},
            "targets[0].model: Field required; fix: add it",
        ),
        (
            {"sla": {**_sla(), "nromal": _sla()["normal"]}, "targets": [_TARGET]},
            "sla.nromal: Input should be 'high', 'normal' or 'low' (got 'nromal'); "
            "fix: use one of high, normal, low (did you mean 'normal'?)",
        ),
        (
            {"targets": [{**_TARGET, "priorities": ["hgih"]}]},
            "targets[0].priorities[0]: Input should be 'high', 'normal' or 'low' (got 'hgih'); "
            "fix: use one of high, normal, low (did you mean 'high'?)",
        ),
        (
            {"cards": {"x": _card(interconnect="nvlnk")}, "targets": [_TARGET]},
            "cards.x.interconnect: Input should be 'nvlink', 'pcie', 'hccs' or 'mlulink' "
            "(got 'nvlnk'); fix: use one of nvlink, pcie, hccs, mlulink (did you mean 'nvlink'?)",
        ),
        (
            {"cards": {"x": _card(memory_gb=-32.8)}, "targets": [_TARGET]},
            "cards.x.memory_gb: Input should be greater than 0 (got -32.8); "
            "fix: use a number above 0",
        ),
        (
            {"models": {"m": {**_LLAMA_8B, "activation_buffer_gb": -1}}, "targets": [_TARGET]},
            "models.m.activation_buffer_gb: Input should be greater than or equal to 0 (got -1); "
            "fix: use a number of at least 0",
        ),
        (
            {"targets": [{**_TARGET, "tp": 65}]},
            "targets[0].tp: Input should be less than or equal to 64 (got 65); "
            "fix: use a number of at most 64",
        ),
        (
            {"targets": [{**_TARGET, "count": True}]},
            "targets[0].count: Input should be a valid integer (got True); "
            "fix: write a whole number, like 2, without quotes",
        ),
    ],
)
def test_a_mistake_says_the_fix_that_is_known(doc: dict[str, object], expected: str) -> None:
    with pytest.raises(FleetError) as err:
        build_fleet(doc, "fleet.yaml")
    assert str(err.value) == f"fleet.yaml: {expected}"


_URL = "http://10.0.0.5:8000"


@pytest.mark.parametrize(
    ("targets", "expected"),
    [
        (
            [{**_TARGET, "count": 2, "url": _URL}],
            "targets[0].url: the 2 replicas of 'a' (count: 2) all get http://10.0.0.5:8000, "
            "one backend the router would count 2 times; fix: put {i} in the url where each "
            "replica's number goes (a-0 gets 0, a-1 gets 1), or list each replica as a target "
            "with its own url",
        ),
        (
            [{**_TARGET, "url": _URL}, {**_TARGET, "id": "b", "url": _URL + "/"}],
            "targets[1].url: http://10.0.0.5:8000/ is already the backend of target 'a'; fix: "
            "give each target the url of its own backend",
        ),
        (
            [{**_TARGET, "url": "http://10.0.0.{i}:8000"}],
            "targets[0].url: {i} stands for the replica's number, but 'a' has count 1, so it "
            "would stay in the address as written; fix: write the backend's url without {i}",
        ),
    ],
)
def test_one_backend_given_to_two_targets_is_refused(
    targets: list[dict[str, object]], expected: str
) -> None:
    """Each was taken: the scraper read the one backend's load into each target, the
    router counted its capacity twice, and `{i}` with count 1 stayed in the address."""
    with pytest.raises(FleetError) as err:
        build_fleet({"targets": targets}, "fleet.yaml")
    assert str(err.value) == f"fleet.yaml: {expected}"


def test_replicas_with_a_numbered_url_each_get_their_own_backend() -> None:
    fleet = build_fleet({"targets": [{**_TARGET, "count": 2, "url": "http://10.0.0.{i}:8000"}]})
    assert [t.url for t in fleet] == ["http://10.0.0.0:8000", "http://10.0.0.1:8000"]
