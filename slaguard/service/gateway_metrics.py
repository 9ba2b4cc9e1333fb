"""The gateway's own counters, on the service's registry."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter


class GatewayMetrics:
    """The gateway's own counters (on the service registry)."""

    def __init__(self, registry: CollectorRegistry, target_ids: Iterable[str]) -> None:
        self.retries = Counter(
            "slaguard_gateway_retries_total",
            "Requests re-sent to the next-best target after a failure before the first byte.",
            registry=registry,
        )
        self.upstream_failures = Counter(
            "slaguard_gateway_upstream_failures_total",
            "Backend failures seen by the gateway, before or after the first answer byte.",
            ["stage", "target"],
            registry=registry,
        )
        self.client_errors = Counter(
            "slaguard_gateway_client_errors_total",
            "Requests a backend refused as the client's mistake (a 4xx such as 400): relayed "
            "and audited, judged by no SLA.",
            registry=registry,
        )
        self.client_cancels = Counter(
            "slaguard_gateway_client_cancels_total",
            "Requests whose client left before the end of the answer (status cancelled): "
            "judged on the first token, or a miss if the client waited past the deadline.",
            registry=registry,
        )
        self.ejections = Counter(
            "slaguard_gateway_ejections_total",
            "Times a target was marked unhealthy for gateway.eject_s after "
            "gateway.eject_after_failures consecutive failures before the first byte.",
            ["target"],
            registry=registry,
        )
        targets = list(target_ids)
        for stage in ("before_first_byte", "after_first_byte"):
            for target in targets:
                self.upstream_failures.labels(stage, target)
        for target in targets:
            self.ejections.labels(target)
