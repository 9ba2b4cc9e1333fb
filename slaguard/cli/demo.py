"""`slaguard demo`: the main job on embedded defaults.

By default the full stack on one machine (`slaguard.emulator.demo`): emulated backends,
`slaguard serve` in gateway mode, the Azure trace sped up, a slowed card then a hot
prompt, and the guard's answer. `--routing-only` routes a handful of representative
requests with both policies and explains each decision, without starting anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from slaguard.cli.errors import fail, print_error
from slaguard.cli.fleet import load_or_fail
from slaguard.cli.paths import path_option
from slaguard.cli.usage import defaulted
from slaguard.emulator.demo import run_demo
from slaguard.emulator.stack import Interrupted, LeftRunning
from slaguard.emulator.workdir import DEFAULT_WORKDIR
from slaguard.fleet import Fleet, Priority, Request
from slaguard.scheduler.core import Scheduler
from slaguard.scheduler.explain import Decision
from slaguard.scheduler.rollout import LEARNED, ROUND_ROBIN
from slaguard.sim.paths import missing_default_trace

SHAPES: tuple[tuple[int, int, Priority], ...] = (
    (400, 60, Priority.HIGH),
    (6_000, 500, Priority.NORMAL),
    (24_000, 300, Priority.LOW),
)
"""(prompt tokens, new tokens, priority) sent to every model the fleet serves."""
LEFT_RUNNING_EXIT = 1
"""The demo's exit status when a process it started outlived its stop."""


def sample_requests(fleet: Fleet) -> list[Request]:
    """Representative requests for `fleet`: each shape for each model it serves, with the
    fleet's own deadlines, then one prompt longer than any context (refused)."""
    models = sorted({t.model.id for t in fleet})
    deadline = {p: c.ttft_s for p, c in fleet.sla.items()}
    out = [
        Request(f"demo-{len(models) * j + i}", prompt, new, model, prio, deadline.get(prio, 4.0))
        for j, (prompt, new, prio) in enumerate(SHAPES)
        for i, model in enumerate(models)
    ]
    too_long = 2 * max(t.model.context_window for t in fleet)
    out.append(Request(f"demo-{len(out)}", too_long, 100, models[0], Priority.NORMAL, 4.0))
    return out


def _describe(d: Decision) -> str:
    e = d.explanation.to_dict()
    ranked = sorted((c for c in e["candidates"] if "score" in c), key=lambda c: -float(c["score"]))[
        :3
    ]
    top = ", ".join(f"{c['target']} {c['score']:.3f}" for c in ranked)
    parts = [f"top: {top}"] if top else []
    if not ranked and e["candidates"]:
        parts.append(f"{len(e['candidates'])} eligible, next in the round-robin rotation")
    if e["rejected"]:
        first = e["rejected"][0]
        parts.append(f"{len(e['rejected'])} rejected (e.g. {first['target']}: {first['reason']})")
    parts.extend(e["notes"])
    return "; ".join(parts)


def _interrupted(exc: Interrupted, workdir: Path) -> str:
    db = workdir / "audit.db"
    left = f"; a partial audit DB is left in {db}" if db.exists() else ""
    return f"interrupted by {exc}{left}"


def _fail_left_running(exc: LeftRunning, workdir: Path) -> NoReturn:
    """What ended the run, then one line per process left, and exit 1 whatever ended it
    (a signal's 128 + N included): a script must learn that processes are still running."""
    ended = exc.__context__
    if isinstance(ended, Interrupted):
        print_error(_interrupted(ended, workdir))
    elif isinstance(ended, RuntimeError):
        print_error(str(ended))
    elif ended is not None:
        print_error(f"the demo failed: {type(ended).__name__}: {ended}")
    for survivor in exc.survivors[:-1]:
        print_error(str(survivor))
    fail(str(exc.survivors[-1]), code=LEFT_RUNNING_EXIT)


def demo(
    fleet_file: Path | None = path_option(
        None, "--fleet", help="Fleet YAML file for --routing-only (default: built-in fleet)."
    ),
    routing_only: bool = typer.Option(
        False, "--routing-only", help="Only route and explain sample requests (no processes)."
    ),
    workdir: Path = path_option(
        DEFAULT_WORKDIR,
        "--workdir",
        help="Where the full demo keeps its audit DB, configs and logs: a new or empty "
        "directory, or an earlier demo's, which it empties first.",
    ),
) -> None:
    """Run the full demo (or, with --routing-only, explain sample routing decisions)."""
    if not routing_only:
        if fleet_file is not None:  # it was dropped without a word
            fail(
                "--fleet: only with --routing-only (the full demo runs its own five emulated "
                "backends); fix: add --routing-only, or drop --fleet"
            )
        problem = missing_default_trace()
        if problem is not None:  # found after the whole stack had started: a traceback
            fail(f"the demo replays the Azure conversation trace, and {problem}")
        workdir = workdir.absolute()  # every path printed is pasted elsewhere
        try:
            run_demo(workdir)
        except LeftRunning as exc:
            _fail_left_running(exc, workdir)
        except Interrupted as exc:  # the stop above said what it stopped
            fail(_interrupted(exc, workdir), code=128 + exc.signo)
        except RuntimeError as exc:
            fail(str(exc))
        return
    if not defaulted("workdir"):  # it was dropped without a word, the default written out too
        fail(
            "--workdir: only for the full demo (--routing-only starts no process and writes "
            "nothing); fix: drop --workdir, or drop --routing-only"
        )
    fleet = load_or_fail(fleet_file)
    console = Console()
    console.print(f"[bold]slaguard demo[/]: {escape(fleet.name)}, {len(fleet)} targets")
    for mode in (ROUND_ROBIN, LEARNED):
        sched = Scheduler(fleet)
        # a busy moment: the L40S cards already hold queued work
        for t in fleet:
            if t.card.id == "l40s":
                sched.state.refresh(t.index, 0.0, queue_depth=12, kv_used_gb=8.0)
        console.print(f"\n[bold]policy: {mode.label}[/] (weights {sched.weights.version})")
        for r in sample_requests(fleet):
            d = sched.decide(r, 0.0, mode)
            if d.target is not None:
                sched.state.add_queue(d.target.index, 1)
            where = d.target.id if d.target else "-"
            console.print(
                f"  {r.request_id}: {r.model_id} {r.priority.value} prompt={r.prompt_tokens} "
                f"-> [bold]{where}[/] ({d.outcome.value})"
            )
            console.print(f"      {_describe(d)}", highlight=False)
    console.print("Next: `slaguard fleet show` for the fleet, `make test` for the suite.")
