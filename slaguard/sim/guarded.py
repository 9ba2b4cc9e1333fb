"""`--policy guarded`: the real `Guard` drives the simulated fleet on simulated time.

The controller is the adapter the service also has (`service/modes.py`): first tokens
become `FirstToken`s (the TTFT detectors' input, as the service's gateway feeds them),
finished requests `GuardSample`s, `Guard.evaluate` runs every `evaluation_interval_s` of
simulated time, the TTFT Z-scores and demotions go to the scheduler state (the router's
jitter term), and the guard's mode is the fleet mode. Evaluations run inside the 500 ms
correction tick and the mode they return is the one the next period routes with, so a
trip acts within one correction period of its verdict. Nothing here changes the guard.

The engine resolves a prefill or decode run ahead of its tick (an event may carry a
time past the current period), so first tokens and finished requests wait in a heap and
reach the guard only once simulated time has passed their time: the guard never hears
of a first token or a finish before it happened.

New model versions come from the scenario's `new_model` faults: requests for that model
arriving (trace seconds) at or after the fault's `start_s` are version `v2`, deployed at
the fault's start on the simulated clock; earlier ones are the established version.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from slaguard.fleet import Fleet
from slaguard.guard.events import (
    BreakerEvent,
    GuardEvent,
    IncidentEvent,
    IncidentState,
    ModeChangedEvent,
    VerdictEvent,
)
from slaguard.guard.guard import Guard
from slaguard.guard.router_inputs import RouterInputs
from slaguard.guard.samples import FirstToken, GuardSample
from slaguard.guard.verdicts import Action, JsonDict
from slaguard.scheduler.explain import Decision
from slaguard.scheduler.rollout import FleetMode
from slaguard.sim.faults import FaultSchedule, NewModelFault
from slaguard.sim.observers import SimObserver
from slaguard.sim.results import OutcomeInfo

if TYPE_CHECKING:
    from slaguard.sim.engine import Simulation

NEW_VERSION = "v2"
"""The version label of a model released by a `new_model` fault."""


@dataclass(frozen=True, slots=True)
class ModelRelease:
    """A model version going live: requests from `from_trace_s` on are `version`."""

    model_id: str
    version: str
    from_trace_s: float
    deployed_at_s: float
    """Simulated seconds (the guard's clock)."""


def releases_from(schedule: FaultSchedule, rate_scale: float = 1.0) -> tuple[ModelRelease, ...]:
    """One release per `new_model` fault; trace seconds map to simulated ones by the rate."""
    return tuple(
        ModelRelease(f.model, NEW_VERSION, f.start_s, f.start_s / rate_scale)
        for f in schedule.faults
        if isinstance(f, NewModelFault)
    )


class GuardController(SimObserver):
    """Feeds the guard, applies its router inputs and takes its fleet mode every period.

    After a run, `trips` holds one record per breaker trip (the report's `guard.trips`,
    each with the incident it opened), `incident_updates` the updates an open incident
    took from verdicts that were no trip of their own (the breaker already open: the
    report's `guard.incident_updates`), `trip_verdicts` when each tripping verdict was
    raised and ended, `demotions` the per-target demote/restore verdicts, `queued` the
    inputs queued (first tokens and finished requests),
    `observed` those handed to the guard so far, and `evaluations` the number of runs.
    With `act=False` the guard runs in shadow: as one of the engine's observers it judges
    the fleet but never touches the router (its mode answer is ignored), to measure it on
    an unguarded run.
    """

    def __init__(
        self,
        guard: Guard,
        fleet: Fleet,
        releases: Sequence[ModelRelease] = (),
        *,
        act: bool = True,
    ) -> None:
        self.guard = guard
        self.fleet = fleet
        self.releases = {r.model_id: r for r in releases}
        self.act = act
        self.interval_s = guard.config.evaluation_interval_s
        self.evaluations = 0
        self.queued = 0
        self.observed = 0
        self.trips: list[JsonDict] = []
        self.incident_updates: list[JsonDict] = []
        self.trip_verdicts: list[JsonDict] = []
        self.demotions: list[JsonDict] = []
        self._index = {t.id: t.index for t in fleet}
        self._waiting: list[tuple[float, int, GuardSample | FirstToken]] = []
        self._next_evaluation_s = self.interval_s

    def initial_mode(self) -> FleetMode:
        return self.guard.state.mode

    def on_decision(self, decision: Decision, now_s: float, latency_s: float) -> None:
        """An arriving request (routed, or finally rejected): the hot-spot detector's input,
        and the work handed to the chosen target's card tier (the tier test's load excuse)."""
        request, target = decision.request, decision.target
        handed = (
            None if target is None else (target.card.id, target.model.id, request.prompt_tokens)
        )
        self.guard.observe_arrival(now_s, request.prefix_id, handed)

    def on_first_token(self, decision: Decision, now_s: float, ttft_s: float) -> None:
        """A first token on a target: the TTFT detectors' sample."""
        target = decision.target
        if target is None:
            return
        first = FirstToken(
            now_s, target.id, target.card.id, target.model.id, ttft_s,
            decision.request.prompt_tokens,
        )  # fmt: skip
        self.queued += 1
        heapq.heappush(self._waiting, (now_s, self.queued, first))

    def on_outcome(self, decision: Decision, now_s: float, outcome: OutcomeInfo) -> None:
        """A finished request that reached a target is one guard sample."""
        target = decision.target
        if target is None:
            return
        request = decision.request
        version, deployed_at = "", None
        release = self.releases.get(target.model.id)
        if release is not None and request.arrival_s >= release.from_trace_s:
            version, deployed_at = release.version, release.deployed_at_s
        sample = GuardSample(
            at_s=now_s,
            target_id=target.id,
            card_type=target.card.id,
            model_id=target.model.id,
            sla_met=outcome.sla_met,
            deadline_s=request.deadline_s,
            ttft_s=outcome.ttft_s,
            arm=decision.arm,
            model_version=version,
            model_deployed_at_s=deployed_at,
            prefix_id=request.prefix_id,
            prompt_tokens=request.prompt_tokens,
            ttft_observed=outcome.ttft_s is not None,
        )
        self.queued += 1
        heapq.heappush(self._waiting, (now_s, self.queued, sample))

    def on_period(self, now_s: float, sim: Simulation) -> tuple[FleetMode, str]:
        """Evaluate when an evaluation is due; the guard's mode routes the next period."""
        reason = ""
        waiting = self._waiting
        while waiting and waiting[0][0] <= now_s:
            self.guard.observe(heapq.heappop(waiting)[2])
            self.observed += 1
        if now_s + 1e-9 >= self._next_evaluation_s:
            self.evaluations += 1
            self._next_evaluation_s = (math.floor(now_s / self.interval_s + 1e-9) + 1) * (
                self.interval_s
            )
            events = self.guard.evaluate(now_s)
            if self.act:
                self._apply_router_inputs(sim)
            reason = self._record(now_s, events)
        return self.guard.state.mode, reason

    def _apply_router_inputs(self, sim: Simulation) -> None:
        """The guard's Z-scores and demotions into the simulated router (as the service's
        leader does)."""
        inputs = RouterInputs(self.guard.jitter_zscores(), frozenset(self.guard.demoted_targets()))
        inputs.apply(sim.scheduler.state, self._index)

    def _record(self, now_s: float, events: list[GuardEvent]) -> str:
        """Keep trips (with their incidents), the open incident's other updates and
        demotions; the reason of the last mode change."""
        reason = ""
        tripped = any(isinstance(e, BreakerEvent) and e.signal == "trip" for e in events)
        incidents = [e for e in events if isinstance(e, IncidentEvent)]
        for update in incidents[1:] if tripped else incidents:  # a trip's own comes first
            if update.state is IncidentState.UPDATED:
                self.incident_updates.append(
                    {"at_s": now_s, "incident_id": update.incident_id, "state": "updated",
                     "detector": update.detector, "subject": update.subject,
                     "summary": update.summary}
                )  # fmt: skip
        for event in events:
            if isinstance(event, BreakerEvent) and event.signal == "trip":
                self.trips.append(self._trip_record(now_s, event, events))
            elif isinstance(event, VerdictEvent):
                v = event.verdict
                if v.action is Action.TRIP:
                    phase = event.phase.value
                    self.trip_verdicts.append(
                        {
                            "at_s": now_s,
                            "phase": phase,
                            "detector": v.detector,
                            "subject": v.subject,
                        }
                    )
                else:
                    z = v.evidence.get("z")
                    self.demotions.append(
                        {"at_s": now_s, "action": v.action.value, "subject": v.subject, "z": z}
                    )
            elif isinstance(event, ModeChangedEvent):
                tr = event.transition
                reason = f"{tr.kind.value}: {event.message}"
                if tr.reason not in event.message:
                    reason += f" ({tr.reason})"
        return reason

    def _trip_record(self, now_s: float, trip: BreakerEvent, events: list[GuardEvent]) -> JsonDict:
        """`{detector, at_s, subject, evidence}` of the first tripping verdict, plus context."""
        verdicts: list[dict[str, Any]] = trip.evidence.get("verdicts", [])
        first = verdicts[0] if verdicts else {}
        switch = next((e.transition for e in events if isinstance(e, ModeChangedEvent)), None)
        incident = next((e for e in events if isinstance(e, IncidentEvent)), None)
        return {
            "detector": first.get("detector", "unknown"),
            "at_s": now_s,
            "subject": first.get("subject", ""),
            "summary": first.get("summary", trip.reason),
            "evidence": first.get("evidence", {}),
            "trip_after": trip.evidence.get("trip_after"),
            "mode_before": switch.from_mode if switch else self.guard.state.mode.label,
            "mode_after": self.guard.state.mode.label,
            "switched": switch is not None,
            "incident_id": incident.incident_id if incident else None,
            "other_verdicts": [
                {k: v[k] for k in ("detector", "subject", "summary")} for v in verdicts[1:]
            ],
        }
