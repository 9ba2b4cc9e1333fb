"""Followers' guard samples and arrivals, carried to the leader in compact batches.

Every replica routes its share of the traffic, only the leader evaluates. At each 500 ms
sync a follower drains what it queued (finished requests, arrivals) into batches and
hands them to its lease (`LeaderLease.forward`); the leader takes what arrived
(`LeaderLease.take_forwarded`) and feeds it to its detectors through the same calls as
its own samples. A batch is one JSON text of at most `MAX_BATCH_BYTES` (PostgreSQL's
NOTIFY payload limit is 8000 bytes): a larger drain is split into several.

Delivery is at most once: a batch sent while no replica leads, or while leadership
changes hands, is lost (PostgreSQL: nobody LISTENs; SQLite: a spool file older than
`MAX_AGE_S` is dropped by the next leader). The detectors are statistical; a gap of a
second or two in their input only shortens a window.

SQLite: `SpoolDir`, a directory beside the lock file. A follower writes each batch to a
file of its own and renames it into place (atomic: the leader never sees half a batch);
the leader reads and deletes every file there.
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

from slaguard.failure_log import FailureLog
from slaguard.guard.samples import FirstToken, GuardSample, Handed
from slaguard.scheduler.rollout import Arm

log = logging.getLogger(__name__)

MAX_BATCH_BYTES = 7900
"""PostgreSQL's NOTIFY payload limit is 8000 bytes: every notification the lease sends fits."""
MAX_AGE_S = 10.0
"""A forwarded batch older than this when the leader reads it is dropped."""

Arrival = tuple[float, str | None, Handed | None]
"""An arrival's time, prefix and handed work (`Guard.observe_arrival`)."""


def _sample_row(s: GuardSample) -> list[object]:
    return [
        round(s.at_s, 4), s.target_id, s.card_type, s.model_id, int(s.sla_met),
        s.deadline_s, None if s.ttft_s is None else round(s.ttft_s, 5),
        None if s.arm is None else s.arm.value, s.model_version, s.model_deployed_at_s,
        s.prefix_id, s.prompt_tokens,
    ]  # fmt: skip


def _sample(row: list[object], ttft_observed: bool) -> GuardSample:
    at, target, card, model, met, deadline, ttft, arm, version, deployed, prefix, tokens = row[:12]
    return GuardSample(
        at_s=float(at),  # type: ignore[arg-type]
        target_id=str(target),
        card_type=str(card),
        model_id=str(model),
        sla_met=bool(met),
        deadline_s=float(deadline),  # type: ignore[arg-type]
        ttft_s=None if ttft is None else float(ttft),  # type: ignore[arg-type]
        arm=None if arm is None else Arm(str(arm)),
        model_version=str(version),
        model_deployed_at_s=None if deployed is None else float(deployed),  # type: ignore[arg-type]
        prefix_id=None if prefix is None else str(prefix),
        prompt_tokens=None if tokens is None else int(tokens),  # type: ignore[call-overload]
        ttft_observed=ttft_observed or (len(row) > 12 and bool(row[12])),
    )


def _first_row(f: FirstToken) -> list[object]:
    return [
        round(f.at_s, 4), f.target_id, f.card_type, f.model_id, round(f.ttft_s, 5),
        f.prompt_tokens,
    ]  # fmt: skip


def _first(row: list[object]) -> FirstToken:
    at, target, card, model, ttft, tokens = row
    return FirstToken(
        float(at),  # type: ignore[arg-type]
        str(target),
        str(card),
        str(model),
        float(ttft),  # type: ignore[arg-type]
        None if tokens is None else int(tokens),  # type: ignore[call-overload]
    )


_KEYS = ("s", "o", "f", "a", "h")
"""Batch lists: finished requests (12 columns: what every version reads), the indices in
`s` of those whose TTFT came as a first token already, first tokens, arrivals (time,
prefix: 2 columns, what every version reads), and the handed work of arrivals routed to a
target (index in `a`, card type, model, prompt tokens; since 2026-11-30 evening). A leader
of an earlier version reads `s` and `a` and ignores the rest, so it counts each TTFT once,
from `s`; a 13th column (`ttft_observed`, written from 2026-11-29 21:52 to 2026-11-30 09:00,
still read) made it drop whole batches, and so would a 3rd column in `a`."""


def encode_batches(
    replica_id: str,
    at_s: float,
    samples: Iterable[GuardSample | FirstToken],
    arrivals: Iterable[Arrival],
    *,
    max_bytes: int = MAX_BATCH_BYTES,
) -> Iterator[str]:
    """The samples, first tokens and arrivals as JSON texts of at most `max_bytes` each."""
    head = json.dumps({"r": replica_id, "at": at_s}, separators=(",", ":"))[:-1]
    empty = len(_batch(head, {k: [] for k in _KEYS}).encode())
    rows: dict[str, list[str]] = {k: [] for k in _KEYS}
    items: list[tuple[str, list[object], bool | Handed | None]] = [
        ("f", _first_row(s), False)
        if isinstance(s, FirstToken)
        else ("s", _sample_row(s), s.ttft_observed)
        for s in samples
    ]
    items += [("a", [round(at, 4), prefix], handed) for at, prefix, handed in arrivals]
    size = empty
    for key, row, extra in items:
        text = json.dumps(row, separators=(",", ":"))
        index = len(rows[key])
        tag = _tag(key, index, extra)
        cost = len(text.encode()) + 1 + (len(tag) + 1 if tag else 0)
        if size + cost > max_bytes and any(rows.values()):
            yield _batch(head, rows)
            rows = {k: [] for k in _KEYS}
            size = empty
            tag = _tag(key, 0, extra)
        if tag:
            rows["o" if key == "s" else "h"].append(tag)
        rows[key].append(text)
        size += cost
    if any(rows.values()):
        yield _batch(head, rows)


def _tag(key: str, index: int, extra: bool | Handed | None) -> str:
    """What a row adds beside it: a finished request's index in `o` (its TTFT came as a
    first token), an arrival's handed work in `h`; "" for nothing."""
    if key == "s" and extra is True:
        return str(index)
    if key == "a" and isinstance(extra, tuple):
        card, model, tokens = extra
        return json.dumps([index, card, model, tokens], separators=(",", ":"))
    return ""


def _batch(head: str, rows: dict[str, list[str]]) -> str:
    lists = ",".join(f'"{k}":[{",".join(rows[k])}]' for k in _KEYS)
    return f"{head},{lists}}}"


class Decoded(NamedTuple):
    """One forwarded batch, read."""

    samples: list[GuardSample | FirstToken]
    arrivals: list[Arrival]
    handed_unknown: bool
    """Arrivals from a replica of an earlier version, which sends no handed work: the
    leader's count of the work handed to each tier then covers only part of the fleet."""


def decode_batch(text: str, now_s: float, own_id: str) -> Decoded:
    """One batch's samples (first tokens among them) and arrivals; nothing when it is
    ours, too old or unreadable. A batch without first tokens (`f`) is an older
    replica's: its samples carry their TTFT; one without handed work (`h`) too: its
    arrivals count for the hot-spot detector alone."""
    try:
        body = json.loads(text)
        if body["r"] == own_id or now_s - float(body["at"]) > MAX_AGE_S:
            return Decoded([], [], False)
        observed = set(body.get("o", ()))
        samples: list[GuardSample | FirstToken] = [
            _sample(row, i in observed) for i, row in enumerate(body["s"])
        ]
        samples += [_first(row) for row in body.get("f", ())]
        handed: dict[int, Handed] = {
            int(i): (str(card), str(model), int(tokens))
            for i, card, model, tokens in body.get("h", ())
        }
        arrivals: list[Arrival] = [
            (float(at), None if p is None else str(p), handed.get(i))
            for i, (at, p) in enumerate(body["a"])
        ]
    except (ValueError, KeyError, TypeError, AttributeError):
        log.warning("unreadable forwarded guard samples ignored")
        return Decoded([], [], False)
    return Decoded(samples, arrivals, bool(arrivals) and "h" not in body)


MAX_SPOOL_FILES = 2000
"""Followers stop adding batch files beyond this many waiting (a leader stopped, not dead,
reads nothing): ~15 minutes of one follower's batches, far past `MAX_AGE_S`."""


class SpoolDir:
    """Batch files in a directory: written whole and renamed in by followers, read and
    deleted by the leader."""

    def __init__(self, path: Path, replica_id: str, max_files: int = MAX_SPOOL_FILES) -> None:
        self.path = path
        self.name = re.sub(r"[^A-Za-z0-9_-]", "_", replica_id)
        self.max_files = max_files
        self._seq = 0
        self._unsafe = FailureLog(log, "guard sample forwarding")

    def _ours_alone(self) -> bool:
        """Its name is predictable (beside the SQLite file): a spool another user made or
        may write to could feed the leader forged samples, and trip the guard. Such a
        spool is neither read nor written, with a WARNING (then once a minute)."""
        st = self.path.stat()
        if st.st_uid == os.geteuid() and not st.st_mode & stat.S_IWOTH:
            self._unsafe.succeeded(time.time())
            return True
        owner = "is another user's" if st.st_uid != os.geteuid() else "is writable by every user"
        self._unsafe.failed(
            f"guard sample spool {self.path} {owner} (uid {st.st_uid}, mode "
            f"{stat.S_IMODE(st.st_mode):04o}), so its batches may be forged: not used; fix: "
            "remove it (slaguard makes it again, owner-only)",
            time.time(),
        )
        return False

    def put(self, texts: Iterable[str]) -> None:
        """Follower: one file per batch (best effort; nothing once the spool is full)."""
        try:
            self.path.mkdir(mode=0o700, exist_ok=True)
            if not self._ours_alone():
                return
            if len(os.listdir(self.path)) >= self.max_files:
                log.debug(
                    "guard samples not forwarded: %d files wait in %s", self.max_files, self.path
                )
                return
            for text in texts:
                self._seq += 1
                name = f"{self.name}.{os.getpid()}.{self._seq:012d}"
                tmp = self.path / f".{name}.tmp"
                tmp.write_text(text)
                os.replace(tmp, self.path / f"{name}.batch")
        except OSError as exc:
            log.debug("guard samples not forwarded: %s", exc)

    def take(self) -> list[str]:
        """Leader: every complete batch waiting, each handed out once; the half-written
        files of followers that died mid-write are removed once older than `MAX_AGE_S`."""
        try:
            if not self._ours_alone():
                return []
            names = sorted(p for p in self.path.glob("*.batch"))
            self._remove_abandoned(self.path.glob(".*.tmp"))
        except OSError:
            return []
        texts: list[str] = []
        for name in names:
            try:
                texts.append(name.read_text())
                name.unlink()
            except OSError as exc:
                log.debug("forwarded batch %s skipped: %s", name.name, exc)
        return texts

    @staticmethod
    def _remove_abandoned(partials: Iterable[Path]) -> None:
        cutoff = time.time() - MAX_AGE_S
        for partial in partials:
            try:
                if partial.stat().st_mtime < cutoff:
                    partial.unlink()
            except OSError:
                continue
