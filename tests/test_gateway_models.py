"""`GET /v1/models` lists what the gateway takes, as OpenAI's clients expect (it was a 404,
and `client.models.list()` or a chat front end's model picker failed)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import yaml

from slaguard.service.app import create_app
from slaguard.service.bootstrap import build_service
from slaguard.service.config import load_config
from slaguard.service.local import ServerThread


def _get_models(tmp_path: Path, gateway: bool) -> httpx.Response:
    fleet = {"targets": [{"id": "l40s-8b", "model": "llama3.1-8b", "card": "l40s"}]}
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(fleet))
    cfg = load_config(None, {
        "fleet": tmp_path / "fleet.yaml", "db": str(tmp_path / "audit.db"),
        "telemetry": {"scrape": False}, "notify_file": tmp_path / "incidents.jsonl",
        "gateway": {"enabled": gateway},
    })  # fmt: skip
    service = build_service(cfg)
    app = create_app(service.runtime, admin_token=None, run_loops=False)
    try:
        with ServerThread(app) as server:
            return httpx.get(f"{server.url}/v1/models", timeout=10)
    finally:
        service.close()


@pytest.mark.parametrize("gateway", [True, False])
def test_the_models_are_those_a_request_may_name(tmp_path: Path, gateway: bool) -> None:
    r = _get_models(tmp_path, gateway)
    if not gateway:  # no gateway, no OpenAI surface
        assert r.status_code == 404
        return
    assert r.status_code == 200
    # the 8B its target serves, and the 70B the router serves by degrading it to the 8B
    assert r.json() == {
        "object": "list",
        "data": [
            {"id": "llama3.1-70b", "object": "model", "owned_by": "slaguard"},
            {"id": "llama3.1-8b", "object": "model", "owned_by": "slaguard"},
        ],
    }
