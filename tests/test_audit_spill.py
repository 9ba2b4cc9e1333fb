"""The spill journal: ordered reads, commit-driven deletion, torn tails, one owner."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import usual_umask

from slaguard.audit.spill import (
    SEGMENT_SUFFIX,
    SpillInUseError,
    SpillJournal,
    read_journal,
    remove_if_unused,
)


def lines(n: int, start: int = 0) -> list[bytes]:
    return [f"line-{i:05d}\n".encode() for i in range(start, start + n)]


def segments(directory: Path) -> list[Path]:
    return sorted(directory.glob(f"*{SEGMENT_SUFFIX}"))


def test_reads_come_back_in_order_across_segments(tmp_path: Path) -> None:
    journal = SpillJournal(tmp_path, segment_bytes=100)
    for line in lines(50):
        journal.append(line)
    assert len(segments(tmp_path)) == 5  # rotation once a segment holds >= 100 bytes
    got: list[bytes] = []
    lsn = 0
    while lsn < journal.end_lsn:
        result = read_journal(tmp_path, lsn, 7, journal.live_from)
        assert 0 < len(result.lines) <= 7
        got += result.lines
        lsn = result.next_lsn
    assert got == lines(50)
    journal.close()


def test_commit_deletes_only_fully_committed_segments(tmp_path: Path) -> None:
    journal = SpillJournal(tmp_path, segment_bytes=100)
    ends = [journal.append(line) for line in lines(30)]
    before = len(segments(tmp_path))
    journal.commit(ends[9])
    assert journal.pending_bytes == journal.end_lsn - ends[9] == 20 * 11
    after = segments(tmp_path)
    assert len(after) == before - 1
    assert int(after[0].name.removesuffix(SEGMENT_SUFFIX)) <= ends[9]
    journal.commit(ends[-1])
    journal.close()
    assert segments(tmp_path) == []


def test_restart_replays_everything_not_committed(tmp_path: Path) -> None:
    journal = SpillJournal(tmp_path, segment_bytes=64)
    ends = [journal.append(line) for line in lines(20)]
    journal.commit(ends[4])
    journal.close()
    reopened = SpillJournal(tmp_path, segment_bytes=64)
    result = read_journal(tmp_path, reopened.committed_lsn, 100, reopened.live_from)
    # Whole segments are kept until fully committed: replay may repeat a few committed
    # lines (inserts are idempotent) but never skips one.
    assert result.lines[-15:] == lines(15, start=5)
    assert len(result.lines) == reopened.recovered_records <= 20
    new_end = reopened.append(b"after-restart\n")
    assert new_end == reopened.end_lsn > ends[-1]
    assert read_journal(tmp_path, result.next_lsn, 10, reopened.live_from).lines == [
        b"after-restart\n"
    ]
    reopened.close()


def test_a_torn_last_line_is_skipped_and_counted(tmp_path: Path) -> None:
    journal = SpillJournal(tmp_path, segment_bytes=1 << 20)
    for line in lines(3):
        journal.append(line)
    journal.close()
    with segments(tmp_path)[-1].open("ab") as f:
        f.write(b"line-000")  # power loss mid-write
    reopened = SpillJournal(tmp_path)
    reopened.append(b"next\n")
    result = read_journal(tmp_path, reopened.committed_lsn, 100, reopened.live_from)
    assert result.lines == [*lines(3), b"next\n"]
    assert result.torn == 1
    reopened.close()


def test_a_second_writer_on_the_same_directory_is_refused(tmp_path: Path) -> None:
    journal = SpillJournal(tmp_path)
    with pytest.raises(SpillInUseError, match="in use by another process"):
        SpillJournal(tmp_path)
    journal.close()
    SpillJournal(tmp_path).close()


def test_a_failed_write_leaves_the_header_to_the_next_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refused write is truncated away with its header line: the next record that
    needs the header writes it again, so the segment still decodes alone."""
    journal = SpillJournal(tmp_path, segment_bytes=10, header_tag=b"F")
    header = ("k", b"F k\n")
    journal.append(b"D first\n", header)  # fills the first segment: the next opens one

    def disk_full(fd: int, data: bytes) -> int:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr("slaguard.audit.spill.os.write", disk_full)
        with pytest.raises(OSError):
            journal.append(b"D lost\n", header)
    journal.append(b"D second\n", header)
    assert segments(tmp_path)[-1].read_bytes() == b"F k\nD second\n"
    journal.close()


def test_a_segment_that_cannot_be_opened_leaves_other_descriptors_alone(
    tmp_path: Path,
) -> None:
    """A failed rotation queued the old segment's descriptor once per later append, so
    `sync()` closed it again and again: EBADF, then whatever file reused the number."""
    journal = SpillJournal(tmp_path, segment_bytes=1000)
    line = b"x" * 99 + b"\n"
    for _ in range(10):
        journal.append(line)
    blocker = tmp_path / f"{journal.end_lsn:020d}{SEGMENT_SUFFIX}"
    blocker.mkdir()  # the next segment cannot be created (as on a read-only directory)
    for _ in range(3):
        with pytest.raises(OSError):
            journal.append(line)
    journal.sync()
    victim = os.open(tmp_path / "victim", os.O_WRONLY | os.O_CREAT)
    try:
        blocker.rmdir()
        journal.append(line)
        journal.sync()
        assert os.write(victim, b"still mine") == 10
    finally:
        os.close(victim)
    journal.close()
    assert len(read_journal(tmp_path, 0, 100, 1 << 62).lines) == 11


def test_the_journal_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    """Segments were 0644 and the lock file 0755 (umask 022): audit records for all."""
    with usual_umask():
        journal = SpillJournal(tmp_path / "new" / "spill", segment_bytes=100)
        for line in lines(20):
            journal.append(line)
        journal.close()
    directory = tmp_path / "new" / "spill"
    assert len(segments(directory)) > 1
    modes = {p.name: p.stat().st_mode & 0o777 for p in [directory, *directory.iterdir()]}
    assert modes == dict.fromkeys(modes, 0o600) | {"spill": 0o700}
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    SpillJournal(shared).close()  # a directory we did not create keeps its mode
    assert shared.stat().st_mode & 0o777 == 0o755


def test_remove_if_unused_removes_a_directory_holding_only_its_lock(tmp_path: Path) -> None:
    spill = tmp_path / "spill"
    SpillJournal(spill).close()
    assert remove_if_unused(spill) is True
    assert not spill.exists()


def test_remove_if_unused_keeps_records_and_a_directory_another_writer_owns(
    tmp_path: Path,
) -> None:
    held = tmp_path / "held"
    owner = SpillJournal(held)
    assert remove_if_unused(held) is False
    owner.close()
    kept = tmp_path / "kept"
    journal = SpillJournal(kept)
    journal.append(b"not in the database\n")
    journal.close()
    assert remove_if_unused(kept) is False
    assert [p.name for p in segments(kept)] == [f"{0:020d}{SEGMENT_SUFFIX}"]
    assert remove_if_unused(tmp_path / "absent") is False
    assert sorted(p.name for p in tmp_path.iterdir()) == ["held", "kept"]


def test_a_file_named_like_a_segment_that_is_not_one_is_left_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`copy.journal` beside the segments was a ValueError: serve did not start (a
    traceback), and the audit writer process, which found it later, crashed at every
    restart, so nothing more reached the database."""
    journal = SpillJournal(tmp_path, segment_bytes=100)
    for line in lines(3):
        journal.append(line)
    journal.close()
    (tmp_path / "copy.journal").write_bytes(b"line-99999\n")
    (tmp_path / "empty.journal").write_bytes(b"")
    assert read_journal(tmp_path, 0, 10, 0).lines == lines(3)
    reopened = SpillJournal(tmp_path, segment_bytes=100)
    assert reopened.recovered_records == 3 and reopened.end_lsn == 33
    reopened.close()
    assert (tmp_path / "copy.journal").read_bytes() == b"line-99999\n"
    assert (tmp_path / "empty.journal").exists()
    assert [r.getMessage() for r in caplog.records if r.name == "slaguard.audit.spill"] == [
        f"spill directory {tmp_path}: {name} is not a journal segment (its name is not an "
        "LSN); left alone, not replayed; fix: move it out of the spill directory"
        for name in ("copy.journal", "empty.journal")
    ]
