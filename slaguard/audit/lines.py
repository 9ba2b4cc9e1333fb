"""The journal line format: how an acknowledged record is written and read back.

    B<decision JSON array>\\x02<escaped arrays>\\n  a decision with the scheduler's Explanation
    D<header JSON>\\x02<explanation JSON>\\n         a decision with a mapping explanation
    O<outcome JSON>\\n                               an outcome
    F<fleet JSON>\\n                                 a fleet (a segment header, not a record)
    R<decision JSON array>\\x02<base64 arrays>\\n    `B` before its escaping, read only
    X<header JSON>\\x02<raw JSON>\\n               `R`'s predecessor, read only

(`R` and `X`: `lines_legacy`.) `B` keeps the routing path cheap: a routed decision is
journalled straight from the scheduler's `Decision` (no `DecisionRecord` built) as one
JSON array (`RawDecision`: the row's fields and the explanation's scalars) and the
router's arrays as one blob of their bytes (layout in `RawDecision`), joined straight
from the arrays' memory and escaped so that it holds no newline (`escape_blob`: two
`bytes.replace`, a quarter of base64's cost, and a smaller line to `write()`). The
writer process renders it to the stored JSON with `scheduler.explain.render_explanation`,
using the `F` line (target ids, card ids, static GB) its fleet key names; every segment
holding a `B`, `R` or `X` line holds that fleet's `F` line before it, so any segment
decodes alone. A `D` explanation is JSON text already (JSON never holds a raw control
byte such as \\x02 or \\x1b): passed through.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

import msgspec
import numpy as np

from slaguard.audit.lines_legacy import (
    BASE64_RAW_DECISION_TAG,
    LEGACY_RAW_DECISION_TAG,
    base64_blob,
    legacy_arrays,
)
from slaguard.audit.models import utc_from_unix
from slaguard.audit.records import AuditRecord, DecisionRecord
from slaguard.fleet.fleet import Fleet
from slaguard.scheduler.explain import Explanation, ExplanationArrays, render_explanation

log = logging.getLogger(__name__)

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
    sla_met: bool


def _encode_hook(value: object) -> object:
    """JSON for any Mapping (msgspec itself takes dicts only)."""
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


json_encoder = msgspec.json.Encoder(enc_hook=_encode_hook)
"""Compact JSON for records, explanations and evidence."""


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


_decode_header = msgspec.json.Decoder(DecisionHeader).decode
_decode_outcome = msgspec.json.Decoder(OutcomeLine).decode
_decode_fleet = msgspec.json.Decoder(FleetLine).decode
_decode_raw = msgspec.json.Decoder(RawDecision).decode


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


def _cut(blob: bytes, start: int, count: int, dtype: np.dtype[Any]) -> tuple[np.ndarray, int]:
    end = start + count * dtype.itemsize
    if end > len(blob):
        raise ValueError(f"raw explanation arrays end at byte {len(blob)}, expected >= {end}")
    return np.frombuffer(blob, dtype, count, start), end


def raw_arrays(r: RawDecision, blob: bytes) -> ExplanationArrays:
    """An `R` line's arrays cut from its blob (a length that disagrees is an error)."""
    n, k = r.n_candidates, r.n_components
    candidates, at = _cut(blob, 0, n, I64)
    reasons, at = _cut(blob, at, n, I8)
    components = None
    if k >= 0:
        flat, at = _cut(blob, at, n * k, F64)
        components = flat.reshape(n, k)
    scores = None
    if r.has_scores:
        scores, at = _cut(blob, at, n, F64)
    v_used, at = _cut(blob, at, n, F64)
    limit, at = _cut(blob, at, n, F64)
    if at != len(blob):
        raise ValueError(f"raw explanation arrays hold {len(blob)} bytes, layout says {at}")
    return ExplanationArrays(
        candidates=candidates, reasons=reasons, components=components, scores=scores,
        v_peak_gb=r.v_peak_gb, v_used_gb=v_used, limit_gb=limit, weights=r.weights,
        weights_version=r.explanation_weights_version, prefiltered_out=r.prefiltered_out,
        chosen=r.chosen, notes=r.notes, spill=r.spill, degraded_from=r.degraded_from,
    )  # fmt: skip


def _render(
    fleet_key: str, policy: str, arrays: ExplanationArrays, fleets: Mapping[str, FleetLabels]
) -> str:
    """The JSON `Explanation.to_dict()` gives (same renderer), from journalled arrays."""
    fleet = fleets.get(fleet_key)
    if fleet is None:
        raise ValueError(f"raw explanation names fleet {fleet_key!r}, not journalled before it")
    rendered = render_explanation(arrays, policy, fleet.target_ids, fleet.card_ids, fleet.static_gb)
    return json_encoder.encode(rendered).decode()


@dataclass(slots=True)
class DecodedBatch:
    """Journal lines turned into insert rows, split per table."""

    decision_rows: list[tuple[Any, ...]] = field(default_factory=list)
    outcome_rows: list[tuple[Any, ...]] = field(default_factory=list)
    unreadable: int = 0
    headers: int = 0
    """Fleet lines read (segment headers, not records)."""


def _decision_row(body: bytes, check_explanation: bool) -> tuple[Any, ...]:
    head, sep, explanation = body.rstrip(b"\n").partition(EXPLANATION_SEPARATOR)
    if not sep:
        raise ValueError("decision line without an explanation")
    if check_explanation:
        msgspec.json.decode(explanation)
    return _row(_decode_header(head), explanation.decode())


def _raw_decision_row(
    body: bytes, fleets: Mapping[str, FleetLabels], unpack: Callable[[bytes], bytes]
) -> tuple[Any, ...]:
    """A `B` line (`unpack` = `unescape_blob`) or an `R` line (`base64_blob`)."""
    head, sep, blob = body.rstrip(b"\n").partition(EXPLANATION_SEPARATOR)
    if not sep:
        raise ValueError("decision line without an explanation")
    r = _decode_raw(head)
    return _row(r, _render(r.fleet, r.policy, raw_arrays(r, unpack(blob)), fleets))


def _legacy_decision_row(body: bytes, fleets: Mapping[str, FleetLabels]) -> tuple[Any, ...]:
    head, sep, raw = body.rstrip(b"\n").partition(EXPLANATION_SEPARATOR)
    if not sep:
        raise ValueError("decision line without an explanation")
    fleet_key, policy, arrays = legacy_arrays(raw)
    return _row(_decode_header(head), _render(fleet_key, policy, arrays, fleets))


def _row(d: DecisionHeader | RawDecision, explanation: str) -> tuple[Any, ...]:
    return (
        d.request_id, utc_from_unix(d.decided_at_s), d.model_id, d.priority,
        d.prompt_tokens, d.max_new_tokens, d.deadline_s, d.policy_arm, d.fleet_mode,
        d.outcome, d.target_id, d.card_type, explanation, d.weights_version,
        d.config_hash, d.decision_latency_s,
    )  # fmt: skip


def _outcome_row(body: bytes) -> tuple[Any, ...]:
    o = _decode_outcome(body.rstrip(b"\n"))
    return (
        o.request_id, utc_from_unix(o.finished_at_s), o.ttft_s, o.tpot_s, o.e2e_s,
        o.status, o.sla_met,
    )  # fmt: skip


def _fleet(body: bytes) -> tuple[str, FleetLabels]:
    f = _decode_fleet(body.rstrip(b"\n"))
    static = np.asarray(f.static_gb, dtype=np.float64)
    return f.key, FleetLabels(tuple(f.target_ids), tuple(f.card_ids), static)


def decode_lines(
    lines: Iterable[bytes],
    check_explanations: bool = True,
    fleets: dict[str, FleetLabels] | None = None,
) -> DecodedBatch:
    """Journal lines -> rows; a line that does not decode is counted and logged, not fatal.

    `fleets` (key -> labels) is filled from `F` lines and renders `B`, `R` and `X` lines;
    pass the same dict for consecutive batches. `D` explanations pass through as text;
    `check_explanations` parses them too (slower)."""
    batch = DecodedBatch()
    known: dict[str, FleetLabels] = {} if fleets is None else fleets
    for line in lines:
        tag, body = line[:1], line[1:]
        try:
            if tag == DECISION_TAG:
                batch.decision_rows.append(_decision_row(body, check_explanations))
            elif tag == RAW_DECISION_TAG:
                batch.decision_rows.append(_raw_decision_row(body, known, unescape_blob))
            elif tag == BASE64_RAW_DECISION_TAG:
                batch.decision_rows.append(_raw_decision_row(body, known, base64_blob))
            elif tag == LEGACY_RAW_DECISION_TAG:
                batch.decision_rows.append(_legacy_decision_row(body, known))
            elif tag == OUTCOME_TAG:
                batch.outcome_rows.append(_outcome_row(body))
            elif tag == FLEET_TAG:
                batch.headers += 1
                key, labels = _fleet(body)
                known[key] = labels
            else:
                raise ValueError(f"unknown record tag {tag!r}")
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError, IndexError) as exc:
            log.error("audit journal: skipping an unreadable record (%s)", exc)
            batch.unreadable += 1
    return batch


def decision_row(rec: DecisionRecord) -> tuple[Any, ...]:
    """A decision as a row in `sink.DECISION_COLUMNS` order, straight from the record."""
    return (
        rec.request_id, utc_from_unix(rec.decided_at_s), rec.model_id, rec.priority,
        rec.prompt_tokens, rec.max_new_tokens, rec.deadline_s, rec.policy_arm,
        rec.fleet_mode, rec.outcome, rec.target_id, rec.card_type,
        json_encoder.encode(explanation_dict(rec)).decode(), rec.weights_version,
        rec.config_hash, rec.decision_latency_s,
    )  # fmt: skip
