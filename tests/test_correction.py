"""Global correction signal: components, threshold and per-target actions."""

from __future__ import annotations

import numpy as np
import pytest

from slaguard.scheduler.config import CorrectionConfig, SchedulerConfig
from slaguard.scheduler.correction import Action, correction_signal

CFG = CorrectionConfig()


def test_balanced_fleet_holds() -> None:
    s = correction_signal(np.full(4, 5.0), np.ones(4), 0.0, np.ones(4), CFG)
    assert s.imbalance == 0.0 and s.queued == 20.0
    assert s.value == pytest.approx(0.2 * 20 / 200)
    assert not s.fired and s.factors == (1.0, 1.0, 1.0, 1.0)


def test_imbalance_slows_the_hot_target_and_speeds_up_the_idle() -> None:
    s = correction_signal(np.array([10.0, 0, 0, 0]), np.ones(4), 0.1, np.ones(4), CFG)
    assert s.imbalance == pytest.approx(np.sqrt(3))
    assert s.value == pytest.approx(0.5 * np.sqrt(3) + 0.2 * 10 / 200 + 0.3 * 0.1)
    assert s.actions == (Action.SLOW_DOWN, Action.SPEED_UP, Action.SPEED_UP, Action.SPEED_UP)
    assert s.factors == (1.25, 0.75, 0.75, 0.75)


def test_load_is_per_unit_of_capacity() -> None:
    s = correction_signal(np.array([8.0, 2.0]), np.array([4.0, 1.0]), 0.0, np.ones(2), CFG)
    assert s.imbalance == 0.0 and not s.fired


def test_factors_are_clamped_and_nan_violation_is_not_a_violation() -> None:
    f = np.array([2.0, 0.5])
    s = correction_signal(np.array([50.0, 0.0]), np.ones(2), float("nan"), f, CFG)
    assert s.violation_rate == 0.0 and s.factors == (2.0, 0.5)


def test_global_period_must_stay_about_5x_the_local_tick() -> None:
    with pytest.raises(ValueError, match="keep it near 5"):
        SchedulerConfig.model_validate({"correction": {"period_s": 0.1}})
    with pytest.raises(ValueError, match="keep it near 5"):
        SchedulerConfig.model_validate({"correction": {"period_s": 2.0}})
