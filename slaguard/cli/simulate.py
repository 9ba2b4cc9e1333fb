"""`slaguard simulate`: replay a real trace through the scheduler on a simulated fleet."""

from __future__ import annotations

import json
import signal
import sys
from enum import StrEnum
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from slaguard.audit.engine import (
    shown_url,
)
from slaguard.cli.errors import fail
from slaguard.cli.fleet import FleetOption, load_or_fail
from slaguard.cli.output import check_writable, writing_to
from slaguard.cli.paths import db_option, path_option
from slaguard.cli.simulate_audit import audit_sink, drain, finish_audit, left_in_journal
from slaguard.cli.stops import Stopped, StopSignals
from slaguard.fleet import Fleet
from slaguard.guard.guard import Guard
from slaguard.plaintext import visible
from slaguard.scheduler.rollout import LEARNED, ROUND_ROBIN, RolloutPlan
from slaguard.sim.arrival_faults import apply_arrival_faults
from slaguard.sim.audit_sink import AuditObserver
from slaguard.sim.engine import SimOptions, Simulation
from slaguard.sim.faults import ARRIVAL_KINDS, FaultError, FaultSchedule, load_faults
from slaguard.sim.guarded import GuardController, releases_from
from slaguard.sim.observers import FixedPolicy, RolloutController, SimObserver
from slaguard.sim.paths import default_trace_path, missing_default_trace
from slaguard.sim.report import build_report, print_summary
from slaguard.sim.results import Results
from slaguard.sim.trace import Trace, TraceError
from slaguard.sim.traces import TraceFormat, check_idle_gaps, load_trace
from slaguard.sim.workload import Workload, WorkloadError, assign_workload


class Policy(StrEnum):
    ROUND_ROBIN = "round-robin"
    LEARNED = "learned"
    ROLLOUT = "rollout"
    GUARDED = "guarded"


def _policy(value: str) -> Policy:
    """`round_robin` as well as `round-robin`: the audit database and `audit decisions
    --policy` spell the arm with an underscore."""
    try:
        return Policy(str(value).replace("_", "-"))
    except ValueError:
        raise ValueError(f"{value!r} is not one of {', '.join(Policy)}") from None


def _controller(
    policy: Policy, plan: RolloutPlan, fleet: Fleet, schedule: FaultSchedule, rate_scale: float
) -> SimObserver:
    if policy is Policy.ROUND_ROBIN:
        return FixedPolicy(ROUND_ROBIN)
    if policy is Policy.LEARNED:
        return FixedPolicy(LEARNED)
    if policy is Policy.ROLLOUT:
        return RolloutController(plan)
    return GuardController(Guard(plan=plan), fleet, releases_from(schedule, rate_scale))


def _truncate(trace: Trace, duration_s: float | None) -> Trace:
    if duration_s is None:
        return trace
    keep = trace.arrival_s <= trace.arrival_s[0] + duration_s
    if not keep.any():
        fail(f"--duration {duration_s}: keeps no request; fix: use a larger value")
    return trace.take(keep.nonzero()[0])


def prepare(
    fleet: Fleet,
    trace_file: Path | None,
    trace_format: TraceFormat | None,
    faults_file: Path | None,
    seed: int,
    duration_s: float | None,
    rate_scale: float,
) -> tuple[Workload, FaultSchedule, str]:
    """Load trace and faults with one-line errors; returns the workload to replay."""
    path = trace_file or _default_trace()
    try:
        trace = _truncate(load_trace(path, trace_format or TraceFormat.AUTO), duration_s)
        check_idle_gaps(trace, rate_scale)
        schedule = load_faults(faults_file, fleet) if faults_file else FaultSchedule()
        _warn(schedule, trace, rate_scale)
        trace = apply_arrival_faults(trace, schedule, seed)
        return assign_workload(trace, fleet), schedule, str(path)
    except (TraceError, FaultError, WorkloadError) as exc:
        fail(str(exc))


def _default_trace() -> Path:
    """The default trace, or one line naming what chose its path: `$SLAGUARD_DATA_DIR`
    when set (it said only "file not found; fix: pass an existing trace file")."""
    problem = missing_default_trace()
    if problem is None:
        return default_trace_path()
    fail(f"no --trace, and the default trace {problem}, or pass --trace FILE")


def _warn(schedule: FaultSchedule, trace: Trace, rate_scale: float) -> None:
    """Say on stderr what in the scenario will not act as written: unknown keys, and
    faults that start after the (kept) trace's last arrival."""
    last = float(trace.arrival_s[-1] - trace.arrival_s[0]) if len(trace) else 0.0
    run_end = last + SimOptions().drain_s * rate_scale  # in trace seconds
    notes = list(schedule.notes)
    for i, fault in enumerate(schedule.faults):
        if fault.start_s <= last:
            continue
        # a target-side fault still meets the requests queued when the arrivals stop
        in_flight = fault.kind not in ARRIVAL_KINDS and fault.start_s <= run_end
        hits = (
            "only requests still in flight then (nothing if the run has drained by then)"
            if in_flight
            else "nothing"
        )
        notes.append(
            f"{schedule.source}: faults[{i}] ({fault.kind}) starts at {fault.start_s:g} s, "
            f"after the trace's last arrival at {last:.0f} s: it hits {hits}"
        )
    for note in notes:
        print(f"warning: {note}", file=sys.stderr)


def _run(sim: Simulation, horizon: float, stops: StopSignals) -> Results:
    """The run, with a progress bar on a terminal; a stop signal takes effect at the next
    simulated second (`progress_every_s`)."""
    console = Console(stderr=True)
    if not console.is_terminal:
        return sim.run(lambda _t: stops.check())
    with Progress(
        TextColumn("simulating"),
        BarColumn(),
        TextColumn("{task.description}"),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task("", total=horizon)

        def progress(t: float) -> None:
            stops.check()
            done = f"{t:.0f}/{horizon:.0f} s"
            bar.update(
                task,
                completed=min(t, horizon),
                description=done if t <= horizon else f"last arrivals finishing ({t:.0f} s)",
            )

        return sim.run(progress)


def _interrupted(
    exc: Stopped,
    sim: Simulation,
    horizon: float,
    controller: SimObserver,
    sink: AuditObserver | None,
    stops: StopSignals,
) -> NoReturn:
    """Say where the run stopped; an audit DB gets the run up to there, whole: the mode
    switches and incidents so far (else written only at the end) and every acknowledged
    row drained from the writer's journal."""
    signo = exc.signo
    where = (
        f"interrupted by {signal.Signals(signo).name} at {sim.results.sim_s:.0f} of "
        f"{horizon:.0f} simulated s (last arrival); no report written"
    )
    if sink is not None:
        stats = drain(sink, stops)
        trips = controller.trips if isinstance(controller, GuardController) else []
        if not stats.queue_depth:
            sink.record_guard_history({"guard": {"trips": trips}})
        url = shown_url(sink.writer.engine.url)
        where += (
            f"; {url} holds the run up to there: {sink.decisions} decisions, "
            f"{sink.outcomes} outcomes (requests in flight have none)"
        )
        if stats.queue_depth:
            where += "; " + left_in_journal(sink, f"{stats.queue_depth} rows")
    fail(where, code=128 + signo)


def simulate(
    fleet_file: Path | None = FleetOption,
    trace: Path | None = path_option(None, "--trace", help="Trace file (default: Azure conv)."),
    trace_format: TraceFormat | None = typer.Option(
        None, "--trace-format", help="Trace format (default: detected from the first line)."
    ),
    faults: Path | None = path_option(None, "--faults", help="Fault scenario YAML."),
    policy: Policy = typer.Option(
        Policy.LEARNED,
        "--policy",
        parser=_policy,
        metavar=f"<{'|'.join(Policy)}>",
        help="Fixed round-robin or learned routing, the rollout plan, or the guard on it.",
    ),
    rate_scale: float = typer.Option(
        1.0, "--rate-scale", min=0.01, max=1000, help="Arrival speed-up."
    ),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed for fault injection randomness."),
    duration: float | None = typer.Option(
        None, "--duration", min=1, help="Trace seconds kept (default: the whole trace)."
    ),
    baseline_s: float = typer.Option(
        300.0, "--baseline-s", min=0, help="Round-robin baseline of the rollout plan (simulated s)."
    ),
    stage_s: float = typer.Option(
        300.0, "--stage-s", min=1, help="Length of each rollout stage (simulated s)."
    ),
    weight_update_s: float = typer.Option(
        60.0, "--weight-update-s", min=1, help="Simulated s between learned-weight updates."
    ),
    report_json: Path | None = path_option(None, "--report-json", help="Write the report."),
    audit_db: str | None = db_option(
        None,
        "--audit-db",
        help="Record every decision and outcome in this audit DB (URL or SQLite file).",
    ),
) -> None:
    """Replay a trace through the scheduler on the simulated fleet and report SLA figures."""
    if report_json is not None:
        check_writable(report_json, "--report-json")
    fleet = load_or_fail(fleet_file)
    for note in fleet.notes:
        print(f"warning: {visible(note)}", file=sys.stderr)
    workload, schedule, trace_path = prepare(
        fleet, trace, trace_format, faults, seed, duration, rate_scale
    )
    plan = RolloutPlan(baseline_s=baseline_s, stage_s=stage_s)
    controller = _controller(policy, plan, fleet, schedule, rate_scale)
    sim = Simulation(
        fleet,
        workload,
        controller,
        schedule,
        SimOptions(rate_scale=rate_scale, weight_update_s=weight_update_s, progress_every_s=1.0),
    )
    horizon = float(sim.arrivals[-1]) if len(workload) else 0.0
    with StopSignals().installed() as stops:
        sink = audit_sink(audit_db, sim) if audit_db else None
        try:
            results = _run(sim, horizon, stops)
        except Stopped as exc:
            _interrupted(exc, sim, horizon, controller, sink, stops)
        extra: dict[str, Any] = {
            "rate_scale": rate_scale,
            "seed": seed,
            "fleet": fleet.name,
            "weights": {
                "version": sim.scheduler.weights.version,
                "values": sim.scheduler.weights.as_dict(),
            },
        }
        report = build_report(
            fleet=fleet,
            workload=workload,
            results=results,
            policy=policy.value,
            trace_path=trace_path,
            faults=schedule.report_rows(),
            trips=controller.trips if isinstance(controller, GuardController) else None,
            incident_updates=(
                controller.incident_updates if isinstance(controller, GuardController) else None
            ),
            extra=extra,
        )
        if report_json is not None:
            with writing_to(report_json, "--report-json") as out:
                out.write_text(json.dumps(report, indent=2) + "\n")
            print(f"report written to {report_json}", file=sys.stderr)
        if sink is not None:
            finish_audit(sink, report, fleet_file, stops)
        print_summary(report, Console())
