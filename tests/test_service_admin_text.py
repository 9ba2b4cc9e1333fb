"""Admin calls whose text PostgreSQL cannot store: a client's mistake is a 422 naming the
field, not a 503 "retry when the database is back"; an alert's NUL does not stop its
rollback (Alertmanager retried a 503 for ever and nothing rolled back)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import httpx
import pytest
import yaml
from pydantic import SecretStr
from sqlalchemy import select
from sqlalchemy.engine import URL
from test_service_admin import AUTH, FLEET, TOKEN, _webhook

from slaguard.audit.models import Incident, ModeChange
from slaguard.audit.store import current_mode
from slaguard.service.app import create_app
from slaguard.service.bootstrap import Service, build_service
from slaguard.service.config import load_config
from slaguard.service.local import ServerThread

pytestmark = pytest.mark.postgres
ALERT = "SlaguardSLAErrorBudgetBurn"


@pytest.fixture(scope="module")
def on_postgres(
    pg_url: URL, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Service, httpx.Client]]:
    tmp = tmp_path_factory.mktemp("admin_pg")
    (tmp / "fleet.yaml").write_text(yaml.safe_dump(FLEET))
    overrides = {
        "fleet": tmp / "fleet.yaml",
        "db": pg_url.render_as_string(hide_password=False),
        "spill_dir": tmp / "spill",
        "telemetry": {"scrape": False},
        "notify_file": tmp / "incidents.jsonl",
        "alertmanager": {"rollback_alerts": [ALERT]},
    }
    service = build_service(load_config(None, overrides))
    app = create_app(service.runtime, admin_token=SecretStr(TOKEN), readiness=service.readiness)
    with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=10) as client:
        yield service, client
    service.close()


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (
            {"reason": "nul\u0000reason"},
            "reason: contains a NUL character (\\x00), which the audit database cannot store; "
            "fix: send the reason without it",
        ),
        (
            {"reason": "ok", "actor": "alice\u0000"},
            "actor: 'alice\\x00' is not a name on one line of at most 120 characters; fix: "
            "give a user or team name",
        ),
        (
            {"reason": "ok", "actor": "alice\nbob"},
            "actor: 'alice\\nbob' is not a name on one line of at most 120 characters; fix: "
            "give a user or team name",
        ),
        (
            {"reason": "ok", "actor": "a" * 121},  # `api:` + 121 is past the 128 column
            "actor: String should have at most 120 characters",
        ),
    ],
)
def test_text_the_database_cannot_store_is_a_422_naming_the_field(
    on_postgres: tuple[Service, httpx.Client], body: dict[str, str], error: str
) -> None:
    service, client = on_postgres
    before = current_mode(service.engine)
    r = client.post("/v1/mode", json={"action": "resume", **body}, headers=AUTH)
    assert (r.status_code, r.json()) == (422, {"error": error})
    assert current_mode(service.engine) == before


def test_an_actor_of_120_characters_is_stored(on_postgres: tuple[Service, httpx.Client]) -> None:
    service, client = on_postgres
    body = {"action": "hold", "reason": "longest name", "actor": "a" * 120}
    r = client.post("/v1/mode", json=body, headers=AUTH)
    assert r.status_code == 200, r.text
    assert current_mode(service.engine).actor == "api:" + "a" * 120


def test_a_critical_alert_with_a_nul_still_rolls_the_fleet_back(
    on_postgres: tuple[Service, httpx.Client],
) -> None:
    service, client = on_postgres
    client.post("/v1/mode", json={"action": "resume", "reason": "start"}, headers=AUTH)
    assert current_mode(service.engine).mode == "rollout(10)"
    payload = _webhook(ALERT)
    (alert,) = payload["alerts"]
    alert["labels"]["instance"] = "h100\u0000-0"
    alert["labels"]["odd\u0000key"] = "x"
    alert["annotations"]["summary"] = "TTFT burning\u0000 14.4x"
    r = client.post("/v1/alertmanager", json=payload, headers=AUTH)
    assert (r.status_code, r.json()["action"], r.json()["mode"]) == (200, "rollback", "round_robin")
    with service.engine.connect() as conn:
        change = conn.execute(select(ModeChange.reason).order_by(ModeChange.id.desc())).first()
        evidence = conn.execute(select(Incident.evidence).order_by(Incident.id.desc())).scalar()
    assert (
        change is not None
        and change.reason == f"alertmanager: {ALERT} firing (TTFT burning\\x00 14.4x)"
    )
    assert evidence is not None
    (stored,) = evidence["verdicts"][0]["evidence"]["alerts"]
    assert stored["labels"]["instance"] == "h100\\x00-0"
    assert stored["labels"]["odd\\x00key"] == "x"


def test_a_reason_or_alert_summary_cannot_forge_log_lines(
    on_postgres: tuple[Service, httpx.Client], caplog: pytest.LogCaptureFixture
) -> None:
    """The mode change's log line quoted the reason as sent: a newline in it wrote a
    second, forged log line (`... fleet mode resume by api:ceo: all fine`) and an ESC
    sequence cleared the terminal reading the log. Written out, as the incident's line."""
    service, client = on_postgres
    forged = "\n2026-12-01 06:00:00,000 INFO slaguard.service.modes: all fine\x1b[2J"
    with caplog.at_level(logging.INFO, logger="slaguard.service.modes"):
        r = client.post("/v1/mode", json={"action": "resume", "reason": "x" + forged}, headers=AUTH)
        assert r.status_code == 200, r.text
        payload = _webhook(ALERT)
        payload["alerts"][0]["annotations"]["summary"] = "burning" + forged
        r = client.post("/v1/alertmanager", json=payload, headers=AUTH)
        assert r.json()["action"] == "rollback", r.text
    said = [r.getMessage() for r in caplog.records if r.name == "slaguard.service.modes"]
    assert len(said) == 2, said
    for line in said:
        assert "\n" not in line and "\x1b" not in line, line
        assert "\\n2026-12-01 06:00:00,000 INFO" in line and "\\x1b[2J" in line, line
    assert (
        current_mode(service.engine).reason
        == "alertmanager: " + ALERT + " firing (burning" + forged + ")"
    )
