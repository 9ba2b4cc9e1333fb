"""The raw journalled explanation renders, in the writer process, to exactly to_dict()."""

from __future__ import annotations

import base64
import copy
from pathlib import Path

import msgspec
import numpy as np
import pytest
from helpers import req
from sqlalchemy import Engine, text

from slaguard.audit.engine import create_audit_engine
from slaguard.audit.from_scheduler import decision_head, record_from_head
from slaguard.audit.jsonenc import json_encoder
from slaguard.audit.lines import (
    FLEET_TAG,
    RAW_DECISION_TAG,
    DecisionHeader,
    JournalEncoder,
    escape_blob,
    fleet_header,
    unescape_blob,
)
from slaguard.audit.lines_decode import decode_lines
from slaguard.audit.lines_legacy import RawArray, RawExplanation
from slaguard.audit.records import DecisionRecord
from slaguard.audit.spill import SEGMENT_SUFFIX
from slaguard.audit.writer import AuditWriter
from slaguard.audit.writer_settings import WriterSettings
from slaguard.fleet import Priority, load_fleet
from slaguard.scheduler.core import Scheduler
from slaguard.scheduler.explain import Decision, Outcome
from slaguard.scheduler.rollout import LEARNED, ROUND_ROBIN


def every_outcome() -> list[Decision]:
    """Routed (both arms, one with an unhealthy target), degraded, spilled, and
    no-capacity decisions (unknown model, context too long, spill refused)."""
    sched = Scheduler(load_fleet())
    sched.state.set_healthy(sched.fleet.target("l40s-8b-3").index, False)
    out = [
        sched.decide(req("routed"), 0.0, LEARNED),
        sched.decide(req("rr"), 0.0, ROUND_ROBIN),
        sched.decide(req("unknown", model="gpt-9"), 0.0, LEARNED),
        sched.decide(req("too-long", prompt=200_000), 0.0, ROUND_ROBIN),
    ]
    blocks = tuple(range(8))
    first = sched.decide(req("a", prompt=4096, prefix_id="p", prefix_blocks=blocks), 0.0, LEARNED)
    assert first.target is not None
    home = first.target
    sched.state.refresh(home.index, 0.0, kv_used_gb=home.kv_budget_gb)
    spill = req("spilled", prompt=4096, prefix_id="p", prefix_blocks=blocks, priority=Priority.HIGH)
    out.append(sched.decide(spill, 0.0, LEARNED))
    for t in sched.fleet:
        if t.model.id == "llama3.1-8b" and t != home:
            sched.state.refresh(t.index, 0.0, kv_used_gb=0.95 * t.kv_budget_gb)
    low = req("refused", prompt=400, gen=10, prefix_id="p", prefix_blocks=blocks,
              priority=Priority.LOW)  # fmt: skip
    out.append(sched.decide(low, 0.0, LEARNED))
    for t in sched.fleet:
        if t.model.id == "llama3.1-70b":
            sched.state.refresh(t.index, 0.0, queue_depth=200)
    big = req("degraded", prompt=2000, model="llama3.1-70b", priority=Priority.HIGH, deadline=1.5)
    out.append(sched.decide(big, 0.0, LEARNED))
    return out


DECISIONS = every_outcome()


def head(d: Decision) -> tuple[object, ...]:
    return decision_head(
        d, decided_at_s=1_796_000_000.0, fleet_mode="learned", config_hash="c", latency_s=1e-4
    )


def record(d: Decision) -> DecisionRecord:
    return record_from_head(head(d), d.explanation)


def test_the_cases_cover_every_outcome() -> None:
    assert {d.outcome for d in DECISIONS} == set(Outcome)
    spilled = [d for d in DECISIONS if d.outcome is Outcome.SPILLED]
    assert spilled and spilled[0].explanation.spill is not None


def test_raw_lines_render_to_exactly_what_to_dict_gives() -> None:
    encoder = JournalEncoder()
    lines: list[bytes] = []
    for d in DECISIONS:
        line, header = encoder.encode(record(d))
        assert line.startswith(RAW_DECISION_TAG) and header is not None
        if not lines:
            lines.append(header[1])
        lines.append(line)
    assert lines[0].startswith(FLEET_TAG)
    batch = decode_lines(lines, fleets={})
    assert (batch.unreadable, batch.headers) == (0, 1)
    stored = [row[12] for row in batch.decision_rows]
    assert stored == [json_encoder.encode(d.explanation.to_dict()).decode() for d in DECISIONS]


def test_a_raw_line_carries_the_decision_itself() -> None:
    """Read back field by field against the Decision (not against another encoding)."""
    encoder = JournalEncoder()
    for d in DECISIONS:
        line, _ = encoder.encode_raw(head(d), d.explanation)
        fields = msgspec.json.decode(line[1:].split(b"\x02")[0])
        e = d.explanation
        target = None if d.target is None else d.target.id
        assert fields[0] == d.request_id and fields[9] == d.outcome.value
        assert fields[10] == target and fields[7] == d.arm.value
        assert fields[13] == "c" and fields[16:19] == [
            e.arm.value,
            e.weights_version,
            len(e.candidates),
        ]
        assert line.count(b"\n") == 1 and line.endswith(b"\n")
        blob = unescape_blob(line.rstrip(b"\n").partition(b"\x02")[2])
        assert blob == _arrays(d)


def _arrays(d: Decision) -> bytes:
    """The layout `RawDecision` documents, built independently of the encoder."""
    e = d.explanation
    parts = [e.candidates.astype("int64"), e.reasons.astype("int8")]
    parts += [a.astype("float64") for a in (e.components, e.scores) if a is not None]
    parts += [e.v_used_gb.astype("float64"), e.limit_gb.astype("float64")]
    return b"".join(a.tobytes() for a in parts)


@pytest.mark.parametrize(
    "blob",
    [b"", b"\n", b"\x1b", b"\x1b\n\x1b1\x1b2\n\n", bytes(range(256)) * 3, b"a\x1b\x1b2b"],
)
def test_escaping_holds_no_newline_and_round_trips(blob: bytes) -> None:
    escaped = escape_blob(blob)
    assert b"\n" not in escaped
    assert unescape_blob(escaped) == blob


def test_a_damaged_escape_is_refused() -> None:
    for bad in (b"ab\x1b", b"\x1bx", b"\x1b\x1b1"):
        with pytest.raises(ValueError, match="escape"):
            unescape_blob(bad)


def test_strided_and_foreign_arrays_journal_their_values() -> None:
    """A view or another dtype is copied into the layout, not read as raw memory."""
    d = DECISIONS[0]
    e = d.explanation
    assert e.components is not None
    strided = np.empty((e.components.shape[0], e.components.shape[1] * 2))
    strided[:, ::2] = e.components
    e2 = copy.copy(e)
    e2.components = strided[:, ::2]
    e2.candidates = e.candidates.astype(np.int32)
    e2.v_used_gb = np.asfortranarray(e.v_used_gb)
    assert not e2.components.flags.c_contiguous
    line, _ = JournalEncoder().encode_raw(head(d), e2)
    assert unescape_blob(line.rstrip(b"\n").partition(b"\x02")[2]) == _arrays(d)


def test_a_head_of_the_wrong_length_is_refused_before_it_is_acknowledged() -> None:
    d = DECISIONS[0]
    with pytest.raises(TypeError, match="14 fields, expected 15"):
        JournalEncoder().encode_raw(head(d)[:-1], d.explanation)


def test_lines_journalled_before_the_r_format_still_replay() -> None:
    """An upgrade must not lose what an older version acknowledged: its `X` lines (the
    header as a JSON object, six RawArray structs) render to the same stored JSON."""
    fleet_key, fleet_line = fleet_header(DECISIONS[0].explanation.fleet)
    lines = [fleet_line]
    for d in DECISIONS:
        e = d.explanation
        raw = RawExplanation(
            fleet_key, e.arm.value, _legacy(e.candidates), _legacy(e.reasons),
            None if e.components is None else _legacy(e.components),
            None if e.scores is None else _legacy(e.scores), e.v_peak_gb,
            _legacy(e.v_used_gb), _legacy(e.limit_gb), e.weights, e.weights_version,
            e.prefiltered_out, None if e.chosen is None else int(e.chosen), list(e.notes),
            e.spill, e.degraded_from,
        )  # fmt: skip
        header = json_encoder.encode(DecisionHeader(*head(d)))
        lines.append(b"X" + header + b"\x02" + json_encoder.encode(raw) + b"\n")
    batch = decode_lines(lines, fleets={})
    assert batch.unreadable == 0
    stored = [row[12] for row in batch.decision_rows]
    assert stored == [json_encoder.encode(d.explanation.to_dict()).decode() for d in DECISIONS]


def _legacy(a: np.ndarray) -> RawArray:
    return RawArray(a.dtype.str, a.shape, a.tobytes())


def test_lines_journalled_with_base64_arrays_still_replay() -> None:
    """`R` lines (the `B` JSON array, the arrays base64-encoded) render the same."""
    encoder = JournalEncoder()
    lines: list[bytes] = []
    for d in DECISIONS:
        line, header = encoder.encode_raw(head(d), d.explanation)
        if not lines:
            lines.append(header[1])
        fields = line[1:].partition(b"\x02")[0]
        lines.append(b"R" + fields + b"\x02" + base64.b64encode(_arrays(d)) + b"\n")
    batch = decode_lines(lines, fleets={})
    assert batch.unreadable == 0
    stored = [row[12] for row in batch.decision_rows]
    assert stored == [json_encoder.encode(d.explanation.to_dict()).decode() for d in DECISIONS]
    bad = lines[1].replace(b"\x02", b"\x02!", 1)
    assert decode_lines([lines[0], bad], fleets={}).unreadable == 1


def test_the_routing_path_journals_the_same_line_without_a_record() -> None:
    """`enqueue_decision`'s encoding (no DecisionRecord built) equals the record's."""
    via_record, via_head = JournalEncoder(), JournalEncoder()
    for d in DECISIONS:
        assert via_head.encode_raw(head(d), d.explanation) == via_record.encode(record(d))


def test_a_raw_line_with_cut_or_padded_arrays_is_unreadable() -> None:
    header, line = JournalEncoder().encode(record(DECISIONS[0]))[::-1]
    assert header is not None
    body, _, blob = line.rstrip(b"\n").partition(b"\x02")
    raw = unescape_blob(blob)
    for bad in (raw[:-8], raw + bytes(8)):
        bad_line = body + b"\x02" + escape_blob(bad) + b"\n"
        assert decode_lines([header[1], bad_line], fleets={}).unreadable == 1
    assert decode_lines([header[1], body + b"\x02" + blob + b"\x1b\n"], fleets={}).unreadable == 1
    assert decode_lines([header[1], line], fleets={}).unreadable == 0


def test_a_raw_line_without_its_fleet_line_is_unreadable() -> None:
    line, _ = JournalEncoder().encode(record(DECISIONS[0]))
    assert decode_lines([line], fleets={}).unreadable == 1


def test_mapping_explanations_still_travel_as_json() -> None:
    rec = record(DECISIONS[0])
    plain = DecisionRecord(**{**_fields(rec), "explanation": {"chosen": "x", "notes": []}})
    line, header = JournalEncoder().encode(plain)
    assert header is None
    assert decode_lines([line]).decision_rows[0][12] == '{"chosen":"x","notes":[]}'


def _fields(rec: DecisionRecord) -> dict[str, object]:
    return {name: getattr(rec, name) for name in DecisionRecord.__slots__}


def test_the_database_stores_the_rendered_json(audit_engine: Engine, tmp_path: Path) -> None:
    with AuditWriter(audit_engine, tmp_path / "spill") as writer:
        for d in DECISIONS:
            writer.enqueue(record(d))
        assert writer.wait_flushed(30), writer.stats()
    cast = "explanation::text" if audit_engine.dialect.name == "postgresql" else "explanation"
    with audit_engine.connect() as conn:
        rows = dict(conn.execute(text(f"SELECT request_id, {cast} FROM decisions")).all())
    assert len(rows) == len(DECISIONS)
    for d in DECISIONS:
        assert rows[d.request_id] == json_encoder.encode(d.explanation.to_dict()).decode()


def test_every_segment_carries_its_fleet_line_and_decodes_alone(
    audit_engine: Engine, tmp_path: Path
) -> None:
    spill = tmp_path / "spill"
    down = create_audit_engine("postgresql+psycopg://postgres@127.0.0.1:1/nowhere")
    with AuditWriter(down, spill, WriterSettings(segment_bytes=4096)) as writer:
        for i in range(30):
            d = DECISIONS[i % len(DECISIONS)]
            writer.enqueue(DecisionRecord(**{**_fields(record(d)), "request_id": f"seg-{i}"}))
        assert writer.close(drain_timeout_s=0).queue_depth == 30
    segments = sorted(spill.glob(f"*{SEGMENT_SUFFIX}"))
    assert len(segments) > 3
    assert all(path.read_bytes().startswith(FLEET_TAG) for path in segments)
    segments[0].unlink()  # a later segment still decodes without the first one
    with AuditWriter(audit_engine, spill) as replay:
        assert replay.wait_flushed(30), replay.stats()
        assert replay.stats().torn_records == 0
        assert 0 < replay.stats().rows_written < 30
