"""schemathesis against the published `/openapi.json`: generated requests never get a 5xx.

Runs in process through the ASGI transport (no sockets), >= 1,000 generated cases in all
(`CASES_PER_OPERATION` x operations, counted and checked by the last test). Admin calls
carry the bearer token so their bodies are exercised, not just the 401. The gateway's two
proxy operations are left out on purpose: a proxy answers 502/503/504 by contract when
its backends fail, so "no 5xx" is not one of its properties; `test_gateway.py` covers
them against real emulators.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
import yaml
from hypothesis import HealthCheck, settings
from pydantic import SecretStr
from schemathesis.checks import not_a_server_error

from slaguard.service.app import create_app
from slaguard.service.bootstrap import Service, build_service
from slaguard.service.config import load_config

pytestmark = pytest.mark.serial  # every generated item has one node id: xdist runs only one
TOKEN = "schemathesis-admin-token-0123"
CASES_PER_OPERATION = 110
MIN_TOTAL_CASES = 1000
_counted: dict[str, int] = {}


def _build() -> tuple[Service, schemathesis.BaseSchema]:
    """The service on a throwaway SQLite file (built at import: schemathesis parametrizes
    from the schema when the module is collected). Closed, and its directory removed, at
    exit too: a process that only collects the module (a pytest-xdist worker, where these
    tests are deselected) runs none of its fixtures, and left its audit writer running and
    its directory behind."""
    tmp = Path(tempfile.mkdtemp(prefix="slaguard-schemathesis-"))
    fleet = {
        "targets": [
            {"id": "h100-8b", "model": "llama3.1-8b", "card": "h100"},
            {"id": "l40s-8b", "model": "llama3.1-8b", "card": "l40s", "count": 2},
        ]
    }
    (tmp / "fleet.yaml").write_text(yaml.safe_dump(fleet))
    cfg = load_config(
        None,
        {
            "fleet": tmp / "fleet.yaml",
            "db": str(tmp / "audit.db"),
            "telemetry": {"scrape": False},
            "notify_file": tmp / "incidents.jsonl",
        },
    )
    service = build_service(cfg)
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    atexit.register(service.close)  # runs first: the writer stops before its files go
    service.runtime.ready_problem = None
    app = create_app(service.runtime, admin_token=SecretStr(TOKEN), run_loops=False)
    loaded = schemathesis.openapi.from_asgi("/openapi.json", app)
    return service, loaded.exclude(path_regex=r"^/v1/(chat/)?completions$")


SERVICE, schema = _build()


@pytest.fixture(scope="module", autouse=True)
def _close_service() -> Iterator[None]:
    yield
    SERVICE.close()


@schema.parametrize()
@settings(
    max_examples=CASES_PER_OPERATION,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_no_generated_request_gets_a_server_error(case: schemathesis.Case) -> None:
    key = f"{case.operation.method.upper()} {case.operation.path}"
    _counted[key] = _counted.get(key, 0) + 1
    case.call_and_validate(
        headers={"Authorization": f"Bearer {TOKEN}"}, checks=[not_a_server_error]
    )


def test_zz_enough_cases_were_generated() -> None:
    total = sum(_counted.values())
    assert total >= MIN_TOTAL_CASES, _counted
    assert len(_counted) >= 9, sorted(_counted)
