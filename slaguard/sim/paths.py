"""Where the shared real-world data lives: `../shared/data` next to the repository.

The repository root is found from this package's location, so the defaults work from any
working directory; `$SLAGUARD_DATA_DIR` points elsewhere (a copy, a CI cache).
"""

from __future__ import annotations

import os
from pathlib import Path

DATA_DIR_ENV = "SLAGUARD_DATA_DIR"

AZURE_CONV_RELPATH = Path("azure-llm-2023/AzureLLMInferenceTrace_conv.csv")
MOONCAKE_CONV_RELPATH = Path("mooncake/conversation_trace.jsonl")
PERF_MODEL_RELPATH = Path("splitwise/perf_model.csv")


def repo_root() -> Path:
    """The checkout holding the `slaguard` package (two levels above this file)."""
    return Path(__file__).resolve().parents[2]


def data_dir() -> Path:
    """`$SLAGUARD_DATA_DIR` if set, else `<repo root>/../shared/data`."""
    override = os.environ.get(DATA_DIR_ENV)
    if override:
        return Path(override)
    return repo_root().parent / "shared" / "data"


def default_trace_path() -> Path:
    """The Azure 2023 conversation trace: the simulator's default workload."""
    return data_dir() / AZURE_CONV_RELPATH


def missing_default_trace() -> str | None:
    """None when the default trace is there, else why not, naming what chose its path
    (`$SLAGUARD_DATA_DIR` when set) and the fix, for a command's one error line."""
    path = default_trace_path()
    if path.exists():
        return None
    where = os.environ.get(DATA_DIR_ENV)
    chosen = f": ${DATA_DIR_ENV} is {where!r}" if where else ""
    return (
        f"{path} does not exist{chosen}; fix: point {DATA_DIR_ENV} at the shared data "
        f"directory (holding {AZURE_CONV_RELPATH})"
    )


def mooncake_trace_path() -> Path:
    """The Mooncake conversation trace (with prefix-cache block ids)."""
    return data_dir() / MOONCAKE_CONV_RELPATH


def perf_model_path() -> Path:
    """Splitwise's measured prefill/decode times, the latency model's ground truth."""
    return data_dir() / PERF_MODEL_RELPATH
