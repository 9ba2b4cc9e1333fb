"""Fleet-file validation: suggestions that hold, and mistakes refused in one line."""

from __future__ import annotations

import re

import pytest

from slaguard.fleet import FleetError, build_fleet


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


@pytest.mark.parametrize(
    ("degrade_to", "loop"),
    [
        ("llama3.1-70b", "llama3.1-8b -> llama3.1-70b -> llama3.1-8b"),  # 70b degrades to 8b
        ("llama3.1-8b", "llama3.1-8b -> llama3.1-8b"),
    ],
)
def test_a_degrade_loop_is_refused_at_the_model_the_file_wrote(degrade_to: str, loop: str) -> None:
    """Accepted before; the router follows degrade_to from model to model, and a loop
    never ends."""
    doc = {
        "models": {"llama3.1-8b": {**_LLAMA_8B, "degrade_to": degrade_to}},
        "targets": [{"id": "a", "model": "llama3.1-8b", "card": "h100"}],
    }
    with pytest.raises(FleetError) as err:
        build_fleet(doc, "fleet.yaml")
    assert str(err.value) == (
        f"fleet.yaml: models.llama3.1-8b.degrade_to: degrade loop {loop}; "
        "fix: remove it, or point it at a model that does not degrade back"
    )


def test_a_degrade_chain_that_ends_is_accepted() -> None:
    doc = {
        "models": {"qwen2.5-32b": {**_LLAMA_8B, "params_b": 32.8, "degrade_to": "llama3.1-70b"}},
        "targets": [{"id": "a", "model": "llama3.1-8b", "card": "h100"}],
    }
    assert build_fleet(doc).models["qwen2.5-32b"].degrade_to == "llama3.1-70b"
