"""The gateway's own errors in OpenAI's shape, where an OpenAI client reads them.

OpenAI's SDKs (and vLLM's answers) put an error in `body["error"]` as an object:
`{"message", "type", "param", "code"}`. The gateway answered `{"error": "text"}`, so a
client read no message, no type and no param from it. Real emulated backends and a real
service on 127.0.0.1; the routing API keeps its `{"error": "text"}` (slaguard's CLI and
docs read it).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from gateway_stack import MODEL, GatewayStack, gateway_stack

from slaguard.service.hotpath import MAX_BODY_BYTES

CARDS = ("h100", "l40s")
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


class Stack(GatewayStack):
    def push(self, healthy: bool = True) -> None:
        """A fresh picture of every target (no scraper: the test decides their health)."""
        for target in self.emulators:
            body = {"target": target, "queue_depth": 0, "healthy": healthy}
            assert self.client.post("/v1/telemetry", json=body).status_code == 200

    def fail_backends(self, mode: str) -> None:
        for target in self.emulators:
            if mode == "recover":
                self.fault(target, "recover")
            else:
                self.fault(target, "fail", {"mode": mode})


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("gateway-openai-errors")
    config = {"telemetry": {"scrape": False, "stale_after_s": 300}}
    cards = {f"{c}-8b": c for c in CARDS}
    with gateway_stack(tmp, cards, config, speedup=8.0, kind=Stack) as stack:
        stack.push()
        yield stack


def openai_error(r: httpx.Response) -> dict[str, Any]:
    """The error as OpenAI's Python SDK reads it (`APIStatusError.body`, `.message`,
    `.type`, `.param`, `.code`): the object under `error`, with exactly OpenAI's keys."""
    assert r.headers["content-type"] == "application/json", r.headers
    error = r.json()["error"]
    assert isinstance(error, dict), r.text
    assert sorted(error) == ["code", "message", "param", "type"], error
    assert isinstance(error["message"], str) and error["message"], error
    assert error["code"] is None, error
    assert error["type"] == ("invalid_request_error" if r.status_code < 500 else "server_error")
    return error


@pytest.mark.parametrize(
    ("path", "body", "headers", "param", "message"),
    [
        ("/v1/chat/completions", {"model": MODEL}, {}, "messages", "messages: Field required"),
        ("/v1/chat/completions", {**CHAT, "max_tokens": 0}, {}, "max_tokens", "max_tokens: "),
        (
            "/v1/chat/completions",
            {**CHAT, "messages": [{"content": "x"}]},
            {},
            "messages.0.role",
            "messages.0.role: Field required",
        ),
        ("/v1/completions", {"model": MODEL, "prompt": 5}, {}, "prompt", "prompt: Input should"),
        ("/v1/chat/completions", {**CHAT, "model": "gpt-9"}, {}, "model", "model: model 'gpt-9'"),
        (
            "/v1/completions",
            {"model": MODEL, "prompt": "x"},
            {"X-Slaguard-Priority": "vip"},
            "X-Slaguard-Priority",
            "X-Slaguard-Priority: unknown priority 'vip'",
        ),
        ("/v1/chat/completions", CHAT, {"x-request-id": "a b"}, "X-Request-Id", "X-Request-Id: "),
        (
            "/v1/chat/completions",
            {**CHAT, "messages": [{"role": "user", "content": "x" * 600_000}]},
            {},
            "messages",
            "messages: the prompt (~150000 tokens",
        ),
    ],
)
def test_a_422_names_its_field_as_param(
    stack: Stack,
    path: str,
    body: dict[str, Any],
    headers: dict[str, str],
    param: str,
    message: str,
) -> None:
    r = stack.client.post(path, json=body, headers=headers)
    assert r.status_code == 422, r.text
    error = openai_error(r)
    assert error["param"] == param and error["message"].startswith(message), error


def test_a_body_that_is_not_json_is_a_422_with_no_param(stack: Stack) -> None:
    r = stack.client.post("/v1/chat/completions", content=b"{", headers={"content-type": "a/b"})
    assert r.status_code == 422
    error = openai_error(r)
    assert error["param"] is None and error["message"].startswith("body: "), error


def test_a_reused_request_id_is_a_409_naming_the_header(stack: Stack) -> None:
    first = stack.client.post("/v1/chat/completions", json=CHAT, headers={"X-Request-Id": "oe-1"})
    assert first.status_code == 200, first.text
    r = stack.client.post("/v1/chat/completions", json=CHAT, headers={"X-Request-Id": "oe-1"})
    assert r.status_code == 409
    error = openai_error(r)
    assert error == {
        "message": "X-Request-Id: 'oe-1' was already used; send a new id",
        "type": "invalid_request_error",
        "param": "X-Request-Id",
        "code": None,
    }


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/v1/models"])
def test_a_body_past_the_limit_is_a_413(stack: Stack, path: str) -> None:
    big = b"{" + b" " * MAX_BODY_BYTES + b"}"
    r = stack.client.request("POST" if path != "/v1/models" else "GET", path, content=big)
    assert r.status_code == 413
    error = openai_error(r)
    assert error["param"] is None and error["message"] == "body: over 8 MiB; send a smaller request"


def test_every_candidate_failing_is_a_502_server_error(stack: Stack) -> None:
    stack.fail_backends("refuse")
    try:
        r = stack.client.post("/v1/chat/completions", json=CHAT)
    finally:
        stack.fail_backends("recover")
    assert r.status_code == 502 and r.headers["x-slaguard-decision-id"]
    error = openai_error(r)
    assert error["param"] is None
    assert error["message"].startswith("backend failed before answering: ")
    assert error["message"].count("HTTP 503") == 2, error  # the chosen target and its retry


def test_no_capacity_is_a_503_server_error(stack: Stack) -> None:
    stack.push(healthy=False)
    try:
        r = stack.client.post("/v1/completions", json={"model": MODEL, "prompt": "x"})
    finally:
        stack.push()
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
    error = openai_error(r)
    assert error["param"] is None and error["message"].startswith(f"no capacity for {MODEL}: ")


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/v1/chat/completions"), ("PUT", "/v1/completions"), ("POST", "/v1/models")],
)
def test_another_method_is_a_405(stack: Stack, method: str, path: str) -> None:
    r = stack.client.request(method, path)
    assert r.status_code == 405
    assert openai_error(r) == {
        "message": "Method Not Allowed",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }


def test_the_routing_api_keeps_its_error_text(stack: Stack) -> None:
    route = {"model": "gpt-9", "prompt_tokens": 1, "max_new_tokens": 1}
    r = stack.client.post("/v1/route", json=route)
    assert r.status_code == 422 and r.json()["error"].startswith("model: model 'gpt-9'")
    big = b"{" + b" " * MAX_BODY_BYTES + b"}"
    r = stack.client.post("/v1/route", content=big)
    assert r.json() == {"error": "body: over 8 MiB; send a smaller request"}
    assert stack.client.get("/v1/route").json() == {"error": "Method Not Allowed"}


def test_a_backends_own_error_passes_through_as_it_came(stack: Stack) -> None:
    """Only slaguard's errors are reshaped: a backend's answer is relayed as it came (the
    emulator, as FastAPI does, refuses a prompt of token-id lists with `{"detail": ...}`)."""
    r = stack.client.post("/v1/completions", json={"model": MODEL, "prompt": [[1, 2]]})
    assert r.status_code == 400, r.text
    assert r.json() == {"detail": "prompt must be a string, a list of strings or of token ids"}


def test_openapi_documents_each_shape_where_it_is_answered(stack: Stack) -> None:
    doc = stack.client.get("/openapi.json").json()

    def error_ref(path: str, method: str, status: str) -> str:
        content = doc["paths"][path][method]["responses"][status]["content"]
        return str(content["application/json"]["schema"]["$ref"]).rsplit("/", 1)[-1]

    for path in ("/v1/chat/completions", "/v1/completions"):
        for status in ("409", "413", "422", "502", "503"):
            assert error_ref(path, "post", status) == "OpenAIErrorResponse", (path, status)
        assert "504" not in doc["paths"][path]["post"]["responses"], "nothing answers a 504"
    assert error_ref("/v1/route", "post", "422") == "ErrorResponse"
    error = doc["components"]["schemas"]["OpenAIError"]
    assert sorted(error["required"]) == ["code", "message", "param", "type"]
