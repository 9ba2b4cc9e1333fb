"""Latency model: the committed fit reproduces the measurements and scales by spec sheets."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from slaguard.fleet import build_fleet, load_fleet
from slaguard.sim.latency import CROSS_NODE_GBPS, LatencyModel, TargetLatency
from slaguard.sim.latency_fit import (
    PROFILED_HARDWARE,
    fit_json,
    measured_configurations,
    profiled_cards,
    profiled_models,
    refit,
)
from slaguard.sim.paths import perf_model_path

FIXTURE = Path(__file__).parent / "fixtures" / "perf_model_excerpt.csv"

# The figures documented in docs/latency-model.md plus a small margin: the test fails if a
# change to the form, the data handling or the runtime arithmetic degrades the fit.
PREFILL_MEDIAN_MAX = 0.11
PREFILL_P90_MAX = 0.25
DECODE_MEDIAN_MAX = 0.035
DECODE_P90_MAX = 0.10


@pytest.fixture(scope="module")
def model() -> LatencyModel:
    return LatencyModel.load()


def _runtime_errors(model: LatencyModel, csv: Path, hardware: str) -> tuple[list[float], ...]:
    """Relative errors of the runtime functions (not the fit code) on measured rows."""
    configs, _ = measured_configurations(csv)
    cards, models = profiled_cards(), profiled_models()
    prefill: dict[tuple[str, int, int, int], list[float]] = {}
    decode: list[float] = []
    for row in configs[configs["hardware"] == hardware].itertuples():
        lat = model.build("t", models[row.model], cards[row.hardware], row.tensor_parallel)
        key = (row.model, row.tensor_parallel, row.prompt_size, row.batch_size)
        predicted = lat.prefill_s(row.prompt_size, row.batch_size) * 1000
        prefill.setdefault(key, []).append(predicted / row.prompt_time - 1)
        generated = min(max((row.e2e_time - row.prompt_time) / row.token_time, 1), row.token_size)
        context = row.batch_size * (row.prompt_size + generated / 2)
        step = lat.decode_step_s(row.batch_size, round(context)) * 1000
        decode.append(step / row.token_time - 1)
    # prefill does not depend on output length: one point per (prompt, batch) setup
    prefill_errors = [abs(float(np.median(v))) for v in prefill.values()]
    return prefill_errors, [abs(e) for e in decode]


@pytest.mark.parametrize("hardware", sorted(PROFILED_HARDWARE))
def test_runtime_model_reproduces_measured_rows_within_documented_error(
    model: LatencyModel, hardware: str
) -> None:
    prefill, decode = _runtime_errors(model, FIXTURE, hardware)
    assert len(prefill) == 51 and len(decode) == 75
    assert float(np.median(prefill)) <= PREFILL_MEDIAN_MAX
    assert float(np.quantile(prefill, 0.9)) <= PREFILL_P90_MAX
    assert float(np.median(decode)) <= DECODE_MEDIAN_MAX
    assert float(np.quantile(decode, 0.9)) <= DECODE_P90_MAX


def test_committed_fit_is_what_the_full_csv_refits_to(model: LatencyModel) -> None:
    csv = perf_model_path()
    if not csv.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{csv} is missing in CI (expected at ../shared/data)")
        pytest.skip(f"{csv} not present")
    fresh = refit(csv)
    assert fresh.source_sha256 == model.fit.source_sha256
    assert fit_json(fresh) == fit_json(model.fit), "run bench/latency_fit.py --write"
    for ref in fresh.references.values():
        assert ref.error["prefill"].median <= PREFILL_MEDIAN_MAX
        assert ref.error["decode"].median <= DECODE_MEDIAN_MAX


def test_fixture_refit_predicts_like_the_committed_fit(model: LatencyModel) -> None:
    """The excerpt (one row per configuration) must lead to practically the same model."""
    excerpt = LatencyModel(refit(FIXTURE))
    fleet = load_fleet()
    for target in fleet.targets:
        a, b = excerpt.for_target(target), model.for_target(target)
        for prompt in (128, 1024, 8192):
            assert a.prefill_s(prompt) == pytest.approx(b.prefill_s(prompt), rel=0.05)
        for batch in (1, 16, 64):
            ctx = batch * 1500
            assert a.decode_step_s(batch, ctx) == pytest.approx(
                b.decode_step_s(batch, ctx), rel=0.03
            )
    assert len(refit(FIXTURE).excluded) == 3


def _llama2(card: str) -> TargetLatency:
    fleet = build_fleet({"targets": [{"id": "x", "model": "llama2-70b", "card": card, "tp": 4}]})
    return LatencyModel.load().for_target(fleet.targets[0])


@pytest.mark.parametrize(
    ("card", "prefill_ms", "decode_ms"),
    [("a100", (127, 403, 2279), 44.5), ("h100", (59.7, 201, 954), 29.4)],
)
def test_data_readme_facts_llama2_70b_tp4(
    card: str, prefill_ms: tuple[float, ...], decode_ms: float
) -> None:
    lat = _llama2(card)
    for prompt, measured in zip((512, 2048, 8192), prefill_ms, strict=True):
        assert lat.prefill_s(prompt) * 1000 == pytest.approx(measured, rel=0.15)
    assert lat.decode_step_s(1, 512 + 64) * 1000 == pytest.approx(decode_ms, rel=0.06)


def _fleet_latency(*targets: dict[str, object]) -> tuple[TargetLatency, ...]:
    return LatencyModel.load().for_fleet(build_fleet({"targets": list(targets)}))


def test_scaling_compute_by_tflops_memory_by_bandwidth_size_by_params() -> None:
    a100, l40s, ascend, a100_70b = _fleet_latency(
        {"id": "a", "model": "llama3.1-8b", "card": "a100"},
        {"id": "l", "model": "llama3.1-8b", "card": "l40s"},
        {"id": "n", "model": "llama3.1-8b", "card": "ascend910b"},
        {"id": "b", "model": "llama3.1-70b", "card": "a100", "tp": 4},
    )
    # same reference (A100 efficiencies), single card: per-token prefill ~ 1 / TFLOPS
    assert l40s.prefill_per_token_s / a100.prefill_per_token_s == pytest.approx(312 / 362)
    assert ascend.prefill_per_token_s / a100.prefill_per_token_s == pytest.approx(312 / 313)
    # decode reads weights and KV at memory bandwidth
    assert l40s.decode_per_context_token_s / a100.decode_per_context_token_s == pytest.approx(
        2039 / 864
    )
    # 70B on 4 cards vs 8B on 1: compute scales with params / tp (plus the TP ring term)
    ratio = a100_70b.prefill_per_token_s / a100.prefill_per_token_s
    assert ratio > 70.6 / 8.03 / 4
    h100, h200 = _fleet_latency(
        {"id": "a", "model": "llama3.1-70b", "card": "h100", "tp": 2},
        {"id": "b", "model": "llama3.1-70b", "card": "h200", "tp": 2},
    )
    assert h200.prefill_s(4096) == pytest.approx(h100.prefill_s(4096))  # same TFLOPS
    assert h200.decode_step_s(8, 8000) < h100.decode_step_s(8, 8000)  # more bandwidth


def test_default_fleet_orders_targets_like_their_hardware(model: LatencyModel) -> None:
    lat = {t.id: model.for_target(t) for t in load_fleet().targets}
    assert all(
        0 < x.prefill_s(1000) < 1.0 and 0 < x.decode_step_s(1, 1000) < 0.1 for x in lat.values()
    )
    assert lat["h100-70b-0"].prefill_s(4000) < lat["a100-70b"].prefill_s(4000)
    slowest_8b = max(
        (k for k in lat if k.endswith("8b") or "-8b-" in k),
        key=lambda k: lat[k].decode_step_s(1, 1000),
    )
    assert slowest_8b == "mlu-8b"


def test_prefix_reuse_batching_and_monotonicity() -> None:
    (lat,) = _fleet_latency({"id": "a", "model": "llama3.1-8b", "card": "h100"})
    full = lat.prefill_s(4096)
    half = lat.prefill_s(4096, reused_tokens=2048)
    cached = lat.prefill_s(4096, reused_tokens=4096)
    assert cached < half < full
    assert cached == pytest.approx(lat.prefill_s(1), rel=0.05)
    assert lat.prefill_many_s([(1000, 0)] * 4) == pytest.approx(lat.prefill_s(1000, 4))
    assert lat.prefill_many_s([(1000, 200), (3000, 0)]) < lat.prefill_many_s([(1000, 0), (3000, 0)])
    steps = [lat.decode_step_s(b, b * 2000) for b in (1, 8, 32, 128)]
    assert steps == sorted(steps)
    assert lat.decode_step_s(8, 64_000) > lat.decode_step_s(8, 8_000)
    assert all(type(x) is float for x in (full, steps[0], lat.prefill_many_s([(10, 0)])))


def test_jitter_factor_multiplies_prefill_and_decode() -> None:
    (lat,) = _fleet_latency({"id": "a", "model": "llama3.1-8b", "card": "a100"})
    slow = lat.with_factor(3.0)
    assert slow.prefill_s(2000) == pytest.approx(3 * lat.prefill_s(2000))
    assert slow.decode_step_s(4, 4000) == pytest.approx(3 * lat.decode_step_s(4, 4000))
    assert lat.factor == 1.0


def test_kv_transfer_uses_the_slower_link() -> None:
    h100_a, h100_b, l40s, other_model = _fleet_latency(
        {"id": "a", "model": "llama3.1-8b", "card": "h100"},
        {"id": "b", "model": "llama3.1-8b", "card": "h100"},
        {"id": "c", "model": "llama3.1-8b", "card": "l40s"},
        {"id": "d", "model": "llama3.1-70b", "card": "h100", "tp": 2},
    )
    kv = h100_a.kv_bytes_per_token
    assert kv == 2 * 32 * 8 * 128 * 2
    assert h100_a.kv_transfer_s(10_000, h100_b) == pytest.approx(10_000 * kv / 900e9)
    assert h100_a.kv_transfer_s(10_000, l40s) == pytest.approx(10_000 * kv / 64e9)
    assert CROSS_NODE_GBPS == 64.0
    assert h100_a.kv_transfer_s(10_000, h100_a) == 0.0
    with pytest.raises(ValueError, match="cannot move KV"):
        h100_a.kv_transfer_s(10, other_model)
