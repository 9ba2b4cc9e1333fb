"""The example scenarios load against the default fleet and fit the Azure conversation hour."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from slaguard.fleet import Fleet, load_fleet
from slaguard.sim.faults import (
    FailFault,
    HotPromptFault,
    JitterFault,
    LoadSpikeFault,
    NewModelFault,
    load_faults,
)

SCENARIOS = Path(__file__).parents[1] / "examples" / "scenarios"
AZURE_HOUR_S = 3501.7
"""Last arrival of the Azure conversation trace, seconds after the first."""


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    return load_fleet()


def test_the_set_of_scenarios_is_complete_and_listed_in_the_readme() -> None:
    names = sorted(p.name for p in SCENARIOS.glob("*.yaml"))
    assert names == [
        "fail.yaml",
        "hot_prompt.yaml",
        "jitter.yaml",
        "load_spike.yaml",
        "mixed.yaml",
        "new_model.yaml",
    ]
    readme = (SCENARIOS / "README.md").read_text(encoding="utf-8")
    assert all(f"`{name}`" in readme for name in names)


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.yaml")), ids=lambda p: p.stem)
def test_each_scenario_loads_and_fits_the_hour(fleet: Fleet, path: Path) -> None:
    schedule = load_faults(path, fleet)
    assert schedule.faults
    for fault in schedule.faults:
        assert 0 < fault.start_s < AZURE_HOUR_S - 300, "starts with time left to see it"
        assert math.isinf(fault.end_s) or fault.end_s <= AZURE_HOUR_S


def test_scenarios_carry_the_documented_values(fleet: Fleet) -> None:
    def only(name: str) -> object:
        (fault,) = load_faults(SCENARIOS / name, fleet).faults
        return fault

    jitter = only("jitter.yaml")
    assert isinstance(jitter, JitterFault) and jitter.factor == 3.0
    assert jitter.target in fleet.card_types()
    assert isinstance(only("fail.yaml"), FailFault)
    hot = only("hot_prompt.yaml")
    assert isinstance(hot, HotPromptFault) and hot.share == 0.3
    new = only("new_model.yaml")
    assert isinstance(new, NewModelFault) and new.latency_factor == 1.8
    assert isinstance(only("load_spike.yaml"), LoadSpikeFault)
    mixed = load_faults(SCENARIOS / "mixed.yaml", fleet)
    assert {f.kind for f in mixed.faults} == {
        "jitter",
        "fail",
        "hot_prompt",
        "new_model",
        "load_spike",
    }
