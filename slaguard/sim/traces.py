"""Trace loaders: the Azure 2023 CSV and the Mooncake JSONL, detected by content.

Every input mistake (missing file, wrong columns, a non-numeric cell, an empty trace) raises
`TraceError` with one line `path:line: problem; fix: ...` that the CLI prints before exit 2.
Arrival times become seconds from the first arrival.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd  # type: ignore[import-untyped]

from slaguard.sim.paths import default_trace_path
from slaguard.sim.trace import Trace, TraceError

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
_AZURE_FIX = "the Azure trace header is TIMESTAMP,ContextTokens,GeneratedTokens"
TRACE_NUMBER_MAX = 2.0**53
"""Bound on every number in a trace, both formats: above it (and NaN or Infinity, which
Python's JSON reader takes) a number is not a time or a length; float64 no longer holds
each whole number exactly, and NaN timestamps made the replay loop forever."""
_LIMIT_TEXT = "2^53 (9007199254740992)"
_RANGE_TEXT = "[0, 2^53)"
_FORMAT_FIX = "pass the format explicitly (--trace-format azure or mooncake)"
_COMPRESSED = {
    b"\x1f\x8b": ("gzip", "gunzip -k"),
    b"\xfd7zXZ\x00": ("xz", "unxz -k"),
    b"BZh": ("bzip2", "bunzip2 -k"),
    b"\x28\xb5\x2f\xfd": ("zstd", "unzstd"),
    b"PK\x03\x04": ("zip", "unzip"),
}
"""Leading bytes of the archives a trace is shipped in, with the command that unpacks
one: read as text, each was only "not UTF-8 text"."""


class TraceFormat(StrEnum):
    """Which loader reads a file; AUTO looks at the first non-empty line (JSON or a header)."""

    AUTO = "auto"
    AZURE = "azure"
    MOONCAKE = "mooncake"


def _error(path: Path, line: int | None, problem: str, fix: str) -> TraceError:
    where = f"{path}:{line}" if line is not None else str(path)
    return TraceError(f"{where}: {problem}; fix: {fix}")


def _first_content_line(path: Path) -> tuple[int, str]:
    """(line number, text) of the first non-blank line; raises for missing/empty files and
    for anything but a regular file (a FIFO hung waiting for a writer, `/dev/zero` was read
    as one endless line until memory ran out)."""
    try:
        if path.exists() and not path.is_dir() and not path.is_file():
            raise _error(
                path,
                None,
                "not a regular file (a device, pipe or socket)",
                "pass a trace saved on disk",
            )
        _refuse_compressed(path)
        with path.open(encoding="utf-8") as handle:
            for number, text in enumerate(handle, start=1):
                if text.strip():
                    return number, text.strip()
    except FileNotFoundError:
        raise _error(path, None, "file not found", "pass an existing trace file") from None
    except IsADirectoryError:
        raise _error(path, None, "is a directory", "pass a trace file, not a folder") from None
    except UnicodeDecodeError:
        raise _not_utf8(path) from None
    except OSError as exc:
        raise _error(path, None, f"cannot read ({exc.strerror})", "check permissions") from None
    raise _error(path, 1, "trace has no requests (empty file)", "pass a non-empty trace")


def _refuse_compressed(path: Path) -> None:
    """A compressed trace (`trace.csv.gz`, whole or cut short) is named as such, with the
    command that unpacks it."""
    with path.open("rb") as handle:
        head = handle.read(6)
    for magic, (kind, unpack) in _COMPRESSED.items():
        if head.startswith(magic):
            raise _error(
                path,
                None,
                f"compressed ({kind}), not a CSV or JSONL trace",
                f"decompress it first ({unpack} {path}) and pass the file it gives",
            )


def _not_utf8(path: Path) -> TraceError:
    """The error for a file that does not decode, on the line of its first bad byte (the
    decoder reads ahead by blocks, so the failing read does not tell the line)."""
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                return _error(path, number, "not UTF-8 text", "pass a CSV or JSONL trace")
    return _error(path, None, "not UTF-8 text", "pass a CSV or JSONL trace")


def detect_format(path: str | Path) -> TraceFormat:
    """`{` on the first non-empty line -> Mooncake JSONL; a header naming an Azure column, in
    any position (pandas reads the columns by name) -> Azure CSV, whose loader then names
    any column missing."""
    p = Path(path)
    number, text = _first_content_line(p)
    found = _sniff(text)
    if found is None:
        raise _error(p, number, f"cannot tell the trace format from {text[:40]!r}", _FORMAT_FIX)
    return found


def _sniff(text: str) -> TraceFormat | None:
    """The format a first non-empty line shows, if any."""
    if text.startswith("{"):
        return TraceFormat.MOONCAKE
    header = {cell.strip().upper() for cell in next(csv.reader([text.lstrip("\ufeff")]))}
    return TraceFormat.AZURE if header & {c.upper() for c in AZURE_COLUMNS} else None


def _check_forced(path: Path, forced: TraceFormat) -> None:
    """The other format given as --trace-format: each loader then failed on its own terms
    (`18 cells; every row needs 17`, `invalid JSON`), never naming the flag."""
    number, text = _first_content_line(path)
    found = _sniff(text)
    if found is None or found is forced:
        return
    what = "a JSON object (Mooncake)" if found is TraceFormat.MOONCAKE else "an Azure CSV header"
    raise _error(
        path,
        number,
        f"{what}, read as --trace-format {forced.value}",
        f"pass --trace-format {found.value}, or leave it out to detect the format",
    )


def load_trace(
    path: str | Path | None = None,
    trace_format: TraceFormat | str = TraceFormat.AUTO,
    name: str | None = None,
) -> Trace:
    """Load a trace file (default: the Azure conversation hour) in the given or detected format."""
    p = Path(path) if path is not None else default_trace_path()
    try:
        fmt = TraceFormat(trace_format)
    except ValueError:
        choices = ", ".join(f.value for f in TraceFormat)
        raise _error(p, None, f"unknown trace format {trace_format!r}", f"use {choices}") from None
    if fmt is TraceFormat.AUTO:
        fmt = detect_format(p)
    else:
        _check_forced(p, fmt)
    label = name or p.stem
    if fmt is TraceFormat.AZURE:
        return load_azure_csv(p, label)
    return load_mooncake_jsonl(p, label)


def _data_line(path: Path, row: int) -> int:
    """File line of the `row`-th data row (0-based) the way pandas counts: blank lines skipped."""
    seen = -1
    with path.open(encoding="utf-8") as handle:
        for number, text in enumerate(handle, start=1):
            if text.strip():
                seen += 1
                if seen == row + 1:
                    return number
    return seen + 1


def _count_column(path: Path, frame: pd.DataFrame, column: str) -> npt.NDArray[np.int64]:
    """A token-count column as int64; below TRACE_NUMBER_MAX every value is held exactly
    (a count above 2^63 turned negative in the cast and crashed the run)."""
    values: npt.NDArray[np.float64] = pd.to_numeric(frame[column], errors="coerce").to_numpy(
        dtype=np.float64
    )
    bad = np.flatnonzero(
        ~np.isfinite(values)
        | (values < 0)
        | (values >= TRACE_NUMBER_MAX)
        | (values != np.floor(values))
    )
    if len(bad):
        row = int(bad[0])
        cell = frame[column].iloc[row]
        raise _error(
            path,
            _data_line(path, row),
            f"{column} is {cell!r}, not a token count (a whole number in {_RANGE_TEXT})",
            f"write a whole number >= 0 and below {_LIMIT_TEXT}",
        )
    return values.astype(np.int64)


def _check_cell_counts(path: Path) -> None:
    """Every row has as many cells as the header: pandas took a row with one more (a saved
    index, a trailing comma) as an index column and dropped or shifted a column silently."""
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle, skipinitialspace=True)
        header: list[str] = []
        for row in reader:
            if not any(cell.strip() for cell in row):  # blank or whitespace: pandas skips it
                continue
            if not header:
                header = row
            elif len(row) != len(header):
                names = ",".join(cell.strip().lstrip("\ufeff") for cell in header)
                raise _error(
                    path,
                    reader.line_num,
                    f"{len(row)} cell{'' if len(row) == 1 else 's'}; every row needs "
                    f"{len(header)} ({names})",
                    "one cell per header column, no index column or trailing comma",
                )


def load_azure_csv(path: str | Path, name: str | None = None) -> Trace:
    """`TIMESTAMP,ContextTokens,GeneratedTokens` rows -> a trace (vectorised, ~0.1 s for 19k)."""
    p = Path(path)
    first_line, _ = _first_content_line(p)
    try:
        _check_cell_counts(p)
        frame = pd.read_csv(p, dtype=str, keep_default_na=False, skipinitialspace=True)
    except UnicodeDecodeError:
        raise _not_utf8(p) from None
    except pd.errors.ParserError as exc:
        match = re.search(r"line (\d+)", str(exc))
        line = int(match.group(1)) if match else None
        raise _error(
            p, line, "wrong number of fields", f"every row needs 3 cells; {_AZURE_FIX}"
        ) from None
    except pd.errors.EmptyDataError:
        raise _error(p, 1, "trace has no requests", "pass a non-empty trace") from None
    frame.columns = [str(c).strip() for c in frame.columns]
    missing = [c for c in AZURE_COLUMNS if c not in frame.columns]
    if missing:
        raise _error(
            p,
            first_line,
            f"missing column(s) {', '.join(missing)} (header has {','.join(frame.columns)})",
            _AZURE_FIX,
        )
    if frame.empty:
        raise _error(p, first_line, "trace has no requests (header only)", "add request rows")
    try:
        stamps = pd.to_datetime(frame["TIMESTAMP"], format="ISO8601", errors="coerce")
    except ValueError:  # pandas refuses times with and without a zone in one column
        raise _error(
            p,
            first_line + 1,
            "TIMESTAMP mixes times with and without a zone",
            "write every time in one form",
        ) from None
    bad = np.flatnonzero(stamps.isna().to_numpy())
    if len(bad):
        row = int(bad[0])
        raise _error(
            p,
            _data_line(p, row),
            f"TIMESTAMP is {frame['TIMESTAMP'].iloc[row]!r}",
            "write times like 2023-11-16 18:15:46.6805900",
        )
    ns = stamps.to_numpy(dtype="datetime64[ns]").astype(np.int64)
    arrival_s = (ns - ns.min()) / 1e9
    prompt = _count_column(p, frame, "ContextTokens")
    output = _count_column(p, frame, "GeneratedTokens")
    return Trace.build(name or p.stem, str(p), arrival_s, prompt, output)


MAX_IDLE_GAP_S = 86_400.0
"""Longest stretch without an arrival a simulation takes (simulated seconds): the engine
steps through idle time 100 ms at a time, and two requests a year apart ran for hours."""


def check_idle_gaps(trace: Trace, rate_scale: float) -> None:
    """Refuse a trace with a gap between arrivals longer than MAX_IDLE_GAP_S once scaled."""
    if len(trace) < 2:
        return
    gaps = np.diff(trace.arrival_s)
    widest = int(np.argmax(gaps))
    if gaps[widest] / rate_scale <= MAX_IDLE_GAP_S:
        return
    start, end = (float(trace.arrival_s[widest + k] - trace.arrival_s[0]) for k in (0, 1))
    raise _error(
        Path(trace.source),
        None,
        f"no request arrives for {gaps[widest] / rate_scale / 86_400:.1f} simulated days "
        f"(from {start:.0f} s to {end:.0f} s of the trace); the simulator steps through idle "
        "time 100 ms at a time and takes at most a day",
        f"remove the gap or split the trace there (--duration {max(1, math.ceil(start))} keeps "
        "what comes before it)",
    )


def _mooncake_number(p: Path, line: int, row: dict[str, Any], field: str) -> float:
    value = row.get(field)
    if value is None:
        raise _error(p, line, f"missing field {field!r}", f"each line needs {MOONCAKE_FIELDS}")
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 <= value < TRACE_NUMBER_MAX
    ):
        raise _error(
            p,
            line,
            f"{field} is {value!r}, not a number in {_RANGE_TEXT}",
            f"write a number >= 0 and below {_LIMIT_TEXT}",
        )
    if field != "timestamp" and value != int(value):  # as the Azure loader: never truncated
        raise _error(p, line, f"{field} is {value!r}, not a token count", "write a whole number")
    return float(value)


def _mooncake_blocks(p: Path, line: int, row: dict[str, Any]) -> list[int]:
    if "hash_ids" not in row:  # a typo'd key would silently turn prefix reuse off
        raise _error(p, line, "missing field 'hash_ids'", "write [] for a request without prefix")
    blocks = row["hash_ids"]
    if not isinstance(blocks, list) or not all(
        isinstance(b, int) and not isinstance(b, bool) and 0 <= b < 2**63 for b in blocks
    ):
        raise _error(p, line, "hash_ids is not a list of integers", "write e.g. [0, 1, 2]")
    return blocks


def _json_objects(p: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(file line, object) for each non-blank line of a JSONL file."""
    try:
        with p.open(encoding="utf-8") as handle:
            for number, text in enumerate(handle, start=1):
                if not text.strip():
                    continue
                try:
                    row = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise _error(
                        p, number, f"invalid JSON ({exc.msg})", "one object per line"
                    ) from None
                if not isinstance(row, dict):
                    raise _error(p, number, "not a JSON object", "one object per line")
                yield number, row
    except UnicodeDecodeError:
        raise _not_utf8(p) from None


def load_mooncake_jsonl(path: str | Path, name: str | None = None) -> Trace:
    """Mooncake lines (`timestamp` ms, lengths, `hash_ids`) -> a trace with prefix blocks."""
    p = Path(path)
    _first_content_line(p)
    stamps: list[float] = []
    prompts: list[float] = []
    outputs: list[float] = []
    block_lists: list[list[int]] = []
    for number, row in _json_objects(p):
        stamps.append(_mooncake_number(p, number, row, "timestamp"))
        prompts.append(_mooncake_number(p, number, row, "input_length"))
        outputs.append(_mooncake_number(p, number, row, "output_length"))
        block_lists.append(_mooncake_blocks(p, number, row))
    arrivals_ms = np.asarray(stamps)
    return Trace.build(
        name or p.stem,
        str(p),
        (arrivals_ms - arrivals_ms.min()) / 1000.0,
        np.asarray(prompts).astype(np.int64),
        np.asarray(outputs).astype(np.int64),
        block_lists,
    )
