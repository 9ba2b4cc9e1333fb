"""The OpenAI-compatible request bodies and headers the gateway reads, and its errors.

Only the fields slaguard needs are declared; every other field is forwarded untouched.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, WrapValidator
from pydantic_core import PydanticCustomError
from pydantic_core.core_schema import ValidatorFunctionWrapHandler

from slaguard.service.schemas import ID_PATTERN, JSON_NUMBER, MAX_TOKENS, Flag, PrefixText

MaxTokens = Annotated[int, Field(ge=1, le=MAX_TOKENS), JSON_NUMBER]


def _one_prompt_error(value: object, handler: ValidatorFunctionWrapHandler) -> object:
    """One line for a prompt of no accepted shape, not one per union member (`prompt.str:
    Input should be a valid string (and 3 more problems)`)."""
    try:
        return handler(value)
    except ValidationError:
        raise PydanticCustomError(
            "prompt_shape",
            "Input should be a string, a list of strings, a list of token ids (integers) "
            "or a list of such lists",
        ) from None


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)


class ChatMessage(_Open):
    role: str = Field(max_length=64)
    content: str | list[dict[str, Any]] | None = None


class ChatCompletionRequest(_Open):
    """The fields slaguard reads; every other OpenAI field is forwarded untouched."""

    model: str = Field(min_length=1, max_length=128)
    messages: list[ChatMessage] = Field(min_length=1, max_length=10_000)
    max_tokens: MaxTokens | None = None
    max_completion_tokens: MaxTokens | None = None
    stream: Flag = False


class CompletionRequest(_Open):
    model: str = Field(min_length=1, max_length=128)
    prompt: Annotated[
        str | list[str] | list[int] | list[list[int]], WrapValidator(_one_prompt_error)
    ]
    """Text, texts, token ids or lists of token ids, as OpenAI takes it (its size is bounded
    by the body limit)."""
    max_tokens: MaxTokens | None = None
    stream: Flag = False


class GatewayHeaders(BaseModel):
    """The business metadata the gateway reads from request headers (looked up without
    regard to case; named as documented, so an error names them so too)."""

    model_config = ConfigDict(allow_inf_nan=False)

    priority: str | None = Field(default=None, alias="X-Slaguard-Priority")
    deadline_s: float | None = Field(default=None, alias="X-Slaguard-Deadline-S", gt=0, le=86_400)
    request_id: str | None = Field(default=None, alias="X-Request-Id", pattern=ID_PATTERN)
    prefix_id: PrefixText | None = Field(default=None, alias="X-Slaguard-Prefix-Id")


class OpenAIError(BaseModel):
    """One error as OpenAI answers it (`hotpath.openai_error`)."""

    message: str = Field(description="one line naming the field or the problem, and the fix")
    type: Literal["invalid_request_error", "server_error"] = Field(
        description="invalid_request_error: the request's mistake (4xx); server_error: 5xx"
    )
    param: str | None = Field(description="the field or header the message names")
    code: None = Field(description="always null: slaguard has no error codes of its own")


class OpenAIErrorResponse(BaseModel):
    """Every error the gateway answers itself (a backend's is relayed as it came)."""

    error: OpenAIError


HEADER_NAMES = tuple(str(f.alias) for f in GatewayHeaders.model_fields.values())
HEADER_PARAMETERS = tuple(
    {"name": name, "in": "header", "required": False, "schema": schema}
    for name, schema in GatewayHeaders.model_json_schema()["properties"].items()
)


def prompt_text(body: ChatCompletionRequest | CompletionRequest) -> str:
    """The prompt's text, for its size estimate and its hash (token ids: see
    `prompt_token_ids`)."""
    if isinstance(body, CompletionRequest):
        p = body.prompt
        return p if isinstance(p, str) else "".join(x for x in p if isinstance(x, str))
    parts: list[str] = []
    for m in body.messages:
        if isinstance(m.content, str):
            parts.append(m.content)
        elif m.content:
            parts.extend(str(p.get("text", "")) for p in m.content)
    return "\n".join(parts)


def prompt_token_ids(body: ChatCompletionRequest | CompletionRequest) -> int:
    """How many token ids the prompt sends as numbers (counted as they are, not estimated)."""
    if not isinstance(body, CompletionRequest) or isinstance(body.prompt, str):
        return 0
    return sum(1 if isinstance(x, int) else len(x) for x in body.prompt if not isinstance(x, str))
