"""The faults `bench/guard_efficacy.py` injects: each a scenario entry with its delay goal,
the verdict subjects that name it and the targets a PromQL alert must name."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FaultCase:
    """A scenario entry (YAML flow mapping), its delay goal, the verdict subjects that name
    it (prefixes: a verdict about anything else is not a detection of this fault) and the
    targets a PromQL alert must name."""

    entry: str
    goal_s: float | None
    subjects: tuple[str, ...]
    promql_targets: str = ""
    """Substring of the target ids a PromQL alert must name to detect the fault."""
    demotes: bool = False
    """The guard's answer is a demotion (one target), not a trip."""


FAULTS = {
    "jitter": FaultCase(
        "{{kind: jitter, target: l40s, start_s: {start}, end_s: {end_long}, factor: 3.0}}",
        30.0,
        ("card:l40s", "fleet"),
        "l40s-",
    ),
    "jitter_one": FaultCase(
        "{{kind: jitter, target: l40s-8b-0, start_s: {start}, end_s: {end_long}, factor: 3.0}}",
        None,
        ("target:l40s-8b-0",),
        "l40s-8b-0",
        demotes=True,
    ),
    "hot_prompt": FaultCase(
        "{{kind: hot_prompt, start_s: {start}, end_s: {end_short}, share: 0.3, "
        "prompt_tokens: 6000}}",
        15.0,
        ("prefix:",),
    ),
    "new_model": FaultCase(
        "{{kind: new_model, model: llama3.1-70b, start_s: {start}, latency_factor: 1.8}}",
        60.0,
        ("model:llama3.1-70b",),
        "-70b",
    ),
    "new_model_same": FaultCase(
        "{{kind: new_model, model: llama3.1-70b, start_s: {start}, latency_factor: 1.0}}",
        None,
        ("model:llama3.1-70b",),
        "-70b",
    ),
}
"""`new_model_same` is a release exactly as fast as the old version: any trip naming it is
a false one (its `delay_s` says when)."""
