"""The emulator's HTTP face: OpenAI-compatible endpoints, vLLM-style `/metrics`, faults.

| endpoint | what |
|---|---|
| `POST /v1/chat/completions`, `POST /v1/completions` | streaming (SSE) or whole answers |
| `GET /v1/models`, `GET /health` | as vLLM |
| `GET /metrics` | `vllm:*` families (running, waiting, KV usage, TTFT/TPOT/e2e, tokens) |
| `POST /admin/slowdown {"factor": 4}` | every step takes `factor` times longer |
| `POST /admin/fail {"mode": "refuse"}` | new requests get 503 before any byte |
| `POST /admin/fail {"mode": "break"}` | streams drop right after their first token |
| `POST /admin/recover` | clear every fault |

The admin bodies are JSON whatever their Content-Type (`curl -d` sends a form type).
Prompt size is estimated at 4 characters per token; answers are the word `tok` repeated.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, TypeVar

from fastapi import FastAPI, HTTPException, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from slaguard.emulator.engine import BROKEN, DONE, Engine, FailMode, Sequence
from slaguard.fleet import Target
from slaguard.service.hotpath import json_body, unless_client_leaves, validation_message
from slaguard.sim.latency import LatencyModel

CHARS_PER_TOKEN = 4.0
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 60.0)
TPOT_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.06, 0.1, 0.2, 0.5, 1.0)
E2E_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 60.0, 120.0)
_Body = TypeVar("_Body", bound=BaseModel)


class SlowdownBody(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    factor: float = Field(ge=0.01, le=1000)


class FailBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: FailMode = FailMode.REFUSE


async def _parsed(request: Request, model: type[_Body]) -> _Body:
    """`model` from the body as JSON whatever its Content-Type: FastAPI reads a declared
    body of any other type as a form, and `curl -d` (no -H) is how one flips a fault."""
    try:
        return model.model_validate_json(await request.body())
    except ValidationError as exc:
        raise HTTPException(422, validation_message(exc.errors())) from None


class VllmMetrics:
    """The families a vLLM replica exposes, on the emulator's own registry."""

    def __init__(self, engine: Engine, model: str) -> None:
        self.registry = CollectorRegistry()
        r, labels = self.registry, ["model_name"]
        Gauge("vllm:num_requests_running", "Requests in the batch.", labels, registry=r).labels(
            model
        ).set_function(lambda: len(engine.running))
        Gauge("vllm:num_requests_waiting", "Requests queued.", labels, registry=r).labels(
            model
        ).set_function(lambda: len(engine.waiting))
        Gauge("vllm:gpu_cache_usage_perc", "KV cache usage, 0..1.", labels, registry=r).labels(
            model
        ).set_function(lambda: engine.kv_usage)
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds", "TTFT.", labels, buckets=TTFT_BUCKETS, registry=r
        ).labels(model)
        self.tpot = Histogram(
            "vllm:time_per_output_token_seconds", "TPOT.", labels, buckets=TPOT_BUCKETS, registry=r
        ).labels(model)
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds", "E2E.", labels, buckets=E2E_BUCKETS, registry=r
        ).labels(model)
        self.prompt_tokens = Counter(
            "vllm:prompt_tokens", "Prompt tokens.", labels, registry=r
        ).labels(model)
        self.generation_tokens = Counter(
            "vllm:generation_tokens", "Generated tokens.", labels, registry=r
        ).labels(model)

    def finished(self, seq: Sequence) -> None:
        now = time.perf_counter()
        if seq.first_token_at is not None:
            self.ttft.observe(seq.first_token_at - seq.arrived)
            if seq.generated > 1:
                self.tpot.observe((now - seq.first_token_at) / (seq.generated - 1))
        self.e2e.observe(now - seq.arrived)
        self.prompt_tokens.inc(seq.prompt_tokens)
        self.generation_tokens.inc(seq.generated)


def _prompt_tokens(doc: dict[str, Any]) -> int:
    """The prompt's size, estimated from its text (token ids count one each); a body of
    the wrong shape is the client's mistake (400), as on vLLM."""
    if "messages" in doc:
        messages = doc["messages"]
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise HTTPException(400, "messages must be a list of objects")
        text = "".join(str(m.get("content") or "") for m in messages)
        return int(len(text) / CHARS_PER_TOKEN) + 1
    prompt = doc.get("prompt")
    if isinstance(prompt, str):
        return int(len(prompt) / CHARS_PER_TOKEN) + 1
    if isinstance(prompt, list) and prompt and all(type(x) is int for x in prompt):
        return len(prompt)
    if isinstance(prompt, list) and all(isinstance(x, str) for x in prompt):
        return int(sum(map(len, prompt)) / CHARS_PER_TOKEN) + 1
    raise HTTPException(400, "prompt must be a string, a list of strings or of token ids")


def _chunk(kind: str, rid: str, model: str, created: int, text: str, finish: str | None) -> bytes:
    if kind == "chat":
        choice: dict[str, Any] = {"index": 0, "delta": {"content": text}, "finish_reason": finish}
        obj = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": text, "finish_reason": finish}
        obj = "text_completion"
    doc = {"id": rid, "object": obj, "created": created, "model": model, "choices": [choice]}
    return b"data: " + json.dumps(doc, separators=(",", ":")).encode() + b"\n\n"


def create_emulator_app(
    target: Target, *, speedup: float = 1.0, served_model: str | None = None
) -> FastAPI:
    """An emulated replica of `target` (its card, model and tensor-parallel size)."""
    model = served_model or target.model.id
    latency = LatencyModel.load().for_target(target)
    kv_tokens = int(target.kv_budget_gb * 1e9 / target.model.kv_bytes_per_token)
    # vLLM refuses to start when one sequence of its context cannot fit in the KV cache.
    max_model_len = min(target.model.context_window, kv_tokens)
    engine = Engine(latency, kv_tokens, speedup=speedup)
    metrics = VllmMetrics(engine, model)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        task = asyncio.create_task(engine.run())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    app = FastAPI(title=f"slaguard emulator: {target.id}", lifespan=lifespan)
    app.state.engine = engine

    async def complete(request: Request, kind: str) -> Response:
        try:
            doc = json.loads(await request.body())
        except ValueError:
            raise HTTPException(400, "body is not JSON") from None
        if not isinstance(doc, dict):
            raise HTTPException(400, "body must be a JSON object")
        if doc.get("model") != model:
            raise HTTPException(404, f"The model `{doc.get('model')}` does not exist.")
        if engine.faults.fail is FailMode.REFUSE:
            raise HTTPException(503, "emulated failure (admin fail switch)")
        max_tokens = doc.get("max_completion_tokens") or doc.get("max_tokens") or 16
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise HTTPException(400, "max_tokens must be a positive integer")
        prompt_tokens = _prompt_tokens(doc)
        if prompt_tokens + max_tokens > max_model_len:
            raise HTTPException(
                400,
                f"This model's maximum context length is {max_model_len} tokens. However, you "
                f"requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the "
                f"messages, {max_tokens} in the completion). Please reduce the length of the "
                "messages or completion.",
            )
        seq = engine.submit(prompt_tokens, max_tokens)
        rid = f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{uuid.uuid4().hex}"
        created = int(time.time())
        usage_wanted = bool((doc.get("stream_options") or {}).get("include_usage"))
        if doc.get("stream"):
            return StreamingResponse(
                _stream(seq, kind, rid, created, usage_wanted), media_type="text/event-stream"
            )
        return await _whole(request, seq, kind, rid, created)

    def usage(seq: Sequence) -> dict[str, int]:
        return {
            "prompt_tokens": seq.prompt_tokens,
            "completion_tokens": seq.generated,
            "total_tokens": seq.prompt_tokens + seq.generated,
        }

    async def _stream(
        seq: Sequence, kind: str, rid: str, created: int, usage_wanted: bool
    ) -> AsyncIterator[bytes]:
        ended = False
        try:
            while True:
                tok = await seq.tokens.get()
                if tok == BROKEN:
                    ended = True
                    raise ConnectionAbortedError("emulated failure after the first token")
                if tok == DONE:
                    ended = True
                    break
                last = tok >= seq.max_tokens
                yield _chunk(kind, rid, model, created, "tok ", "length" if last else None)
            metrics.finished(seq)
            if usage_wanted:
                tail = {"id": rid, "object": "chat.completion.chunk", "created": created,
                        "model": model, "choices": [], "usage": usage(seq)}  # fmt: skip
                yield b"data: " + json.dumps(tail).encode() + b"\n\n"
            yield b"data: [DONE]\n\n"
        finally:
            seq.cancelled = not ended

    async def _whole(
        request: Request, seq: Sequence, kind: str, rid: str, created: int
    ) -> Response:
        """The answer once its last token is out; a client that leaves first frees its
        place in the batch (as vLLM aborts a request whose client disconnects)."""

        async def last_token() -> int:
            while (tok := await seq.tokens.get()) not in (BROKEN, DONE):
                pass
            return tok

        tok = await unless_client_leaves(request, last_token())
        if tok is None:
            seq.cancelled = True
            return Response(status_code=499)
        if tok == BROKEN:
            raise HTTPException(500, "emulated failure after the first token")
        metrics.finished(seq)
        text = "tok " * seq.generated
        choice: dict[str, Any] = (
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "length",
            }
            if kind == "chat"
            else {"index": 0, "text": text, "finish_reason": "length"}
        )
        obj = "chat.completion" if kind == "chat" else "text_completion"
        return JSONResponse(
            {
                "id": rid,
                "object": obj,
                "created": created,
                "model": model,
                "choices": [choice],
                "usage": usage(seq),
            }
        )

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        return await complete(request, "chat")

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await complete(request, "text")

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": model, "object": "model", "owned_by": "slaguard"}],
        }

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(generate_latest(metrics.registry), media_type="text/plain; version=0.0.4")

    @app.post("/admin/slowdown", openapi_extra=json_body(SlowdownBody))
    async def slowdown(request: Request) -> dict[str, Any]:
        engine.faults.slowdown = (await _parsed(request, SlowdownBody)).factor
        return faults()

    @app.post("/admin/fail", openapi_extra=json_body(FailBody))
    async def fail(request: Request) -> dict[str, Any]:
        engine.faults.fail = (await _parsed(request, FailBody)).mode
        return faults()

    @app.post("/admin/recover")
    async def recover() -> dict[str, Any]:
        engine.faults.slowdown = 1.0
        engine.faults.fail = FailMode.NONE
        return faults()

    @app.get("/admin/faults")
    def faults() -> dict[str, Any]:
        return {
            "target": target.id,
            "slowdown": engine.faults.slowdown,
            "fail": engine.faults.fail.value,
            "running": len(engine.running),
            "waiting": len(engine.waiting),
            "kv_usage": round(engine.kv_usage, 4),
        }

    return app
