"""Request and response bodies of the HTTP API (they are what `/openapi.json` publishes).

Bounds are explicit so a bad value is a 422 naming the field, never a 500 deep inside:
token counts are 0..10M, deadlines finite and positive, ids 1..128 characters (the audit
columns' width), prefix ids without control characters. Model and priority names are
checked against the loaded fleet in the route handler, since the fleet is only known at
run time.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

from slaguard.plaintext import MAX_ACTOR, first_control, visible

MAX_TOKENS = 10_000_000
ID_PATTERN = r"^[\x21-\x7e]{1,128}$"
"""Printable ASCII without spaces: ids end up in URLs, logs and VARCHAR(128) columns."""


def _a_json_number(value: object) -> object:
    """`"100"` or `true` for a number is a client's bug, not a number (pydantic's lax mode
    would take both); `10.0` stays accepted for a count, as many JSON encoders write it,
    and `10` for a float."""
    if isinstance(value, str | bool):
        raise PydanticCustomError(
            "json_number",
            "Input should be a number, not a {kind}",
            {"kind": "boolean" if isinstance(value, bool) else "string"},
        )
    return value


def _a_json_bool(value: object) -> object:
    """`"yes"`, `"true"` or `1` for a flag is a client's bug (pydantic's lax mode would
    take them all)."""
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        kind = "string" if isinstance(value, str) else "number"
        raise PydanticCustomError(
            "json_bool", "Input should be true or false, not a {kind}", {"kind": kind}
        )
    return value


def _no_control_characters(value: str) -> str:
    """A prefix is a hot-spot trip's subject and evidence: one with a NUL was routed, then
    its trip was refused by PostgreSQL (text cannot hold NUL) at every retry, and a tab or
    newline forged lines in the incident's messages."""
    at = first_control(value)
    if at is not None:
        raise PydanticCustomError(
            "control_character",
            "contains a control character ({char} at position {at}); "
            "fix: send it as printable text on one line",
            {"char": visible(value[at]), "at": at},
        )
    return value


PrefixText = Annotated[
    str, Field(min_length=1, max_length=128), AfterValidator(_no_control_characters)
]
"""A prefix identity or prompt hash: 1..128 characters, no control character."""
JSON_NUMBER = BeforeValidator(_a_json_number)
"""A number of a request body, after its bounds: `Annotated[int, Field(ge=0), JSON_NUMBER]`
(an integer count, a float: a JSON integer is one too). With the bounds after it (on the
field of a `... | None`) pydantic published them as `ge`/`le`, not JSON Schema's
`minimum`/`maximum`."""
Tokens = Annotated[int, Field(ge=0, le=MAX_TOKENS), JSON_NUMBER]
Seconds = Annotated[float, Field(ge=0, le=86_400), JSON_NUMBER]
Gigabytes = Annotated[float, Field(ge=0, le=100_000), JSON_NUMBER]
Flag = Annotated[bool, BeforeValidator(_a_json_bool)]
"""A boolean field of a request body."""


class _Body(BaseModel):
    """A request body: no unknown keys, no NaN."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class RouteRequest(_Body):
    """Metadata of one inference request the platform's gateway is about to send."""

    model: str = Field(min_length=1, max_length=128, description="fleet model id")
    prompt_tokens: Tokens
    max_new_tokens: Tokens
    priority: str = Field(default="normal", description="high, normal or low")
    deadline_s: Annotated[float, Field(gt=0, le=86_400), JSON_NUMBER] | None = Field(
        default=None, description="TTFT deadline; default: the priority's SLA"
    )
    prefix_id: PrefixText | None = None
    prompt_hash: PrefixText | None = None
    request_id: str | None = Field(default=None, pattern=ID_PATTERN)


class RouteResponse(BaseModel):
    """Where to send the request; `decision_id` is what `/v1/feedback` refers to."""

    decision_id: str
    target: str | None
    url: str | None
    served_model: str
    outcome: Literal["routed", "spilled", "degraded", "no_capacity"]
    arm: Literal["round_robin", "learned"]
    mode: str
    alternatives: list[str]
    explanation: dict[str, Any] | None = None


class FeedbackRequest(_Body):
    """How a routed request went (latencies in seconds, None when never measured). An `ok`
    one needs `ttft_s` or `e2e_s` (or a `/v1/first-token` before it) to be judged on. A
    `cancelled` one (the client stopped the answer) is judged on its TTFT; without one,
    `e2e_s` (how long the client waited) past the deadline is a miss, else no verdict."""

    decision_id: str = Field(pattern=ID_PATTERN)
    status: Literal["ok", "failed", "rejected", "timeout", "client_error", "cancelled"] = "ok"
    ttft_s: Seconds | None = None
    tpot_s: Annotated[float, Field(ge=0, le=3_600), JSON_NUMBER] | None = None
    e2e_s: Seconds | None = None
    prompt_tokens: Tokens | None = None
    completion_tokens: Tokens | None = None


class FirstTokenRequest(_Body):
    """A routed request's first token, seen by a client that streams the answer itself."""

    decision_id: str = Field(pattern=ID_PATTERN)
    ttft_s: Seconds


class FirstTokenResponse(BaseModel):
    decision_id: str
    fed: bool
    """False when the guard already had this request's TTFT, it has finished, or the
    decision is only in the audit DB (routed before a restart)."""


class FeedbackResponse(BaseModel):
    decision_id: str
    recorded: bool
    duplicate: bool
    sla_met: bool | None = Field(
        description="the SLA verdict; null for a `client_error`, which no SLA judges, and "
        "for a `cancelled` request left before its first token and its deadline"
    )


class TelemetryRequest(_Body):
    """A pushed hardware picture of one target (any subset of the fields)."""

    target: str = Field(min_length=1, max_length=128)
    memory_used_gb: Gigabytes | None = None
    kv_used_gb: Gigabytes | None = None
    kv_used_ratio: Annotated[float, Field(ge=0, le=1), JSON_NUMBER] | None = None
    queue_depth: Annotated[float, Field(ge=0, le=10_000_000), JSON_NUMBER] | None = None
    healthy: Flag | None = None


class TelemetryResponse(BaseModel):
    target: str
    accepted: bool


class ModeRequest(_Body):
    """A human's mode change: `rollback`, `hold` (round-robin and stay) or `resume`."""

    action: Literal["rollback", "hold", "resume"]
    reason: str = Field(min_length=1, max_length=500)
    actor: str = Field(default="api", min_length=1, max_length=MAX_ACTOR)
    stage_pct: Annotated[int, Field(gt=0, le=100), JSON_NUMBER] | None = Field(
        default=None, description="resume only"
    )


class ModeResponse(BaseModel):
    changed: bool
    mode: str
    version: int
    message: str
    resolved_incident: str | None = Field(
        default=None,
        description="the audit incident this command resolved; its [resolved] message is "
        "queued for the guard leader (the CLI's '; incident N resolved')",
    )


class AlertmanagerAlert(BaseModel):
    """One alert of an Alertmanager webhook (v4); unknown keys are kept, not refused."""

    model_config = ConfigDict(extra="allow")

    status: Literal["firing", "resolved"]
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    startsAt: str | None = None
    endsAt: str | None = None
    fingerprint: str | None = None


class AlertmanagerWebhook(BaseModel):
    """The Alertmanager webhook payload, version 4."""

    model_config = ConfigDict(extra="allow")

    version: Literal["4"]
    status: Literal["firing", "resolved"]
    alerts: list[AlertmanagerAlert] = Field(max_length=10_000)
    groupKey: str | None = None
    groupLabels: dict[str, str] = Field(default_factory=dict)
    commonLabels: dict[str, str] = Field(default_factory=dict)


class AlertmanagerResponse(BaseModel):
    received: int
    matched: list[str]
    action: str
    mode: str


class ErrorResponse(BaseModel):
    """Every 4xx/5xx body but the OpenAI-compatible gateway's (`OpenAIErrorResponse`): one
    line naming the field or the problem, and the fix."""

    error: str
