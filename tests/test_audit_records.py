"""Record checks at the producer, and the journal encoding round trip."""

from __future__ import annotations

import types
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slaguard.audit.lines import encode_record
from slaguard.audit.lines_decode import decision_row, decode_lines
from slaguard.audit.records import DecisionRecord, OutcomeRecord


def decision(**overrides: object) -> DecisionRecord:
    fields: dict[str, object] = {
        "request_id": "r-1", "decided_at_s": 1_796_000_000.25, "model_id": "llama3.1-8b",
        "priority": "high", "prompt_tokens": 900, "max_new_tokens": 128, "deadline_s": 1.5,
        "policy_arm": "learned", "fleet_mode": "rollout(10)", "outcome": "routed",
        "target_id": "h100-8b-0", "card_type": "h100",
        "explanation": {"chosen": "h100-8b-0", "candidates": [{"target": "h100-8b-0"}]},
        "weights_version": "w1", "config_hash": "c1", "decision_latency_s": 0.0012,
    }  # fmt: skip
    fields.update(overrides)
    return DecisionRecord(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"priority": "urgent"}, "priority must be one of"),
        ({"policy_arm": "random"}, "policy_arm must be one of"),
        ({"outcome": "lost"}, "outcome must be one of"),
        ({"outcome": "no_capacity"}, "target_id must be None exactly when"),
        ({"target_id": None, "card_type": None}, "target_id must be None exactly when"),
        ({"request_id": ""}, "request_id must be 1..128"),
        ({"request_id": "x" * 129}, "request_id must be 1..128"),
        ({"prompt_tokens": -1}, "token counts must be >= 0"),
    ],
)
def test_bad_decisions_fail_at_the_producer(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decision(**overrides)


def test_bad_outcome_status_fails() -> None:
    with pytest.raises(ValueError, match="status must be one of"):
        OutcomeRecord("r", 1.0, 0.1, 0.01, 1.0, "done", True)  # type: ignore[arg-type]


@dataclass(slots=True)
class _LazyExplanation:
    """Stands in for the scheduler's Explanation: a dataclass holding objects that are
    not JSON (the fleet), turned into JSON only through to_dict()."""

    fleet: object = field(default_factory=object)

    def to_dict(self) -> dict[str, object]:
        return {"chosen": "a100-8b", "weights": {"compute": 0.5}}


def test_explanations_may_be_mappings_or_objects_with_to_dict() -> None:
    frozen = decision(explanation=types.MappingProxyType({"chosen": "x"}))
    lazy = decision(explanation=_LazyExplanation())
    rows = decode_lines([encode_record(frozen), encode_record(lazy)]).decision_rows
    assert rows[0][12] == '{"chosen":"x"}'
    assert rows[1][12] == '{"chosen":"a100-8b","weights":{"compute":0.5}}'


texts = st.text(min_size=1, max_size=40).filter(lambda s: "\x00" not in s)


@given(
    rid=texts,
    at=st.floats(min_value=1e9, max_value=4e9),
    tokens=st.integers(min_value=0, max_value=2**31 - 1),
    note=st.text(max_size=60),
    ttft=st.none() | st.floats(min_value=0, max_value=1e4),
)
def test_journal_lines_decode_to_the_rows_a_direct_insert_would_write(
    rid: str, at: float, tokens: int, note: str, ttft: float | None
) -> None:
    rec = decision(request_id=rid[:128], decided_at_s=at, prompt_tokens=tokens,
                   explanation={"notes": [note], "score": 0.5})  # fmt: skip
    out = OutcomeRecord(rid[:128], at + 1, ttft, None, None, "ok", ttft is not None)
    lines = [encode_record(rec), encode_record(out)]
    assert all(line.endswith(b"\n") and line.count(b"\n") == 1 for line in lines)
    batch = decode_lines(lines)
    assert batch.unreadable == 0
    assert batch.decision_rows == [decision_row(rec)]
    assert batch.outcome_rows[0][0] == rid[:128]
    assert batch.outcome_rows[0][2] == ttft


def test_unreadable_lines_are_counted_not_fatal() -> None:
    batch = decode_lines([b"D{not json\n", b"X{}\n", encode_record(decision())])
    assert batch.unreadable == 2
    assert len(batch.decision_rows) == 1
