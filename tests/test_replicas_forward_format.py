"""The batch format followers forward their guard samples and arrivals in: split under
PostgreSQL's NOTIFY limit, compact, and read across versions (replicas are upgraded one
by one, so a leader reads what the one before and after it sends)."""

from __future__ import annotations

import json

from slaguard.guard.forward import MAX_AGE_S, MAX_BATCH_BYTES, Arrival, decode_batch, encode_batches
from slaguard.guard.samples import FirstToken, GuardSample
from slaguard.scheduler.rollout import Arm

MODEL = "llama3.1-8b"


def test_batches_stay_under_the_notify_limit_and_round_trip() -> None:
    samples = [
        GuardSample(
            1000.0 + i / 1000,
            f"target-{i % 7}",
            "h100",
            MODEL,
            i % 3 > 0,
            2.5,
            0.125 if i % 5 else None,
            Arm.LEARNED if i % 2 else None,
            "v2",
            900.5,
            f"{i:016x}",
            300 + i,
            ttft_observed=i % 5 > 1,
        )
        for i in range(1500)
    ]
    firsts = [
        FirstToken(999.0 + i / 1000, f"target-{i % 7}", "l40s", MODEL, 0.25, 40) for i in range(300)
    ]
    arrivals: list[Arrival] = [
        (1000.0 + i / 1000, None if i % 4 == 0 else f"{i:016x}", None) for i in range(2500)
    ]
    batches = list(encode_batches("replica-b", 1001.5, samples + firsts, arrivals))
    sizes = [len(b.encode()) for b in batches]
    assert max(sizes) <= MAX_BATCH_BYTES and min(sizes[:-1]) > MAX_BATCH_BYTES - 200  # full
    # compact: < 130 bytes a sample, 80 a first token, 32 an arrival
    assert sum(sizes) < 1500 * 130 + 300 * 80 + 2500 * 32
    got_samples: list[GuardSample | FirstToken] = []
    got_arrivals: list[Arrival] = []
    for text in batches:
        json.loads(text)
        s, a, _ = decode_batch(text, 1002.0, "replica-a")
        got_samples += s
        got_arrivals += a
    assert [s for s in got_samples if isinstance(s, GuardSample)] == samples
    assert [s for s in got_samples if isinstance(s, FirstToken)] == firsts
    assert got_arrivals == arrivals
    assert decode_batch(batches[0], 1002.0, "replica-b") == ([], [], False)  # our own
    assert decode_batch(batches[0], 1001.5 + MAX_AGE_S + 0.1, "replica-a") == ([], [], False)
    assert decode_batch("{not json", 1002.0, "replica-a") == ([], [], False)


def test_a_batch_from_a_replica_without_first_tokens_still_reads() -> None:
    """A replica of the previous version sends 12-field samples and no `f` list."""
    row = '[999.5,"t","h100","m",1,2.5,0.2,null,"",null,null,300]'
    old = '{"r":"old","at":1000.0,"s":[' + row + '],"a":[]}'
    samples, arrivals, _ = decode_batch(old, 1001.0, "new")
    assert samples == [GuardSample(999.5, "t", "h100", "m", True, 2.5, 0.2, prompt_tokens=300)]
    assert arrivals == [] and not samples[0].ttft_observed  # type: ignore[union-attr]


def _leader_of_2026_11_29_evening(text: str) -> tuple[int, int, int]:
    """What a leader of the 2026-11-29 evening reads of a batch (its `decode_batch`): `s`
    rows unpacked into exactly 12 fields, `a`; any error drops the whole batch.
    (samples, of them with a TTFT, arrivals)."""
    body = json.loads(text)
    try:
        rows = [tuple(row) for row in body["s"]]
        for row in rows:
            _at, _t, _c, _m, _met, _d, _ttft, _arm, _v, _dep, _p, _tokens = row
        arrivals = [(float(at), p) for at, p in body["a"]]
    except ValueError:
        return 0, 0, 0
    return len(rows), sum(row[6] is not None for row in rows), len(arrivals)


def test_an_earlier_leader_reads_every_sample_and_counts_each_ttft_once() -> None:
    """Rows of 13 fields made an earlier leader drop whole batches (arrivals included)
    while replicas were upgraded one by one."""
    samples = [
        GuardSample(
            1000.0 + i, f"t{i % 3}", "h100", MODEL, True, 2.5, 0.2, ttft_observed=i % 2 == 1
        )
        for i in range(400)
    ]
    firsts = [FirstToken(999.0 + i, f"t{i % 3}", "h100", MODEL, 0.2, 40) for i in range(1, 400, 2)]
    arrivals: list[Arrival] = [
        (1000.0 + i, None, ("h100", MODEL, 300 + i) if i % 3 else None) for i in range(300)
    ]
    batches = list(encode_batches("new", 1001.0, samples + firsts, arrivals, max_bytes=2000))
    assert len(batches) > 10
    read = [_leader_of_2026_11_29_evening(text) for text in batches]
    assert sum(r[0] for r in read) == 400 and sum(r[2] for r in read) == 300
    assert sum(r[1] for r in read) == 400  # each TTFT once: from `s`, `f` is not read
    got = [s for text in batches for s in decode_batch(text, 1002.0, "old")[0]]
    assert [s for s in got if isinstance(s, GuardSample)] == samples  # flags kept
    assert [s for s in got if isinstance(s, FirstToken)] == firsts
    assert [a for text in batches for a in decode_batch(text, 1002.0, "old")[1]] == arrivals


def test_handed_work_rides_beside_the_arrivals_and_old_batches_still_read() -> None:
    """The handed work (card type, model, prompt tokens) of each routed arrival goes in its
    own list `h` (index in `a`), so an earlier leader reads `a` as before; a batch without
    `h` (a replica of an earlier version) gives arrivals without handed work."""
    arrivals: list[Arrival] = [
        (1000.0 + i / 100, f"p{i}" if i % 2 else None, ("l40s", MODEL, 40 + i) if i % 5 else None)
        for i in range(700)
    ]
    batches = list(encode_batches("new", 1010.0, [], arrivals, max_bytes=1500))
    assert len(batches) > 5
    assert all(len(json.loads(text)["a"][0]) == 2 for text in batches)
    assert [a for text in batches for a in decode_batch(text, 1011.0, "other")[1]] == arrivals
    assert not any(decode_batch(text, 1011.0, "other").handed_unknown for text in batches)
    old = '{"r":"old","at":1000.0,"s":[],"f":[],"a":[[999.5,"p"],[999.6,null]]}'
    read = decode_batch(old, 1001.0, "new")
    assert read.arrivals == [(999.5, "p", None), (999.6, None, None)] and read.handed_unknown


def test_a_batch_with_13_field_samples_still_reads() -> None:
    """Replicas of 2026-11-29 21:52 - 2026-11-30 09:00 sent `ttft_observed` as a 13th field."""
    row = '[999.5,"t","h100","m",1,2.5,0.2,null,"",null,null,300,1]'
    text = '{"r":"old","at":1000.0,"s":[' + row + '],"f":[],"a":[]}'
    samples, _, _ = decode_batch(text, 1001.0, "new")
    assert samples[0].ttft_observed  # type: ignore[union-attr]
