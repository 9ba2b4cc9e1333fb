"""The journal line format: how an acknowledged record is written and read back.

    B<decision JSON array>\\x02<escaped arrays>\\n  a decision with the scheduler's Explanation
    D<header JSON>\\x02<explanation JSON>\\n         a decision with a mapping explanation
    O<outcome JSON>\\n                               an outcome
    F<fleet JSON>\\n                                 a fleet (a segment header, not a record)
    R<decision JSON array>\\x02<base64 arrays>\\n    `B` before its escaping, read only
    X<header JSON>\\x02<raw JSON>\\n               `R`'s predecessor, read only

(`R` and `X`: `lines_legacy`; reading lines back into rows: `lines_decode`.) `B` keeps the
routing path cheap: a routed decision is journalled straight from the scheduler's `Decision`
(no `DecisionRecord` built) as one JSON array (`RawDecision`: the row's fields and the
explanation's scalars) and the router's arrays as one blob of their bytes (layout in
`RawDecision`), joined straight from the arrays' memory and escaped so that it holds no
newline (`escape_blob`: two `bytes.replace`, a quarter of base64's cost, and a smaller line
to `write()`). The writer process renders it to the stored JSON with
`scheduler.explain.render_explanation`, using the `F` line (target ids, card ids, static GB)
its fleet key names; every segment holding a `B`, `R` or `X` line holds that fleet's `F`
line before it, so any segment decodes alone. A `D` explanation is JSON text already (JSON
never holds a raw control byte such as \\x02 or \\x1b): passed through.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec
import numpy as np

from slaguard.audit.jsonenc import json_encoder
from slaguard.audit.records import AuditRecord, DecisionRecord
from slaguard.fleet.fleet import Fleet
from slaguard.scheduler.explain import Explanation, ExplanationArrays

DECISION_TAG = b"D"
RAW_DECISION_TAG = b"B"
OUTCOME_TAG = b"O"
FLEET_TAG = b"F"
EXPLANATION_SEPARATOR = b"\x02"
ESCAPE, ESCAPED_ESCAPE, ESCAPED_NEWLINE = b"\x1b", b"\x1b1", b"\x1b2"


def escape_blob(blob: bytes) -> bytes:
    """Binary bytes as a line's tail: every ESC becomes ESC "1", then every newline ESC "2"."""
    return blob.replace(ESCAPE, ESCAPED_ESCAPE).replace(b"\n", ESCAPED_NEWLINE)


def unescape_blob(blob: bytes) -> bytes:
    """`escape_blob` undone; ValueError if an ESC starts no escape (a damaged line).

    Every ESC in an escaped blob starts a pair, so the newline pairs are found first
    without ambiguity, and the ESC pairs left are exactly the escaped ESCs."""
    escapes = blob.count(ESCAPE)
    if escapes and escapes != blob.count(ESCAPED_ESCAPE) + blob.count(ESCAPED_NEWLINE):
        raise ValueError("raw explanation arrays: an escape byte starts no escape")
    return blob.replace(ESCAPED_NEWLINE, b"\n").replace(ESCAPED_ESCAPE, ESCAPE)


class DecisionHeader(msgspec.Struct):
    """A decision's fields other than the explanation, as journalled."""

    request_id: str
    decided_at_s: float
    model_id: str
    priority: str
    prompt_tokens: int
    max_new_tokens: int
    deadline_s: float
    policy_arm: str
    fleet_mode: str
    outcome: str
    target_id: str | None
    card_type: str | None
    weights_version: str
    config_hash: str
    decision_latency_s: float


class OutcomeLine(msgspec.Struct):
    """An outcome as journalled."""

    request_id: str
    finished_at_s: float
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None
    status: str
    sla_met: bool | None


class FleetLine(msgspec.Struct, array_like=True):
    """What rendering needs of a fleet, journalled once per segment under its key."""

    key: str
    target_ids: list[str]
    card_ids: list[str]
    static_gb: list[float]


class RawDecision(DecisionHeader, array_like=True):
    """An `R` line's JSON array: the decision row's fields (`DecisionHeader`'s, in its
    order), then the explanation's scalars and the counts its arrays are cut by.

    The blob after it holds, in native byte order and C order, without padding: candidates
    int64[n], reasons int8[n], components float64[n, n_components] unless n_components is
    -1, scores float64[n] if has_scores, v_used_gb float64[n], limit_gb float64[n]
    (n = n_candidates)."""

    fleet: str
    policy: str
    explanation_weights_version: str
    n_candidates: Annotated[int, msgspec.Meta(ge=0)]
    n_components: Annotated[int, msgspec.Meta(ge=-1)]
    has_scores: bool
    v_peak_gb: float
    weights: tuple[float, ...]
    prefiltered_out: int
    chosen: int | None
    notes: list[str]
    spill: dict[str, Any] | None
    degraded_from: str | None


I64, I8, F64 = np.dtype(np.int64), np.dtype(np.int8), np.dtype(np.float64)
_LAYOUT: tuple[np.dtype[Any], ...] = (I64, I8, F64, F64, F64, F64)
_ABSENT = np.empty(0, F64)


def raw_blob(e: ExplanationArrays) -> bytes:
    """The arrays' bytes in `RawDecision`'s layout: read straight from their memory when
    it already is the layout (the scheduler's arrays), else converted."""
    c, r, v, lim = e.candidates, e.reasons, e.v_used_gb, e.limit_gb
    k = _ABSENT if e.components is None else e.components
    s = _ABSENT if e.scores is None else e.scores
    if (
        c.dtype is I64 and r.dtype is I8 and k.dtype is F64 and s.dtype is F64
        and v.dtype is F64 and lim.dtype is F64
    ):  # fmt: skip
        try:
            return b"".join((c, r, k, s, v, lim))  # type: ignore[arg-type]  # numpy stubs: 3.12+
        except TypeError:
            pass  # a strided view exports no flat buffer
    arrays = (c, r, k, s, v, lim)
    return b"".join(a.astype(t, copy=False).tobytes() for a, t in zip(arrays, _LAYOUT, strict=True))


HEAD_FIELDS = len(DecisionHeader.__struct_fields__)


@dataclass(frozen=True, slots=True)
class FleetLabels:
    target_ids: tuple[str, ...]
    card_ids: tuple[str, ...]
    static_gb: np.ndarray


def explanation_dict(record: DecisionRecord) -> Mapping[str, Any]:
    """The explanation as a mapping: as given, or the producer object's `to_dict()`."""
    explanation = record.explanation
    return explanation if isinstance(explanation, Mapping) else explanation.to_dict()


def _head(record: DecisionRecord) -> tuple[Any, ...]:
    return (
        record.request_id, record.decided_at_s, record.model_id, record.priority,
        record.prompt_tokens, record.max_new_tokens, record.deadline_s,
        record.policy_arm, record.fleet_mode, record.outcome, record.target_id,
        record.card_type, record.weights_version, record.config_hash,
        record.decision_latency_s,
    )  # fmt: skip


def encode_record(record: AuditRecord) -> bytes:
    """One `D` or `O` journal line (the explanation rendered here; see `JournalEncoder`)."""
    if isinstance(record, DecisionRecord):
        return (
            DECISION_TAG
            + json_encoder.encode(DecisionHeader(*_head(record)))
            + EXPLANATION_SEPARATOR
            + json_encoder.encode(explanation_dict(record))
            + b"\n"
        )
    return OUTCOME_TAG + json_encoder.encode(record) + b"\n"


def fleet_header(fleet: Fleet) -> tuple[str, bytes]:
    """(fleet key, `F` line): the key hashes exactly what rendering reads."""
    ids, cards, static = list(fleet.target_ids), list(fleet.card_ids), fleet.static_gb_array
    digest = hashlib.blake2b(json_encoder.encode([ids, cards]), digest_size=8)
    digest.update(static.tobytes())
    key = digest.hexdigest()
    return key, FLEET_TAG + json_encoder.encode(FleetLine(key, ids, cards, static.tolist())) + b"\n"


class JournalEncoder:
    """Records -> journal lines on the routing path; a scheduler `Explanation` is
    journalled raw (`B`), never rendered here."""

    def __init__(self) -> None:
        self._fleet: tuple[Fleet, tuple[str, bytes]] | None = None
        """The fleet last seen and its header (one fleet is live at a time)."""
        self._weights: tuple[tuple[float, ...], msgspec.Raw] = ((), msgspec.Raw(b"[]"))
        """The weights last seen and their JSON (one tuple per weights version; floats
        are the dearest thing to encode)."""

    def encode(self, record: AuditRecord) -> tuple[bytes, tuple[str, bytes] | None]:
        """(line, segment header it needs or None)."""
        if isinstance(record, DecisionRecord) and isinstance(record.explanation, Explanation):
            return self.encode_raw(_head(record), record.explanation)
        return encode_record(record), None

    def encode_raw(
        self, head: tuple[Any, ...], explanation: Explanation
    ) -> tuple[bytes, tuple[str, bytes]]:
        """(`B` line, its fleet's segment header) for a row's fields (`DecisionHeader`
        order) and its explanation."""
        if len(head) != HEAD_FIELDS:
            raise TypeError(f"decision head has {len(head)} fields, expected {HEAD_FIELDS}")
        e = explanation
        cached = self._fleet
        if cached is None or cached[0] is not e.fleet:
            cached = self._fleet = (e.fleet, fleet_header(e.fleet))
        header = cached[1]
        weights = self._weights
        if weights[0] is not e.weights:
            weights = self._weights = (e.weights, msgspec.Raw(json_encoder.encode(e.weights)))
        comps, chosen = e.components, e.chosen
        tail = (
            header[0], e.arm, e.weights_version, len(e.candidates),
            -1 if comps is None else comps.shape[1], e.scores is not None, e.v_peak_gb,
            weights[1], e.prefiltered_out, None if chosen is None else int(chosen), e.notes,
            e.spill, e.degraded_from,
        )  # fmt: skip
        line = b"".join((
            RAW_DECISION_TAG, json_encoder.encode(head + tail), EXPLANATION_SEPARATOR,
            escape_blob(raw_blob(e)), b"\n",
        ))  # fmt: skip
        return line, header
