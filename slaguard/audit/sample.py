"""A deterministic synthetic audit run: decisions, outcomes, one incident, mode switches.

Used by the tests, `bench/audit.py` and the docs' examples, so every `slaguard audit`
subcommand can be exercised before a simulator run exists. Targets come from the
built-in fleet; one target (`SICK_TARGET`) slows down 6x during the incident, and the
guard moves the fleet from `rollout(50)` to `held_round_robin` and back.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sqlalchemy import Engine

from slaguard.audit.records import (
    DecisionRecord,
    IncidentRecord,
    ModeChangeRecord,
    OutcomeRecord,
    PolicyArm,
    PriorityName,
    WeightVersionRecord,
)
from slaguard.audit.store import open_incident, record_mode_change, record_weight_version
from slaguard.audit.writer import AuditWriter
from slaguard.fleet.fleet import Target, load_fleet
from slaguard.scheduler.config import COMPONENTS

SICK_TARGET = "l40s-8b-0"
_BASE_TTFT_S = {"h200": 0.25, "h100": 0.3, "a100": 0.5, "ascend910b": 0.6, "l40s": 0.8}
_DEADLINE_S: dict[PriorityName, float] = {"high": 1.5, "normal": 4.0, "low": 12.0}
_PRIORITIES: tuple[PriorityName, ...] = ("high", "normal", "low")
_WEIGHTS = {"compute": 0.3, "interconnect": 0.2, "memory": 0.25, "load": 0.15, "jitter": 0.1}
WEIGHTS_VERSION = "w-2026-11-29T13"
CONFIG_HASH = "cfg-5e1f0c2a"


@dataclass(frozen=True)
class SyntheticRun:
    """Everything one synthetic run writes; the incident has id 1 in a fresh database."""

    decisions: list[DecisionRecord]
    outcomes: list[OutcomeRecord]
    incident: IncidentRecord
    mode_changes: list[ModeChangeRecord]
    weight_version: WeightVersionRecord


def _mode_at(t: float, incident: tuple[float, float]) -> str:
    opened, resolved = incident
    return "held_round_robin" if opened + 60.0 <= t < resolved else "rollout(50)"


def synthetic_run(
    n_decisions: int = 2000,
    start_s: float = 1_796_000_000.0,
    duration_s: float = 3600.0,
    seed: int = 7,
) -> SyntheticRun:
    """`n_decisions` spread over `duration_s`; the incident covers the middle third."""
    rng = np.random.default_rng(seed)
    fleet = load_fleet()
    by_model: dict[str, list[Target]] = {}
    for target in fleet.targets:
        by_model.setdefault(target.model.id, []).append(target)
    models = sorted(by_model)
    opened, resolved = start_s + duration_s / 3, start_s + 2 * duration_s / 3
    times = np.sort(rng.uniform(start_s, start_s + duration_s, n_decisions))
    decisions: list[DecisionRecord] = []
    outcomes: list[OutcomeRecord] = []
    for i, t in enumerate(times.tolist()):
        targets = by_model[models[int(rng.integers(len(models)))]]
        priority = _PRIORITIES[int(rng.choice(3, p=[0.2, 0.6, 0.2]))]
        mode = _mode_at(t, (opened, resolved))
        arm: PolicyArm = (
            "learned" if mode != "held_round_robin" and rng.random() < 0.5 else ("round_robin")
        )
        prompt = int(rng.integers(64, 8192))
        rid = f"req-{i:08d}"
        if rng.random() < 0.01:
            decisions.append(_decision(rid, t, targets, None, prompt, priority, arm, mode))
            outcomes.append(OutcomeRecord(rid, t + 0.01, None, None, None, "rejected", False))
            continue
        tflops = np.array([x.tflops for x in targets])
        chosen = targets[int(rng.choice(len(targets), p=tflops / tflops.sum()))]
        decisions.append(_decision(rid, t, targets, chosen, prompt, priority, arm, mode))
        ttft = _BASE_TTFT_S.get(chosen.card.id, 1.0) * float(rng.lognormal(0.0, 0.3))
        ttft *= (prompt / 1000.0) ** 0.3
        if chosen.id == SICK_TARGET and opened <= t < resolved:
            ttft *= 6.0
        tpot = 0.02 * float(rng.lognormal(0.0, 0.2))
        e2e = ttft + 256 * tpot
        met = ttft <= _DEADLINE_S[priority]
        outcomes.append(OutcomeRecord(rid, t + e2e, ttft, tpot, e2e, "ok", met))
    evidence = {"target": SICK_TARGET, "ttft_p99_z": 4.8, "window_s": 300}
    incident = IncidentRecord(
        opened_at_s=opened, resolved_at_s=resolved, detector="ttft_zscore", severity="page",
        subject=f"TTFT p99 of {SICK_TARGET} jumped to 6x its 5-minute baseline",
        evidence=evidence, notification_state="resolved_sent",
        slack_channel="C0AUDIT", slack_ts="1796001200.000100",
    )  # fmt: skip
    changes = [
        ModeChangeRecord(start_s - 300.0, "round_robin", "rollout(50)",
                         "baseline collected; rollout stage 50 %", "guard", {}, None),
        ModeChangeRecord(opened + 60.0, "rollout(50)", "held_round_robin",
                         "ttft_zscore fired on " + SICK_TARGET, "guard", evidence, 1),
        ModeChangeRecord(resolved, "held_round_robin", "rollout(50)",
                         "incident resolved; resuming rollout", "guard", {}, 1),
    ]  # fmt: skip
    return SyntheticRun(
        decisions, outcomes, incident, changes,
        WeightVersionRecord(WEIGHTS_VERSION, start_s - 600.0, _WEIGHTS),
    )  # fmt: skip


def _decision(
    rid: str,
    t: float,
    targets: list[Target],
    chosen: Target | None,
    prompt: int,
    priority: PriorityName,
    arm: PolicyArm,
    mode: str,
) -> DecisionRecord:
    candidates = []
    shown = targets[:4] if chosen is None or chosen in targets[:4] else [chosen, *targets[:3]]
    for k, target in enumerate(shown):
        components = {c: round(0.1 + 0.8 * ((k * 7 + j * 3) % 10) / 10, 4)
                      for j, c in enumerate(COMPONENTS)}  # fmt: skip
        if target is chosen:
            components = {c: 0.95 for c in COMPONENTS}
        score = round(sum(_WEIGHTS[c] * v for c, v in components.items()), 4)
        candidates.append({
            "target": target.id, "card": target.card.id, "components": components,
            "score": score, "v_h_gb": 20.0 + k, "v_peak_gb": 41.5, "limit_gb": 73.6,
        })  # fmt: skip
    rejected = [{"target": x.id, "reason": "memory bound: v_h + v_peak > 0.92 x V_h"}
                for x in targets if x not in shown][:2]  # fmt: skip
    explanation = {
        "policy": arm, "weights": _WEIGHTS, "weights_version": WEIGHTS_VERSION,
        "candidates": candidates, "rejected": rejected, "prefiltered_out": 9,
        "chosen": None if chosen is None else chosen.id, "notes": [],
    }  # fmt: skip
    return DecisionRecord(
        request_id=rid, decided_at_s=t, model_id=targets[0].model.id, priority=priority,
        prompt_tokens=prompt, max_new_tokens=256, deadline_s=_DEADLINE_S[priority],
        policy_arm=arm, fleet_mode=mode,
        outcome="no_capacity" if chosen is None else "routed",
        target_id=None if chosen is None else chosen.id,
        card_type=None if chosen is None else chosen.card.id,
        explanation=explanation, weights_version=WEIGHTS_VERSION, config_hash=CONFIG_HASH,
        decision_latency_s=0.0008,
    )  # fmt: skip


def load_run(engine: Engine, run: SyntheticRun, spill_dir: Path, timeout_s: float = 60.0) -> int:
    """Store a run the way production does (store calls + the background writer);
    return the incident's id. The database must be migrated and fresh."""
    record_weight_version(engine, run.weight_version)
    incident_id = open_incident(engine, run.incident)
    for change in run.mode_changes:
        linked = change.incident_id is not None
        record_mode_change(
            engine,
            ModeChangeRecord(
                change.at_s, change.from_mode, change.to_mode, change.reason, change.actor,
                change.evidence, incident_id if linked else None,
            ),
        )  # fmt: skip
    with AuditWriter(engine, spill_dir) as writer:
        for decision in run.decisions:
            writer.enqueue(decision)
        for outcome in run.outcomes:
            writer.enqueue(outcome)
        if not writer.wait_flushed(timeout_s):
            raise TimeoutError(f"audit writer did not flush within {timeout_s}s")
    return incident_id
