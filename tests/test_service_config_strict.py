"""Every section of the serve config is as strict as `guard:`: flags are true or false,
counts whole numbers as written, other numbers finite; environment variables, text by
nature, are still read as the field's type."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from slaguard.service.config import ServiceConfigError, load_config

WHOLE = "write a whole number, like 3, without quotes"
FLAG = "write true or false, without quotes"
FINITE = "write a finite number"
NUMBER = "write a number"


def _file_error(tmp_path: Path, text: str) -> str:
    path = tmp_path / "serve.yaml"
    path.write_text(text + "\n")
    with pytest.raises(ServiceConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert "\n" not in message and "Traceback" not in message
    return message.removeprefix(f"{path}: ")


def _variable(field: str) -> str:
    """The environment variable that sets `field` (`rollout.stages_pct[1]`:
    `ROLLOUT__STAGES_PCT`), which the fix offers."""
    return re.sub(r"\[\d+\]$", "", field).replace(".", "__").upper()


@pytest.mark.parametrize(
    ("text", "field", "got", "fix"),
    [
        ("telemetry: {scrape: 'yes'}", "telemetry.scrape", "'yes'", FLAG),
        ("telemetry: {scrape: 1}", "telemetry.scrape", "1", FLAG),
        ("telemetry: {scrape_interval_s: true}", "telemetry.scrape_interval_s", "True", NUMBER),
        ("gateway: {enabled: 'yes'}", "gateway.enabled", "'yes'", FLAG),
        ("gateway: {max_connections: 2.5}", "gateway.max_connections", "2.5", WHOLE),
        ("gateway: {default_max_tokens: true}", "gateway.default_max_tokens", "True", WHOLE),
        ("gateway: {chars_per_token: true}", "gateway.chars_per_token", "True", NUMBER),
        ("gateway: {eject_after_failures: 2.5}", "gateway.eject_after_failures", "2.5", WHOLE),
        ("gateway: {eject_s: .inf}", "gateway.eject_s", "inf", FINITE),
        ("loops: {weights_s: .inf}", "loops.weights_s", "inf", FINITE),
        ("loops: {detectors_s: true}", "loops.detectors_s", "True", NUMBER),
        ("rollout: {baseline_s: .inf}", "rollout.baseline_s", "inf", FINITE),
        ("rollout: {stages_pct: [10, 50.0, 100]}", "rollout.stages_pct[1]", "50.0", WHOLE),
        ("rollout: {stages_pct: [true, 50, 100]}", "rollout.stages_pct[0]", "True", WHOLE),
        ("migrate: 'yes'", "migrate", "'yes'", FLAG),
        ("migrate: 1", "migrate", "1", FLAG),
        ("port: 8080.0", "port", "8080.0", WHOLE),
        ("max_pending_decisions: 1000.5", "max_pending_decisions", "1000.5", WHOLE),
    ],
)
def test_a_loose_value_in_any_section_is_refused_in_one_line(
    text: str, field: str, got: str, fix: str, tmp_path: Path
) -> None:
    """`scrape: "yes"` was true, `max_connections: 2.5`... 2, `weights_s: .inf` a
    refit that never came, `stages_pct: [true, 50, 100]` a 1 % first stage."""
    message = _file_error(tmp_path, text)
    assert message.startswith(f"{field}: "), message
    assert message.endswith(f"(got {got}); fix: {fix} (or set $SLAGUARD_SERVE_{_variable(field)})")


@pytest.mark.parametrize(
    ("text", "field", "got"),
    [
        ("migrate: yes", "migrate", "'yes'"),
        ("migrate: No", "migrate", "'No'"),
        ("migrate: on", "migrate", "'on'"),
        ("telemetry: {scrape: OFF}", "telemetry.scrape", "'OFF'"),
        ("gateway: {enabled: off}", "gateway.enabled", "'off'"),
        ("guard: {breaker: {auto_return: yes}}", "guard.breaker.auto_return", "'yes'"),
    ],
)
def test_a_yaml_1_1_boolean_is_no_flag(text: str, field: str, got: str, tmp_path: Path) -> None:
    """PyYAML reads `yes`, `no`, `on` and `off` as booleans (YAML 1.1), so `migrate: yes`
    was true though `SLAGUARD_SERVE_MIGRATE=yes` is refused."""
    assert _file_error(tmp_path, text) == (
        f"{field}: Input should be a valid boolean (got {got}); fix: {FLAG} (or set "
        f"$SLAGUARD_SERVE_{_variable(field)})"
    )


@pytest.mark.parametrize(("text", "read"), [("true", True), ("False", False), ("TRUE", True)])
def test_a_file_flag_is_true_or_false_in_yamls_three_spellings(
    text: str, read: bool, tmp_path: Path
) -> None:
    path = tmp_path / "serve.yaml"
    path.write_text(f"migrate: {text}\ngateway: {{enabled: {text}}}\n")
    config = load_config(path)
    assert config.migrate is read and config.gateway.enabled is read


@pytest.mark.parametrize(
    ("variable", "value", "section", "key", "read"),
    [
        ("TELEMETRY__SCRAPE", "false", "telemetry", "scrape", False),
        ("GATEWAY__ENABLED", "true", "gateway", "enabled", True),
        ("GATEWAY__MAX_CONNECTIONS", "20", "gateway", "max_connections", 20),
        ("LOOPS__WEIGHTS_S", "60", "loops", "weights_s", 60.0),
        ("ROLLOUT__STAGES_PCT", "[20, 100]", "rollout", "stages_pct", (20, 100)),
        ("MIGRATE", "false", "", "migrate", False),
        ("PORT", "9000", "", "port", 9000),
        ("MAX_PENDING_DECISIONS", "1000", "", "max_pending_decisions", 1000),
    ],
)
def test_environment_variables_are_still_read_as_the_fields_type(
    variable: str, value: str, section: str, key: str, read: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(f"SLAGUARD_SERVE_{variable}", value)
    config = load_config()
    assert getattr(getattr(config, section) if section else config, key) == read


def test_an_infinite_environment_number_names_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SLAGUARD_SERVE_LOOPS__WEIGHTS_S", "inf")
    with pytest.raises(ServiceConfigError) as err:
        load_config()
    assert str(err.value) == (
        "$SLAGUARD_SERVE_LOOPS__WEIGHTS_S: loops.weights_s: Input should be a finite number "
        "(got 'inf'); fix: correct the variable or unset it"
    )


@pytest.mark.parametrize(
    ("variable", "value", "field"),
    [
        ("MIGRATE", "yes", "migrate"),
        ("MIGRATE", "1", "migrate"),
        ("GATEWAY__ENABLED", "no", "gateway.enabled"),
        ("TELEMETRY__SCRAPE", "off", "telemetry.scrape"),
        ("GUARD__BREAKER__AUTO_RETURN", "y", "guard.breaker.auto_return"),
        ("MIGRATE", "", "migrate"),
    ],
)
def test_an_environment_flag_is_true_or_false_as_in_the_file(
    variable: str, value: str, field: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`SLAGUARD_SERVE_MIGRATE=yes` or `SLAGUARD_SERVE_GATEWAY__ENABLED=no` started
    normally (read as pydantic's lax bool), though the file's `"yes"` and `1` are refused."""
    monkeypatch.setenv(f"SLAGUARD_SERVE_{variable}", value)
    with pytest.raises(ServiceConfigError) as err:
        load_config()
    assert str(err.value) == (
        f"$SLAGUARD_SERVE_{variable}: {field}: Input should be a valid boolean (got "
        f"{value!r}); fix: set it to true or false, or unset it"
    )


@pytest.mark.parametrize(
    ("variable", "value", "field"),
    [
        ("PORT", "9000.0", "port"),
        ("PORT", "1_000", "port"),
        ("PORT", "+9000", "port"),
        ("PORT", "abc", "port"),
        ("MAX_PENDING_DECISIONS", "1000.0", "max_pending_decisions"),
        ("GATEWAY__MAX_CONNECTIONS", "20.0", "gateway.max_connections"),
        ("GUARD__BREAKER__TRIP_AFTER", "3.0", "guard.breaker.trip_after"),
    ],
)
def test_an_environment_whole_number_is_digits_only(
    variable: str, value: str, field: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`SLAGUARD_SERVE_PORT=9000.0` listened on 9000 (pydantic's lax int read it), though
    the file's `port: 9000.0` is refused."""
    monkeypatch.setenv(f"SLAGUARD_SERVE_{variable}", value)
    with pytest.raises(ServiceConfigError) as err:
        load_config()
    assert str(err.value) == (
        f"$SLAGUARD_SERVE_{variable}: {field}: Input should be a valid integer (got "
        f"{value!r}); fix: set it to a whole number in digits, like 3, or unset it"
    )


def test_a_negative_environment_whole_number_meets_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A minus sign is read, so the bound's own words say what is wrong."""
    monkeypatch.setenv("SLAGUARD_SERVE_GATEWAY__MAX_CONNECTIONS", "-5")
    with pytest.raises(ServiceConfigError) as err:
        load_config()
    assert str(err.value) == (
        "$SLAGUARD_SERVE_GATEWAY__MAX_CONNECTIONS: gateway.max_connections: Input should be "
        "greater than or equal to 1 (got -5); fix: correct the variable or unset it"
    )


@pytest.mark.parametrize(("value", "read"), [("TRUE", True), ("False", False), (" true ", True)])
def test_an_environment_flag_may_be_written_in_any_case(
    value: str, read: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the file's `True` and `FALSE` (YAML's own)."""
    monkeypatch.setenv("SLAGUARD_SERVE_GATEWAY__ENABLED", value)
    assert load_config().gateway.enabled is read


@pytest.mark.parametrize(
    ("text", "field", "got"),
    [
        ("gateway: {connect_timeout_s: .nan}", "gateway.connect_timeout_s", "nan"),
        ("gateway: {connect_timeout_s: .inf}", "gateway.connect_timeout_s", "inf"),
        ("gateway: {chars_per_token: -.inf}", "gateway.chars_per_token", "-inf"),
        ("telemetry: {stale_after_s: .nan}", "telemetry.stale_after_s", "nan"),
        ("telemetry: {scrape_interval_s: .inf}", "telemetry.scrape_interval_s", "inf"),
        ("rollout: {baseline_s: .nan}", "rollout.baseline_s", "nan"),
        ("rollout: {stage_s: .nan}", "rollout.stage_s", "nan"),
        ("loops: {detectors_s: .nan}", "loops.detectors_s", "nan"),
        ("loops: {weights_s: .nan}", "loops.weights_s", "nan"),
    ],
)
def test_a_number_that_is_not_finite_is_refused_as_such_in_every_section(
    text: str, field: str, got: str, tmp_path: Path
) -> None:
    """`connect_timeout_s: .nan` said `Input should be less than or equal to 60 (got nan);
    fix: correct the value`: the bound was checked before finiteness, outside `guard:`."""
    message = _file_error(tmp_path, text)
    assert message == (
        f"{field}: Input should be a finite number (got {got}); fix: {FINITE} (or set "
        f"$SLAGUARD_SERVE_{_variable(field)})"
    )


def test_a_bounded_environment_number_that_is_not_finite_names_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SLAGUARD_SERVE_GATEWAY__CONNECT_TIMEOUT_S", "nan")
    with pytest.raises(ServiceConfigError) as err:
        load_config()
    assert str(err.value) == (
        "$SLAGUARD_SERVE_GATEWAY__CONNECT_TIMEOUT_S: gateway.connect_timeout_s: Input should be "
        "a finite number (got 'nan'); fix: correct the variable or unset it"
    )


@pytest.mark.parametrize("value", ["1e308", "1e12", "2592001"])
def test_a_weight_refit_period_past_thirty_days_is_refused_at_load(
    value: str, tmp_path: Path
) -> None:
    """`weights_s: 1e308` passed the config and then crashed serve's start with an
    OverflowError traceback (exit 3) when the scheduler made the job's interval."""
    message = _file_error(tmp_path, f"loops: {{weights_s: {value}}}")
    assert message.startswith("loops.weights_s: Input should be less than or equal to 2592000"), (
        message
    )
    assert message.endswith("(or set $SLAGUARD_SERVE_LOOPS__WEIGHTS_S)"), message


def test_a_thirty_day_weight_refit_period_is_taken(tmp_path: Path) -> None:
    path = tmp_path / "serve.yaml"
    path.write_text("loops: {weights_s: 2592000}\n")
    assert load_config(path).loops.weights_s == 2_592_000
