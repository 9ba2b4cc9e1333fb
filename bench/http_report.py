"""The human-readable tables of `bench/http.py` (its `--json` output, printed)."""

from __future__ import annotations

from typing import Any


def cpu_text(r: dict[str, Any]) -> str:
    """Service CPU per request (main process + audit writer), the load generator's, load."""
    return (
        f"{r['service_cpu_us']:>7} ({r['service_main_cpu_us']} + {r['service_children_cpu_us']})"
        f" loadgen {r['loadgen_cpu_us']:>6} load {r['load_average_1m']:.2f}"
    )


def report(result: dict[str, Any]) -> None:
    """The human-readable tables (CPU in us per request: service total (main process +
    audit writer process), this load generator's, and the 1-minute load average)."""
    base, route, found, gw = (result[k] for k in ("healthz_baseline", "route", "sweep", "gateway"))
    print(f"{'endpoint':<22}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'errors':>8}"
          f"   service CPU us/req (main + writer), loadgen us/req, load")  # fmt: skip
    for name, r in (("GET /healthz (floor)", base), ("POST /v1/route", route)):
        print(f"{name:<22}{r['achieved_rps']:>9}{r['p50_ms']:>9}{r['p99_ms']:>9}"
              f"{r['max_ms']:>9}{r['errors']:>8}   {cpu_text(r)}")  # fmt: skip
    print(f"decisions in the audit DB: {route['decisions_in_db']} of {route['requests']}")
    if found:
        print(f"\n/v1/route sweep (goal p99 <= {found['p99_goal_ms']} ms)")
        for st in found["steps"]:
            h, r = st["healthz"], st["route"]
            print(
                f"  {st['offered_rps']:>6.0f}/s route {r['achieved_rps']:>7}/s p50 {r['p50_ms']:>8}"
                f" p99 {r['p99_ms']:>9} err {r['errors']} CPU {cpu_text(r)}"
                f" | healthz p50 {h['p50_ms']:>8} p99 {h['p99_ms']:>9} CPU {h['service_cpu_us']}"
            )
        print(f"  highest rate at the goal: {found['max_rate_at_goal']}")
    print(f"\nTTFT, 1-token stream, {gw['requests']} each, emulator speedup "
          f"{result['emulator_speedup']}   p50 ms   p99 ms")  # fmt: skip
    print(f"  direct to emulator            {gw['direct_p50_ms']:>8}{gw['direct_p99_ms']:>9}")
    print(f"  through slaguard              {gw['gateway_p50_ms']:>8}{gw['gateway_p99_ms']:>9}")
    print(f"  overhead                      {gw['overhead_p50_ms']:>8}{gw['overhead_p99_ms']:>9}")
    print(f"  overhead, paired requests     {gw['paired_overhead_p50_ms']:>8}"
          f"{gw['paired_overhead_p99_ms']:>9}")  # fmt: skip
    print(f"  CPU per request through the gateway, one at a time: {cpu_text(gw)}")
    at = gw["at_load"]
    print(f"  CPU per request through the gateway, {at['concurrency']} at a time "
          f"({at['achieved_rps']}/s): {cpu_text(at)}")  # fmt: skip
    load = result["load_average"]
    idle = result["service_idle_cpu_pct"]
    print(
        f"\nservice idle CPU {idle['main']} % (+ writer {idle['children']} %); "
        f"{result['cores']} cores; load average before {load['before'][0]:.2f}, "
        f"after {load['after'][0]:.2f}"
    )
