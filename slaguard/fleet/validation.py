"""Field types and error wording shared by the fleet file and its catalogues.

YAML hands pydantic `true`, `"4"` and `.inf` as readily as numbers; these types keep such
values from passing as 1, 4 or an endless deadline. `explain` turns pydantic's first error
into a field path, the problem and a fix the user can act on.
"""

from __future__ import annotations

import difflib
import inspect
from enum import Enum
from typing import Annotated, Any, get_args, get_origin

from pydantic import BaseModel, BeforeValidator, Field
from pydantic_core import ErrorDetails, PydanticCustomError


def _not_bool(value: object) -> object:
    """`true` is no number, though Python counts it as 1."""
    if isinstance(value, bool):
        raise PydanticCustomError("number_type", "Input should be a number, not true or false")
    return value


Number = Annotated[float, Field(allow_inf_nan=False), BeforeValidator(_not_bool)]
"""A finite float. A string stays accepted: PyYAML reads `1e-5` (no dot) as one.
Finiteness is the float's own check, so it comes before a field's bounds (`gt=0`): put
after the validator, it ran after them, and `.nan` was "greater than 0"."""

Whole = Annotated[int, Field(strict=True)]
"""An int as written: no `true`, no `"4"`, no `4.0`."""


_FIXES = {  # by pydantic error type; the bound comes from the error's context
    "greater_than": "use a number above {gt:g}",
    "greater_than_equal": "use a number of at least {ge:g}",
    "less_than": "use a number below {lt:g}",
    "less_than_equal": "use a number of at most {le:g}",
    "int_type": "write a whole number, like 2, without quotes",
    "float_parsing": "write a number",
    "number_type": "write a number",
    "finite_number": "write a finite number",
    "string_type": "write it as text",
    "bool_type": "write true or false, without quotes",
    "string_too_short": "write a non-empty value",
    "too_short": "list at least {min_length} of them",
    "missing": "add it",
    "duplicate_priority": "list each priority once",
    "unprintable_id": "write the id in printable characters without spaces, e.g. h100-8b",
    "non_ascii_id": "write the id in ASCII letters, digits and punctuation, e.g. h100-8b",
}


def _field_path(loc: tuple[int | str, ...]) -> str:
    """`targets[0].card` from pydantic's ('targets', 0, 'card')."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _type_at(root: type[BaseModel], loc: tuple[int | str, ...]) -> Any:
    """The declared type at `loc`: a model's field, a list's item, a mapping's value, or
    its key for `[key]`; None where the schema does not say (a free-form mapping)."""
    tp: Any = root
    for part in loc:
        if get_origin(tp) is None and inspect.isclass(tp) and issubclass(tp, BaseModel):
            field = tp.model_fields.get(str(part))
            if field is None:
                return None
            tp = field.annotation
        elif args := get_args(tp):
            tp = args[0] if part == "[key]" else args[-1]
        else:
            return None
    return tp


def _keys(tp: Any, hidden: frozenset[str]) -> list[str]:
    if inspect.isclass(tp) and issubclass(tp, BaseModel):
        return sorted(set(tp.model_fields) - hidden)
    return []


def _near(word: object, choices: list[str]) -> str | None:
    found = difflib.get_close_matches(str(word), choices, n=1)
    return found[0] if found else None


def _beside(errors: list[ErrorDetails], kind: str, loc: tuple[int | str, ...]) -> list[str]:
    """Keys in the same mapping as `loc` with an error of `kind`."""
    return [str(e["loc"][-1]) for e in errors if e["type"] == kind and e["loc"][:-1] == loc[:-1]]


def explain(
    errors: list[ErrorDetails], root: type[BaseModel], hidden: frozenset[str] = frozenset()
) -> tuple[str, str, str]:
    """(field path, problem, fix) for the first error of validating `root`; `hidden` are
    fields the loader fills in itself, never offered as keys to write."""
    err = errors[0]
    loc, kind, value = tuple(err["loc"]), err["type"], err.get("input")
    type_loc = loc
    if loc[-1:] == ("[key]",):  # a mapping's key is wrong: name the key, not "[key]"
        loc, type_loc = loc[:-1], (*loc[:-2], "[key]")
    problem = err["msg"] if isinstance(value, dict | list) else f"{err['msg']} (got {value!r})"
    fix = _FIXES.get(kind, "correct the value").format(**err.get("ctx", {}))
    if kind == "extra_forbidden":
        keys = _keys(_type_at(root, loc[:-1]), hidden)
        problem, fix = "unknown key", f"remove it, or use one of {', '.join(keys)}"
        if near := _near(loc[-1], _beside(errors, "missing", loc) or keys):
            fix += f" (did you mean {near!r}?)"
    elif kind == "missing" and (typo := _near(loc[-1], _beside(errors, "extra_forbidden", loc))):
        fix += f" (the key {typo!r} here is probably a typo of it)"
    elif kind == "enum":
        tp = _type_at(root, type_loc)
        if inspect.isclass(tp) and issubclass(tp, Enum):
            choices = [str(m.value) for m in tp]
            fix = f"use one of {', '.join(choices)}"
            if near := _near(value, choices):
                fix += f" (did you mean {near!r}?)"
    return _field_path(loc), problem, fix
