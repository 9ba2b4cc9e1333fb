"""Admin endpoints on a real server: bearer auth, manual modes, the Alertmanager receiver.

Every mode switch must land in the audit database's `fleet_state` row and `mode_changes`
log; an Alertmanager rollback also opens an incident and writes its message to a file.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from helpers import wait_for
from pydantic import SecretStr
from sqlalchemy import select, text

from slaguard.audit.models import Incident, ModeChange
from slaguard.audit.store import current_mode
from slaguard.service.app import create_app
from slaguard.service.bootstrap import Service, build_service
from slaguard.service.config import load_config
from slaguard.service.local import ServerThread

TOKEN = "test-admin-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
FLEET = {"targets": [{"id": "l40s-8b", "model": "llama3.1-8b", "card": "l40s", "count": 3}]}


@dataclass
class Admin:
    service: Service
    client: httpx.Client
    tmp: Path

    def rows(self, model: Any) -> list[Any]:
        with self.service.engine.connect() as conn:
            return list(conn.execute(select(model.__table__)).mappings())


@pytest.fixture(scope="module")
def admin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Admin]:
    tmp = tmp_path_factory.mktemp("admin")
    (tmp / "fleet.yaml").write_text(yaml.safe_dump(FLEET))
    cfg = load_config(
        None,
        {
            "fleet": tmp / "fleet.yaml",
            "db": str(tmp / "audit.db"),
            "telemetry": {"scrape": False},
            "notify_file": tmp / "incidents.jsonl",
            "alertmanager": {
                "rollback_alerts": ["SlaguardSLAErrorBudgetBurn"],
                "fleet": "default-mixed",
            },
        },
    )
    service = build_service(cfg)
    app = create_app(service.runtime, admin_token=SecretStr(TOKEN), readiness=service.readiness)
    with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=10) as client:
        yield Admin(service, client, tmp)
    service.close()


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-token-wrong-token"},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": f"Bearer {TOKEN}x"},
    ],
)
def test_admin_needs_the_exact_bearer_token(admin: Admin, headers: dict[str, str]) -> None:
    r = admin.client.post("/v1/mode", json={"action": "hold", "reason": "x"}, headers=headers)
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert "bearer token" in r.json()["error"]
    # an unauthenticated caller learns nothing about the body: 401 even for garbage
    bad = admin.client.post("/v1/alertmanager", json={"nonsense": 1}, headers=headers)
    assert bad.status_code == 401
    garbage = admin.client.post("/v1/mode", content=b"{not json", headers=headers)
    assert garbage.status_code == 401


def test_an_admin_body_is_parsed_whatever_its_content_type(admin: Admin) -> None:
    """curl -d sends form-urlencoded: FastAPI's 422 said 'Input should be a valid
    dictionary'; broken JSON named a character offset as the field."""
    # read as JSON down to its fields, and refused there: the fleet's mode stays untouched
    body = b'{"action": "rollback", "reason": "check", "actor": "a\\tb"}'
    r = admin.client.post(
        "/v1/mode",
        content=body,
        headers={**AUTH, "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert r.status_code == 422 and r.json()["error"].startswith("actor: "), r.text
    assert current_mode(admin.service.engine).version == 0
    broken = admin.client.post("/v1/mode", content=b'{"action": "hold"', headers=AUTH)
    assert broken.status_code == 422
    assert broken.json()["error"].startswith("body: Invalid JSON: EOF while parsing")


def test_manual_resume_rollback_hold_are_stored(admin: Admin) -> None:
    engine = admin.service.engine
    assert current_mode(engine).mode == "round_robin"
    r = admin.client.post(
        "/v1/mode",
        json={"action": "resume", "reason": "baseline reviewed", "actor": "alice", "stage_pct": 50},
        headers=AUTH,
    )
    assert r.status_code == 200, r.text
    assert r.json()["changed"] is True and r.json()["mode"] == "rollout(50)"
    assert r.json()["resolved_incident"] is None  # none was open
    stored = current_mode(engine)
    assert (stored.mode, stored.actor) == ("rollout(50)", "api:alice")
    assert stored.version == r.json()["version"] == 1
    assert admin.service.runtime.modes.current().label == "rollout(50)"
    again = admin.client.post(
        "/v1/mode", json={"action": "resume", "reason": "again", "stage_pct": 50}, headers=AUTH
    ).json()
    assert again["changed"] is False and again["version"] == 1
    lower = admin.client.post(
        "/v1/mode", json={"action": "resume", "reason": "runbook", "stage_pct": 10}, headers=AUTH
    ).json()
    assert (lower["changed"], lower["mode"], lower["version"]) == (False, "rollout(50)", 1)
    assert lower["message"] == (
        "fleet already on rollout(50) (the learned policy routes 50 % of requests); nothing to "
        "resume (to restart at rollout(10), roll back first)"
    )
    r = admin.client.post("/v1/mode", json={"action": "hold", "reason": "freeze"}, headers=AUTH)
    assert r.json()["mode"] == "held_round_robin" and current_mode(engine).version == 2
    changes = admin.rows(ModeChange)
    assert [(c["from_mode"], c["to_mode"]) for c in changes[-2:]] == [
        ("round_robin", "rollout(50)"),
        ("rollout(50)", "held_round_robin"),
    ]
    assert changes[-1]["reason"] == "freeze"
    assert changes[-1]["evidence"]["transition"] == {"kind": "manual_hold", "version": 2}
    metrics = admin.client.get("/metrics").text
    assert 'slaguard_fleet_mode{mode="held_round_robin"} 1.0' in metrics


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"action": "explode", "reason": "x"}, "action"),
        ({"action": "hold"}, "reason"),
        ({"action": "resume", "reason": "x", "stage_pct": 0}, "stage_pct"),
        ({"action": "hold", "reason": "x", "stage_pct": 10}, "stage_pct"),
    ],
)
def test_bad_mode_bodies(admin: Admin, body: dict[str, Any], field: str) -> None:
    r = admin.client.post("/v1/mode", json=body, headers=AUTH)
    assert r.status_code == 422 and r.json()["error"].startswith(field), r.json()


def _webhook(
    name: str,
    status: str = "firing",
    severity: str = "critical",
    starts_at: str | None = None,
) -> dict[str, Any]:
    """`starts_at` defaults to now: a fresh episode."""
    if starts_at is None:
        starts_at = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    alert = {
        "status": status,
        "labels": {"alertname": name, "severity": severity},
        "annotations": {"summary": "TTFT error budget burning 14.4x"},
        "startsAt": starts_at,
        "endsAt": "0001-01-01T00:00:00Z",
        "fingerprint": "abc",
    }
    return {
        "version": "4",
        "status": status,
        "receiver": "slaguard",
        "groupKey": "{}:{}",
        "groupLabels": {"alertname": name},
        "commonLabels": {"alertname": name},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager",
        "alerts": [alert],
    }


def _messages(path: Path) -> list[dict[str, Any]]:
    """The file notifier's complete lines so far: it creates the file before it writes the
    line, so the file can exist and still be empty."""
    text = path.read_text() if path.exists() else ""
    return [json.loads(x) for x in text[: text.rfind("\n") + 1].splitlines()]


def test_alertmanager_rollback_is_recorded_with_its_incident(admin: Admin) -> None:
    admin.client.post(
        "/v1/mode", json={"action": "resume", "reason": "start", "stage_pct": 10}, headers=AUTH
    )
    ignored = admin.client.post("/v1/alertmanager", json=_webhook("SomethingElse"), headers=AUTH)
    assert ignored.json()["action"] == "none" and ignored.json()["mode"] == "rollout(10)"
    # another fleet's burn alert through a shared receiver rolled this one back too
    elsewhere = _webhook("SlaguardSLAErrorBudgetBurn")
    elsewhere["alerts"][0]["labels"]["fleet"] = "eu-west"
    other = admin.client.post("/v1/alertmanager", json=elsewhere, headers=AUTH).json()
    assert (other["matched"], other["action"], other["mode"]) == ([], "none", "rollout(10)")
    resolved = admin.client.post(
        "/v1/alertmanager", json=_webhook("SlaguardSLAErrorBudgetBurn", "resolved"), headers=AUTH
    )
    assert resolved.json()["action"] == "none"
    ticket = admin.client.post(
        "/v1/alertmanager",
        json=_webhook("SlaguardSLAErrorBudgetBurn", severity="warning"),
        headers=AUTH,
    )
    assert ticket.json()["action"] == "none" and ticket.json()["mode"] == "rollout(10)"
    r = admin.client.post(
        "/v1/alertmanager", json=_webhook("SlaguardSLAErrorBudgetBurn"), headers=AUTH
    )
    assert r.status_code == 200, r.text
    assert r.json() == {
        "received": 1,
        "matched": ["SlaguardSLAErrorBudgetBurn"],
        "action": "rollback",
        "mode": "round_robin",
    }
    stored = current_mode(admin.service.engine)
    assert (stored.mode, stored.actor) == ("round_robin", "alertmanager")
    change = admin.rows(ModeChange)[-1]
    incident = admin.rows(Incident)[-1]
    assert change["incident_id"] == incident["id"]
    assert change["reason"].startswith("alertmanager: SlaguardSLAErrorBudgetBurn firing")
    assert change["evidence"]["transition"]["kind"] == "manual_rollback"
    assert incident["detector"] == "alertmanager"
    assert incident["subject"] == "SlaguardSLAErrorBudgetBurn"
    (alert,) = incident["evidence"]["verdicts"][0]["evidence"]["alerts"]
    assert alert["labels"] == {"alertname": "SlaguardSLAErrorBudgetBurn", "severity": "critical"}
    assert alert["annotations"]["summary"] == "TTFT error budget burning 14.4x"
    # the same alert again (Alertmanager repeats): no second switch
    again = admin.client.post(
        "/v1/alertmanager", json=_webhook("SlaguardSLAErrorBudgetBurn"), headers=AUTH
    ).json()
    assert again["action"].startswith("none") and current_mode(admin.service.engine).version == (
        stored.version
    )
    notes = admin.tmp / "incidents.jsonl"
    lines = wait_for("the incident message", lambda: _messages(notes), 10)
    assert lines[0]["incident"]["detector"] == "alertmanager"
    assert lines[0]["incident"]["mode_after"] == "round_robin"


def test_status_names_the_guard_leader_and_a_resume_resolves_the_alert_incident(
    admin: Admin,
) -> None:
    # the detectors run every second on the service's scheduler: wait for the first run
    deadline = time.monotonic() + 10
    guard = admin.client.get("/v1/status").json()["guard"]
    while guard["evaluations"] < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
        guard = admin.client.get("/v1/status").json()["guard"]
    assert guard["leader"] is True and guard["lease"] == "file lock"
    assert guard["evaluations"] >= 1 and guard["persist_errors"] == 0
    r = admin.client.post("/v1/mode", json={"action": "resume", "reason": "ok"}, headers=AUTH)
    assert r.json()["changed"] is True and r.json()["mode"] == "rollout(10)"
    incident = admin.rows(Incident)[-1]
    assert r.json()["resolved_incident"] == str(incident["id"])  # as the CLI's line says
    assert incident["detector"] == "alertmanager" and incident["resolved_at"] is not None
    assert [u["state"] for u in incident["evidence"]["updates"]] == ["resolved"]


def test_an_alert_re_sent_after_the_resume_does_not_roll_back_again(admin: Admin) -> None:
    """Alertmanager re-sends a firing alert every repeat interval, and the 6h/30m burn
    pair keeps firing ~50 minutes after the fault: each repeat rolled a fleet a human had
    resumed back again, with a new incident and Slack message."""
    assert current_mode(admin.service.engine).mode == "rollout(10)"  # resumed above
    incidents = len(admin.rows(Incident))
    before_resume = _webhook("SlaguardSLAErrorBudgetBurn", starts_at="2026-01-01T00:00:00Z")
    old = admin.client.post("/v1/alertmanager", json=before_resume, headers=AUTH).json()
    assert old["action"].startswith("none") and old["mode"] == "rollout(10)"
    assert len(admin.rows(Incident)) == incidents
    later = datetime.fromtimestamp(time.time() + 1, UTC).isoformat().replace("+00:00", "Z")
    new = admin.client.post(
        "/v1/alertmanager",
        json=_webhook("SlaguardSLAErrorBudgetBurn", starts_at=later),
        headers=AUTH,
    ).json()
    assert new["action"] == "rollback" and new["mode"] == "round_robin"


def test_the_alert_resolving_is_said_once_in_its_incident(admin: Admin) -> None:
    """A rollback an alert asked for opens no breaker, so nothing ever said the alert had
    gone: the incident sat silent until someone resumed."""
    assert current_mode(admin.service.engine).mode == "round_robin"  # the alert above
    done = _webhook("SlaguardSLAErrorBudgetBurn", "resolved")
    first = admin.client.post("/v1/alertmanager", json=done, headers=AUTH).json()
    assert first["action"] == "incident updated: alert resolved"
    assert first["matched"] == ["SlaguardSLAErrorBudgetBurn"] and first["mode"] == "round_robin"
    again = admin.client.post("/v1/alertmanager", json=done, headers=AUTH).json()
    assert again["action"] == "none"
    incident = admin.rows(Incident)[-1]
    assert incident["resolved_at"] is None  # the fleet is still on round-robin
    (update,) = incident["evidence"]["updates"]
    assert update["state"] == "updated" and update["summary"] == (
        "SlaguardSLAErrorBudgetBurn resolved; the fleet stays on round_robin until resumed"
    )


def test_bad_alertmanager_payload(admin: Admin) -> None:
    bad = _webhook("SlaguardSLAErrorBudgetBurn") | {"version": "3"}
    r = admin.client.post("/v1/alertmanager", json=bad, headers=AUTH)
    assert r.status_code == 422 and r.json()["error"].startswith("version")


def test_a_mode_command_that_changes_nothing_is_logged_at_info(
    admin: Admin, caplog: pytest.LogCaptureFixture
) -> None:
    """Every Alertmanager repeat of a firing alert logged `fleet mode rollback by
    alertmanager: fleet already on round_robin; nothing to roll back` at WARNING, which
    is for what changes routing."""
    caplog.set_level(logging.INFO, logger="slaguard.service.modes")
    admin.client.post("/v1/mode", json={"action": "resume", "reason": "again"}, headers=AUTH)
    later = datetime.fromtimestamp(time.time() + 1, UTC).isoformat().replace("+00:00", "Z")
    firing = _webhook("SlaguardSLAErrorBudgetBurn", starts_at=later)
    for _ in range(2):
        admin.client.post("/v1/alertmanager", json=firing, headers=AUTH)
    said = [
        (r.levelname, r.getMessage().split(":")[0])
        for r in caplog.records
        if r.name == "slaguard.service.modes" and r.getMessage().startswith("fleet mode")
    ]
    assert said == [
        ("WARNING", "fleet mode resume by api"),
        ("WARNING", "fleet mode rollback by alertmanager"),
        ("INFO", "fleet mode rollback by alertmanager"),
    ]


def test_a_mode_change_the_database_refuses_is_a_503_with_retry_after(admin: Admin) -> None:
    """The 503 had no `Retry-After`, where `/v1/decisions` and `/v1/feedback` send 5 s."""
    with admin.service.engine.begin() as conn:
        conn.execute(text("ALTER TABLE fleet_state RENAME TO fleet_state_away"))
    try:
        r = admin.client.post("/v1/mode", json={"action": "hold", "reason": "x"}, headers=AUTH)
        assert r.status_code == 503, r.text
        assert r.headers["retry-after"] == "5"
        assert r.json()["error"].startswith("mode: the audit database refused the change")
        assert r.json()["error"].endswith("fix: retry when the database is back")
        fired = _webhook("SlaguardSLAErrorBudgetBurn")
        am = admin.client.post("/v1/alertmanager", json=fired, headers=AUTH)
        assert (am.status_code, am.headers["retry-after"]) == (503, "5"), am.text
    finally:
        with admin.service.engine.begin() as conn:
            conn.execute(text("ALTER TABLE fleet_state_away RENAME TO fleet_state"))


def test_an_alert_while_the_database_cannot_be_read_is_a_503_not_a_500(admin: Admin) -> None:
    """The read of the fleet's last return raised through to a 500 and a traceback."""
    with admin.service.engine.begin() as conn:
        conn.execute(text("ALTER TABLE mode_changes RENAME TO mode_changes_away"))
    try:
        fired = _webhook("SlaguardSLAErrorBudgetBurn")
        am = admin.client.post("/v1/alertmanager", json=fired, headers=AUTH)
        assert (am.status_code, am.headers.get("retry-after")) == (503, "5"), am.text
        error = am.json()["error"]
        assert error.startswith("mode: the audit database cannot be read: "), error
        assert error.endswith("; Alertmanager will retry")
    finally:
        with admin.service.engine.begin() as conn:
            conn.execute(text("ALTER TABLE mode_changes_away RENAME TO mode_changes"))


def test_another_fleets_label_is_logged_on_one_line(
    admin: Admin, caplog: pytest.LogCaptureFixture
) -> None:
    """An alert's `fleet` label went into the log line as sent: a newline in it forged a
    second line (any Alertmanager sender could write the service's log)."""
    caplog.set_level(logging.INFO, logger="slaguard.service.admin")
    forged = _webhook("SlaguardSLAErrorBudgetBurn")
    forged["alerts"][0]["labels"]["fleet"] = "eu\n2026-12-01 ERROR forged\x1b[2J"
    # with an alert of no fleet beside it (acted on as this fleet's): a KeyError, a 500
    forged["alerts"].append(_webhook("SomethingElse")["alerts"][0])
    r = admin.client.post("/v1/alertmanager", json=forged, headers=AUTH)
    assert r.status_code == 200 and r.json()["matched"] == [], r.text
    (line,) = [m for m in caplog.messages if "alerts of other fleets" in m]
    assert "\n" not in line and "\x1b" not in line
    assert "(eu\\n2026-12-01 ERROR forged\\x1b[2J)" in line
