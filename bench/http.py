"""HTTP benchmarks of `slaguard serve` on loopback; the load runs in this process, the
service (and the emulator) in their own processes.

1. `/v1/route` open-loop at `--rate` requests/s with the audit writer on (SQLite): latency
   p50/p99 measured from each request's *scheduled* send time (no coordinated omission),
   errors, and whether every decision reached the database. Baseline in the same run:
   `GET /healthz` at the same rate (the HTTP stack's own floor).
2. The sustainable rate: `/v1/route` at each `--sweep` rate; the highest one answered at
   p99 <= `--p99-goal-ms` with no error and no backlog is reported.
3. Gateway overhead: TTFT of a streamed 1-token completion through slaguard minus TTFT
   straight to the emulator, alternating, `--gateway-requests` each.

Every phase also reports the service's CPU per request (user + system time from /proc of
the service process and of its children, i.e. the audit writer process, each shown; the
idle rate measured just before the phase subtracted), which does not depend on how busy
the rest of the machine is, and this load generator's own CPU per request. The machine has
2 cores: the service, the emulator and this load generator (on uvloop, to take less of
them) share them with whatever else runs, so latencies include that contention; the load
average is printed after each phase. Usage: `python bench/http.py [--json]`.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as `python bench/http.py`, this file's folder comes first on sys.path and this
# module would shadow the standard library's `http` package: drop that entry.
# The folder goes back at the end, after the standard library, for `http_report`.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.append(sys.path.pop(0))

import argparse
import asyncio
import functools
import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import Any, TypeVar

import httpx
import numpy as np
import uvloop
import yaml
from http_report import report

from slaguard.service.local import free_port

_R = TypeVar("_R")
ROUTE_BODY = b'{"model":"llama3.1-8b","prompt_tokens":900,"max_new_tokens":128,"priority":"normal"}'


def spawn(args: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "slaguard", *args],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})},
    )


def wait_ok(url: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} not ready")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc); 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    """The live child processes of `pid` (the service's audit writer)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


class CpuMeter:
    """The service's CPU per request in one phase, split into its main process and its
    children (the audit writer), each net of its idle rate (loops, scraper) measured
    just before the phase."""

    def __init__(self, pid: int, idle_s: float = 2.0) -> None:
        self.pid = pid
        self.idle_s = idle_s
        self.idle_rate = (0.0, 0.0)

    def sample(self) -> tuple[float, float]:
        """(main process, children) CPU seconds so far."""
        return cpu_s(self.pid), sum(cpu_s(c) for c in children(self.pid))

    def measure_idle(self) -> tuple[float, float]:
        """CPU per second of the idle service (main, children)."""
        (m0, c0), t0 = self.sample(), time.monotonic()
        time.sleep(self.idle_s)
        (m1, c1), took = self.sample(), time.monotonic() - t0
        self.idle_rate = ((m1 - m0) / took, (c1 - c0) / took)
        return self.idle_rate

    def measure(self, requests: int, run: Callable[[], _R]) -> tuple[_R, dict[str, float]]:
        """Run one phase; its result and the CPU (us) per request: `service_cpu_us` (main
        process + children), `service_main_cpu_us`, `service_children_cpu_us`,
        `loadgen_cpu_us` (this process) and the load average after it."""
        self.measure_idle()
        (m0, c0), t0, own0 = self.sample(), time.monotonic(), time.process_time()
        result = run()
        (m1, c1), wall = self.sample(), time.monotonic() - t0
        n = max(requests, 1)
        main = max(m1 - m0 - self.idle_rate[0] * wall, 0.0) / n * 1e6
        kids = max(c1 - c0 - self.idle_rate[1] * wall, 0.0) / n * 1e6
        return result, {
            "service_cpu_us": round(main + kids, 1),
            "service_main_cpu_us": round(main, 1),
            "service_children_cpu_us": round(kids, 1),
            "loadgen_cpu_us": round((time.process_time() - own0) / n * 1e6, 1),
            "load_average_1m": round(os.getloadavg()[0], 2),
        }


async def _conn_worker(
    host: str, port: int, request: bytes, queue: asyncio.Queue[float | None], out: list[float],
    errors: list[int],
) -> None:  # fmt: skip
    reader, writer = await asyncio.open_connection(host, port)
    while (scheduled := await queue.get()) is not None:
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        await reader.readexactly(length)
        out.append(time.perf_counter() - scheduled)
        if not head.startswith(b"HTTP/1.1 200"):
            errors.append(1)
    writer.close()


async def open_loop(url: str, method: str, path: str, body: bytes, rate: float, seconds: float,
                    connections: int) -> dict[str, float]:  # fmt: skip
    """Send `rate` requests/s for `seconds` over keep-alive connections; latency p50/p99."""
    u = httpx.URL(url)
    head = f"{method} {path} HTTP/1.1\r\nhost: {u.host}\r\ncontent-type: application/json\r\n"
    request = (head + f"content-length: {len(body)}\r\n\r\n").encode() + body
    queue: asyncio.Queue[float | None] = asyncio.Queue()
    latencies: list[float] = []
    errors: list[int] = []
    workers = [
        asyncio.create_task(
            _conn_worker(str(u.host), int(u.port or 80), request, queue, latencies, errors)
        )
        for _ in range(connections)
    ]
    start = time.perf_counter()
    n = int(rate * seconds)
    for i in range(n):
        at = start + i / rate
        delay = at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        queue.put_nowait(at)
    for _ in workers:
        queue.put_nowait(None)
    await asyncio.gather(*workers)
    took = time.perf_counter() - start
    arr = np.array(latencies) * 1e3
    return {
        "requests": n,
        "achieved_rps": round(len(latencies) / took, 1),
        "p50_ms": round(float(np.percentile(arr, 50)), 3),
        "p99_ms": round(float(np.percentile(arr, 99)), 3),
        "max_ms": round(float(arr.max()), 3),
        "errors": len(errors) + (n - len(latencies)),
    }


async def ttft(client: httpx.AsyncClient, url: str) -> float:
    body = {"model": "llama3.1-8b", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 1, "stream": True}  # fmt: skip
    started = time.perf_counter()
    first = None
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
        # Read to the end like a real client: leaving after the first token would
        # close both connections and have the gateway record a failed stream.
        async for line in r.aiter_lines():
            if first is None and '"content":"' in line:
                first = time.perf_counter() - started
    if first is None:
        raise RuntimeError("no token")
    return first


async def gateway_overhead(direct: str, via: str, n: int) -> dict[str, float]:
    d: list[float] = []
    g: list[float] = []
    async with httpx.AsyncClient(timeout=30) as c:
        for _ in range(20):
            await ttft(c, direct)
            await ttft(c, via)
        for _ in range(n):
            d.append(await ttft(c, direct))
            g.append(await ttft(c, via))
    da, ga = np.array(d) * 1e3, np.array(g) * 1e3
    paired = ga - da
    return {
        "requests": n,
        "paired_overhead_p50_ms": round(float(np.percentile(paired, 50)), 3),
        "paired_overhead_p99_ms": round(float(np.percentile(paired, 99)), 3),
        "direct_p50_ms": round(float(np.percentile(da, 50)), 3),
        "direct_p99_ms": round(float(np.percentile(da, 99)), 3),
        "gateway_p50_ms": round(float(np.percentile(ga, 50)), 3),
        "gateway_p99_ms": round(float(np.percentile(ga, 99)), 3),
        "overhead_p50_ms": round(float(np.percentile(ga, 50) - np.percentile(da, 50)), 3),
        "overhead_p99_ms": round(float(np.percentile(ga, 99) - np.percentile(da, 99)), 3),
    }


async def gateway_load(via: str, n: int, concurrency: int) -> dict[str, float]:
    """`n` streamed completions through slaguard, `concurrency` at a time: enough
    requests per second that the service's CPU per request stands above its idle
    noise (the paired phase runs one request at a time, ~50/s)."""
    left = n
    started = time.perf_counter()

    async def worker(c: httpx.AsyncClient) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await ttft(c, via)

    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(timeout=30, limits=limits) as c:
        await asyncio.gather(*(worker(c) for _ in range(concurrency)))
    took = time.perf_counter() - started
    return {"requests": n, "concurrency": concurrency, "achieved_rps": round(n / took, 1)}


def stored_decisions(db: Path, expected: int, timeout_s: float = 30.0) -> int:
    """Decisions in the audit DB once the writer caught up with `expected` (or timed out)."""
    deadline = time.monotonic() + timeout_s
    stored = 0
    while time.monotonic() < deadline:
        with sqlite3.connect(db) as conn:
            stored = conn.execute("select count(*) from decisions").fetchone()[0]
        if stored >= expected:
            break
        time.sleep(0.2)
    return int(stored)


def sweep(svc: str, meter: CpuMeter, args: argparse.Namespace) -> dict[str, object]:
    """`/v1/route` at each rate, after `GET /healthz` at the same rate (the floor of this
    machine at that moment); the highest rate held at the p99 goal with no error."""
    steps = []
    best = None
    for rate in sorted(float(r) for r in args.sweep.split(",") if r):
        step: dict[str, Any] = {"offered_rps": rate}
        for name, method, path, body in (
            ("healthz", "GET", "/healthz", b""),
            ("route", "POST", "/v1/route", ROUTE_BODY),
        ):
            run = functools.partial(
                open_loop, svc, method, path, body, rate, args.sweep_seconds, args.connections
            )
            r, cpu = meter.measure(int(rate * args.sweep_seconds), lambda: uvloop.run(run()))  # noqa: B023
            step[name] = {**r, **cpu}
            time.sleep(1.0)  # let the writer and any queue drain before the next run
        steps.append(step)
        route = step["route"]
        held = route["errors"] == 0 and route["achieved_rps"] >= 0.98 * rate
        if held and route["p99_ms"] <= args.p99_goal_ms:
            best = rate
    return {"p99_goal_ms": args.p99_goal_ms, "max_rate_at_goal": best, "steps": steps}


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rate", type=float, default=2000.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument(
        "--sweep",
        default="250,500,1000,1500",
        help="comma-separated rates for the sustainable-rate search ('' skips)",
    )
    ap.add_argument("--sweep-seconds", type=float, default=5.0)
    ap.add_argument("--p99-goal-ms", type=float, default=5.0)
    ap.add_argument("--gateway-requests", type=int, default=500)
    ap.add_argument("--gateway-concurrency", type=int, default=16)
    ap.add_argument(
        "--emulator-speedup",
        type=float,
        default=1.0,
        help="faster emulated steps make the backend's own TTFT spread smaller "
        "than the gateway's overhead being measured",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()  # fmt: skip
    tmp = Path(tempfile.mkdtemp(prefix="slaguard-bench-http-"))
    emu_port, port = free_port(), free_port()
    emu = f"http://127.0.0.1:{emu_port}"
    fleet = {"targets": [
        {"id": "h100-8b", "model": "llama3.1-8b", "card": "h100", "url": emu},
        {"id": "l40s-8b", "model": "llama3.1-8b", "card": "l40s", "count": 6},
    ]}  # fmt: skip
    (tmp / "fleet.yaml").write_text(yaml.safe_dump(fleet))
    cfg = {"fleet": str(tmp / "fleet.yaml"), "db": str(tmp / "audit.db"), "port": port,
           "log_level": "warning", "telemetry": {"scrape": True, "stale_after_s": 300}}  # fmt: skip
    (tmp / "serve.yaml").write_text(yaml.safe_dump(cfg))
    emulate_args = ["emulate", "--card", "h100", "--port", str(emu_port)]
    emulate_args += ["--speedup", str(args.emulator_speedup)]
    procs = [
        spawn(emulate_args, tmp / "emu.log"),
        spawn(["serve", "--config", str(tmp / "serve.yaml")], tmp / "serve.log"),
    ]
    svc = f"http://127.0.0.1:{port}"
    load_before = os.getloadavg()
    finished = False
    try:
        wait_ok(f"{emu}/health")
        wait_ok(f"{svc}/readyz")
        for t in ["h100-8b", *(f"l40s-8b-{i}" for i in range(6))]:
            httpx.post(f"{svc}/v1/telemetry", json={"target": t, "queue_depth": 0})
        meter = CpuMeter(procs[1].pid)
        idle = meter.measure_idle()
        n = int(args.rate * args.seconds)

        def at_rate(method: str, path: str, body: bytes) -> dict[str, float]:
            return uvloop.run(open_loop(svc, method, path, body, args.rate, args.seconds,
                                        args.connections))  # fmt: skip

        base, base_cpu = meter.measure(n, lambda: at_rate("GET", "/healthz", b""))
        route, route_cpu = meter.measure(n, lambda: at_rate("POST", "/v1/route", ROUTE_BODY))
        base.update(base_cpu)
        route.update(route_cpu)
        route["decisions_in_db"] = stored_decisions(
            tmp / "audit.db", route["requests"] - route["errors"]
        )
        found = sweep(svc, meter, args) if args.sweep else None
        # Per request through the gateway: the service served the warm-up and the
        # through-slaguard half of the pairs, not the direct ones.
        gw, gw_cpu = meter.measure(
            args.gateway_requests + 20,
            lambda: uvloop.run(gateway_overhead(emu, svc, args.gateway_requests)),
        )
        gw_cpu["loadgen_cpu_us"] = round(gw_cpu["loadgen_cpu_us"] / 2, 1)  # it sent both halves
        gw.update(gw_cpu)
        n_gw, conc = args.gateway_requests, args.gateway_concurrency
        gw_load, gw_load_cpu = meter.measure(
            n_gw, lambda: uvloop.run(gateway_load(svc, n_gw, conc))
        )
        gw["at_load"] = {**gw_load, **gw_load_cpu}
        finished = True
    finally:
        for p in procs:
            p.terminate()
            p.wait(15)
        if finished:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"the run failed; its logs are kept in {tmp}", file=sys.stderr)
    result = {
        "healthz_baseline": base, "route": route, "sweep": found, "gateway": gw,
        "service_idle_cpu_pct": {"main": round(idle[0] * 100, 2),
                                 "children": round(idle[1] * 100, 2)},
        "cores": os.cpu_count(),
        "emulator_speedup": args.emulator_speedup,
        "load_average": {"before": load_before, "after": os.getloadavg()},
    }  # fmt: skip
    if args.json:
        print(json.dumps(result, indent=2))
        return
    report(result)


if __name__ == "__main__":
    main()
