"""Topology-aware router (reference scheduler, section 1) and the round-robin baseline.

Per request: an O(1) pre-filter by (model, priority); eligibility (memory upper bound at
0.92 x V_h, context window, health, stale telemetry, jitter demotion); then either the
round-robin rotation over eligible targets or the learned weighted sum of five components
(compute density, interconnect, memory headroom, load, jitter). The learned arm also keeps
prompts on their prefix-cache home, gates spillover, and degrades to a smaller model when
no target can meet the deadline. Everything is computed on small numpy arrays gathered in
one indexing operation, so a decision costs tens of microseconds.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from slaguard.fleet.fleet import Fleet
from slaguard.fleet.request import Priority, Request
from slaguard.scheduler.config import SchedulerConfig
from slaguard.scheduler.explain import Decision, Explanation, Outcome, Reason
from slaguard.scheduler.groups import CandidateGroup, build_groups
from slaguard.scheduler.kv import PrefixDirectory, decide_spill, kv_transfer_s
from slaguard.scheduler.rollout import Arm, ab_bucket
from slaguard.scheduler.state import (
    DEMOTED,
    HEALTHY,
    JITTER_Z,
    KV_USED,
    QUEUE,
    REFRESHED_AT,
    FleetState,
)
from slaguard.scheduler.weights import Weights

_MEMORY, _CONTEXT, _UNHEALTHY, _STALE, _DEMOTED = (
    int(Reason.MEMORY),
    int(Reason.CONTEXT),
    int(Reason.UNHEALTHY),
    int(Reason.STALE),
    int(Reason.DEMOTED),
)

DEMOTED_FALLBACK_NOTE = "every target that could take it is demoted: a demoted one took it"

TYPICAL_PROMPT_TOKENS = 1024
"""Prompt size assumed for each queued request in the TTFT estimate."""


class RoundRobin:
    """Unbiased baseline: rotate over each (model, priority) group's eligible targets."""

    def __init__(self) -> None:
        self._next: dict[tuple[str, Priority], int] = {}

    def choose(self, key: tuple[str, Priority], eligible: np.ndarray) -> int:
        """Position (within the group) of the first eligible target at or after the pointer."""
        ok = np.flatnonzero(eligible)
        start = self._next.get(key, 0) % len(eligible)
        k = int(np.searchsorted(ok, start))
        pos = int(ok[k]) if k < len(ok) else int(ok[0])
        self._next[key] = pos + 1
        return pos


class Router:
    """Routes requests over a fleet; holds no clock and performs no I/O."""

    def __init__(
        self,
        fleet: Fleet,
        state: FleetState,
        cfg: SchedulerConfig,
        weights: Weights,
        directory: PrefixDirectory | None = None,
    ) -> None:
        self.fleet = fleet
        self.state = state
        self.cfg = cfg
        self.weights = weights
        self.directory = directory if directory is not None else PrefixDirectory()
        self.groups = build_groups(fleet, cfg)
        self.round_robin = RoundRobin()

    @property
    def weights(self) -> Weights:
        return self._weights

    @weights.setter
    def weights(self, value: Weights) -> None:
        self._weights = value
        self._w = value.as_array()

    def route(self, request: Request, now_s: float, arm: Arm) -> Decision:
        """One decision: never raises for a request nothing can take (NO_CAPACITY)."""
        key = (request.model_id, request.priority)
        group = self.groups.get(key)
        if group is None:
            return self._route_unserved(request, now_s, arm, key)
        reasons, rows, v_peak, on_demoted = self._eligibility(group, request, now_s)
        eligible = reasons == 0
        if arm is Arm.ROUND_ROBIN:
            expl = self._explanation(group, arm, reasons, rows, v_peak, None, None)
            if on_demoted:
                expl.notes.append(DEMOTED_FALLBACK_NOTE)
            if not eligible.any():
                expl.notes.append("no eligible target")
                return Decision(
                    request, arm, Outcome.NO_CAPACITY, None, expl, served_model=request.model_id
                )
            pos = self.round_robin.choose(key, eligible)
            return self._decide(request, arm, Outcome.ROUTED, group, pos, expl, eligible)
        decision = self._route_learned(request, now_s, group, reasons, rows, v_peak)
        if on_demoted:
            decision.explanation.notes.append(DEMOTED_FALLBACK_NOTE)
        return decision

    def _route_learned(
        self,
        request: Request,
        now_s: float,
        group: CandidateGroup,
        reasons: np.ndarray,
        rows: np.ndarray,
        v_peak: float,
    ) -> Decision:
        arm = Arm.LEARNED
        eligible = reasons == 0
        comps, scores = self._score(group, request, rows, v_peak)
        scores = np.where(eligible, scores, -np.inf)
        expl = self._explanation(group, arm, reasons, rows, v_peak, comps, scores)
        est = self._ttft_estimate(group, request, rows)
        if self.cfg.degrade and (not eligible.any() or est[eligible].min() > request.deadline_s):
            degraded = self._try_degrade(request, now_s, est, eligible, expl)
            if degraded is not None:
                return degraded
        if not eligible.any():
            expl.notes.append("no eligible target")
            return Decision(
                request, arm, Outcome.NO_CAPACITY, None, expl, served_model=request.model_id
            )
        best = int(np.argmax(scores))
        home = self.directory.home(request.prefix_id)
        hpos = np.flatnonzero(group.indices == home) if home is not None else np.empty(0)
        if hpos.size:
            h = int(hpos[0])
            if eligible[h] and scores[h] >= scores[best] - self.cfg.router.affinity_margin:
                expl.notes.append("prefix home: reuses cached prefix blocks")
                return self._decide(request, arm, Outcome.ROUTED, group, h, expl, eligible)
            if reasons[h] == Reason.MEMORY and h != best:
                return self._spill(request, group, h, best, expl, eligible)
        return self._decide(request, arm, Outcome.ROUTED, group, best, expl, eligible)

    def _spill(
        self,
        request: Request,
        group: CandidateGroup,
        home: int,
        dest: int,
        expl: Explanation,
        eligible: np.ndarray,
    ) -> Decision:
        targets = self.fleet.targets
        src, dst = targets[int(group.indices[home])], targets[int(group.indices[dest])]
        reused = len(request.prefix_blocks) * 512 if request.prefix_blocks else 0
        transfer = kv_transfer_s(
            min(reused, request.prompt_tokens), group.kv_bytes_per_token, src, dst, self.cfg.spill
        )
        verdict = decide_spill(
            dest_free_ratio=self.state.free_kv_ratio(dst.index),
            priority=request.priority,
            probe=ab_bucket("spill:" + request.request_id),
            transfer_s=transfer,
            cfg=self.cfg.spill,
        )
        expl.spill = {
            "from": src.id,
            "to": dst.id,
            "allowed": verdict.allowed,
            "reason": verdict.reason,
            "transfer_s": round(transfer, 4),
        }
        if not verdict.allowed:
            expl.notes.append("prefix home saturated and spill not allowed: retry later")
            return Decision(
                request, Arm.LEARNED, Outcome.NO_CAPACITY, None, expl, served_model=request.model_id
            )
        expl.notes.append("spilled: loses prefix reuse, pays KV transfer")
        return self._decide(
            request, Arm.LEARNED, Outcome.SPILLED, group, dest, expl, eligible, transfer_s=transfer
        )

    def _try_degrade(
        self,
        request: Request,
        now_s: float,
        est: np.ndarray,
        eligible: np.ndarray,
        expl: Explanation,
    ) -> Decision | None:
        variant = self.fleet.models[request.model_id].degrade_to
        if variant is None or (variant, request.priority) not in self.groups:
            return None
        group = self.groups[(variant, request.priority)]
        reasons, rows, v_peak, _ = self._eligibility(group, request, now_s)
        ok = reasons == Reason.ELIGIBLE
        if not ok.any():
            return None
        dest_est = self._ttft_estimate(group, request, rows)
        current = float(est[eligible].min()) if eligible.any() else float("inf")
        if float(dest_est[ok].min()) >= current:
            return None
        comps, scores = self._score(group, request, rows, v_peak)
        scores = np.where(ok, scores, -np.inf)
        dexpl = self._explanation(group, Arm.LEARNED, reasons, rows, v_peak, comps, scores)
        dexpl.degraded_from = request.model_id
        dexpl.notes = [
            *expl.notes,
            f"no {request.model_id} target meets the {request.deadline_s}s deadline "
            f"(best estimate {current:.2f}s): degraded to {variant}",
        ]
        pos = int(np.argmax(scores))
        return self._decide(
            request, Arm.LEARNED, Outcome.DEGRADED, group, pos, dexpl, ok, served_model=variant
        )

    def _eligibility(
        self, group: CandidateGroup, request: Request, now_s: float
    ) -> tuple[np.ndarray, np.ndarray, float, bool]:
        """Per candidate its reason (0: eligible), the fleet-picture rows, v_peak, and
        whether only demoted targets are left eligible (they take the request then)."""
        rows = self.state.rows[group.indices]
        tokens = request.prompt_tokens + request.max_new_tokens
        v_peak = group.kv_bytes_per_token * tokens / 1e9
        reasons = np.zeros(len(group.indices), dtype=np.int8)
        reasons[rows[:, KV_USED] + v_peak > group.kv_budget_gb] = _MEMORY
        stale_after = self.cfg.router.stale_after_s
        if stale_after is not None:
            reasons[now_s - rows[:, REFRESHED_AT] > stale_after] = _STALE
        reasons[rows[:, HEALTHY] == 0] = _UNHEALTHY
        if tokens > group.min_context:
            reasons[tokens > group.context_window] = _CONTEXT
        if request.priority is not Priority.LOW:
            demoted = rows[:, DEMOTED] > 0
            if demoted.any():
                # a demoted target is the fallback, never removed: it keeps its place
                # while no other target of the group could take the request
                movable = demoted & (reasons != _UNHEALTHY) & (reasons != _CONTEXT)
                if ((reasons == 0) & ~demoted).any():
                    reasons[movable] = _DEMOTED
                elif (reasons[movable] == 0).any():
                    return reasons, rows, v_peak, True
        return reasons, rows, v_peak, False

    def _score(
        self, group: CandidateGroup, request: Request, rows: np.ndarray, v_peak: float
    ) -> tuple[np.ndarray, np.ndarray]:
        rc = self.cfg.router
        intensity = min(1.0, request.prompt_tokens / rc.long_prompt_tokens)
        comps = np.empty((len(group.indices), 5))
        comps[:, 0] = intensity * group.compute
        comps[:, 1] = intensity * group.interconnect
        headroom = 1.0 - (rows[:, KV_USED] + v_peak) / group.kv_budget_gb
        comps[:, 2] = np.minimum(np.maximum(headroom, 0.0), 1.0)
        comps[:, 3] = 1.0 / (1.0 + rows[:, QUEUE] / group.slots)
        # dead band: a Z below demote_z is noise and changes nothing; from there the term
        # falls to 0 at jitter_z_cap (only a persistent anomaly's Z gets that high)
        span = max(rc.jitter_z_cap - rc.demote_z, 1e-9)
        jitter = (rows[:, JITTER_Z] - rc.demote_z) / span
        comps[:, 4] = 1.0 - np.minimum(np.maximum(jitter, 0.0), 1.0)
        return comps, comps @ self._w

    @staticmethod
    def _ttft_estimate(group: CandidateGroup, request: Request, rows: np.ndarray) -> np.ndarray:
        queued = rows[:, QUEUE] * TYPICAL_PROMPT_TOKENS / np.maximum(group.slots / 4.0, 1.0)
        est: np.ndarray = (request.prompt_tokens + queued) * group.seconds_per_token
        return est

    def _explanation(
        self,
        group: CandidateGroup,
        arm: Arm,
        reasons: np.ndarray,
        rows: np.ndarray,
        v_peak: float,
        comps: np.ndarray | None,
        scores: np.ndarray | None,
    ) -> Explanation:
        return Explanation(
            fleet=self.fleet,
            arm=arm,
            candidates=group.indices,
            reasons=reasons,
            components=comps,
            scores=scores,
            v_peak_gb=v_peak,
            v_used_gb=group.static_gb + rows[:, KV_USED],
            limit_gb=group.limit_gb,
            weights=self.weights.values,
            weights_version=self.weights.version,
            prefiltered_out=group.prefiltered_out,
        )

    def _decide(
        self,
        request: Request,
        arm: Arm,
        outcome: Outcome,
        group: CandidateGroup,
        pos: int,
        expl: Explanation,
        eligible: np.ndarray,
        *,
        transfer_s: float = 0.0,
        served_model: str | None = None,
    ) -> Decision:
        index = int(group.indices[pos])
        expl.chosen = index
        if outcome is not Outcome.SPILLED:
            self.directory.record(request.prefix_id, index)
        return Decision(
            request,
            arm,
            outcome,
            self.fleet.targets[index],
            expl,
            served_model=served_model or group.model_id,
            transfer_s=transfer_s,
        )

    def _route_unserved(
        self, request: Request, now_s: float, arm: Arm, key: tuple[str, Priority]
    ) -> Decision:
        """A model no target serves at this priority but whose `degrade_to` one is: that
        model's targets take it, under either arm (the service admits such a model, and
        every request for it was no capacity, retried for ever)."""
        spec = self.fleet.models.get(request.model_id)
        variant = None if spec is None else spec.degrade_to
        if not self.cfg.degrade or variant is None or (variant, key[1]) not in self.groups:
            return self._no_candidates(request, arm, key)
        inner = self.route(replace(request, model_id=variant), now_s, arm)
        inner.explanation.degraded_from = request.model_id
        inner.explanation.notes.append(
            f"no target serves {key[0]} at priority {key[1].value}: degraded to {variant}"
        )
        if inner.target is None:
            return replace(inner, request=request, served_model=request.model_id)
        # the inner route may have degraded once more: its served model stands
        outcome = Outcome.DEGRADED if inner.outcome is Outcome.ROUTED else inner.outcome
        return replace(inner, request=request, outcome=outcome)

    def _no_candidates(self, request: Request, arm: Arm, key: tuple[str, Priority]) -> Decision:
        empty = np.empty(0, dtype=np.intp)
        expl = Explanation(
            fleet=self.fleet,
            arm=arm,
            candidates=empty,
            reasons=np.empty(0, dtype=np.int8),
            components=None,
            scores=None,
            v_peak_gb=0.0,
            v_used_gb=np.empty(0),
            limit_gb=np.empty(0),
            weights=self.weights.values,
            weights_version=self.weights.version,
            prefiltered_out=len(self.fleet),
        )
        if request.model_id not in self.fleet.models:
            expl.notes.append(f"unknown model {request.model_id!r}")
        else:
            expl.notes.append(f"no target serves {key[0]} at priority {key[1].value}")
        return Decision(
            request, arm, Outcome.NO_CAPACITY, None, expl, served_model=request.model_id
        )
