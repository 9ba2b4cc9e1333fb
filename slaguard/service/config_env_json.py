"""A `SLAGUARD_SERVE_*` variable holding a list or a whole section must be JSON, as
pydantic-settings reads it: anything else (`..._ROLLBACK_ALERTS=SlaguardSLAErrorBudgetBurn`,
`..._STAGES_PCT=10,50`) was a SettingsError traceback naming only the section."""

from __future__ import annotations

import json
from typing import Any, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

_LISTS = (tuple, list, set, frozenset)


def not_json(name: str, path: str, field: FieldInfo, value: str) -> str | None:
    """The error line for variable `name` (setting `path`) when its field is read as JSON
    and `value` is not JSON; None otherwise."""
    kind = field.annotation
    section = kind if isinstance(kind, type) and issubclass(kind, BaseModel) else None
    if section is None and get_origin(kind) not in _LISTS:
        return None
    try:
        json.loads(value)
    except ValueError:
        pass
    else:
        return None
    problem = f"${name}: {path}: {value!r} is not JSON, as a "
    if section is None:
        example = json.dumps(list(field.get_default(call_default_factory=True)))
        return (
            f"{problem}list given in a variable must be; fix: write a JSON list, e.g. "
            f"{name}='{example}'"
        )
    keys, value_of = _example(section)
    return (
        f"{problem}section given in a variable must be; fix: write a JSON object, e.g. "
        f"{name}='{json.dumps(value_of)}', or set each key in its own variable, e.g. "
        f"${name}__{'__'.join(keys).upper()}"
    )


def _example(section: type[BaseModel]) -> tuple[list[str], dict[str, Any]]:
    """One key of `section` with its default, and its path: its first nested section's,
    if it has one (guard's first key, evaluation_interval_s, is one serve refuses)."""
    fields = section.model_fields
    for key, field in fields.items():
        kind = field.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            keys, inner = _example(kind)
            return [key, *keys], {key: inner}
    key, first = next(iter(fields.items()))
    return [key], {key: first.get_default(call_default_factory=True)}
