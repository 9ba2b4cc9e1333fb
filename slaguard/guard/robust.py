"""Robust scores: median and MAD (scaled by 1.4826 to match a normal sigma).

For positive, multiplicative quantities (latency quantiles, ratios) score their logs with
`floor_rel=0` and `floor_abs=log_floor(rel)`: a MAD floor of `rel` relative to the median
in linear terms is the absolute floor ln(1 + rel) in log terms.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

MAD_TO_SIGMA = 1.4826
"""MAD x 1.4826 estimates the standard deviation of normal data."""


@dataclass(frozen=True, slots=True)
class RobustCenter:
    """Median, raw MAD and the scale actually used (MAD floored)."""

    median: float
    mad: float
    scale: float


def robust_center(
    values: np.typing.ArrayLike, floor_rel: float, floor_abs: float = 1e-9
) -> RobustCenter:
    """Median and floored scale of `values`.

    The scale is `1.4826 x max(MAD, floor_rel x |median|, floor_abs)`: identical values
    (MAD = 0) never divide by zero, and differences smaller than the floor never count as
    anomalies.
    """
    arr = np.asarray(values, dtype=float)
    if arr.size == 0 or not np.all(np.isfinite(arr)):
        raise ValueError("robust_center needs a non-empty array of finite values")
    median = float(np.median(arr))
    mad = float(np.median(np.abs(arr - median)))
    scale = MAD_TO_SIGMA * max(mad, floor_rel * abs(median), floor_abs)
    return RobustCenter(median=median, mad=mad, scale=scale)


def robust_zscores(
    values: Mapping[str, float],
    floor_rel: float,
    floor_abs: float = 1e-9,
    noise: Mapping[str, float] | None = None,
) -> tuple[dict[str, float], RobustCenter]:
    """Robust Z-score of every value against the group (the value itself included).

    `noise` is a per-key standard error of the value itself (an estimate read from few
    samples), added in quadrature to the group's scale: a noisy read needs a larger
    departure before it counts.
    """
    keys = list(values)
    center = robust_center([values[k] for k in keys], floor_rel, floor_abs)
    se = noise or {}
    return {
        k: (values[k] - center.median) / math.hypot(center.scale, se.get(k, 0.0)) for k in keys
    }, center


def log_floor(floor_rel: float) -> float:
    """The log-space MAD floor equivalent to a floor of `floor_rel` relative to the median."""
    return math.log1p(floor_rel)


IQR_PER_SIGMA = 1.349
"""A normal distribution's interquartile range in standard deviations."""


def sigma_from_iqr(iqr: float) -> float:
    """A robust standard deviation from an interquartile range (normal-consistent)."""
    return iqr / IQR_PER_SIGMA
