"""The discrete-event fleet simulator: real scheduler code on simulated time.

Each 100 ms tick: arrivals are routed at their arrival time (requests nothing can take wait
in a retry queue until their deadline passes), the hardware picture is refreshed, every
target's batcher refills its slots and its GPU advances through the window. Every 500 ms
the global correction runs and the mode controller (fixed policy, rollout plan, or the
guard) sets the fleet mode. First tokens feed the learned policy; its weights update on
the configured period. Deterministic for a given seed: no wall clock is read except to
measure decision latency, which no decision depends on.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from slaguard.fleet.fleet import Fleet
from slaguard.fleet.request import Request
from slaguard.scheduler.config import SchedulerConfig
from slaguard.scheduler.core import Scheduler
from slaguard.scheduler.explain import Decision, Outcome
from slaguard.scheduler.kv import KvPool
from slaguard.scheduler.rollout import Arm, FleetMode
from slaguard.scheduler.state import REFRESHED_AT
from slaguard.sim.faults import FaultSchedule
from slaguard.sim.latency import LatencyModel
from slaguard.sim.observers import SimObserver
from slaguard.sim.replica import Event, Replica
from slaguard.sim.results import Results, Status
from slaguard.sim.workload import Workload

Progress = Callable[[float], None]


@dataclass(frozen=True)
class SimOptions:
    """Engine knobs; scheduler tuning lives in `SchedulerConfig`."""

    rate_scale: float = 1.0
    """Trace seconds per simulated second: arrivals and fault windows come this much sooner."""
    weight_update_s: float = 60.0
    drain_s: float = 600.0
    progress_every_s: float = 60.0


def _on_sim_clock(schedule: FaultSchedule, rate_scale: float) -> FaultSchedule:
    """Fault windows are trace seconds, like the arrival-side faults already applied to the
    trace: at rate scale x they happen x times sooner on the simulated clock."""
    if rate_scale == 1.0:
        return schedule
    scaled = tuple(
        f.model_copy(update={"start_s": f.start_s / rate_scale, "end_s": f.end_s / rate_scale})
        for f in schedule.faults
    )
    return FaultSchedule(scaled, schedule.source)


def _ticks_per_s(tick_s: float) -> float:
    """Divisor giving tick start times: `step / 10` is exact where `step * 0.1` is not, so
    period and rollout-stage boundaries land on their configured seconds."""
    per_s = 1.0 / tick_s
    return float(round(per_s)) if abs(per_s - round(per_s)) < 1e-9 else per_s


def _first_tick_end_after(horizon_s: float, per_s: float) -> float:
    """The end of the tick the drain stops in: the first `k / per_s` past `horizon_s`,
    computed as the loop computes tick ends."""
    k = max(1, math.floor(horizon_s * per_s))
    while k > 1 and (k - 1) / per_s > horizon_s:
        k -= 1
    while k / per_s <= horizon_s:
        k += 1
    return k / per_s


def _event_time(event: Event) -> float:
    return event.at_s


@dataclass
class _Pending:
    request: Request
    index: int
    decision: Decision | None = None
    decision_latency_s: float = 0.0
    reused: int = 0


@dataclass
class Simulation:
    """One run: build it, then `run()`; results are per-request arrays."""

    fleet: Fleet
    workload: Workload
    controller: SimObserver
    faults: FaultSchedule = field(default_factory=FaultSchedule)
    options: SimOptions = field(default_factory=SimOptions)
    cfg: SchedulerConfig | None = None
    latency: LatencyModel | None = None
    observers: Sequence[SimObserver] = ()

    def __post_init__(self) -> None:
        base = self.cfg or SchedulerConfig()
        learning = base.learning.model_copy(
            update={"update_period_s": self.options.weight_update_s}
        )
        self.cfg = base.model_copy(update={"learning": learning})
        self.scheduler = Scheduler(self.fleet, self.cfg)
        model = self.latency or LatencyModel.load()
        self.replicas = [
            Replica(model.for_target(t), KvPool(t), self.scheduler.batchers[t.index])
            for t in self.fleet
        ]
        n = len(self.workload)
        self.results = Results.empty(n, self.fleet)
        self.arrivals = self.workload.trace.arrival_s / self.options.rate_scale
        self.mode: FleetMode = self.controller.initial_mode()
        self.mode_timeline: list[tuple[float, FleetMode, str]] = [(0.0, self.mode, "start")]
        self._pending: dict[str, _Pending] = {}
        self._retry: list[_Pending] = []
        self._window_violations = [0, 0]
        self._next_fault_change = 0.0
        self._reporting = np.ones(len(self.fleet), dtype=bool)
        self._all_reporting = True
        self._sim_faults = _on_sim_clock(self.faults, self.options.rate_scale)
        self._listeners: list[SimObserver] = []
        self._run_end = math.inf
        """No event after this time happens: the drain stops the run there."""
        self._last_event_s = 0.0

    def run(self, progress: Progress | None = None) -> Results:
        """Replay the whole workload; returns the per-request results."""
        tick = self.scheduler.cfg.batching.tick_s
        period_ticks = round(self.scheduler.cfg.correction.period_s / tick)
        n = len(self.workload)
        end_arrivals = float(self.arrivals[-1]) if n else 0.0
        next_arrival = 0
        step = 0
        now = 0.0
        last_progress = 0.0
        self._listeners = [self.controller, *self.observers]
        replicas = list(enumerate(self.replicas))
        per_s = _ticks_per_s(tick)
        self._run_end = _first_tick_end_after(end_arrivals + self.options.drain_s, per_s)
        wall0 = time.perf_counter()
        while True:
            now = step / per_s
            window_end = (step + 1) / per_s
            self._refresh(now)
            next_arrival = self._arrivals(next_arrival, window_end)
            self._retry_pending(now)
            events: list[Event] = []
            for i, rep in replicas:
                if rep.failed or rep.busy_until >= window_end:
                    continue
                if rep.batcher.queued:
                    self._tick_replica(i, rep, now)
                if rep.prefill or window_end > rep.wake_at:  # Replica.needs_advance, inlined
                    rep.advance(now, window_end, events)
            if events:
                events.sort(key=_event_time)
                for ev in events:
                    self._on_event(ev)
            step += 1
            self.results.sim_s = window_end  # kept current: an interrupted run says where
            if step % period_ticks == 0:
                self._period(window_end)
            if progress is not None and window_end - last_progress >= self.options.progress_every_s:
                last_progress = window_end
                progress(window_end)
            done = next_arrival >= n and not self._retry and not self._pending
            if done or window_end > end_arrivals + self.options.drain_s:
                break
        for p in list(self._pending.values()) + self._retry:
            self._finish(p, window_end, Status.INCOMPLETE)
        # a pass can end after the tick that ran it: the run lasts to its last event
        end = self.results.sim_s = max(window_end, self._last_event_s)
        self.results.wall_s = time.perf_counter() - wall0
        self.results.busy_s = np.array(
            [min(end, r.busy_s - max(0.0, r.busy_until - end)) for r in self.replicas]
        )
        self.results.mode_timeline = self.mode_timeline
        return self.results

    def _refresh(self, now: float) -> None:
        """The 100 ms hardware refresh; failed targets stop reporting (and go stale)."""
        if now >= self._next_fault_change:
            self._apply_faults(now)
        if self._all_reporting:
            self.scheduler.state.rows[:, REFRESHED_AT] = now
        else:
            self.scheduler.state.rows[self._reporting, REFRESHED_AT] = now

    def _apply_faults(self, now: float) -> None:
        """Fault answers change only at fault boundaries: recompute them there."""
        later = [t for t in self._sim_faults.change_times() if t > now]
        self._next_fault_change = later[0] if later else float("inf")
        for i, rep in enumerate(self.replicas):
            target = self.fleet.targets[i]
            failed = self._sim_faults.is_failed(target.id, now)
            if failed and not rep.failed:
                self.scheduler.state.refresh(i, now, kv_used_gb=0.0, queue_depth=0.0)
                for r in rep.drop_all():
                    p = self._pending.get(r.request_id)
                    if p is not None:
                        self._finish(p, now, Status.FAILED)
            rep.failed = failed
            self._reporting[i] = not failed
            rep.factor = self._sim_faults.latency_factor(target, now)
        self._all_reporting = bool(self._reporting.all())

    def _arrivals(self, next_arrival: int, window_end: float) -> int:
        n = len(self.workload)
        while next_arrival < n and self.arrivals[next_arrival] < window_end:
            i = next_arrival
            r = self.workload.request(i)
            at = float(self.arrivals[i])
            p = _Pending(r, i)
            self.results.arrival_s[i] = at
            if not self._route(p, at):
                self._retry.append(p)
            next_arrival += 1
        return next_arrival

    def _route(self, p: _Pending, at: float) -> bool:
        """Route (or re-route) a request; False when nothing can take it yet."""
        t0 = time.perf_counter()
        d = self.scheduler.decide(p.request, at, self.mode)
        p.decision_latency_s = time.perf_counter() - t0
        self.results.decision_latency_s.append(p.decision_latency_s)
        res = self.results
        res.arm[p.index] = 0 if d.arm is Arm.ROUND_ROBIN else 1
        p.decision = d
        if d.target is None:
            return False
        for obs in self._all_observers():
            obs.on_decision(d, at, p.decision_latency_s)
        i = d.target.index
        rep = self.replicas[i]
        res.target[p.index] = i
        res.outcome[p.index] = d.outcome.value
        if rep.failed:
            self._finish(p, at, Status.FAILED)
            return True
        r = p.request
        p.reused = 0 if d.outcome is Outcome.SPILLED else rep.pool.reusable_tokens(r.prefix_blocks)
        res.transfer_s[p.index] = d.transfer_s
        self.scheduler.state.add_queue(i, 1)
        self.scheduler.state.add_kv(i, d.explanation.v_peak_gb)
        self._pending[r.request_id] = p
        rep.batcher.submit(r, at)
        return True

    def _retry_pending(self, now: float) -> None:
        if not self._retry:
            return
        waiting, self._retry = self._retry, []
        for p in waiting:
            if now - p.request.arrival_s / self.options.rate_scale > p.request.deadline_s:
                self._finish(p, now, Status.REJECTED)
                continue
            if not self._route(p, now):
                self._retry.append(p)

    def _tick_replica(self, i: int, rep: Replica, now: float) -> None:
        def admit(r: Request) -> bool:
            return rep.pool.admit(r.request_id, r.prompt_tokens + r.max_new_tokens, r.prefix_blocks)

        def release(r: Request) -> bool:
            rep.pool.release(r.request_id)
            rep.forget(r.request_id)
            return True

        result = rep.batcher.tick(now, admit, release, self.scheduler.cfg.correction.ttl_s)
        for r in result.admitted:
            p = self._pending[r.request_id]
            rep.prefill.append((r, p.index, p.reused, float(self.results.arrival_s[p.index])))

    def _on_event(self, ev: Event) -> None:
        if ev.at_s > self._run_end:
            return  # the pass ends after the drain stopped the run: its request times out
        self._last_event_s = max(self._last_event_s, ev.at_s)
        res = self.results
        rid = self.workload.request_id(ev.index)
        p = self._pending.get(rid)
        if p is None or p.decision is None:
            return
        if ev.first:
            if not math.isnan(res.first_token_s[ev.index]):
                return  # prefilled again after a preemption: the client has its first token
            ttft = ev.at_s - res.arrival_s[ev.index] + res.transfer_s[ev.index]
            res.ttft_s[ev.index] = ttft
            res.first_token_s[ev.index] = ev.at_s
            if p.decision.target is not None:
                self.replicas[p.decision.target.index].pool.cache_prefix(p.request.prefix_blocks)
            self.scheduler.feedback(p.decision, ttft, ev.at_s)
            for obs in self._all_observers():
                obs.on_first_token(p.decision, ev.at_s, ttft)
            return
        self._finish(p, ev.at_s, Status.OK)

    def _finish(self, p: _Pending, at: float, status: Status) -> None:
        res = self.results
        r = p.request
        self._pending.pop(r.request_id, None)
        d = p.decision
        if d is not None and d.target is not None and status is Status.OK:
            i = d.target.index
            rep = self.replicas[i]
            rep.batcher.finish(r.request_id)
            rep.pool.release(r.request_id, r.prefix_blocks)
            self.scheduler.state.add_queue(i, -1)
            self.scheduler.state.add_kv(i, -d.explanation.v_peak_gb)
        if status is Status.FAILED and d is not None:
            self.scheduler.feedback(d, None, at)
        res.finish(p.index, at, status, r.deadline_s, r.max_new_tokens)
        self._window_violations[0] += 1
        self._window_violations[1] += int(not res.sla_met[p.index])
        if d is not None:
            if d.target is None:  # rejected after retries: observers see its last decision
                for obs in self._all_observers():
                    obs.on_decision(d, at, p.decision_latency_s)
            for obs in self._all_observers():
                obs.on_outcome(d, at, res.outcome_of(p.index))

    def _period(self, now: float) -> None:
        """Every 500 ms: global correction, then the fleet mode for the next period."""
        total, bad = self._window_violations
        self._window_violations = [0, 0]
        self.scheduler.correct(bad / total if total else float("nan"))
        self.scheduler.apply_factors(now)
        mode, reason = self.controller.on_period(now, self)
        if mode != self.mode:
            self.mode = mode
            self.mode_timeline.append((now, mode, reason))
        for obs in self.observers:
            obs.on_period(now, self)

    def _all_observers(self) -> list[SimObserver]:
        """The controller, then the other observers (fixed when `run()` starts)."""
        return self._listeners
