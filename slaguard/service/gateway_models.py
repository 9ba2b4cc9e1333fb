"""`GET /v1/models` of the OpenAI-compatible gateway: the models it takes.

OpenAI's clients list models before they use one (`client.models.list()`, discovery in
chat front ends); without it they got a 404. The list is every model a request may name:
one a target serves, or one the router serves by degrading it to a smaller model.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel

from slaguard.service.views import runtime_of

router = APIRouter()


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    owned_by: str = "slaguard"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


@router.get("/v1/models", response_model=ModelList, summary="Models the gateway takes (OpenAI)")
async def models(request: Request) -> ModelList:
    servable = runtime_of(request).fleet.servable_priorities
    return ModelList(data=[ModelCard(id=model) for model in sorted(servable)])
