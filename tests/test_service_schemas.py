"""Request bodies as the API reads them: JSON types taken strictly.

A real service on 127.0.0.1 (uvicorn, SQLite audit DB); each bad body must be one 422
line naming its field, each good one must get past validation.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from service_helpers import Clock, build_test_service

from slaguard.service.app import create_app
from slaguard.service.local import ServerThread

ROUTE = {"model": "llama3.1-8b", "prompt_tokens": 10, "max_new_tokens": 5}
CHAT = {"model": "llama3.1-8b", "messages": [{"role": "user", "content": "x"}]}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    service = build_test_service(tmp_path_factory.mktemp("schemas"), Clock(time.time()))
    app = create_app(service.runtime, admin_token=None, readiness=service.readiness)
    with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=10) as client:
        yield client
    service.close()


@pytest.mark.parametrize(
    ("path", "body", "error"),
    [
        # pydantic's lax mode read these as 1.0, 10.0, 0.5, 1.0, True and 3.0
        ("/v1/route", {**ROUTE, "deadline_s": True}, "deadline_s: Input should be a number"),
        ("/v1/route", {**ROUTE, "deadline_s": "10"}, "deadline_s: Input should be a number"),
        ("/v1/feedback", {"decision_id": "d", "ttft_s": "0.5"}, "ttft_s: Input should be a"),
        ("/v1/feedback", {"decision_id": "d", "tpot_s": True}, "tpot_s: Input should be a"),
        ("/v1/feedback", {"decision_id": "d", "e2e_s": "1"}, "e2e_s: Input should be a"),
        ("/v1/first-token", {"decision_id": "d", "ttft_s": "0.5"}, "ttft_s: Input should be"),
        ("/v1/telemetry", {"target": "h100-8b", "healthy": "yes"}, "healthy: Input should be"),
        ("/v1/telemetry", {"target": "h100-8b", "healthy": 1}, "healthy: Input should be"),
        ("/v1/telemetry", {"target": "h100-8b", "queue_depth": "3"}, "queue_depth: Input"),
        ("/v1/telemetry", {"target": "h100-8b", "kv_used_ratio": False}, "kv_used_ratio: In"),
        ("/v1/chat/completions", {**CHAT, "stream": "true"}, "stream: Input should be true"),
        ("/v1/completions", {"model": "llama3.1-8b", "prompt": "x", "stream": 1}, "stream: In"),
    ],
)
def test_a_number_or_flag_of_the_wrong_json_type_is_a_422(
    client: httpx.Client, path: str, body: dict[str, Any], error: str
) -> None:
    r = client.post(path, json=body)
    text = r.json()["error"]
    if path.endswith("completions"):  # the gateway answers in OpenAI's shape
        text = text["message"]
    assert r.status_code == 422 and text.startswith(error), r.json()


@pytest.mark.parametrize("prompt", [5, None, {"text": "x"}, [1, "x"], [[1, "x"]]])
def test_a_completions_prompt_of_no_accepted_shape_is_one_line(
    client: httpx.Client, prompt: Any
) -> None:
    """It was `prompt.str: Input should be a valid string (and 3 more problems)`."""
    r = client.post("/v1/completions", json={"model": "llama3.1-8b", "prompt": prompt})
    assert r.status_code == 422 and r.json()["error"]["message"] == (
        "prompt: Input should be a string, a list of strings, a list of token ids "
        "(integers) or a list of such lists"
    )


def test_a_json_integer_is_a_float_and_true_a_flag(client: httpx.Client) -> None:
    pushed = client.post("/v1/telemetry", json={"target": "h100-8b", "queue_depth": 3})
    assert pushed.status_code == 200, pushed.text
    healthy = client.post("/v1/telemetry", json={"target": "h100-8b", "healthy": True})
    assert healthy.status_code == 200, healthy.text
    routed = client.post("/v1/route", json={**ROUTE, "deadline_s": 10})
    assert routed.status_code == 200, routed.text
    body = {"decision_id": routed.json()["decision_id"], "ttft_s": 1}
    assert client.post("/v1/first-token", json=body).status_code == 200
    fed = client.post("/v1/feedback", json={**body, "tpot_s": 0, "e2e_s": 2})
    assert fed.status_code == 200 and fed.json()["sla_met"] is True, fed.text


def _keys(node: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(where, key) for every key of a JSON document's objects, not counting the names
    under `properties` (a field may be called anything)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if not path.endswith("/properties"):
                yield path, key
            yield from _keys(value, f"{path}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _keys(value, f"{path}/{index}")


def test_openapi_bounds_are_json_schema_keywords(client: httpx.Client) -> None:
    """`ge`/`le`/`gt` were published for optional counts and bounded floats (pydantic's
    own names): JSON Schema tools ignored them, so the bounds were not in the contract."""
    document = client.get("/openapi.json").json()
    found = [f"{where}/{key}" for where, key in _keys(document) if key in {"ge", "le", "gt", "lt"}]
    assert found == []
    feedback = document["paths"]["/v1/feedback"]["post"]
    fields = feedback["requestBody"]["content"]["application/json"]["schema"]["properties"]
    tokens = {"minimum": 0, "maximum": 10_000_000, "type": "integer"}
    assert tokens in fields["prompt_tokens"]["anyOf"]
    assert "503" in feedback["responses"] and "409" in feedback["responses"]


def test_openapi_says_what_a_null_sla_met_means(client: httpx.Client) -> None:
    """`sla_met` null (a `client_error`, judged by no SLA) was published as a bare
    boolean-or-null: a client reading the contract could not tell it from a miss."""
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    sla_met = schemas["FeedbackResponse"]["properties"]["sla_met"]
    assert {"type": "null"} in sla_met["anyOf"] and {"type": "boolean"} in sla_met["anyOf"]
    assert "client_error" in sla_met["description"]
