"""Trace loaders: real excerpts load exactly, bad input gives one line naming file and line."""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slaguard.sim import paths
from slaguard.sim.trace import (
    NO_PREFIX,
    Trace,
    TraceError,
    concat_traces,
    gather_rows,
    offsets_from_lengths,
    prefix_key_of,
)
from slaguard.sim.traces import TraceFormat, detect_format, load_trace

FIXTURES = Path(__file__).parent / "fixtures"
AZURE = FIXTURES / "azure_conv_200.csv"
MOONCAKE = FIXTURES / "mooncake_conv_200.jsonl"


def require_full(path: Path) -> Path:
    """Full shared data: required in CI, optional on a laptop."""
    if path.exists():
        return path
    if os.environ.get("CI") == "true":
        pytest.fail(f"{path} is missing in CI (expected at ../shared/data)")
    pytest.skip(f"{path} not present")


def test_azure_excerpt_loads_with_seconds_from_first_arrival() -> None:
    trace = load_trace(AZURE)
    assert len(trace) == 200
    assert trace.name == "azure_conv_200"
    assert trace.arrival_s[0] == 0.0
    # 18:15:50.9951690 - 18:15:46.6805900
    assert trace.arrival_s[1] == pytest.approx(4.314579, abs=1e-6)
    assert (trace.prompt_tokens[:3].tolist(), trace.output_tokens[:3].tolist()) == (
        [374, 396, 879],
        [44, 109, 55],
    )
    assert trace.prompt_tokens[-1] == 1143 and trace.output_tokens[-1] == 409
    assert bool(np.all(np.diff(trace.arrival_s) >= 0))
    assert not trace.has_prefixes and trace.prefix_id(0) is None and trace.prefix_blocks(0) == ()


def test_mooncake_excerpt_loads_blocks_and_prefix_ids() -> None:
    trace = load_trace(MOONCAKE)
    assert len(trace) == 200
    assert trace.prefix_blocks(0) == tuple(range(14))
    assert trace.prefix_blocks(1)[:2] == (0, 14)
    assert trace.prompt_tokens[0] == 6758 and trace.output_tokens[0] == 500
    assert all(trace.prefix_blocks(i)[0] == 0 for i in range(len(trace)))
    assert len(set(trace.prefix_key.tolist())) == 200
    assert trace.prefix_id(0) == f"{prefix_key_of(list(range(14))):016x}"
    assert trace.arrival_s[0] == 0.0 and trace.arrival_s[-1] > 0


def test_format_is_detected_by_content_not_by_name(tmp_path: Path) -> None:
    disguised = tmp_path / "trace.jsonl"
    shutil.copy(AZURE, disguised)
    assert detect_format(disguised) is TraceFormat.AZURE
    assert len(load_trace(disguised)) == 200
    assert detect_format(MOONCAKE) is TraceFormat.MOONCAKE


@pytest.mark.parametrize(
    "header",
    [
        "GeneratedTokens,TIMESTAMP,ContextTokens",
        '"ContextTokens", "GeneratedTokens", "TIMESTAMP"',
        "\ufeffTIMESTAMP,ContextTokens,GeneratedTokens",
    ],
)
def test_azure_is_detected_by_column_names_in_any_order(tmp_path: Path, header: str) -> None:
    """Only the first cell was looked at: reordered columns could not be detected."""
    rows = AZURE.read_text(encoding="utf-8").splitlines()[1:]
    order = [c.strip(' "\ufeff') for c in header.split(",")]
    index = {name: i for i, name in enumerate(("TIMESTAMP", "ContextTokens", "GeneratedTokens"))}
    lines = [",".join(r.split(",")[index[c]] for c in order) for r in rows]
    path = tmp_path / "reordered.csv"
    path.write_text("\n".join([header, *lines]) + "\n", encoding="utf-8")
    assert detect_format(path) is TraceFormat.AZURE
    trace, original = load_trace(path), load_trace(AZURE)
    assert trace.prompt_tokens.tolist() == original.prompt_tokens.tolist()
    assert trace.arrival_s.tolist() == original.arrival_s.tolist()


def test_explicit_format_overrides_detection(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="unknown trace format 'parquet'"):
        load_trace(AZURE, trace_format="parquet")


@pytest.mark.parametrize(
    ("path", "forced", "found"),
    [(AZURE, "mooncake", "an Azure CSV header"), (MOONCAKE, "azure", "a JSON object (Mooncake)")],
)
def test_the_other_format_forced_is_named_as_the_mismatch(
    path: Path, forced: str, found: str
) -> None:
    """Mooncake read as Azure was `18 cells; every row needs 17 ({"timestamp": 0,...})`,
    Azure read as Mooncake `invalid JSON (Expecting value)`: neither named the flag."""
    other = "azure" if forced == "mooncake" else "mooncake"
    with pytest.raises(TraceError) as caught:
        load_trace(path, trace_format=forced)
    assert str(caught.value) == (
        f"{path}:1: {found}, read as --trace-format {forced}; fix: pass --trace-format "
        f"{other}, or leave it out to detect the format"
    )


AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
GOOD_ROW = "2023-11-16 18:15:46.6805900,374,44\n"

BAD_INPUTS = [
    ("empty.csv", "", "1", "trace has no requests"),
    ("header.csv", AZURE_HEADER, "1", "header only"),
    ("cols.csv", "TIMESTAMP,Context,Out\n" + GOOD_ROW, "1", "missing column(s) ContextTokens"),
    (
        "cell.csv",
        AZURE_HEADER + GOOD_ROW * 2 + "2023-11-16 18:15:47,abc,3\n",
        "4",
        "ContextTokens is 'abc'",
    ),
    (
        "blank.csv",
        AZURE_HEADER + GOOD_ROW + "\n\n" + "2023-11-16 18:15:47,5,-3\n",
        "5",
        "GeneratedTokens is '-3'",
    ),
    ("frac.csv", AZURE_HEADER + "2023-11-16 18:15:47,5.5,3\n", "2", "ContextTokens is '5.5'"),
    ("stamp.csv", AZURE_HEADER + GOOD_ROW + "yesterday,5,3\n", "3", "TIMESTAMP is 'yesterday'"),
    (
        "fields.csv",
        AZURE_HEADER + GOOD_ROW + "2023-11-16 18:15:47,1,2,3\n",
        "3",
        "4 cells; every row needs 3",
    ),
    (
        "huge.csv",
        AZURE_HEADER + GOOD_ROW + "2023-11-16 18:15:50.0,99999999999999999999,10\n",
        "3",
        "ContextTokens is '99999999999999999999', not a token count (a whole number in [0, 2^53))",
    ),
    (
        "int64.csv",
        AZURE_HEADER + "2023-11-16 18:15:50.0,10,9223372036854775807\n",
        "2",
        "GeneratedTokens is '9223372036854775807'",
    ),
    ("above.csv", AZURE_HEADER + "2023-11-16 18:15:50.0,9007199254740993,1\n", "2", "2^53"),
    (
        "index.csv",
        AZURE_HEADER + "0,2023-11-16 18:15:50.0,500,10\n1,2023-11-16 18:15:51.0,500,10\n",
        "2",
        "4 cells; every row needs 3 (TIMESTAMP,ContextTokens,GeneratedTokens)",
    ),
    (
        "trailing.csv",
        AZURE_HEADER + GOOD_ROW + "\n" + GOOD_ROW.replace("\n", ",\n"),
        "4",
        "4 cells; every row needs 3 (TIMESTAMP,ContextTokens,GeneratedTokens)",
    ),
    ("short.csv", AZURE_HEADER + "2023-11-16 18:15:50.0,500\n", "2", "2 cells; every row needs 3"),
    ("what.txt", "hello\n", "1", "cannot tell the trace format"),
    (
        "late.jsonl",
        '{"timestamp": 1e300, "input_length": 5, "output_length": 1, "hash_ids": []}\n',
        "1",
        "timestamp is 1e+300, not a number in [0, 2^53); fix: write a number >= 0 and below 2^53",
    ),
    (
        "json.jsonl",
        '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": []}\n{oops\n',
        "2",
        "invalid JSON",
    ),
    (
        "frac.jsonl",
        '{"timestamp": 0.5, "input_length": 5.0, "output_length": 1, "hash_ids": [1]}\n'
        '{"timestamp": 1, "input_length": 100.7, "output_length": 10, "hash_ids": [1]}\n',
        "2",
        "input_length is 100.7, not a token count",
    ),
    (
        "out.jsonl",
        '{"timestamp": 1, "input_length": 100, "output_length": 0.5, "hash_ids": [1]}\n',
        "1",
        "output_length is 0.5, not a token count",
    ),
    (
        "noids.jsonl",
        '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_id": [1]}\n',
        "1",
        "missing field 'hash_ids'",
    ),
    ("key.jsonl", '\n{"timestamp": 0, "input_length": 5}\n', "2", "missing field 'output_length'"),
    (
        "num.jsonl",
        '{"timestamp": "soon", "input_length": 5, "output_length": 1}\n',
        "1",
        "timestamp is 'soon'",
    ),
    (
        "neg.jsonl",
        '{"timestamp": 0, "input_length": -5, "output_length": 1}\n',
        "1",
        "input_length is -5",
    ),
    (
        "ids.jsonl",
        '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": "a"}\n',
        "1",
        "hash_ids is not a list of integers",
    ),
    ("list.jsonl", "{}\n[1, 2]\n", "1", "missing field 'timestamp'"),
]


@pytest.mark.parametrize(("name", "text", "line", "problem"), BAD_INPUTS)
def test_bad_input_is_one_line_with_file_line_and_fix(
    tmp_path: Path, name: str, text: str, line: str, problem: str
) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{path}:{line}: ")
    assert problem in message
    assert "; fix: " in message


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
@pytest.mark.parametrize("good_lines", [1, 400])
def test_bad_utf8_is_reported_on_its_line(tmp_path: Path, suffix: str, good_lines: int) -> None:
    """The bad byte's line, early (first read block) or late (past pandas' first block)."""
    if suffix == ".csv":
        head, bad = AZURE_HEADER + GOOD_ROW * good_lines, b"2023-11-16 18:15:51,5\xff0,10\n"
        line = good_lines + 2
    else:
        row = '{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": []}\n'
        head, bad = row * good_lines, row.encode().replace(b"}", b"}\xff")
        line = good_lines + 1
    path = tmp_path / f"badutf{suffix}"
    path.write_bytes(head.encode() + bad + GOOD_ROW.encode())
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    assert str(caught.value) == f"{path}:{line}: not UTF-8 text; fix: pass a CSV or JSONL trace"


@pytest.mark.parametrize("trace_format", [TraceFormat.AUTO, TraceFormat.AZURE])
@pytest.mark.parametrize("truncated", [False, True])
def test_a_gzip_trace_is_named_as_compressed(
    tmp_path: Path, trace_format: TraceFormat, truncated: bool
) -> None:
    """`trace.csv.gz`, whole or cut short by a copy, was "not UTF-8 text; fix: pass a CSV
    or JSONL trace": the fix did not say to decompress it."""
    packed = gzip.compress(AZURE.read_bytes())
    path = tmp_path / "trace.csv.gz"
    path.write_bytes(packed[: len(packed) // 3] if truncated else packed)
    with pytest.raises(TraceError) as caught:
        load_trace(path, trace_format)
    assert str(caught.value) == (
        f"{path}: compressed (gzip), not a CSV or JSONL trace; fix: decompress it first "
        f"(gunzip -k {path}) and pass the file it gives"
    )


def test_missing_file_and_directory_name_the_path(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"nope\.csv: file not found; fix: "):
        load_trace(tmp_path / "nope.csv")
    with pytest.raises(TraceError, match="is a directory; fix: "):
        load_trace(tmp_path)


@pytest.mark.parametrize("trace_format", [TraceFormat.AUTO, TraceFormat.AZURE])
def test_fifo_and_device_are_refused_without_reading(
    tmp_path: Path, trace_format: TraceFormat
) -> None:
    """A FIFO with no writer hung the loader; `/dev/zero` was read until memory ran out."""
    fifo = tmp_path / "trace.csv"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero")):
        with pytest.raises(TraceError, match=r"not a regular file .*; fix: pass a trace saved"):
            load_trace(path, trace_format)


def test_default_paths_follow_repo_root_and_env_override(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(paths.DATA_DIR_ENV, raising=False)
    root = Path(__file__).resolve().parents[1]
    assert paths.repo_root() == root
    assert paths.default_trace_path() == (
        root.parent / "shared" / "data" / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"
    )
    monkeypatch.setenv(paths.DATA_DIR_ENV, str(tmp_path))
    assert paths.mooncake_trace_path() == tmp_path / "mooncake" / "conversation_trace.jsonl"
    assert paths.perf_model_path() == tmp_path / "splitwise" / "perf_model.csv"


def test_full_shared_traces_replay_their_documented_figures() -> None:
    azure = load_trace(require_full(paths.default_trace_path()))
    assert len(azure) == 19_366
    assert azure.duration_s == pytest.approx(3501.72, abs=0.01)
    assert float(np.median(azure.prompt_tokens)) == 1020.0
    assert int(azure.prompt_tokens.max()) == 14_050
    assert float(np.median(azure.output_tokens)) == 129.0
    mooncake = load_trace(require_full(paths.mooncake_trace_path()))
    assert len(mooncake) == 12_031
    assert mooncake.has_prefixes
    first_blocks = mooncake.blocks[mooncake.block_offsets[:-1]]
    assert bool(np.all(first_blocks == 0))  # block 0 is the shared system prefix
    assert len(mooncake) / (mooncake.duration_s / 60) == pytest.approx(204.1, abs=0.2)


def test_unsorted_input_is_sorted_stably_and_keeps_row_ids() -> None:
    trace = Trace.build(
        "t", "mem", [3.0, 1.0, 1.0, 0.0], [1, 2, 3, 4], [5, 6, 7, 8], [[1], [2, 3], [], [4, 5, 6]]
    )
    assert trace.arrival_s.tolist() == [0.0, 1.0, 1.0, 3.0]
    assert trace.row_id.tolist() == [3, 1, 2, 0]
    assert [trace.prefix_blocks(i) for i in range(4)] == [(4, 5, 6), (2, 3), (), (1,)]
    assert trace.prefix_key[2] == NO_PREFIX


def test_slicing_scaling_and_merging_keep_columns_aligned() -> None:
    trace = load_trace(MOONCAKE)
    window = trace.between(10.0, 20.0)
    assert bool(np.all((window.arrival_s >= 10.0) & (window.arrival_s < 20.0)))
    assert len(window) == int(np.sum((trace.arrival_s >= 10.0) & (trace.arrival_s < 20.0)))
    faster = trace.with_rate_scale(2.0)
    assert faster.duration_s == pytest.approx(trace.duration_s / 2)
    merged = concat_traces(window, trace.between(0.0, 10.0))
    assert merged.row_id.tolist() == sorted(merged.row_id.tolist())
    for i in range(len(merged)):
        original = int(merged.row_id[i])
        assert merged.prefix_blocks(i) == trace.prefix_blocks(original)
    with pytest.raises(ValueError, match="rate scale"):
        trace.with_rate_scale(0.0)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 99), max_size=5), min_size=1, max_size=12),
    st.data(),
)
def test_gather_rows_matches_python_slicing(rows: list[list[int]], data: st.DataObject) -> None:
    offsets = offsets_from_lengths(np.asarray([len(r) for r in rows], dtype=np.int64))
    values = np.asarray([x for r in rows for x in r], dtype=np.int64)
    pick = data.draw(st.lists(st.integers(0, len(rows) - 1), max_size=20))
    new_offsets, new_values = gather_rows(offsets, values, np.asarray(pick, dtype=np.int64))
    got = [new_values[new_offsets[k] : new_offsets[k + 1]].tolist() for k in range(len(pick))]
    assert got == [rows[i] for i in pick]


def test_summary_reports_headline_figures() -> None:
    summary = load_trace(AZURE).summary()
    assert summary["requests"] == 200
    assert summary["distinct_prefixes"] == 0
    assert summary["prompt_tokens_max"] == int(load_trace(AZURE).prompt_tokens.max())


@pytest.mark.parametrize("blank", ["   \n", "\t\r\n", "\n"])
def test_a_blank_or_whitespace_line_in_an_azure_csv_is_skipped(tmp_path: Path, blank: str) -> None:
    """pandas skips such lines; the cell count check took `'   '` for a row of 1 cell."""
    rows = "2023-11-16 18:15:50.0,500,10\n2023-11-16 18:15:51.0,600,20\n"
    path = tmp_path / "ws.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + rows + blank)
    trace = load_trace(path)
    assert len(trace) == 2 and list(trace.prompt_tokens) == [500, 600]
