"""The hardware picture the router reads: one row per target, refreshed every 100 ms.

Columns live in one numpy array so the router gathers a candidate set in one indexing
operation. `kv_used_gb` is the KV of admitted requests; the static reservation (weights +
activation buffers) is known from the fleet, so the card's memory in use is
`static_gb + kv_used_gb`. (The spec's memory rule `v_h + v_peak > 0.92 x V_h` counts the
static reservation in `v_peak`, its `v_h` being the KV in use; explanations show them so.)
Telemetry that reports total memory is converted on entry.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from slaguard.fleet.fleet import Fleet

KV_USED, QUEUE, JITTER_Z, HEALTHY, DEMOTED, REFRESHED_AT = range(6)
N_COLUMNS = 6


@dataclass(frozen=True, slots=True)
class TargetPicture:
    """One target's row, as plain values (for explanations, telemetry and tests)."""

    kv_used_gb: float
    queue_depth: float
    jitter_z: float
    healthy: bool
    demoted: bool
    refreshed_at_s: float


class FleetState:
    """Mutable per-target picture; written by adapters, read by the router."""

    def __init__(self, fleet: Fleet, now_s: float = 0.0) -> None:
        self.fleet = fleet
        self.rows = np.zeros((len(fleet), N_COLUMNS), dtype=np.float64)
        self.rows[:, HEALTHY] = 1.0
        self.rows[:, REFRESHED_AT] = now_s
        self.static_gb = np.array([t.static_gb for t in fleet], dtype=np.float64)
        self.kv_budget_gb = np.array([t.kv_budget_gb for t in fleet], dtype=np.float64)
        self.version = 0
        """Bumped when demotions change, so the router can rebuild its pre-filter table."""

    def picture(self, index: int) -> TargetPicture:
        r = self.rows[index]
        return TargetPicture(
            float(r[KV_USED]),
            float(r[QUEUE]),
            float(r[JITTER_Z]),
            bool(r[HEALTHY]),
            bool(r[DEMOTED]),
            float(r[REFRESHED_AT]),
        )

    def refresh(
        self,
        index: int,
        now_s: float,
        *,
        kv_used_gb: float | None = None,
        queue_depth: float | None = None,
        memory_used_gb: float | None = None,
    ) -> None:
        """Record one hardware refresh; `memory_used_gb` is total use (static + KV)."""
        row = self.rows[index]
        if memory_used_gb is not None:
            kv_used_gb = max(0.0, memory_used_gb - float(self.static_gb[index]))
        if kv_used_gb is not None:
            row[KV_USED] = max(0.0, kv_used_gb)
        if queue_depth is not None:
            row[QUEUE] = max(0.0, queue_depth)
        row[REFRESHED_AT] = now_s

    def refresh_all(
        self, now_s: float, kv_used_gb: np.ndarray, queue_depth: np.ndarray, reporting: np.ndarray
    ) -> None:
        """One refresh of every reporting target at once (rows where `reporting` is True)."""
        rows = self.rows
        rows[reporting, KV_USED] = np.maximum(kv_used_gb[reporting], 0.0)
        rows[reporting, QUEUE] = np.maximum(queue_depth[reporting], 0.0)
        rows[reporting, REFRESHED_AT] = now_s

    def add_kv(self, index: int, delta_gb: float) -> None:
        """Reserve (or release, when negative) KV for an admitted request."""
        self.rows[index, KV_USED] = max(0.0, self.rows[index, KV_USED] + delta_gb)

    def add_queue(self, index: int, delta: float) -> None:
        self.rows[index, QUEUE] = max(0.0, self.rows[index, QUEUE] + delta)

    def set_jitter(self, z_by_target: dict[int, float]) -> None:
        """Jitter Z-scores from the TTFT detector; NaN (no data) counts as 0, not as bad."""
        for index, z in z_by_target.items():
            self.rows[index, JITTER_Z] = 0.0 if np.isnan(z) else z

    def set_demoted(self, index: int, demoted: bool) -> None:
        if bool(self.rows[index, DEMOTED]) != demoted:
            self.rows[index, DEMOTED] = float(demoted)
            self.version += 1

    def set_healthy(self, index: int, healthy: bool) -> None:
        self.rows[index, HEALTHY] = float(healthy)

    def free_kv_ratio(self, index: int) -> float:
        budget = float(self.kv_budget_gb[index])
        return max(0.0, 1.0 - float(self.rows[index, KV_USED]) / budget)
