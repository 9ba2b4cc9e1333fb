"""The output formats of the query commands, apart from the pandas code that writes them,
so a command's options can name them without importing pandas."""

from __future__ import annotations

from enum import StrEnum


class OutputFormat(StrEnum):
    TABLE = "table"
    CSV = "csv"
    JSON = "json"
    PARQUET = "parquet"
