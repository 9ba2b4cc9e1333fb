"""The `guard:` section of the serve config: each mistake is one line naming its source,
the field and the fix, refused before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from slaguard.cli.main import app
from slaguard.fleet import load_fleet
from slaguard.guard.config import MAX_SLICES, GuardConfig
from slaguard.guard.guard import Guard
from slaguard.service.config import ServiceConfigError, load_config
from slaguard.sim.guarded import GuardController


def _error(path: Path) -> str:
    with pytest.raises(ServiceConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert "\n" not in message and "fix:" in message
    return message


def _env_error(monkeypatch: pytest.MonkeyPatch, variable: str, value: str) -> str:
    """The one-line refusal of a serve config with `variable` set to `value`."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(ServiceConfigError) as err:
        load_config()
    return str(err.value)


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "serve.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ("ttft_zscore", "window_s"),
        ("rollout_compare", "window_s"),
        ("breaker", "cooldown_s"),
        ("hot_spot", "decay_tau_s"),
        ("cold_start", "max_age_s"),
    ],
)
def test_an_infinite_number_is_refused_like_nan(section: str, key: str, tmp_path: Path) -> None:
    """`window_s: .inf` crashed the start with an OverflowError traceback; `cooldown_s: .inf`
    and `decay_tau_s: .inf` were taken (a cool-down that never ends)."""
    path = _file(tmp_path, f"guard:\n  {section}:\n    {key}: .inf\n")
    env = f"SLAGUARD_SERVE_GUARD__{section.upper()}__{key.upper()}"
    assert _error(path) == (
        f"{path}: guard.{section}.{key}: Input should be a finite number (got inf); "
        f"fix: write a finite number (or set ${env})"
    )


def test_an_infinite_number_from_the_environment_names_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _env_error(monkeypatch, "SLAGUARD_SERVE_GUARD__TTFT_ZSCORE__WINDOW_S", "inf").startswith(
        "$SLAGUARD_SERVE_GUARD__TTFT_ZSCORE__WINDOW_S: guard.ttft_zscore.window_s: "
        "Input should be a finite number"
    )


@pytest.mark.parametrize(
    "text",
    [
        "ttft_zscore: {window_s: 1.0e+9}",
        "ttft_zscore: {window_s: 1.0e+300, slice_s: 1.0e-10}",
        "rollout_compare: {window_s: 1.0e+9}",
        "ttft_zscore: {tier_fast_window_s: 10, tier_fast_slice_s: 0.0001}",
    ],
)
def test_a_window_of_too_many_slices_is_refused(text: str, tmp_path: Path) -> None:
    """A window of 1e9 s passed the start and ran out of memory at the first sample."""
    message = _error(_file(tmp_path, f"guard:\n  {text}\n"))
    assert f"slices, above {MAX_SLICES}" in message, message
    assert "fix: raise the slice or shorten the window" in message


def test_serve_refuses_an_infinite_window_in_one_line_exit_2(tmp_path: Path) -> None:
    path = _file(tmp_path, "guard:\n  ttft_zscore:\n    window_s: .inf\n")
    result = CliRunner().invoke(app, ["serve", "--config", str(path)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "finite number" in result.stderr


def test_the_defaults_are_valid_and_within_the_slice_bound() -> None:
    config = GuardConfig()
    assert config.ttft_zscore.slice_count <= MAX_SLICES


@pytest.mark.parametrize(
    ("text", "field", "fix"),
    [
        ("breaker: {trip_after: true}", "breaker.trip_after", "write a whole number"),
        ("breaker: {clear_after: '30'}", "breaker.clear_after", "write a whole number"),
        ("breaker: {clear_after: 30.0}", "breaker.clear_after", "write a whole number"),
        ("ttft_zscore: {min_samples: false}", "ttft_zscore.min_samples", "write a whole number"),
        ("breaker: {auto_return: 'yes'}", "breaker.auto_return", "write true or false"),
        ("breaker: {auto_return: 1}", "breaker.auto_return", "write true or false"),
        ("ttft_zscore: {window_s: true}", "ttft_zscore.window_s", "write a number"),
    ],
)
def test_a_count_or_flag_of_the_wrong_kind_is_refused(
    text: str, field: str, fix: str, tmp_path: Path
) -> None:
    """`trip_after: true` was K = 1 and `auto_return: "yes"` true, without a word."""
    path = _file(tmp_path, f"guard:\n  {text}\n")
    message = _error(path)
    assert message.startswith(f"{path}: guard.{field}: "), message
    assert f"fix: {fix}" in message, message


@pytest.mark.parametrize(
    ("variable", "value", "read"),
    [
        ("BREAKER__AUTO_RETURN", "true", True),
        ("BREAKER__AUTO_RETURN", "false", False),
        ("BREAKER__TRIP_AFTER", "5", 5),
        ("BREAKER__COOLDOWN_S", "60", 60.0),
        ("TTFT_ZSCORE__WINDOW_S", "1e3", 1000.0),
    ],
)
def test_environment_variables_are_text_read_as_the_fields_type(
    variable: str, value: str, read: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(f"SLAGUARD_SERVE_GUARD__{variable}", value)
    section, key = variable.lower().split("__")
    assert getattr(getattr(load_config().guard, section), key) == read


def test_an_environment_count_that_is_no_number_names_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _env_error(monkeypatch, "SLAGUARD_SERVE_GUARD__BREAKER__TRIP_AFTER", "true") == (
        "$SLAGUARD_SERVE_GUARD__BREAKER__TRIP_AFTER: guard.breaker.trip_after: Input should "
        "be a valid integer (got 'true'); fix: set it to a whole number in digits, like 3, or "
        "unset it"
    )


def test_serve_refuses_the_simulators_evaluation_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It was taken and ignored: serve evaluates every `loops.detectors_s`, so K and M
    were timed by another knob than the one set."""
    path = _file(tmp_path, "guard:\n  evaluation_interval_s: 2\n")
    assert _error(path) == (
        f"{path}: guard.evaluation_interval_s: serve does not read it (got 2): it evaluates "
        "the guard every loops.detectors_s (default 1.0), and this key is the simulator's; "
        "fix: remove it and set loops.detectors_s"
    )
    assert _env_error(monkeypatch, "SLAGUARD_SERVE_GUARD__EVALUATION_INTERVAL_S", "2").startswith(
        "$SLAGUARD_SERVE_GUARD__EVALUATION_INTERVAL_S: guard.evaluation_interval_s: serve "
        "does not read it"
    )


def test_an_unknown_guard_key_does_not_offer_the_evaluation_interval(tmp_path: Path) -> None:
    message = _error(_file(tmp_path, "guard:\n  evaluation_intervals: 2\n"))
    assert "use one of breaker, cold_start, hot_spot, rollout_compare, ttft_zscore" in message


def test_the_simulator_still_reads_its_evaluation_interval() -> None:
    config = GuardConfig.model_validate({"evaluation_interval_s": 2})
    assert GuardController(Guard(config), load_fleet()).interval_s == 2.0
