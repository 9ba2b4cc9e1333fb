"""How the gateway judges a backend's answer read whole (a non-streamed one, or an error
status): whose fault a 4xx is, and whether a 200 is an answer at all."""

from __future__ import annotations

import json

from slaguard.audit.records import RequestStatus
from slaguard.service.pending import Routed
from slaguard.service.runtime import ServiceRuntime
from slaguard.service.sse_meter import usage_count

FLEET_REFUSALS = frozenset({401, 403, 408, 429})
"""4xx answers that are the fleet's doing, not the request's: slaguard's credentials
refused, the backend timed out or shed load. Any other 4xx is the client's mistake."""


def status_of_code(code: int) -> RequestStatus:
    if code < 400:
        return "ok"
    return "client_error" if code < 500 and code not in FLEET_REFUSALS else "failed"


def finish_whole(
    rt: ServiceRuntime,
    routed: Routed,
    decide_s: float,
    e2e_s: float,
    code: int,
    content: bytes,
    media: str,
) -> None:
    """Record a whole answer: no first-token time; tokens from `usage`. A success whose
    body is no JSON object (a proxy's HTML page) is the backend's failure: it was
    recorded `ok`, the SLA met, while the client got nothing it could read."""
    entry = routed.entry
    status = status_of_code(code)
    if status == "client_error":
        rt.gateway_metrics.client_errors.inc()
    usage: object = None
    if code < 400:
        try:
            doc = json.loads(content)
        except ValueError:
            doc = None
        if isinstance(doc, dict):
            usage = doc.get("usage")
        else:
            status = "failed"
            assert entry.target_index is not None
            target = rt.fleet.targets[entry.target_index].id
            routed.decision.explanation.notes.append(
                f"gateway: {target} answered HTTP {code} with no JSON object "
                f"({media.split(';')[0]}, {len(content)} bytes)"
            )
    rt.record_decision(routed, decide_s)
    rt.finish(
        entry,
        status,
        ttft_s=None,
        tpot_s=None,
        e2e_s=e2e_s,
        prompt_tokens=usage_count(usage, "prompt_tokens"),
        completion_tokens=usage_count(usage, "completion_tokens"),
    )
