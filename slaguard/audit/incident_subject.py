"""Which targets an incident's subject covers, so its plot draws them first.

The detectors name their subject in one of a few forms (`guard/`): `target:X` (the TTFT
Z-score per target), `card:Y` (the card tier test, its evidence naming the model the
tier serves), `fleet` (the fleet-wide TTFT trip, its evidence listing the anomalous
targets), `model:M` or `model:M@v` (a young release) and `prefix:P` (a hot prompt). The
decisions record no prefix, and an Alertmanager rollback's subject is alert names: those
cover no target this can name.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import pandas as pd  # type: ignore[import-untyped]
from sqlalchemy import Engine, select

from slaguard.audit.group_stats import decided_between
from slaguard.audit.models import Decision


def served_models(engine: Engine, since: datetime, until: datetime) -> pd.DataFrame:
    """target_id, card_type, model_id: the model each target served in [since, until).
    A degraded decision names the model asked for, not the one its target serves: left
    out, an 8B target given degraded 70B requests joined the 70B card tiers."""
    with engine.connect() as conn:
        return pd.read_sql(
            select(Decision.target_id, Decision.card_type, Decision.model_id)
            .where(
                *decided_between(since, until),
                Decision.target_id.is_not(None),
                Decision.outcome != "degraded",
            )
            .distinct()
            .order_by(Decision.target_id, Decision.model_id),
            conn,
        )


def _verdict_evidence(subject: str, evidence: Mapping[str, Any]) -> Mapping[str, Any]:
    """The evidence of the verdict that named `subject`: the service stores the opening
    verdicts as a list (`verdicts`), a simulated run the first one's evidence itself."""
    for verdict in evidence.get("verdicts") or []:
        if isinstance(verdict, Mapping) and verdict.get("subject") == subject:
            found = verdict.get("evidence")
            return found if isinstance(found, Mapping) else {}
    return evidence


def subject_targets(subject: str, evidence: Mapping[str, Any], served: pd.DataFrame) -> list[str]:
    """The targets `subject` covers, sorted; none for a subject naming no target.
    `served` is `served_models` of the incident's window."""
    kind, _, name = subject.partition(":")
    detail = _verdict_evidence(subject, evidence)
    if subject == "fleet":
        named = detail.get("anomalous_targets") or []
        return sorted({str(t["target"]) for t in named if isinstance(t, Mapping)})
    if kind == "target":
        return [name]
    if kind == "card":
        rows = served[served["card_type"] == name]
        if isinstance(detail.get("model"), str):
            rows = rows[rows["model_id"] == detail["model"]]
    elif kind == "model":
        rows = served[served["model_id"] == name.partition("@")[0]]
    else:
        return []
    return sorted(set(rows["target_id"]))
