"""The full demo on one machine: emulated backends, `slaguard serve`, a trace, two faults.

Five emulated replicas of different card types, the service in gateway mode with a short
rollout plan, the Azure conversation trace replayed 3x faster, the H200 slowed down 5x at
22 s (during the round-robin baseline), then a hot prompt at 80 s (`DemoPlan`; each fault
at its own second, not at a status line). Every 5 s a line shows the rate, the fleet
mode, demotions and the per-target TTFT; at the end it says where to look. Every process
it starts is stopped, on success, failure, Ctrl-C, SIGTERM or SIGHUP: the load generator
first (at the end its requests in flight may finish, for a bounded time), then the
service and the backends. On Linux they also end when the demo is killed outright
(SIGKILL, a crash): each gets SIGTERM (`tether`).

The guard runs with `DEMO_GUARD`, its time scales shrunk to the demo's two minutes. With
the defaults nothing could be demoted here: a target's TTFT change score needs a
baseline 300 s old (restarted by every rollout stage), the peer score needs three
targets of one card type and the tier test two, and the demo has one of each.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import secrets
import shlex
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx
import numpy as np
import yaml
from rich.console import Console
from rich.text import Text
from sqlalchemy import select

from slaguard.audit.engine import DB_ENV_VAR, create_audit_engine
from slaguard.audit.models import Incident
from slaguard.emulator.loadgen import HotWindow, LoadGenerator
from slaguard.emulator.stack import LeftRunning, Stack, StopSignals, wait_ok
from slaguard.emulator.workdir import claimed_workdir
from slaguard.notify.messaging import from_mrkdwn
from slaguard.plaintext import visible
from slaguard.service.local import free_port
from slaguard.sim.traces import load_trace

MODEL = "llama3.1-8b"
CARDS = ("h100", "h200", "a100", "l40s", "ascend910b")
SLOWED = "h200-8b"
DEMO_GUARD = {
    "ttft_zscore": {
        "window_s": 20.0,
        "slice_s": 2.0,
        "tier_window_s": 20.0,
        "min_samples": 10,
        "demote_after_s": 6.0,
    }
}
"""TTFT p99 over 20 s instead of 5 min (so the baselines are a window old 20 s after the
last rollout stage), 10 samples instead of 30 (the learned policy sends the L40S ~1
request/s), demoted after 6 s anomalous instead of 30."""


@dataclass(frozen=True, slots=True)
class DemoPlan:
    """When things happen, in wall seconds from the start of the load."""

    duration_s: float = 105.0
    trace_speedup: float = 3.0
    slow_at_s: float = 22.0
    slow_factor: float = 5.0
    hot_at_s: float = 80.0
    hot_share: float = 0.6
    baseline_s: float = 48.0
    stage_s: float = 8.0
    drain_s: float = 15.0
    """After the last request is sent, how long its answers in flight may take."""


@contextlib.contextmanager
def running_stack(stack: Stack, plan: DemoPlan, console: Console) -> Iterator[Stack]:
    """Start the emulators and the service; stop them all on the way out, and say so once
    all were seen stopped (what was not is in `stack.left`, for the caller to fail on)."""
    workdir = stack.workdir
    began = time.monotonic()

    def ready(what: str) -> None:  # the start takes ~10 s: say each step, not only the end
        console.print(f"  {what} ready ({time.monotonic() - began:.1f}s)", highlight=False)

    try:
        console.print(
            f"starting {len(CARDS)} emulated backends ({', '.join(CARDS)}), then slaguard "
            f"serve; logs in {workdir}",
            highlight=False,
        )
        for card in CARDS:
            port = free_port()
            stack.spawn(f"emulate-{card}", ["emulate", "--card", card, "--port", str(port)])
            stack.emulators[f"{card}-8b"] = f"http://127.0.0.1:{port}"
        fleet = {
            "name": "demo",
            "targets": [
                {"id": tid, "model": MODEL, "card": tid.removesuffix("-8b"), "url": url}
                for tid, url in stack.emulators.items()
            ],
        }
        (workdir / "fleet.yaml").write_text(yaml.safe_dump(fleet, sort_keys=False))
        port = free_port()
        serve_cfg = {
            "fleet": str(workdir / "fleet.yaml"),
            "db": str(workdir / "audit.db"),
            "port": port,
            "notify_file": str(workdir / "incidents.jsonl"),
            "log_level": "warning",
            "rollout": {"baseline_s": plan.baseline_s, "stage_s": plan.stage_s},
            "guard": DEMO_GUARD,
        }
        (workdir / "serve.yaml").write_text(yaml.safe_dump(serve_cfg, sort_keys=False))
        for tid, url in stack.emulators.items():
            wait_ok(f"{url}/health", 30, stack)
            ready(f"backend {tid} on {url}")
        token = secrets.token_hex(16)
        stack.spawn(
            "serve",
            ["serve", "--config", str(workdir / "serve.yaml")],
            {"SLAGUARD_ADMIN_TOKEN": token},
        )
        stack.service_url = f"http://127.0.0.1:{port}"
        wait_ok(f"{stack.service_url}/readyz", 30, stack)
        ready(f"slaguard serve (gateway) on {stack.service_url}")
        yield stack
    finally:
        if not stack.stop():
            console.print(
                f"stopped the {len(stack.procs)} processes the demo started and the ones they "
                "started",
                highlight=False,
            )


def _p(values: list[float], q: float) -> str:
    return f"{np.quantile(values, q):5.2f}" if values else "  -  "


async def _faults(stack: Stack, plan: DemoPlan, console: Console, started: float) -> None:
    """Each fault at its time in the plan; they used to wait for the next 5 s status line
    (the H200's slowdown at 25 s, not 22)."""

    async def slow() -> str:
        async with httpx.AsyncClient(timeout=5) as client:
            url = f"{stack.emulators[SLOWED]}/admin/slowdown"
            answer = await client.post(url, json={"factor": plan.slow_factor})
        if answer.is_error:  # the line said "slowed" whatever the emulator answered
            return f"{SLOWED} NOT slowed down: the emulator answered {answer.status_code}"
        return f"{SLOWED} slowed down {plan.slow_factor:.0f}x"

    async def hot() -> str:  # the load generator sends the hot prompt from that time on
        return f"hot prompt: {plan.hot_share:.0%} of requests now share one prompt"

    for at, fault in sorted([(plan.slow_at_s, slow), (plan.hot_at_s, hot)], key=lambda f: f[0]):
        await asyncio.sleep(at - (time.monotonic() - started))
        said = await fault()
        elapsed = time.monotonic() - started
        console.print(f"{elapsed:5.0f}s  [bold red]FAULT[/] {said}", highlight=False)


async def drive(stack: Stack, plan: DemoPlan, console: Console) -> dict[str, list[float]]:
    """Replay the load through the service, inject the faults, print a status line every
    5 s; every TTFT seen, by target."""
    gen = LoadGenerator(
        stack.service_url,
        load_trace(),
        model=MODEL,
        speedup=plan.trace_speedup,
        hot=HotWindow(plan.hot_at_s, plan.duration_s, plan.hot_share),
    )
    every: dict[str, list[float]] = {}
    load = asyncio.create_task(gen.run(plan.duration_s, plan.drain_s))
    started = time.monotonic()
    faults = asyncio.create_task(_faults(stack, plan, console, started))
    seen_demoted: set[str] = set()
    last_mode = "?"
    last_sent = 0
    async with httpx.AsyncClient(timeout=5) as client:
        while not load.done():
            await asyncio.wait({load}, timeout=5.0)
            elapsed = time.monotonic() - started
            mode, demoted = "?", ["?"]
            with contextlib.suppress(httpx.HTTPError, ValueError):
                status = (await client.get(f"{stack.service_url}/v1/status")).json()
                mode = status["mode"]["mode"]
                demoted = [t["target"] for t in status["targets"] if t["demoted"]]
                for t in status["targets"]:
                    if t["demoted"] and t["target"] not in seen_demoted:
                        seen_demoted.add(t["target"])
                        z = t["jitter_z"]  # null: too few requests since to score
                        score = "not scored" if z is None else f"{z:.1f}"
                        console.print(
                            f"[bold yellow]GUARD[/] {t['target']} demoted: TTFT p99 Z-score "
                            f"{score}, it now takes low-priority traffic only"
                        )
                if mode == "round_robin" and last_mode not in ("?", "round_robin"):
                    console.print(
                        f"[bold yellow]GUARD[/] breaker tripped: fleet {last_mode} -> {mode} "
                        f"({status['mode']['reason']})",
                        highlight=False,
                    )
                last_mode = mode
            window = gen.stats.take_window()
            for target, values in window.items():
                every.setdefault(target, []).extend(values)
            ttft = " ".join(
                f"{t.removesuffix('-8b')}={_p(v, 0.5).strip()}" for t, v in sorted(window.items())
            )
            rate = (gen.stats.sent - last_sent) / 5.0
            last_sent = gen.stats.sent
            if not gen.sending:
                console.print(
                    f"{elapsed:5.0f}s  load stopped: {gen.in_flight} answers in flight "
                    f"(waiting up to {plan.drain_s:.0f}s)  mode={mode}  errors={gen.stats.errors}",
                    highlight=False,
                )
                continue
            console.print(
                f"{elapsed:5.0f}s  {rate:4.1f} req/s  mode={mode:<16} "
                f"errors={gen.stats.errors}  demoted={demoted or '-'}  TTFT p50 s: {ttft}",
                highlight=False,
            )
    faults.cancel()  # any still to come after the load (a shorter plan)
    await asyncio.wait({faults})
    if not faults.cancelled():
        faults.result()  # one that could not be injected fails the demo
    st = gen.stats
    kinds = ", ".join(f"{k}: {n}" for k, n in sorted(st.error_kinds.items()))
    console.print(
        f"requests: {st.sent} sent, {st.ok} answered, {st.errors} errors"
        f"{f' ({kinds})' if kinds else ''}, {st.cut_off} still in flight after the "
        f"{plan.drain_s:.0f}s drain (cancelled, not errors)",
        highlight=False,
    )
    return every


def _incidents(db: Path) -> list[tuple[int, str, str]]:
    engine = create_audit_engine(str(db))
    try:
        with engine.connect() as conn:
            rows = conn.execute(select(Incident.id, Incident.detector, Incident.subject))
            return [(int(r[0]), str(r[1]), str(r[2])) for r in rows]
    finally:
        engine.dispose()


def _report(stack: Stack, every: dict[str, list[float]], console: Console) -> None:
    console.print("\n[bold]per-target TTFT over the run[/] (seconds)")
    for target, values in sorted(every.items()):
        console.print(
            f"  {target:<14} n={len(values):5d}  p50={_p(values, 0.5)}  p99={_p(values, 0.99)}",
            highlight=False,
        )
    notes = stack.workdir / "incidents.jsonl"
    messages = [json.loads(x) for x in notes.read_text().splitlines()] if notes.exists() else []
    console.print(f"\n[bold]guard messages[/] ({len(messages)} written to {notes}):")
    for m in messages:  # as Slack shows it, and never read as Rich markup
        console.print(Text("  " + visible(from_mrkdwn(str(m["text"])))), highlight=False)
    where_to_look(stack.workdir, console)


def slaguard_command() -> list[str]:
    """The command that runs this slaguard, to paste: `make demo` runs .venv/bin/slaguard,
    which is not on PATH, and `python -m slaguard` has no script at all."""
    script = Path(sys.argv[0])
    if script.name != "slaguard":
        return [sys.executable, "-m", "slaguard"]
    found = shutil.which("slaguard")
    if found is not None and Path(found).resolve() == script.resolve():
        return ["slaguard"]
    return [str(script.absolute())]


def where_to_look(workdir: Path, console: Console) -> None:
    """The files, and the commands that read them, each on one line to paste (never wrapped
    at the terminal's width), with absolute paths: `--workdir demo2` printed `--db
    demo2/audit.db`, which fails pasted from any other directory."""
    workdir = workdir.absolute()
    db, fleet = workdir / "audit.db", workdir / "fleet.yaml"

    def say(label: str, *args: str | Path, note: str = "") -> None:
        text = shlex.join([*slaguard_command(), *map(str, args)])
        console.print(f"  {label:<15}: {text}{note}", markup=False, highlight=False, soft_wrap=True)

    console.print("\n[bold]where to look[/]")
    console.print(
        f"  audit database : {db}   (`export {DB_ENV_VAR}={shlex.quote(str(db))}` stands for "
        "every --db below)",
        markup=False, highlight=False, soft_wrap=True,
    )  # fmt: skip
    say("fleet mode", "status", "--db", db)
    say("mode switches", "history", "--db", db)
    say("incidents", "incidents", "--db", db)
    say("decisions", "audit", "summary", "--db", db, "--fleet", fleet, "--since", "-1h")
    for incident_id, detector, subject in _incidents(db):
        say(
            f"incident {incident_id}", "audit", "incident", str(incident_id), "--db", db,
            "--fleet", fleet, note=f"   ({detector} on {subject})",
        )  # fmt: skip
    say("resume rollout", "resume", "--db", db, "--reason", "demo over")
    for label, path in (
        ("fleet file", str(fleet)),
        ("logs", f"{workdir}/*.log"),
        ("metrics", f"{workdir / 'metrics.txt'} (the last /metrics scrape)"),
    ):
        console.print(f"  {label:<15}: {path}", markup=False, highlight=False, soft_wrap=True)


def _run(stack: Stack, plan: DemoPlan, console: Console) -> dict[str, list[float]]:
    console.print(
        f"replaying the Azure conversation trace {plan.trace_speedup:.0f}x for "
        f"{plan.duration_s:.0f}s; rollout: round-robin {plan.baseline_s:.0f}s, then 10/50/"
        f"100 % learned every {plan.stage_s:.0f}s"
    )
    z = DEMO_GUARD["ttft_zscore"]
    console.print(
        f"guard on the demo's time scale: TTFT p99 over {z['window_s']:.0f}s (default 300), "
        f"demotion after {z['demote_after_s']:.0f}s anomalous (default 30)",
        highlight=False,
    )
    every = asyncio.run(drive(stack, plan, console))
    metrics = httpx.get(f"{stack.service_url}/metrics", timeout=5).text
    (stack.workdir / "metrics.txt").write_text(metrics)
    return every


def demo_console(file: IO[str] | None = None) -> Console:
    """Rich's console, one line per status line even piped into a log (rich wraps text
    at 80 columns off a terminal, which split each tick's TTFT figures from its rate);
    on a terminal, the terminal wraps."""
    return Console(file=file, soft_wrap=True)


def run_demo(workdir: Path, plan: DemoPlan | None = None, console: Console | None = None) -> None:
    """The whole demo; `workdir` is emptied first and keeps the DB, config and logs
    (named by absolute path in all it prints). Ctrl-C, SIGTERM and SIGHUP stop it all
    and raise `Interrupted`; `LeftRunning` instead when a process outlived the stop (it
    used to be a line on stdout, and the demo exited 0)."""
    workdir = workdir.absolute()
    plan = plan or DemoPlan()
    console = console or demo_console()
    say = functools.partial(console.print, highlight=False)
    with StopSignals().installed() as signals, claimed_workdir(workdir, say) as lock:
        stack = Stack(workdir, signals, lock_fd=lock)
        try:
            with running_stack(stack, plan, console):
                every = _run(stack, plan, console)
            _report(stack, every, console)
        finally:
            if stack.left:  # whatever else ended the run stays its __context__
                raise LeftRunning(stack.left)
