"""Journals left by earlier versions replay exactly once after an upgrade.

`fixtures/journal_formats.json` holds, per commit, the lines that commit's own
`JournalEncoder` wrote for four scheduler decisions and their outcomes, and the rows its
own decoder made of them (explanations rendered by that version)."""

from __future__ import annotations

import copy
import json
import stat
from pathlib import Path
from typing import Any

import pytest
from helpers import usual_umask
from sqlalchemy import Engine, text

from slaguard.audit.lines_decode import decode_lines
from slaguard.audit.spill import QUARANTINE_FILE, SEGMENT_SUFFIX
from slaguard.audit.writer import AuditWriter

FORMATS: dict[str, dict[str, Any]] = json.loads(
    (Path(__file__).parent / "fixtures" / "journal_formats.json").read_text()
)


def _lines(commit: str) -> list[bytes]:
    return [line.encode("latin-1") for line in FORMATS[commit]["lines"]]


def _as_rendered_now(commit: str, explanation: Any) -> Any:
    """What this version renders of a decision the `commit`'s version stored: since
    2026-12-01 a candidate's `v_h_gb` is the KV in use, without the static reservation
    (from the journal's `F` line) that `v_peak_gb` holds, as the scheduler spec's memory
    rule reads them (docs/upgrading.md). Rows already stored keep their figures."""
    fleet_line = FORMATS[commit]["lines"][0]
    assert fleet_line.startswith("F")
    _, ids, _, static = json.loads(fleet_line[1:])
    static_by_id = dict(zip(ids, static, strict=True))
    explanation = copy.deepcopy(explanation)  # the fixture's, shared by every test
    for cand in explanation.get("candidates", []):
        cand["v_h_gb"] = round(cand["v_h_gb"] - static_by_id[cand["target"]], 3)
    return explanation


def test_the_fixture_covers_every_raw_line_format() -> None:
    assert {f["tag"] for f in FORMATS.values()} == {"X{", "X[", "R[", "B["}


@pytest.mark.parametrize("commit", sorted(FORMATS))
def test_each_earlier_format_decodes_to_what_its_own_version_stored(commit: str) -> None:
    batch = decode_lines(_lines(commit), True, {})
    assert batch.unreadable == 0
    expected = FORMATS[commit]["decision_rows"]
    assert len(batch.decision_rows) == len(expected) == 4
    for row, old in zip(batch.decision_rows, expected, strict=True):
        assert json.loads(row[12]) == _as_rendered_now(commit, old[12])
        assert [str(v) for i, v in enumerate(row) if i != 12] == [
            str(v) for i, v in enumerate(old) if i != 12
        ]
    assert len(batch.outcome_rows) == 4


@pytest.mark.parametrize("commit", sorted(FORMATS))
def test_a_journal_left_by_an_earlier_version_replays_once(
    commit: str, audit_engine: Engine, tmp_path: Path
) -> None:
    spill = tmp_path / "spill"
    spill.mkdir()
    lines = _lines(commit)
    (spill / f"{0:020d}{SEGMENT_SUFFIX}").write_bytes(b"".join(lines))
    with AuditWriter(audit_engine, spill) as writer:
        assert writer.wait_flushed(30), writer.stats()
        stats = writer.stats()
    assert stats.torn_records == 0
    assert stats.records_flushed == len(lines) - 1  # the fleet line is a header
    cast = "explanation::text" if audit_engine.dialect.name == "postgresql" else "explanation"
    with audit_engine.connect() as conn:
        stored = dict(conn.execute(text(f"SELECT request_id, {cast} FROM decisions")).all())
        outcomes = conn.execute(text("SELECT count(*) FROM outcomes")).scalar_one()
    expected = {
        row[0]: _as_rendered_now(commit, row[12]) for row in FORMATS[commit]["decision_rows"]
    }
    assert {rid: json.loads(e) for rid, e in stored.items()} == expected
    assert outcomes == 4


def test_lines_no_version_can_read_are_counted_and_kept_aside(
    audit_engine: Engine, tmp_path: Path
) -> None:
    """They were skipped with an ERROR line each and deleted with their segment: the loss
    reached no counter, and nothing was left to recover from. The file they are kept in
    followed the umask (0644: records readable by anyone)."""
    spill = tmp_path / "spill"
    spill.mkdir()
    good = _lines("37952cf")
    bad = [b"Q{'a future format'}\n", b"B[not json\x02\n"]
    (spill / f"{0:020d}{SEGMENT_SUFFIX}").write_bytes(b"".join(good[:3] + bad + good[3:]))
    lost: list[int] = []
    with usual_umask(), AuditWriter(audit_engine, spill, on_records_lost=lost.append) as writer:
        assert writer.wait_flushed(30), writer.stats()
        assert writer.stats().torn_records == 2
    assert sum(lost) == 2
    # kept after the fleet line they may need, so the file replays as a segment
    assert (spill / QUARANTINE_FILE).read_bytes() == b"".join(good[:1] + bad)
    assert stat.S_IMODE((spill / QUARANTINE_FILE).stat().st_mode) == 0o600
    assert not list(spill.glob(f"*{SEGMENT_SUFFIX}"))  # replayed: the segment is gone
    with audit_engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM decisions")).scalar_one() == 4
