"""Field types and error wording shared by the fleet file and its catalogues.

YAML hands pydantic `true`, `"4"` and `.inf` as readily as numbers; these types keep such
values from passing as 1, 4 or an endless deadline.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field
from pydantic_core import PydanticCustomError


def _not_bool(value: object) -> object:
    """`true` is no number, though Python counts it as 1."""
    if isinstance(value, bool):
        raise PydanticCustomError("number_type", "Input should be a number, not true or false")
    return value


Number = Annotated[float, BeforeValidator(_not_bool), Field(allow_inf_nan=False)]
"""A finite float. A string stays accepted: PyYAML reads `1e-5` (no dot) as one."""

Whole = Annotated[int, Field(strict=True)]
"""An int as written: no `true`, no `"4"`, no `4.0`."""
