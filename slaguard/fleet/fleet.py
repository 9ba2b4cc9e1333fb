"""Fleet files: which model replicas run on which cards, validated with one-line errors.

A routing *target* is one model replica on one card or on a tensor-parallel group of
cards of one type. The built-in default is `examples/fleet.yaml`'s twin shipped in the
package, so `slaguard` works with no file at all.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import yaml
from pydantic import (
    AnyHttpUrl,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from slaguard.fleet.backends import (
    REPLICA_NUMBER,
    credentials_in_url,
    replica_url,
    shared_backend,
)
from slaguard.fleet.catalogue import CardType, ModelSpec, builtin_cards, builtin_models
from slaguard.fleet.request import Priority
from slaguard.fleet.validation import Number, Whole, explain
from slaguard.userfiles import load_user_yaml

_M = TypeVar("_M", bound=BaseModel)
_HTTP_URL = TypeAdapter(AnyHttpUrl)

MEMORY_HEADROOM = 0.92
"""Usable share of card memory: 8 % is kept for fragmentation and bursts."""

MAX_TP = 64
"""Largest tensor-parallel group a target may span."""


class FleetError(ValueError):
    """A fleet file mistake, worded as `file: field: problem; fix`."""


class SlaClass(BaseModel):
    """What a priority's contract promises: a TTFT deadline, and its share for traces."""

    model_config = ConfigDict(extra="forbid")

    ttft_s: Number = Field(gt=0)
    share: Number = Field(ge=0, le=1)


def _default_sla() -> dict[Priority, SlaClass]:
    return {
        Priority.HIGH: SlaClass(ttft_s=1.5, share=0.2),
        Priority.NORMAL: SlaClass(ttft_s=4.0, share=0.6),
        Priority.LOW: SlaClass(ttft_s=12.0, share=0.2),
    }


class TargetSpec(BaseModel):
    """A target as written in the fleet file; `count` expands to id-0 .. id-(count-1)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    model: str
    card: str
    tp: Whole = Field(default=1, ge=1, le=MAX_TP)
    count: Whole = Field(default=1, ge=1, le=4096)
    url: str | None = None
    priorities: list[Priority] = Field(default_factory=lambda: list(Priority), min_length=1)

    @field_validator("id")
    @classmethod
    def _printable_id(cls, target_id: str) -> str:
        """An id is a metric label, a database key, a word on a command line and the value
        of the gateway's `x-slaguard-target` header: a control character or a space in it
        is a slip that would go everywhere unseen."""
        for at, ch in enumerate(target_id):
            if not ch.isprintable() or ch.isspace():
                raise PydanticCustomError(
                    "unprintable_id",
                    "a space or control character, {ch} at position {at}",
                    {"ch": repr(ch), "at": at},
                )
            if not ch.isascii():  # latin-1 is all a header carries: the answer was a 500
                raise PydanticCustomError(
                    "non_ascii_id",
                    "a character outside ASCII, {ch} at position {at}, which the "
                    "x-slaguard-target header cannot carry",
                    {"ch": repr(ch), "at": at},
                )
        return target_id

    @field_validator("priorities")
    @classmethod
    def _each_once(cls, priorities: list[Priority]) -> list[Priority]:
        """A priority listed twice is a slip (one meant another), not a weight."""
        twice = sorted({p.value for p in priorities if priorities.count(p) > 1})
        if twice:
            raise PydanticCustomError(
                "duplicate_priority", "{twice} listed twice", {"twice": ", ".join(twice)}
            )
        return priorities

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        """A backend address the gateway and the scraper can reach (`{i}`: the index)."""
        if url is not None:
            _HTTP_URL.validate_python(url.replace(REPLICA_NUMBER, "0"))
        return url


class FleetFile(BaseModel):
    """The whole fleet file."""

    model_config = ConfigDict(extra="forbid")

    name: str = "fleet"
    cards: dict[str, dict[str, Any]] = Field(default_factory=dict)
    models: dict[str, dict[str, Any]] = Field(default_factory=dict)
    sla: dict[Priority, SlaClass] = Field(default_factory=_default_sla)
    targets: list[TargetSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _shares_are_a_mix(self) -> FleetFile:
        """The priorities' shares of the traffic: a mix that sums to 1."""
        total = sum(c.share for c in self.sla.values())
        if abs(total - 1.0) > 0.001:
            raise ValueError(
                f"sla: the shares sum to {total:g}, not 1; fix: give each priority its share "
                "of the traffic, e.g. high 0.2, normal 0.6, low 0.2"
            )
        return self


@dataclass(frozen=True, slots=True)
class Target:
    """One routing target: a model replica on `tp` cards of one type."""

    index: int
    id: str
    model: ModelSpec
    card: CardType
    tp: int
    url: str | None
    priorities: frozenset[Priority]

    @property
    def memory_gb(self) -> float:
        """V_h of the whole tensor-parallel group."""
        return self.card.memory_gb * self.tp

    @property
    def static_gb(self) -> float:
        """Incompressible reservation: weights plus activation buffers."""
        return self.model.weights_gb + self.model.activation_buffer_gb * self.tp

    @property
    def kv_budget_gb(self) -> float:
        """V_kv(h): what is left for KV cache under the 0.92 headroom."""
        return MEMORY_HEADROOM * self.memory_gb - self.static_gb

    @property
    def tflops(self) -> float:
        return self.card.bf16_tflops * self.tp


@dataclass(frozen=True)
class Fleet:
    """The validated fleet: targets in a fixed order (their index is their identity)."""

    name: str
    cards: dict[str, CardType]
    models: dict[str, ModelSpec]
    targets: tuple[Target, ...]
    sla: dict[Priority, SlaClass]
    source: str

    @cached_property
    def target_ids(self) -> tuple[str, ...]:
        """Target ids by index (explanations render from these)."""
        return tuple(t.id for t in self.targets)

    @cached_property
    def digest(self) -> str:
        """12 hex digits naming what routing depends on (each target's id, model, card,
        tensor parallelism, URL and priorities): replicas sharing a guard compare it."""
        rows = sorted(
            (t.id, t.model.id, t.card.id, t.tp, t.url or "", sorted(p.value for p in t.priorities))
            for t in self.targets
        )
        return hashlib.blake2b(json.dumps(rows).encode(), digest_size=6).hexdigest()

    @cached_property
    def servable_priorities(self) -> dict[str, frozenset[Priority]]:
        """Per model, the priorities the router can serve it at: its own targets', then
        those of the models it degrades to (to a fixed point: a degrade may chain)."""
        served: dict[str, set[Priority]] = {}
        for t in self.targets:
            served.setdefault(t.model.id, set()).update(t.priorities)
        grew = True
        while grew:
            grew = False
            for model, spec in self.models.items():
                more = served.get(spec.degrade_to or "", set()) - served.get(model, set())
                if more:
                    served.setdefault(model, set()).update(more)
                    grew = True
        return {m: frozenset(p) for m, p in served.items()}

    @cached_property
    def notes(self) -> tuple[str, ...]:
        """What in this fleet will not act as its author may expect, one line each: a model
        some targets serve that requests at some priority can never reach (they are
        refused, 422 from the service, rejected in a simulation)."""
        everyone, targeted = set(Priority), {t.model.id for t in self.targets}
        return tuple(
            f"{self.source}: {model} is served only at {_listed(served)}: requests at "
            f"{_listed(everyone - served)} are refused; fix: add a target serving them, or "
            f"a degrade_to for {model}"
            for model, served in self.servable_priorities.items()
            if model in targeted and everyone - served
        )

    @cached_property
    def card_ids(self) -> tuple[str, ...]:
        return tuple(t.card.id for t in self.targets)

    @cached_property
    def static_gb_array(self) -> np.ndarray:
        """Static reservation (weights + buffers) per target index, GB."""
        return np.array([t.static_gb for t in self.targets], dtype=np.float64)

    def __iter__(self) -> Iterator[Target]:
        return iter(self.targets)

    def __len__(self) -> int:
        return len(self.targets)

    def target(self, target_id: str) -> Target:
        for t in self.targets:
            if t.id == target_id:
                return t
        raise KeyError(target_id)

    def card_types(self) -> list[str]:
        return sorted({t.card.id for t in self.targets})


def _smallest_tp(target: Target) -> int | None:
    """The least tp at which the target leaves room for KV cache, None past `MAX_TP`:
    each card adds its own activation buffer, so the need grows with tp."""
    return next(
        (tp for tp in range(1, MAX_TP + 1) if replace(target, tp=tp).kv_budget_gb > 0), None
    )


def _refuse_degrade_to_itself(source: str, models: dict[str, ModelSpec]) -> None:
    """A model degrading to itself names no fallback: a typo for another model. A loop
    through others is a real setup (70B degrades to 8B at low priority, 8B to 70B at
    high): the router takes one hop per request, so it always ends."""
    for name, spec in models.items():
        if spec.degrade_to == name:
            raise _fail(
                source,
                f"models.{name}.degrade_to",
                f"{name} degrades to itself",
                "name the model its requests fall back to, or remove degrade_to",
            )


def _fail(source: str, field: str, problem: str, fix: str) -> FleetError:
    return FleetError(f"{source}: {field}: {problem}; fix: {fix}")


def _catalogue(
    source: str, section: str, raw: dict[str, dict[str, Any]], cls: type[_M]
) -> dict[str, _M]:
    out: dict[str, _M] = {}
    for key, entry in raw.items():
        try:
            out[key] = cls.model_validate({**entry, "id": key})
        except ValidationError as exc:
            field, problem, fix = explain(exc.errors(), cls, hidden=frozenset({"id"}))
            raise _fail(source, f"{section}.{key}.{field}", problem, fix) from None
    return out


def build_fleet(raw: Any, source: str = "<fleet>") -> Fleet:
    """Validate a parsed fleet document; raise FleetError naming the field and the fix."""
    if not isinstance(raw, dict):
        raise _fail(source, "<top>", "not a mapping", "write a YAML mapping with 'targets:'")
    try:
        spec = FleetFile.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        if err["type"] == "value_error" and not err["loc"]:  # a check across fields
            raise FleetError(f"{source}: {err['ctx']['error']}") from None
        field, problem, fix = explain(exc.errors(), FleetFile)
        if err["loc"][-1:] == ("url",):
            fix = "write the backend's base URL, like http://10.0.0.5:8000"
        raise _fail(source, field, problem, fix) from None
    cards = _catalogue(source, "cards", {**builtin_cards(), **spec.cards}, CardType)
    models = _catalogue(source, "models", {**builtin_models(), **spec.models}, ModelSpec)
    for mid, m in models.items():
        if m.degrade_to is not None and m.degrade_to not in models:
            raise _fail(
                source,
                f"models.{mid}.degrade_to",
                f"unknown model {m.degrade_to!r}",
                f"use one of {sorted(models)}",
            )
    _refuse_degrade_to_itself(source, models)
    shared = credentials_in_url(spec.targets) or shared_backend(spec.targets)
    if shared is not None:
        raise _fail(source, f"targets[{shared[0]}].url", shared[1], shared[2])
    targets: list[Target] = []
    seen: set[str] = set()
    for i, ts in enumerate(spec.targets):
        where = f"targets[{i}]"
        if ts.card not in cards:
            raise _fail(
                source,
                f"{where}.card",
                f"unknown card type {ts.card!r}",
                f"use one of {sorted(cards)} or add it under 'cards:'",
            )
        if ts.model not in models:
            raise _fail(
                source,
                f"{where}.model",
                f"unknown model {ts.model!r}",
                f"use one of {sorted(models)} or add it under 'models:'",
            )
        ids = [ts.id] if ts.count == 1 else [f"{ts.id}-{k}" for k in range(ts.count)]
        for k, tid in enumerate(ids):
            if tid in seen:
                raise _fail(
                    source,
                    f"{where}.id",
                    f"duplicate target id {tid!r}",
                    "give every target a unique id",
                )
            seen.add(tid)
            url = replica_url(ts.url, ts.count, k)
            target = Target(
                index=len(targets),
                id=tid,
                model=models[ts.model],
                card=cards[ts.card],
                tp=ts.tp,
                url=url,
                priorities=frozenset(ts.priorities),
            )
            if target.kv_budget_gb <= 0:
                need = _smallest_tp(target)
                raise _fail(
                    source,
                    f"{where}.tp",
                    f"model {ts.model} needs {target.static_gb:.0f} GB for weights and "
                    f"buffers; {ts.tp} x {ts.card} gives {MEMORY_HEADROOM * target.memory_gb:.0f}"
                    " GB usable",
                    "place it on a larger card"
                    if need is None
                    else f"set tp >= {need} or place it on a larger card",
                )
            targets.append(target)
    return Fleet(spec.name, cards, models, tuple(targets), dict(spec.sla), source)


def load_fleet(path: str | Path | None = None) -> Fleet:
    """Load a fleet file, or the built-in default fleet when `path` is None."""
    if path is None:
        text = resources.files("slaguard.data").joinpath("fleet.yaml").read_text("utf-8")
        return build_fleet(yaml.safe_load(text), "<built-in fleet>")
    p = Path(path)
    raw = load_user_yaml(p, FleetError, "fleet file")
    return build_fleet(raw, str(p))


def _listed(priorities: frozenset[Priority] | set[Priority]) -> str:
    return ", ".join(p.value for p in Priority if p in priorities)
