"""`slaguard serve` settings: each mistake is one line naming where the value came from
(flag, environment variable or file), the field, and the fix."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from slaguard.service.bootstrap import build_service
from slaguard.service.config import ServiceConfigError, load_config
from slaguard.service.config_sections import ALERT_SEVERITIES, SLAGUARD_ALERTS
from slaguard.service.credentials import admin_token

ROOT = Path(__file__).resolve().parents[1]


def _error(path: Path | None = None, flags: dict[str, object] | None = None) -> str:
    with pytest.raises(ServiceConfigError) as err:
        load_config(path, flags)
    message = str(err.value)
    assert "\n" not in message and "fix:" in message
    return message


def test_a_flag_is_named_as_the_flag() -> None:
    """It said `environment: port: ...` and suggested the file or $SLAGUARD_SERVE_PORT."""
    assert _error(flags={"port": 99999}) == (
        "--port: 99999 is out of range; fix: use a port from 1 to 65535, or 0 for any free port"
    )


def test_an_environment_variable_is_named_as_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It named the YAML file even when the bad value came from the environment."""
    (tmp_path / "serve.yaml").write_text("port: 9000\n")
    monkeypatch.setenv("SLAGUARD_SERVE_GATEWAY__CONNECT_TIMEOUT_S", "abc")
    assert _error(tmp_path / "serve.yaml").startswith(
        "$SLAGUARD_SERVE_GATEWAY__CONNECT_TIMEOUT_S: gateway.connect_timeout_s: Input should "
        "be a valid number"
    )


def test_a_file_value_is_named_with_the_file(tmp_path: Path) -> None:
    (tmp_path / "serve.yaml").write_text("gateway:\n  connect_timeout_s: -1\n")
    assert _error(tmp_path / "serve.yaml") == (
        f"{tmp_path / 'serve.yaml'}: gateway.connect_timeout_s: Input should be greater than 0 "
        "(got -1); fix: correct the value (or set $SLAGUARD_SERVE_GATEWAY__CONNECT_TIMEOUT_S)"
    )


def test_the_admin_token_in_the_file_points_at_its_variable(tmp_path: Path) -> None:
    """It suggested $SLAGUARD_SERVE_ADMIN_TOKEN, which nothing reads."""
    (tmp_path / "serve.yaml").write_text("admin_token: abcdefabcdefabcdef\n")
    assert _error(tmp_path / "serve.yaml").endswith(
        "admin_token: unknown setting; fix: remove it; the admin token is read only from "
        "$SLAGUARD_ADMIN_TOKEN(_FILE)"
    )


def test_a_picture_stale_before_the_next_scrape_is_refused(tmp_path: Path) -> None:
    """Accepted before: every target read as saturated and every route got no_capacity."""
    (tmp_path / "serve.yaml").write_text("telemetry:\n  stale_after_s: 0.2\n")
    assert _error(tmp_path / "serve.yaml").endswith(
        "telemetry: stale_after_s 0.2 is not above scrape_interval_s 0.25: every picture would "
        "go stale before the next scrape and every target be treated as saturated; fix: raise "
        "stale_after_s (default 1.0) or lower scrape_interval_s"
    )
    pushed_only = load_config(None, {"telemetry": {"scrape": False, "stale_after_s": 0.2}})
    assert pushed_only.telemetry.stale_after_s == 0.2


@pytest.mark.parametrize("value", ["", "   "])
def test_a_blank_admin_token_is_refused_not_ignored(value: str, tmp_path: Path) -> None:
    """A blank token disabled the admin endpoints with a warning; a short one was refused."""
    with pytest.raises(ServiceConfigError, match="SLAGUARD_ADMIN_TOKEN: set but blank; fix:"):
        admin_token({"SLAGUARD_ADMIN_TOKEN": value})
    (tmp_path / "token").write_text("\n")
    with pytest.raises(ServiceConfigError, match="token is empty; fix: write the token in it"):
        admin_token({"SLAGUARD_ADMIN_TOKEN_FILE": str(tmp_path / "token")})
    assert admin_token({}) is None


@pytest.mark.parametrize(
    "value", ["pässwörd-0123456789-abc", "0123456789 abcdef-xyz", "0123456789abcdef\tx"]
)
def test_an_admin_token_no_client_can_send_is_refused(value: str, tmp_path: Path) -> None:
    """A non-ASCII token was accepted and then never authenticated (the header is latin-1)."""
    (tmp_path / "token").write_text(value + "\n")
    for env in (
        {"SLAGUARD_ADMIN_TOKEN": value},
        {"SLAGUARD_ADMIN_TOKEN_FILE": str(tmp_path / "token")},
    ):
        with pytest.raises(ServiceConfigError) as info:
            admin_token(env)
        assert str(info.value).startswith(
            "SLAGUARD_ADMIN_TOKEN: the token must be printable ASCII (no spaces); fix:"
        )
        assert value not in str(info.value)
    token = admin_token({"SLAGUARD_ADMIN_TOKEN": "0123456789abcdef-~!#$%&*+/=?^_|"})
    assert token is not None


def test_a_bad_database_url_names_where_it_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It always said `--db`, also for the file's `db:`, $SLAGUARD_SERVE_DB or $SLAGUARD_DB."""
    config = tmp_path / "serve.yaml"
    config.write_text("db: mysql://x/y\n")
    monkeypatch.delenv("SLAGUARD_DB", raising=False)
    problem = "backend 'mysql' is not supported; fix: use a SQLite file path or postgresql+psycopg://user@host:5432/db"
    cases: list[tuple[str, Path | None, dict[str, object] | None, str]] = [
        ("", config, None, f"{config}: db"),
        ("", None, {"db": "mysql://x/y"}, "--db"),
        ("SLAGUARD_SERVE_DB", config, None, "$SLAGUARD_SERVE_DB"),
        ("SLAGUARD_DB", None, None, "$SLAGUARD_DB"),
    ]
    for variable, path, flags, source in cases:
        with monkeypatch.context() as env:
            if variable:
                env.setenv(variable, "mysql://x/y")
            with pytest.raises(ServiceConfigError) as err:
                load_config(path, flags)
        assert str(err.value) == f"{source}: {problem}"


@pytest.mark.parametrize("field", ["spill_dir", "fleet", "notify_file", "db"])
def test_a_blank_path_is_refused_not_the_working_directory(
    field: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`SLAGUARD_SERVE_SPILL_DIR=""` put the spill journal in the working directory
    (`Path("")` is "."); a blank `db` fell back to the default database."""
    variable = f"SLAGUARD_SERVE_{field.upper()}"
    monkeypatch.setenv(variable, "")
    assert _error() == (
        f"${variable}: {field}: blank (''); fix: give a path, or leave the setting out (unset "
        "the variable) for its default"
    )
    monkeypatch.delenv(variable)
    (tmp_path / "serve.yaml").write_text(f"{field}: ' '\n")
    assert _error(tmp_path / "serve.yaml").startswith(f"{tmp_path / 'serve.yaml'}: {field}: blank")
    assert _error(flags={"fleet": ""}).startswith("--fleet: blank")


@pytest.mark.parametrize(
    ("severity", "hint"), [("urgent", ""), ("critcal", " (did you mean 'critical'?)")]
)
def test_a_severity_no_alert_has_is_refused(severity: str, hint: str, tmp_path: Path) -> None:
    """Accepted before: no alert matched, so automatic rollback was silently off."""
    (tmp_path / "serve.yaml").write_text(f"alertmanager:\n  rollback_severities: [{severity}]\n")
    assert _error(tmp_path / "serve.yaml") == (
        f"{tmp_path / 'serve.yaml'}: alertmanager.rollback_severities: {severity!r} is not a "
        "severity slaguard's alerts have, so no alert would roll back; fix: use critical or "
        f"warning{hint}"
    )
    both = load_config(None, {"alertmanager": {"rollback_severities": ["critical", "warning"]}})
    assert both.alertmanager.rollback_severities == ("critical", "warning")


def test_another_alertmanager_alert_may_have_any_severity(tmp_path: Path) -> None:
    """`rollback_alerts` may name any Alertmanager alert: its severity is not slaguard's to
    know. Refused for a day with "not a severity slaguard's alerts have", untrue for it."""
    (tmp_path / "serve.yaml").write_text(
        "alertmanager:\n  rollback_alerts: [VllmReplicasDown]\n  rollback_severities: [page]\n"
    )
    config = load_config(tmp_path / "serve.yaml")
    assert config.alertmanager.rollback_alerts == ("VllmReplicasDown",)
    assert config.alertmanager.rollback_severities == ("page",)
    mixed = {
        "rollback_alerts": ["SlaguardDown", "VllmReplicasDown"],
        "rollback_severities": ["page"],
    }
    assert load_config(None, {"alertmanager": mixed}).alertmanager.rollback_severities == ("page",)
    only_ours = {"rollback_alerts": ["SlaguardDown"], "rollback_severities": ["critcal"]}
    assert _error(flags={"alertmanager": only_ours}).endswith(
        "fix: use critical or warning (did you mean 'critical'?)"
    )


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("SlaguardSLAErrorBudgetBrn", " (did you mean 'SlaguardSLAErrorBudgetBurn'?)"),
        ("slaguardSLAErrorBudgetBurn", " (did you mean 'SlaguardSLAErrorBudgetBurn'?)"),
        ("SlagaurdSLAErrorBudgetBurn", " (did you mean 'SlaguardSLAErrorBudgetBurn'?)"),
        ("SlaguardBurnRate", ""),
    ],
)
def test_a_misspelt_slaguard_alert_is_refused(name: str, hint: str, tmp_path: Path) -> None:
    """Taken before as another Alertmanager alert: no alert has that name, so the burn page
    rolled nothing back, and the severity check was skipped for it as well."""
    (tmp_path / "serve.yaml").write_text(f"alertmanager:\n  rollback_alerts: [{name}]\n")
    assert _error(tmp_path / "serve.yaml") == (
        f"{tmp_path / 'serve.yaml'}: alertmanager.rollback_alerts: {name!r} is not one of "
        "slaguard's alerts (alerts/*.yml), so no alert would roll back under that name; fix: "
        f"write the alert's name as its rule does{hint}"
    )


def test_slaguard_alerts_are_those_of_the_alert_rules() -> None:
    """The names the severity check treats as slaguard's own, and their severities."""
    names: set[str] = set()
    severities: set[str] = set()
    for path in (ROOT / "alerts").glob("slaguard-*.yml"):
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]:
            for rule in group["rules"]:
                if "alert" in rule:
                    names.add(rule["alert"])
                    severities.add(rule["labels"]["severity"])
    assert names == SLAGUARD_ALERTS
    assert severities == set(ALERT_SEVERITIES)


@pytest.mark.parametrize(
    ("stages", "problem"),
    [
        ("[10, 500]", "[10, 500]: 500 is not a percentage in (0, 100]; fix: give each stage's "
         "learned share as a percentage, e.g. [10, 50, 100]"),
        ("[50, 10]", "[50, 10] is not increasing; fix: list the stages in the order they run, "
         "e.g. [10, 50]"),
        ("[]", "empty; fix: list the learned share per stage, e.g. [10, 50, 100]"),
    ],
)  # fmt: skip
def test_rollout_stages_name_the_bad_value_and_the_fix(
    stages: str, problem: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """They said `stages_pct must be non-empty values in (0, 100]` with no value or fix,
    and named the file even when the list came from the environment."""
    (tmp_path / "serve.yaml").write_text(f"rollout:\n  stages_pct: {stages}\n")
    assert _error(tmp_path / "serve.yaml") == (
        f"{tmp_path / 'serve.yaml'}: rollout.stages_pct: {problem}"
    )
    monkeypatch.setenv("SLAGUARD_SERVE_ROLLOUT__STAGES_PCT", stages)
    assert _error(tmp_path / "serve.yaml").startswith(
        "$SLAGUARD_SERVE_ROLLOUT__STAGES_PCT: rollout.stages_pct: "
    )


def test_an_unknown_key_lists_its_sections_keys_and_where_they_are_documented(
    tmp_path: Path,
) -> None:
    """An unknown guard key pointed at examples/serve.yaml, which does not list them."""
    (tmp_path / "serve.yaml").write_text("guard:\n  breaker:\n    trip_aftr: 5\n")
    assert _error(tmp_path / "serve.yaml").endswith(
        "guard.breaker.trip_aftr: unknown setting; fix: remove it, or use one of auto_return, "
        "clear_after, cooldown_s, max_switches_per_hour, trip_after (docs/guard.md); did you "
        "mean 'trip_after'?"
    )
    (tmp_path / "serve.yaml").write_text("gateway:\n  read_timeout: 5\n")
    assert _error(tmp_path / "serve.yaml").endswith(
        "(examples/serve.yaml); did you mean 'read_timeout_s'?"
    )


def test_the_example_config_leaves_the_database_to_slaguard_db_and_serve_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """examples/serve.yaml set `db:` with a comment reading like a default: serve with it
    ignored $SLAGUARD_DB, wrote ./slaguard.db, and nothing in the log said which."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SLAGUARD_DB", f"sqlite:///{tmp_path / 'ops' / 'audit.db'}")
    (tmp_path / "ops").mkdir()
    flags: dict[str, object] = {"fleet": ROOT / "examples" / "fleet.yaml", "notify_file": "n.jsonl"}
    config = load_config(ROOT / "examples" / "serve.yaml", flags)
    assert config.db is None
    caplog.set_level(logging.INFO, logger="slaguard.service.bootstrap")
    build_service(config).close()
    assert (tmp_path / "ops" / "audit.db").is_file()
    assert not (tmp_path / "slaguard.db").exists()
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("audit database")]
    assert said == [f"audit database sqlite:///{tmp_path / 'ops' / 'audit.db'}"]


def test_the_database_named_at_start_hides_its_password_and_is_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    caplog.set_level(logging.INFO, logger="slaguard.service.bootstrap")
    secret = "postgresql+psycopg://slaguard:s3cret@127.0.0.1:1/audit"  # nothing listens
    option = "postgres://slaguard@127.0.0.1:1/audit?password=s3cret&sslpassword=s3cret2"
    for db in ("relative.db", secret, option):
        service = build_service(load_config(None, {"db": db, "spill_dir": tmp_path / db[:3]}))
        service.writer.settings = replace(service.writer.settings, drain_timeout_s=0.1)
        service.close()
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("audit database")]
    assert said == [
        f"audit database sqlite:///{tmp_path / 'relative.db'}",
        "audit database postgresql+psycopg://slaguard:***@127.0.0.1:1/audit",
        "audit database postgresql+psycopg://slaguard@127.0.0.1:1/audit?password=***"
        "&sslpassword=***",
    ]
    assert "s3cret" not in caplog.text


@pytest.mark.parametrize(
    ("variable", "line"),
    [
        ("SLAGUARD_SERVE_GATEWAY__CONECT_TIMEOUT_S", "gateway.conect_timeout_s: unknown setting; "
         "fix: unset it, or use one of chars_per_token, connect_timeout_s, default_max_tokens, "
         "default_priority, eject_after_failures, eject_s, enabled, first_byte_timeout_s, "
         "max_connections, read_timeout_s "
         "(examples/serve.yaml); did you mean $SLAGUARD_SERVE_GATEWAY__CONNECT_TIMEOUT_S?"),
        ("SLAGUARD_SERVE_GUARD__BREAKER__TRIP_AFTERR", "guard.breaker.trip_afterr: unknown "
         "setting; fix: unset it, or use one of auto_return, clear_after, cooldown_s, "
         "max_switches_per_hour, trip_after (docs/guard.md); did you mean "
         "$SLAGUARD_SERVE_GUARD__BREAKER__TRIP_AFTER?"),
        ("SLAGUARD_SERVE_GUARD__BREAKR__TRIP_AFTER", "guard.breakr: unknown setting; fix: unset "
         "it, or use one of breaker, cold_start, hot_spot, rollout_compare, ttft_zscore "
         "(docs/guard.md); did you mean $SLAGUARD_SERVE_GUARD__BREAKER?"),
        ("SLAGUARD_SERVE_PROT", "prot: unknown setting; fix: unset it, or use one of "
         "alertmanager, db, fleet, gateway, guard, host, log_format, log_level, loops, "
         "max_pending_decisions, migrate, notify_file, port, rollout, spill_dir, telemetry "
         "(examples/serve.yaml); did you mean $SLAGUARD_SERVE_PORT?"),
        ("SLAGUARD_SERVE_ADMIN_TOKEN", "admin_token: unknown setting; fix: unset it; the admin "
         "token is read only from $SLAGUARD_ADMIN_TOKEN(_FILE)"),
        ("SLAGUARD_SERVE_PORT__HTTP", "port.http: unknown setting; fix: unset it: port is a "
         "single value, not a section (set $SLAGUARD_SERVE_PORT)"),
    ],
)  # fmt: skip
def test_an_unknown_variable_is_refused_naming_the_variable_not_the_file(
    variable: str, line: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A misspelt nested variable was blamed on the file (`serve.yaml: gateway.conect_...:
    unknown setting; fix: remove it`), which does not hold it; a misspelt top-level one
    (`SLAGUARD_SERVE_PROT=9000`) was ignored and serve started on the default port."""
    (tmp_path / "serve.yaml").write_text("port: 9000\n")
    monkeypatch.setenv(variable, "1")
    assert _error(tmp_path / "serve.yaml") == f"${variable}: {line}"
    assert _error() == f"${variable}: {line}"


@pytest.mark.parametrize(
    ("variable", "value", "line"),
    [
        (
            "SLAGUARD_SERVE_ALERTMANAGER__ROLLBACK_ALERTS",
            "SlaguardSLAErrorBudgetBurn",
            "alertmanager.rollback_alerts: 'SlaguardSLAErrorBudgetBurn' is not JSON, as a list "
            "given in a variable must be; fix: write a JSON list, e.g. "
            "SLAGUARD_SERVE_ALERTMANAGER__ROLLBACK_ALERTS='[\"SlaguardSLAErrorBudgetBurn\"]'",
        ),
        (
            "SLAGUARD_SERVE_ROLLOUT__STAGES_PCT",
            "10,50",
            "rollout.stages_pct: '10,50' is not JSON, as a list given in a variable must be; "
            "fix: write a JSON list, e.g. SLAGUARD_SERVE_ROLLOUT__STAGES_PCT='[10, 50, 100]'",
        ),
        (
            "SLAGUARD_SERVE_TELEMETRY",
            "{scrape: false}",
            "telemetry: '{scrape: false}' is not JSON, as a section given in a variable must "
            "be; fix: write a JSON object, e.g. SLAGUARD_SERVE_TELEMETRY='{\"scrape\": true}', "
            "or set each key in its own variable, e.g. $SLAGUARD_SERVE_TELEMETRY__SCRAPE",
        ),
    ],
)
def test_a_list_or_section_variable_that_is_not_json_is_one_line(
    variable: str, value: str, line: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pydantic-settings reads these as JSON: anything else was a SettingsError traceback,
    exit 1, naming only the section."""
    monkeypatch.setenv(variable, value)
    assert _error() == f"${variable}: {line}"


def test_a_section_given_as_json_names_its_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "serve.yaml").write_text("port: 9000\n")
    monkeypatch.setenv("SLAGUARD_SERVE_GATEWAY", '{"conect_timeout_s": 1}')
    assert _error(tmp_path / "serve.yaml").startswith(
        "$SLAGUARD_SERVE_GATEWAY: gateway.conect_timeout_s: unknown setting; fix: unset it, "
    )
    monkeypatch.setenv("SLAGUARD_SERVE_GATEWAY", '{"connect_timeout_s": -1}')
    assert _error(tmp_path / "serve.yaml").startswith(
        "$SLAGUARD_SERVE_GATEWAY: gateway.connect_timeout_s: Input should be greater than 0 "
    )


@pytest.mark.parametrize(
    ("variable", "value"),
    [("SLAGUARD_SERVE_DB", "audit.db"), ("SLAGUARD_SERVE_SPILL_DIR", "spill"),
     ("SLAGUARD_SERVE_GUARD__BREAKER__TRIP_AFTER", "5"),
     ("SLAGUARD_SERVE_TELEMETRY__SCRAPE_INTERVAL_S", "0.5"),
     ("slaguard_serve_loops__weights_s", "60")],
)  # fmt: skip
def test_every_variable_of_a_setting_is_still_taken(
    variable: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, value)
    load_config()
