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
