"""The `Guard` facade: samples in, `evaluate(now_s)` out, the same code on any clock.

Driver contract (the simulator on simulated time, the service on wall time):
* call `observe(sample)` for every finished request (cheap, no I/O); where first tokens
  are seen as they arrive, `observe(FirstToken(...))` for each, the finished request's
  sample then marked `ttft_observed` (the TTFT detectors see a slowdown when answers start
  late instead of when they end); where requests are seen arriving,
  `observe_arrival(at_s, prefix_id)` for each (the hot-spot detector then counts arrivals
  instead of completions);
* call `evaluate(now_s)` every `evaluation_interval_s` (1 s); it returns the events of that
  evaluation. A `ModeChangedEvent` must be published (store compare-and-set on
  `state.version`, then the router's mode) before the next 500 ms correction tick, so a
  trip acts within one correction period of the verdict that caused it;
* store `IncidentEvent`s in the database outbox (`IncidentStore`), which the leader's
  `GuardReplica.deliver` sends from the notify job (never from the decision path);
* manual actions go through `rollback` / `resume`; a state changed elsewhere (another
  replica, the CLI) is taken with `adopt_state`.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from slaguard.guard import modes, rollout_compare
from slaguard.guard.breaker import BreakerSignal, BreakerState, Evaluation, step_breaker
from slaguard.guard.cold_start import ColdStartDetector
from slaguard.guard.config import GuardConfig
from slaguard.guard.events import (
    BreakerEvent,
    GuardEvent,
    IncidentEvent,
    ModeChangedEvent,
    VerdictEvent,
    VerdictPhase,
)
from slaguard.guard.hot_spot import HotSpotDetector
from slaguard.guard.incidents import IncidentTracker, OpenIncident
from slaguard.guard.modes import ModeState, TransitionResult
from slaguard.guard.rollout_compare import RolloutCompareDetector
from slaguard.guard.samples import FirstToken, GuardSample, Handed
from slaguard.guard.ttft_zscore import TtftZscoreDetector
from slaguard.guard.verdicts import Action, DetectorReport, Status, Verdict
from slaguard.scheduler.rollout import ModeKind, RolloutPlan

_LEARNED_FAMILY = (ModeKind.ROLLOUT, ModeKind.LEARNED)


class Detector(Protocol):
    """What the guard needs from a detector."""

    name: str

    def observe(self, sample: GuardSample) -> None: ...

    def evaluate(self, now_s: float) -> DetectorReport: ...


def _judged_now(report: DetectorReport | None) -> str:
    """What is true now of a trip verdict that ended: its old summary alone read as still
    firing when a detector flapped near its threshold."""
    if report is None:
        return "no longer trips"
    if report.evidence.get("gray_stage") is False:
        return "not judged outside a gray rollout stage"
    if report.status is Status.INSUFFICIENT:
        return "too little data to judge now"
    if report.status is Status.ANOMALOUS:
        return "no longer trips on this subject"
    if report.score is None or report.threshold is None:
        return "normal now"
    return f"normal now (score {report.score:.3g}, threshold {report.threshold:.3g})"


@dataclass(slots=True)
class Checkpoint:
    """What a command changes in a guard, kept to go back to if its switch is refused.
    The detectors its switch resets are copied as they were, only when it resets them
    (`Guard._take`): undoing a rollback from rollout(50) changed the learned share again,
    and a second reset lost what the TTFT detector had learned."""

    state: ModeState
    breaker: BreakerState
    incident: OpenIncident | None
    ttft: TtftZscoreDetector | None = None
    compare: RolloutCompareDetector | None = None


class Guard:
    """Detectors + breaker + mode state machine + incidents, driven by `now_s`."""

    def __init__(
        self,
        config: GuardConfig | None = None,
        plan: RolloutPlan | None = None,
        state: ModeState | None = None,
        incident_prefix: str = "inc",
    ) -> None:
        self.config = config or GuardConfig()
        self.plan = plan or RolloutPlan()
        self.state = state or ModeState()
        self.breaker = BreakerState()
        self.ttft = TtftZscoreDetector(self.config.ttft_zscore)
        self.cold_start = ColdStartDetector(self.config.cold_start)
        self.hot_spot = HotSpotDetector(self.config.hot_spot)
        self.compare = RolloutCompareDetector(self.config.rollout_compare)
        self.incidents = IncidentTracker(incident_prefix, self.plan.first_stage().stage_pct)
        self._active: dict[tuple[str, str], Verdict] = {}
        self.last_reports: tuple[DetectorReport, ...] = ()

    @property
    def detectors(self) -> tuple[Detector, ...]:
        return (self.ttft, self.hot_spot, self.cold_start, self.compare)

    def observe(self, sample: GuardSample | FirstToken) -> None:
        """Feed one finished request to every detector, or a first token to the TTFT one."""
        if isinstance(sample, FirstToken):
            self.ttft.observe_first_token(sample)
            return
        for detector in self.detectors:
            detector.observe(sample)

    def observe_arrival(
        self,
        at_s: float,
        prefix_id: str | None,
        handed: Handed | None = None,
    ) -> None:
        """One request arriving (routed), for the hot-spot detector: a flood is counted as it
        arrives, not as it finishes (then finished requests no longer count there).
        `handed`: the chosen target's (card type, model) and the request's prompt tokens
        (None when no target took it or the prompt length is unknown), the work handed to
        that card tier for the TTFT tier test's load excuse."""
        self.hot_spot.observe_arrival(at_s, prefix_id)
        if handed is not None:
            self.ttft.observe_handed(at_s, *handed)

    def restart_handed_work(self) -> None:
        """The handed work counted from now on covers more of the fleet than before (every
        replica sends it again): its baselines start afresh, so no tier reads as handed
        more than usual for that alone."""
        self.ttft.restart_handed()

    def jitter_zscores(self) -> dict[str, float]:
        """Per-target TTFT Z-scores for the router's jitter term (thin targets absent)."""
        return self.ttft.zscores()

    def inherit_demotions(self, targets: Iterable[str]) -> None:
        """Take over a previous leader's demotions (see `TtftZscoreDetector`)."""
        self.ttft.inherit_demotions(targets)

    def demoted_targets(self) -> set[str]:
        """Targets the router should demote to low-priority / fallback traffic."""
        return self.ttft.demoted()

    def evaluate(self, now_s: float) -> list[GuardEvent]:
        """Run every detector once, step the breaker, move the mode; return the events."""
        reports = tuple(self._in_stage(d.evaluate(now_s)) for d in self.detectors)
        self.last_reports = reports
        trips = [v for r in reports for v in r.trips]
        events: list[GuardEvent] = list(self._verdict_events(now_s, reports, trips))
        if trips:
            evaluation = Evaluation.BAD
        elif any(r.status is Status.OK for r in reports):
            evaluation = Evaluation.GOOD
        else:
            evaluation = Evaluation.NEUTRAL
        step = step_breaker(self.breaker, evaluation, now_s, self.config.breaker)
        self.breaker = step.state
        if step.signal is BreakerSignal.TRIP:
            events += self._on_trip(now_s, trips)
        elif step.signal is BreakerSignal.CLEAR:
            events += self._on_clear(now_s)
        elif trips and (joined := self.incidents.joined(now_s, trips, self.state.mode.label)):
            events.append(joined)
        if step.state.consecutive_bad == 0 and self.breaker.opened_at_s is None:
            events += self._apply(modes.advance(self.state, now_s, self.plan), now_s)
        return events

    def _in_stage(self, report: DetectorReport) -> DetectorReport:
        """The rollout comparison judges only during a gray stage: outside one its window
        holds the requests of a stage that has ended (after a trip, the learned arm's last
        ones against round-robin's next ones), not two arms running side by side. Resetting
        its counts at a mode change would not do: requests routed before the change finish
        after it (in the simulator, 110-150 learned-arm samples after a trip at 20 req/s),
        and a new gray stage would lose the previous stage's comparable requests. Only a
        stage entered from round-robin starts afresh (`_take`)."""
        if report.detector != rollout_compare.NAME or self.state.mode.kind is ModeKind.ROLLOUT:
            return report
        evidence = report.evidence | {"gray_stage": False}
        return DetectorReport(
            report.detector, Status.INSUFFICIENT, evidence=evidence, threshold=report.threshold
        )

    def _verdict_events(
        self, now_s: float, reports: tuple[DetectorReport, ...], trips: list[Verdict]
    ) -> list[VerdictEvent]:
        events = [
            VerdictEvent(v, VerdictPhase.ONCE)
            for r in reports
            for v in r.verdicts
            if v.action is not Action.TRIP
        ]
        current = {(v.detector, v.subject): v for v in trips}
        events += [
            VerdictEvent(v, VerdictPhase.RAISED)
            for k, v in current.items()
            if k not in self._active
        ]
        by_detector = {r.detector: r for r in reports}
        for key, old in self._active.items():
            if key not in current:
                now_line = _judged_now(by_detector.get(old.detector))
                ended = Verdict(
                    old.detector,
                    old.action,
                    old.subject,
                    old.severity,
                    f"ended: {now_line}; was: {old.summary}",
                    now_s,
                    old.evidence,
                )
                events.append(VerdictEvent(ended, VerdictPhase.ENDED))
        self._active = current
        return events

    def _on_trip(self, now_s: float, trips: list[Verdict]) -> list[GuardEvent]:
        k = self.config.breaker.trip_after
        reason = f"{trips[0].detector}: {trips[0].summary}"
        evidence = {"verdicts": [v.to_dict() for v in trips], "trip_after": k}
        events: list[GuardEvent] = [BreakerEvent("trip", now_s, reason, evidence)]
        before = self.state.mode.label
        result = modes.trip(self.state, now_s, reason=reason, evidence=evidence)
        events += self._apply(result, now_s, open_incident=False)
        events.append(self.incidents.tripped(now_s, trips, before, self.state.mode.label))
        return events

    def _on_clear(self, now_s: float) -> list[GuardEvent]:
        c = self.config.breaker
        reason = f"{c.clear_after} good evaluations and {c.cooldown_s:.0f}s since the trip"
        events: list[GuardEvent] = [BreakerEvent("clear", now_s, reason)]
        result = modes.auto_return(self.state, now_s, self.plan, c, reason=reason)
        events += self._apply(result, now_s)
        if not result.changed and self.state.mode.kind not in _LEARNED_FAMILY:
            cleared = self.incidents.cleared(now_s, self.state.mode.label, result.message)
            if cleared is not None:
                events.append(cleared)
        return events

    def _apply(
        self,
        result: TransitionResult,
        now_s: float,
        open_incident: bool = True,
        keep: Checkpoint | None = None,
    ) -> list[GuardEvent]:
        """Take a transition's state; resolve the incident when the episode is over.
        `keep`: a command's checkpoint, given the detectors the switch resets."""
        if result.transition is None:
            return []
        before = self.state
        self._take(result.state, keep=keep)
        events: list[GuardEvent] = [ModeChangedEvent(result.transition, result.message)]
        if open_incident:
            resolved = self._maybe_resolve(before, now_s, result.message)
            if resolved is not None:
                events.append(resolved)
        return events

    def _take(
        self, state: ModeState, *, new_stage: bool = True, keep: Checkpoint | None = None
    ) -> None:
        """Adopt a new state; a new learned share moves load between targets by design, so
        the TTFT detector's per-target baselines start again. `new_stage` False: the fleet
        never left its stage (this guard's own switch away was not stored), so the
        rollout comparison goes on. `keep`: copy a detector there before resetting it."""
        if state.mode.learned_share != self.state.mode.learned_share:
            if keep is not None:
                keep.ttft = copy.deepcopy(self.ttft)
            self.ttft.rebaseline()
        entered = (
            self.state.mode.kind not in _LEARNED_FAMILY and state.mode.kind is ModeKind.ROLLOUT
        )
        if entered and new_stage:
            if keep is not None:
                keep.compare = copy.deepcopy(self.compare)
            self.compare.restart()
        self.state = state

    def _maybe_resolve(self, before: ModeState, now_s: float, message: str) -> IncidentEvent | None:
        after = self.state.mode
        back_to_learned = before.mode.kind not in _LEARNED_FAMILY and after.kind in _LEARNED_FAMILY
        held = (
            after.kind is ModeKind.HELD_ROUND_ROBIN
            and before.mode.kind is not ModeKind.HELD_ROUND_ROBIN
        )
        if back_to_learned or held:
            return self.incidents.resolved(now_s, message, before.mode.label, after.label)
        return None

    def rollback(
        self,
        now_s: float,
        *,
        actor: str,
        reason: str,
        hold: bool = False,
        stop_plan: bool = True,
        keep: Checkpoint | None = None,
    ) -> tuple[TransitionResult, list[GuardEvent]]:
        """Manual rollback (`hold`: and keep the fleet on round-robin); idempotent.
        `stop_plan`: on the baseline, stop the plan (`modes.manual_rollback`). `keep`: the
        checkpoint `undo` goes back to if the switch is refused."""
        result = modes.manual_rollback(
            self.state, now_s, actor=actor, reason=reason, hold=hold, stop_plan=stop_plan
        )
        return result, self._apply(result, now_s, keep=keep)

    def resume(
        self,
        now_s: float,
        *,
        actor: str,
        reason: str,
        stage_pct: int | None = None,
        keep: Checkpoint | None = None,
    ) -> tuple[TransitionResult, list[GuardEvent]]:
        """Manual resume at a rollout stage (the plan's first by default); idempotent.
        `keep`: the checkpoint `undo` goes back to if the switch is refused."""
        result = modes.manual_resume(
            self.state, now_s, self.plan, actor=actor, reason=reason, stage_pct=stage_pct
        )
        if result.changed:
            self._close_breaker()
        return result, self._apply(result, now_s, keep=keep)

    def _close_breaker(self) -> None:
        """A human's resume closes the breaker, whichever replica or CLI wrote it: the plan
        then advances by its timing here as on any replica that starts fresh (the open
        breaker lived only in this process, so a restart advanced a fleet this one held
        back), and a fault still there trips again after `trip_after` bad evaluations."""
        self.breaker = BreakerState()

    def checkpoint(self) -> Checkpoint:
        """The state, breaker and open incident as they are, before a command (pass it to
        `rollback` / `resume` as `keep`)."""
        return Checkpoint(self.state, self.breaker, copy.deepcopy(self.incidents.current))

    def undo(self, checkpoint: Checkpoint) -> None:
        """Back to `checkpoint`: the database refused the command's switch, so the fleet
        never left that state. Left one version ahead, a replica routed a mode never
        stored and ignored the stored one as older, so every later command conflicted.
        The detectors the switch reset are the ones kept, as they were: nothing moved
        load between targets, nor ended the rollout stage."""
        self.state = checkpoint.state
        if checkpoint.ttft is not None:
            self.ttft = checkpoint.ttft
        if checkpoint.compare is not None:
            self.compare = checkpoint.compare
        self.breaker = checkpoint.breaker
        self.incidents.current = checkpoint.incident

    def adopt_state(
        self, stored: ModeState, now_s: float, *, replacing_unsaved: bool = False
    ) -> list[GuardEvent]:
        """Take a newer state written elsewhere (CLI, another replica); resolve if due.
        `replacing_unsaved`: this guard's own switches were not stored (another writer
        took the version, or the database refused them for good), so the stored state
        replaces them even at the same or an older version."""
        if stored.version <= self.state.version and not replacing_unsaved:
            return []
        before = self.state
        # only when the stored state is no newer than this guard's unstored one did the
        # fleet stay in its stage; a later state (a rollback, then a resume) is new
        self._take(stored, new_stage=not (replacing_unsaved and stored.version <= before.version))
        if before.mode.kind not in _LEARNED_FAMILY and stored.mode.kind in _LEARNED_FAMILY:
            self._close_breaker()  # a resume (or a return) another process wrote
        resolved = self._maybe_resolve(before, now_s, stored.reason)
        return [] if resolved is None else [resolved]
