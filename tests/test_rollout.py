"""Fleet modes, deterministic A/B arms and the cold-start plan."""

from __future__ import annotations

import pytest

from slaguard.scheduler.rollout import (
    HELD_ROUND_ROBIN,
    LEARNED,
    ROUND_ROBIN,
    Arm,
    FleetMode,
    ModeKind,
    RolloutPlan,
    assign_arm,
    should_roll_back,
)


@pytest.mark.parametrize("pct", [10, 50])
def test_arm_share_matches_stage(pct: int) -> None:
    mode = FleetMode(ModeKind.ROLLOUT, pct)
    learned = sum(assign_arm(mode, f"req-{i}") is Arm.LEARNED for i in range(20_000))
    assert abs(learned / 20_000 - pct / 100) < 0.01


def test_arms_are_deterministic_and_nested() -> None:
    ten, fifty = FleetMode(ModeKind.ROLLOUT, 10), FleetMode(ModeKind.ROLLOUT, 50)
    for i in range(2000):
        rid = f"r{i}"
        assert assign_arm(ten, rid) is assign_arm(ten, rid)
        if assign_arm(ten, rid) is Arm.LEARNED:  # growing the stage never flips a request back
            assert assign_arm(fifty, rid) is Arm.LEARNED
    assert assign_arm(ROUND_ROBIN, "x") is Arm.ROUND_ROBIN
    assert assign_arm(HELD_ROUND_ROBIN, "x") is Arm.ROUND_ROBIN
    assert assign_arm(LEARNED, "x") is Arm.LEARNED


def test_rollback_rule_is_strictly_above_105_percent() -> None:
    assert not should_roll_back(0.105, 0.100)
    assert should_roll_back(0.1051, 0.100)
    assert not should_roll_back(0.0, 0.0)


def test_plan_stages_in_seconds() -> None:
    plan = RolloutPlan(baseline_s=60, stage_s=30)
    assert plan.mode_at(59.9) == ROUND_ROBIN
    assert plan.mode_at(60).label == "rollout(10)"
    assert plan.mode_at(90).label == "rollout(50)"
    assert plan.mode_at(120).label == "rollout(100)"
    assert plan.mode_at(150) == LEARNED
    assert plan.next_stage(FleetMode(ModeKind.ROLLOUT, 50)).label == "rollout(100)"
    assert plan.next_stage(FleetMode(ModeKind.ROLLOUT, 100)) == LEARNED
    assert plan.next_stage(ROUND_ROBIN) == plan.first_stage()
    assert plan.next_stage(HELD_ROUND_ROBIN) == HELD_ROUND_ROBIN
    assert RolloutPlan().stage_s == 86_400  # production default: a day per stage


@pytest.mark.parametrize("text", ["round_robin", "rollout(10)", "learned", "held_round_robin"])
def test_mode_label_round_trips(text: str) -> None:
    assert FleetMode.parse(text).label == text


def test_invalid_plans_and_stages_are_refused() -> None:
    with pytest.raises(ValueError):
        FleetMode(ModeKind.ROLLOUT, 0)
    with pytest.raises(ValueError):
        RolloutPlan(stages_pct=(50, 10))
