"""Query answers as DataFrames whose columns keep their types when no value comes back.

`pd.read_sql` types each column from its values: an empty answer's are untyped (object),
and so is a column NULL on every row (the outcomes of decisions whose outcomes have not
arrived yet), which parquet stores as `null`, so a folder of daily exports whose first
day was quiet could not be read back, and its `decided_at` was no UTC timestamp. The SQL
type of each selected column says what a row would have held.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pandas as pd  # type: ignore[import-untyped]
from sqlalchemy import Connection, Select

_DTYPES: dict[type, str] = {
    bool: "boolean",  # nullable: a NULL stays missing, not False
    int: "Int64",
    float: "float64",
    str: "str",
    datetime: "datetime64[us, UTC]",
}


def read_frame(stmt: Select[*tuple[Any, ...]], conn: Connection) -> pd.DataFrame:
    """`pd.read_sql(stmt, conn)`; a column without a value typed from its SQL type."""
    frame = pd.read_sql(stmt, conn)
    dtypes = {}
    for column in stmt.selected_columns:
        if column.name not in frame.columns or not frame[column.name].isna().all():
            continue
        try:
            python_type = column.type.python_type
        except NotImplementedError:  # an expression SQLAlchemy cannot type: left as read
            continue
        if python_type in _DTYPES:
            dtypes[column.name] = _DTYPES[python_type]
    return frame.astype(dtypes) if dtypes else frame
