"""Workload assignment: deterministic priority/deadline/model per request, as documented."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from slaguard.fleet import Priority, build_fleet, load_fleet
from slaguard.sim.synthetic import synthetic_trace
from slaguard.sim.trace import Trace
from slaguard.sim.traces import load_trace
from slaguard.sim.workload import (
    WorkloadError,
    assign_workload,
    iter_requests,
    model_capacity,
)

FIXTURES = Path(__file__).parent / "fixtures"


def _fleet(**extra: Any) -> Any:
    raw = {
        "targets": [
            {"id": "big", "model": "llama3.1-70b", "card": "h100", "tp": 4},
            {"id": "small", "model": "llama3.1-8b", "card": "l40s", "count": 2},
        ],
        **extra,
    }
    return build_fleet(raw, "test-fleet.yaml")


def test_priority_shares_and_deadlines_follow_the_fleet_sla() -> None:
    fleet = load_fleet()
    work = assign_workload(synthetic_trace(50_000, 10.0, seed=0), fleet)
    counts = work.priority_counts()
    assert counts[Priority.HIGH] / len(work) == pytest.approx(0.2, abs=0.01)
    assert counts[Priority.NORMAL] / len(work) == pytest.approx(0.6, abs=0.01)
    assert counts[Priority.LOW] / len(work) == pytest.approx(0.2, abs=0.01)
    for request in (work.request(i) for i in range(200)):
        assert request.deadline_s == fleet.sla[request.priority].ttft_s


def test_the_rule_is_pinned_hash_of_row_id() -> None:
    """Changing the hash would silently reshuffle every published figure: pin it."""
    trace = synthetic_trace(12, 1.0, seed=0)
    work = assign_workload(trace, _fleet())
    by_row = {int(trace.row_id[i]): work.request(i).priority for i in range(12)}
    h, n, low = Priority.HIGH, Priority.NORMAL, Priority.LOW
    assert [by_row[r] for r in range(12)] == [h, h, n, n, n, n, low, n, n, n, n, n]


def test_assignment_depends_on_row_id_only_not_on_order() -> None:
    trace = load_trace(FIXTURES / "mooncake_conv_200.jsonl")
    fleet = _fleet()
    forward = {r.request_id: r for r in iter_requests(trace, fleet)}
    reversed_trace = trace.take(np.arange(len(trace))[::-1])
    for request in assign_workload(reversed_trace, fleet).requests():
        same = forward[request.request_id]
        assert (request.priority, request.model_id) == (same.priority, same.model_id)


def test_custom_sla_shares_from_the_fleet_file_override_the_default() -> None:
    fleet = _fleet(
        sla={"high": {"ttft_s": 0.5, "share": 0.5}, "normal": {"ttft_s": 2.0, "share": 0.5}}
    )
    work = assign_workload(synthetic_trace(20_000, 10.0, seed=1), fleet)
    counts = work.priority_counts()
    assert counts[Priority.LOW] == 0
    assert counts[Priority.HIGH] / len(work) == pytest.approx(0.5, abs=0.015)
    deadlines = {r.priority: r.deadline_s for r in work.requests()}
    assert deadlines == {Priority.HIGH: 0.5, Priority.NORMAL: 2.0}


def test_models_are_weighted_by_capacity_or_by_model_mix() -> None:
    fleet = load_fleet()
    capacity = model_capacity(fleet)
    expected_small = capacity["llama3.1-8b"] / sum(capacity.values())
    trace = synthetic_trace(40_000, 10.0, seed=2)
    counts = assign_workload(trace, fleet).model_counts()
    assert counts["llama3.1-8b"] / len(trace) == pytest.approx(expected_small, abs=0.01)
    mixed = assign_workload(trace, fleet, {"llama3.1-70b": 3, "llama3.1-8b": 1}).model_counts()
    assert mixed["llama3.1-70b"] / len(trace) == pytest.approx(0.75, abs=0.01)
    only = assign_workload(trace, fleet, {"llama3.1-70b": 1, "llama3.1-8b": 0})
    assert only.model_counts() == {"llama3.1-70b": len(trace)}


@pytest.mark.parametrize(
    ("mix", "problem"),
    [
        ({"gpt-5": 1.0}, "model 'gpt-5' is not served by fleet"),
        ({"llama3.1-8b": -1.0}, "weight -1.0 < 0"),
        ({"llama3.1-8b": 0.0}, "all weights are 0"),
    ],
)
def test_bad_model_mix_is_one_line_with_a_fix(mix: dict[str, float], problem: str) -> None:
    with pytest.raises(WorkloadError) as caught:
        assign_workload(synthetic_trace(10, 1.0), _fleet(), mix)
    assert problem in str(caught.value) and "; fix: " in str(caught.value)
    assert "\n" not in str(caught.value)


def test_requests_carry_trace_fields_and_prefix_identity() -> None:
    trace = load_trace(FIXTURES / "mooncake_conv_200.jsonl")
    requests = iter_requests(trace, _fleet())
    assert isinstance(requests, types.GeneratorType)
    first = next(requests)
    assert first.request_id == "mooncake_conv_200-0"
    assert (first.prompt_tokens, first.max_new_tokens, first.arrival_s) == (6758, 500, 0.0)
    assert first.prefix_blocks == tuple(range(14))
    assert first.prefix_id is not None and len(first.prefix_id) == 16
    twin = Trace.build("twin", "mem", [0.0, 1.0], [5, 5], [1, 1], [[0, 1, 2], [0, 1, 2]])
    a, b = iter_requests(twin, _fleet())
    assert a.prefix_id == b.prefix_id and a.request_id == "twin-0" and b.request_id == "twin-1"
    azure = next(iter_requests(load_trace(FIXTURES / "azure_conv_200.csv"), _fleet()))
    assert azure.prefix_id is None and azure.prefix_blocks == ()
