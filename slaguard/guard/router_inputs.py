"""The router inputs the guard leader publishes: its jitter Z-scores and demotions, taken
by every other replica at its 500 ms sync so that all routers avoid the same targets."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from slaguard.scheduler.state import FleetState

log = logging.getLogger(__name__)

ROUTER_MAX_AGE_S = 3.0
"""Router inputs published longer ago than this (a leader gone quiet) are dropped."""
INHERIT_MAX_AGE_S = 300.0
"""A new leader takes the last leader's demotions if they are younger than this (the TTFT
window): its predecessor may have died seconds before the lease passed on."""


@dataclass(frozen=True, slots=True)
class RouterInputs:
    """The leader's jitter Z-scores and demoted targets: computed on the leader, taken
    by the others from what the leader publishes at each sync (at most ~1 s behind)."""

    jitter_z: dict[str, float] = field(default_factory=dict)
    demoted: frozenset[str] = frozenset()
    fleet: str | None = None
    """The leader's `Fleet.digest` (None from versions before it was published)."""

    def to_text(self, replica_id: str, at_s: float) -> str:
        z = {t: round(v, 2) for t, v in sorted(self.jitter_z.items())}
        body = {
            "replica": replica_id, "at": at_s, "jitter_z": z, "demoted": sorted(self.demoted),
            "fleet": self.fleet,
        }  # fmt: skip
        return json.dumps(body, separators=(",", ":"))

    @classmethod
    def from_text(
        cls,
        text: str | None,
        now_s: float,
        own_id: str | None,
        max_age_s: float = ROUTER_MAX_AGE_S,
    ) -> RouterInputs:
        """What another replica published (`own_id` None: anyone); empty when absent,
        ours, older than `max_age_s` or unreadable."""
        got = parse_published(text)
        if got is None:
            return cls()
        replica, at_s, inputs = got
        return cls() if replica == own_id or now_s - at_s > max_age_s else inputs

    def inheritable(self, fleet: str | None) -> frozenset[str]:
        """The demotions a new leader routing with `fleet` takes from these (its
        predecessor's, read with `INHERIT_MAX_AGE_S`): none when published for another
        fleet file, whose target ids may name other cards or URLs (unknown on either side:
        taken, as from versions that published no digest)."""
        if self.fleet is None or fleet is None or self.fleet == fleet:
            return self.demoted
        if self.demoted:
            log.info(
                "the last guard leader's demotions (%s) not taken: published for another fleet"
                " file (digest %s, this replica %s)",
                ", ".join(sorted(self.demoted)), self.fleet, fleet,
            )  # fmt: skip
        return frozenset()

    def apply(self, state: FleetState, index_by_id: Mapping[str, int]) -> None:
        """Into a router's fleet picture: a target without a score gets 0 (all of them when
        nothing fresh was published), never a stale one."""
        state.set_jitter({index: self.jitter_z.get(t, 0.0) for t, index in index_by_id.items()})
        for target_id, index in index_by_id.items():
            state.set_demoted(index, target_id in self.demoted)


def parse_published(text: str | None) -> tuple[str, float, RouterInputs] | None:
    """(publishing replica, when, inputs) of a published text; None when absent or
    unreadable (said at WARNING)."""
    if not text:
        return None
    try:
        body = json.loads(text)
        z = {str(t): float(v) for t, v in body["jitter_z"].items()}
        fleet = body.get("fleet")
        inputs = RouterInputs(
            z, frozenset(str(t) for t in body["demoted"]), None if fleet is None else str(fleet)
        )
        return str(body["replica"]), float(body["at"]), inputs
    except (ValueError, KeyError, TypeError, AttributeError):
        log.warning("unreadable router inputs from the guard leader ignored")
        return None
