"""Refit the latency model from splitwise's measured `perf_model.csv`.

Rows are aggregated per measured configuration (median of the repeats), two kinds of rows
are excluded (see `excluded` in the output), and each reference GPU gets its coefficients
by least squares on relative error (rows weighted 1/measured), keeping every coefficient
non-negative by dropping a term that would go negative and refitting. The result is the
packaged `slaguard/data/latency_fit.json`; `bench/latency_fit.py --write` regenerates it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd  # type: ignore[import-untyped]

from slaguard.fleet.catalogue import CardType, ModelSpec, builtin_cards, builtin_models
from slaguard.sim.latency import (
    DECODE_TERMS,
    FIT_SCHEMA,
    PREFILL_TERMS,
    LatencyFit,
    PhaseError,
    ReferenceFit,
    TermUnits,
)
from slaguard.sim.paths import PERF_MODEL_RELPATH

PROFILED_HARDWARE = {"a100-80gb": "a100", "h100-80gb": "h100"}
"""perf_model.csv hardware name -> catalogue card id. The power-capped `h100-80gb-pcap`
is not a catalogue card (and its decode columns repeat the uncapped H100's)."""

BLOOM_176B = ModelSpec(
    id="bloom-176b",
    params_b=176.2,
    layers=70,
    kv_heads=112,
    head_dim=128,
    dtype_bytes=2,
    context_window=2048,
)
"""BLOOM-176B (BigScience model card): 70 layers, width 14,336, 112 heads, no GQA."""

CONFIG_KEY = ["model", "hardware", "tensor_parallel", "prompt_size", "batch_size", "token_size"]
REQUIRED_COLUMNS = (*CONFIG_KEY, "prompt_time", "token_time", "e2e_time")
SIGNIFICANT_DIGITS = 6

Array = npt.NDArray[np.float64]


@cache
def profiled_models() -> Mapping[str, ModelSpec]:
    """The two models splitwise measured, llama2-70b straight from our catalogue."""
    llama = ModelSpec.model_validate({**builtin_models()["llama2-70b"], "id": "llama2-70b"})
    return {"llama2-70b": llama, "bloom-176b": BLOOM_176B}


@cache
def profiled_cards() -> Mapping[str, CardType]:
    cards = builtin_cards()
    return {
        hw: CardType.model_validate({**cards[cid], "id": cid})
        for hw, cid in PROFILED_HARDWARE.items()
    }


def measured_configurations(csv_path: str | Path) -> tuple[pd.DataFrame, list[str]]:
    """Median of the repeats per configuration, minus excluded rows (and why, as text)."""
    frame = pd.read_csv(csv_path)
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"{csv_path}: missing column(s) {missing}; fix: pass perf_model.csv")
    excluded = [
        f"hardware {hw}: not a catalogue card"
        for hw in sorted(set(frame["hardware"]) - set(PROFILED_HARDWARE))
    ]
    frame = frame[frame["hardware"].isin(list(PROFILED_HARDWARE))]
    frame = frame[frame["model"].isin(list(profiled_models()))]
    configs = (
        frame.groupby(CONFIG_KEY)[["prompt_time", "token_time", "e2e_time"]]
        .median()
        .reset_index()
        .sort_values(CONFIG_KEY, ignore_index=True)
    )
    same_but_batch = [c for c in CONFIG_KEY if c != "batch_size"]
    smaller_batch = configs.groupby(same_but_batch)["prompt_time"].shift(1)
    failed = configs["prompt_time"] < smaller_batch
    for row in configs[failed].itertuples():
        excluded.append(
            f"{row.model} {row.hardware} tp{row.tensor_parallel} batch {row.batch_size}: "
            f"prefill {row.prompt_time:.0f} ms is faster than the half-size batch (failed run)"
        )
    return configs[~failed].reset_index(drop=True), excluded


def _units(row: pd.Series) -> TermUnits:
    model = profiled_models()[str(row["model"])]
    card = profiled_cards()[str(row["hardware"])]
    return TermUnits.of(model, card, int(row["tensor_parallel"]))


def prefill_points(configs: pd.DataFrame) -> tuple[pd.DataFrame, Array]:
    """Prefill does not depend on output length: one point per (prompt, batch) per setup."""
    points = configs.groupby(CONFIG_KEY[:-1])["prompt_time"].median().reset_index()
    rows = []
    for _, row in points.iterrows():
        prompt, batch = float(row["prompt_size"]), int(row["batch_size"])
        rows.append(_units(row).prefill_row(batch * prompt, batch * prompt * prompt, batch))
    return points, np.asarray(rows, dtype=np.float64)


def decode_points(configs: pd.DataFrame) -> tuple[pd.DataFrame, Array]:
    """Mean context over a generation; tokens generated come from e2e - prefill time."""
    rows = []
    for _, row in configs.iterrows():
        generated = (row["e2e_time"] - row["prompt_time"]) / row["token_time"]
        generated = float(np.clip(generated, 1.0, row["token_size"]))
        batch = float(row["batch_size"])
        context = batch * (float(row["prompt_size"]) + generated / 2.0)
        rows.append(_units(row).decode_row(batch, context))
    return configs, np.asarray(rows, dtype=np.float64)


def fit_nonnegative(design: Array, measured_s: Array) -> Array:
    """Least squares on relative error; a term whose coefficient goes negative is dropped."""
    active = list(range(design.shape[1]))
    weights = 1.0 / measured_s
    while True:
        solution, *_ = np.linalg.lstsq(
            design[:, active] * weights[:, None], np.ones_like(measured_s), rcond=None
        )
        if solution.min() >= 0 or len(active) == 1:
            break
        active.pop(int(np.argmin(solution)))
    coefficients = np.zeros(design.shape[1])
    coefficients[active] = np.maximum(solution, 0.0)
    return coefficients


def relative_error(predicted: Array, measured: Array) -> PhaseError:
    err = np.abs(predicted / measured - 1.0)
    return PhaseError(
        points=len(err),
        median=round(float(np.median(err)), 4),
        p90=round(float(np.quantile(err, 0.9)), 4),
        max=round(float(err.max()), 4),
    )


def _rounded(values: Array) -> Array:
    return np.asarray([float(f"{v:.{SIGNIFICANT_DIGITS}g}") for v in values])


def _fit_phase(
    points: pd.DataFrame,
    design: Array,
    measured_ms: pd.Series,
) -> tuple[Array, PhaseError, dict[str, PhaseError]]:
    measured = measured_ms.to_numpy(dtype=np.float64) / 1000.0
    coefficients = _rounded(fit_nonnegative(design, measured))
    predicted = design @ coefficients
    groups = points["model"] + "/tp" + points["tensor_parallel"].astype(str)
    by_group = {
        str(g): relative_error(predicted[mask], measured[mask])
        for g in sorted(set(groups))
        for mask in [(groups == g).to_numpy()]
    }
    return coefficients, relative_error(predicted, measured), by_group


def refit(csv_path: str | Path) -> LatencyFit:
    """Fit every reference GPU in the CSV; the packaged file is this, serialised."""
    configs, excluded = measured_configurations(csv_path)
    references: dict[str, ReferenceFit] = {}
    for hardware, card_id in PROFILED_HARDWARE.items():
        subset = configs[configs["hardware"] == hardware].reset_index(drop=True)
        pre_points, pre_design = prefill_points(subset)
        dec_points, dec_design = decode_points(subset)
        pre, pre_err, pre_groups = _fit_phase(pre_points, pre_design, pre_points["prompt_time"])
        dec, dec_err, dec_groups = _fit_phase(dec_points, dec_design, dec_points["token_time"])
        references[card_id] = ReferenceFit(
            prefill=dict(zip(PREFILL_TERMS, map(float, pre), strict=True)),
            decode=dict(zip(DECODE_TERMS, map(float, dec), strict=True)),
            error={"prefill": pre_err, "decode": dec_err},
            error_by_group={
                g: {"prefill": pre_groups[g], "decode": dec_groups[g]} for g in sorted(pre_groups)
            },
        )
    digest = hashlib.sha256(Path(csv_path).read_bytes()).hexdigest()
    return LatencyFit(
        schema_id=FIT_SCHEMA,
        source=PERF_MODEL_RELPATH.as_posix(),
        source_sha256=digest,
        excluded=excluded,
        references=references,
    )


def fit_json(fit: LatencyFit) -> str:
    """Stable text form of a fit (what is committed)."""
    return json.dumps(fit.model_dump(by_alias=True), indent=2) + "\n"


def write_fit(fit: LatencyFit, path: str | Path) -> None:
    Path(path).write_text(fit_json(fit), encoding="utf-8")
