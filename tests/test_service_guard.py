"""The guard inside the real service, on a simulated clock: arrivals reach the hot-spot
detector at the routing decision, and a mode changed by the CLI (another process, on the
database) restarts the TTFT baselines of the running replica.

A real service (real SQLite audit DB, real uvicorn on 127.0.0.1, background loops off so
the test drives the guard's evaluations itself on the simulated clock).
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml
from fakes.incidents import incident
from pydantic import SecretStr

from slaguard.guard.events import BreakerEvent
from slaguard.guard.guard import Guard
from slaguard.guard.samples import GuardSample
from slaguard.service.app import create_app
from slaguard.service.bootstrap import Service, build_service
from slaguard.service.config import load_config
from slaguard.service.local import ServerThread

MODEL = "llama3.1-8b"
CARDS = ("h100", "h200", "a100", "l40s")
FLEET = {
    "name": "service-guard-test",
    "targets": [{"id": f"{card}-8b", "model": MODEL, "card": card} for card in CARDS],
}
TOKEN = "service-guard-test-token"
LATENCY_S = 6.0
"""Every request of the flood test finishes this long after its routing decision."""


@dataclass
class SimClock:
    """The service's clock, moved by the test."""

    now: float

    def __call__(self) -> float:
        return self.now


@dataclass
class Served:
    service: Service
    client: httpx.Client
    clock: SimClock
    db: Path


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(FLEET))
    cfg = load_config(
        None,
        {
            "fleet": tmp_path / "fleet.yaml",
            "db": str(tmp_path / "audit.db"),
            "telemetry": {"scrape": False, "stale_after_s": 300},
            "notify_file": tmp_path / "incidents.jsonl",
        },
    )
    # behind the wall clock, so the CLI's wall-clock `since` is never before the service's
    clock = SimClock(time.time() - 5_000.0)
    service = build_service(cfg, clock=clock)
    app = create_app(
        service.runtime, admin_token=SecretStr(TOKEN), readiness=service.readiness,
        run_loops=False,
    )  # fmt: skip
    with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=10) as client:
        yield Served(service, client, clock, tmp_path / "audit.db")
    service.close()


def _push_telemetry(s: Served) -> None:
    for t in s.service.runtime.fleet:
        r = s.client.post("/v1/telemetry", json={"target": t.id, "queue_depth": 0})
        assert r.status_code == 200, r.text


def _first_trip(events_by_s: dict[float, list[object]]) -> float | None:
    for at_s, events in sorted(events_by_s.items()):
        if any(isinstance(e, BreakerEvent) and e.signal == "trip" for e in events):
            return at_s
    return None


def test_a_flood_trips_at_its_arrivals_not_a_latency_later(served: Served) -> None:
    """8 req/s of distinct prompts; from t=30 s 4 req/s more share one prefix (a third of
    the traffic). Every request finishes 6 s after it was routed. The service counts the
    flood at its routing decisions, so its breaker trips a latency sooner than the same
    detector counting completions (the fallback, fed the same requests here)."""
    s, replica = served, served.service.modes.replica
    t0, flood_s, end_s = s.clock.now, 30.0, 50.0
    completions_only = Guard(replica.guard.config)
    routed: list[tuple[float, str, str, str]] = []  # finish at, decision id, target, prefix
    by_service: dict[float, list[object]] = {}
    by_completions: dict[float, list[object]] = {}
    step, n = 1.0 / 8, 0
    for tick in range(int(end_s / step)):
        rel = tick * step
        s.clock.now = t0 + rel
        if tick % 8 == 0:
            _push_telemetry(s)
        prefixes = [f"p{n}"] + (["hot"] if rel >= flood_s and tick % 2 == 0 else [])
        for prefix in prefixes:
            n += 1
            body = {"model": MODEL, "prompt_tokens": 400, "max_new_tokens": 20,
                    "prefix_id": prefix}  # fmt: skip
            r = s.client.post("/v1/route", json=body)
            assert r.status_code == 200 and r.json()["target"] is not None, r.text
            routed.append((s.clock.now + LATENCY_S, r.json()["decision_id"],
                           r.json()["target"], prefix))  # fmt: skip
        while routed and routed[0][0] <= s.clock.now:
            _, decision_id, target, prefix = routed.pop(0)
            fb = {"decision_id": decision_id, "ttft_s": 0.2, "e2e_s": LATENCY_S}
            assert s.client.post("/v1/feedback", json=fb).status_code == 200
            card = target.removesuffix("-8b")
            completions_only.observe(
                GuardSample(s.clock.now, target, card, MODEL, True, 1.0, 0.2, prefix_id=prefix)
            )
        if tick % 8 == 7:  # the 1 s detector job
            at = s.clock.now
            by_service[at - t0] = list(replica.evaluate(at))
            by_completions[at - t0] = list(completions_only.evaluate(at))
    hot_spot = next(r for r in replica.reports if r.detector == "hot_spot")
    assert hot_spot.evidence["counts"] == "arrivals"
    service_trip, fallback_trip = _first_trip(by_service), _first_trip(by_completions)
    assert service_trip is not None and fallback_trip is not None, (service_trip, fallback_trip)
    # measured: 8 s (the decayed share passes 20 % after 6 s, then 3 bad evaluations)
    # against 14 s counting completions
    assert flood_s < service_trip <= flood_s + 10.0, service_trip
    assert fallback_trip - service_trip >= LATENCY_S - 1.0, (service_trip, fallback_trip)


def _feed_until_scored(s: Served, seconds: int) -> dict[str, float]:
    """One finished request per target every 0.25 s (TTFT per card, steady), the 1 s
    detector job each second; the leader's jitter Z-scores at the end."""
    replica = s.service.modes.replica
    speed = {"h100": 0.10, "h200": 0.09, "a100": 0.16, "l40s": 0.25}
    for second in range(seconds):
        for quarter in range(4):
            s.clock.now += 0.25
            for t in s.service.runtime.fleet:
                wobble = 1.0 + 0.05 * ((second * 4 + quarter + t.index) % 5)
                s.service.modes.on_outcome(
                    GuardSample(s.clock.now, t.id, t.card.id, MODEL, True, 2.0,
                                speed[t.card.id] * wobble)
                )  # fmt: skip
        replica.evaluate(s.clock.now)
    return dict(replica.router.jitter_z)


def _cli(s: Served, *args: str) -> str:
    exe = Path(sys.executable).with_name("slaguard")
    done = subprocess.run(
        [str(exe), *args, "--actor", "ci", "--db", str(s.db)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_mode_changed_by_the_cli_restarts_the_replicas_baselines(served: Served) -> None:
    """The change score needs a per-target baseline a window (300 s) old; a new learned
    share restarts the baselines, so right after one no target has a change score (the
    fleet has one target per card type: no peer score either)."""
    s = served
    replica = s.service.modes.replica
    assert replica.is_leader and replica.current().label == "round_robin"
    window = int(replica.guard.config.ttft_zscore.window_s)
    assert set(_feed_until_scored(s, window + 20)) == {f"{c}-8b" for c in CARDS}
    # 1. the CLI resumes (share 0 -> 10 %); before the mode sync sees it, an operator
    # asks this replica for the same stage: the stored state is adopted, nothing changes
    said = _cli(s, "resume", "--stage", "10", "--reason", "canary")
    assert said == f"fleet resumed at rollout(10) by ci (canary); database sqlite:///{s.db}\n"
    r = s.client.post(
        "/v1/mode",
        json={"action": "resume", "stage_pct": 10, "reason": "canary"},
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert r.status_code == 200 and r.json()["changed"] is False, r.text
    assert replica.current().label == "rollout(10)"
    assert _feed_until_scored(s, 1) == {}
    # 2. scored again a window later; the CLI rolls back (10 % -> 0), the sync adopts it
    assert len(_feed_until_scored(s, window + 20)) == len(CARDS)
    _cli(s, "rollback", "--reason", "drill")
    assert replica.sync(s.clock.now).adopted is not None
    assert replica.current().label == "round_robin"
    assert _feed_until_scored(s, 1) == {}


def test_the_guard_section_of_the_config_reaches_the_detectors(tmp_path: Path) -> None:
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(FLEET))
    guard = {"ttft_zscore": {"window_s": 20, "slice_s": 2, "tier_window_s": 20}}
    cfg = load_config(
        None,
        {"fleet": tmp_path / "fleet.yaml", "db": str(tmp_path / "audit.db"), "guard": guard},
    )
    service = build_service(cfg)
    try:
        config = service.modes.replica.guard.config
        assert (config.ttft_zscore.window_s, config.ttft_zscore.slice_s) == (20.0, 2.0)
        assert config.hot_spot.trip_share == 0.2  # the rest keeps its defaults
    finally:
        service.close()


def test_a_route_client_reports_the_first_token_and_it_counts_once(served: Served) -> None:
    """`/v1/first-token` hands the TTFT detectors a routed request's TTFT while its answer
    still streams; its `/v1/feedback` later does not count it again."""
    s, replica = served, served.service.modes.replica
    _push_telemetry(s)
    body = {"model": MODEL, "prompt_tokens": 400, "max_new_tokens": 20}
    out = s.client.post("/v1/route", json=body).json()
    target, decision_id = out["target"], out["decision_id"]
    counts = replica.guard.ttft._hist.count
    replica.evaluate(s.clock.now)
    before = counts(target)
    r = s.client.post("/v1/first-token", json={"decision_id": decision_id, "ttft_s": 0.3})
    assert r.status_code == 200 and r.json() == {"decision_id": decision_id, "fed": True}
    replica.evaluate(s.clock.now)
    assert counts(target) == before + 1
    again = s.client.post("/v1/first-token", json={"decision_id": decision_id, "ttft_s": 0.4})
    assert again.json()["fed"] is False, "the guard already has this TTFT"
    s.clock.now += 2.0
    fb = {"decision_id": decision_id, "ttft_s": 0.3, "e2e_s": 2.0}
    assert s.client.post("/v1/feedback", json=fb).json()["recorded"] is True
    replica.evaluate(s.clock.now)
    assert counts(target) == before + 1, "the feedback did not count the TTFT again"
    late = s.client.post("/v1/first-token", json={"decision_id": decision_id, "ttft_s": 0.3})
    assert late.json()["fed"] is False, "finished"
    missing = s.client.post("/v1/first-token", json={"decision_id": "never-routed", "ttft_s": 1})
    assert missing.status_code == 404
    assert missing.json()["error"].startswith("decision_id: no decision 'never-routed'")
    bad = s.client.post("/v1/first-token", json={"decision_id": decision_id, "ttft_s": -1})
    assert bad.status_code == 422 and bad.json()["error"].startswith("ttft_s")


def test_without_the_first_token_the_feedback_brings_the_ttft(served: Served) -> None:
    """The baseline of the test above: a request reported only with `/v1/feedback` reaches
    the TTFT detectors at completion, once."""
    s, replica = served, served.service.modes.replica
    _push_telemetry(s)
    body = {"model": MODEL, "prompt_tokens": 400, "max_new_tokens": 20}
    out = s.client.post("/v1/route", json=body).json()
    counts = replica.guard.ttft._hist.count
    replica.evaluate(s.clock.now)
    before = counts(out["target"])
    fb = {"decision_id": out["decision_id"], "ttft_s": 0.3, "e2e_s": 2.0}
    assert s.client.post("/v1/feedback", json=fb).status_code == 200
    replica.evaluate(s.clock.now)
    assert counts(out["target"]) == before + 1


def test_the_service_log_says_when_the_guard_demotes_a_target(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    """The demo's logs were empty: nothing in the service said a target was demoted (or a
    fleet switched); only the audit rows and a gauge knew."""
    s, modes = served, served.service.modes
    speed = {"h100": 0.10, "h200": 0.09, "a100": 0.16, "l40s": 0.25}

    async def run() -> None:
        for second in range(420):
            for quarter in range(4):
                s.clock.now += 0.25
                for t in s.service.runtime.fleet:
                    slow = 8.0 if t.card.id == "h200" and second >= 330 else 1.0
                    wobble = 1.0 + 0.05 * ((second * 4 + quarter + t.index) % 5)
                    modes.on_outcome(
                        GuardSample(s.clock.now, t.id, t.card.id, MODEL, True, 2.0,
                                    speed[t.card.id] * wobble * slow)
                    )  # fmt: skip
            await modes.evaluate(s.clock.now)
        await modes.wait_for_delivery()

    with caplog.at_level(logging.INFO, logger="slaguard"):
        asyncio.run(run())
    said = [(r.levelno, r.getMessage()) for r in caplog.records]
    demoted = [m for level, m in said if "demotes target:h200-8b" in m]
    assert demoted and demoted[0].startswith("guard ttft_zscore demotes target:h200-8b: "), said
    assert all(level == logging.WARNING for level, m in said if m in demoted)


def test_the_incident_message_resumes_the_services_own_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The resume command in an incident message named no database, so an on-call pasting
    it elsewhere resumed ./slaguard.db there; a relative SQLite path is made absolute."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(FLEET))
    cfg = load_config(
        None,
        {"fleet": "fleet.yaml", "db": "audit.db", "notify_file": "incidents.jsonl",
         "telemetry": {"scrape": False}},
    )  # fmt: skip
    service = build_service(cfg)
    try:
        notifier = service.modes.replica.notifier
        assert notifier.send(incident()).ok
    finally:
        service.close()
    text = (tmp_path / "incidents.jsonl").read_text()
    assert f"--db sqlite:///{tmp_path / 'audit.db'}" in text, text
