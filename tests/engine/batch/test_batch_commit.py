"""Applying a ``BatchCommitEntry``: commit-time checks of docs/nats-differences.md §4 (any failure
stores nothing) and what a successful commit stores (contiguous seqs, EOB commit header, dedupe,
rollups, limits), on both stores."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from engine import limits
from engine.batch import BatchResult
from engine.entries import BatchCommitEntry, InboundMsg
from engine.stream import Stream
from tests.engine.batch.batch_builders import bmsg, hdr
from tests.engine.stream.harness import Harness, MakeHarness

Extras = list[tuple[str, str]]


def commit(h: Harness, batch_id: str, msgs: list[InboundMsg], eob: bool = False) -> BatchResult:
    result = h.apply(BatchCommitEntry(h.tick(), batch_id, tuple(msgs), eob))
    assert isinstance(result, BatchResult)
    return result


def batch(
    batch_id: str, extras: list[Extras], subjects: list[str] | None = None
) -> list[InboundMsg]:
    """Messages 1..n of a batch (the last with Nats-Batch-Commit: 1), each with its extras."""
    n = len(extras)
    subjects = subjects or ["S.a"] * n
    return [
        bmsg(
            batch_id,
            i,
            "1" if i == n else None,
            *extra,
            subject=subj,
            data=f"{batch_id}{i}".encode(),
        )
        for i, (extra, subj) in enumerate(zip(extras, subjects, strict=True), start=1)
    ]


def snapshot(stream: Stream) -> tuple[Any, ...]:
    return (stream.state(), stream.last_msg_id, stream.deleted_seqs())


@dataclass
class Row:
    name: str
    extras: list[Extras]
    err_code: int
    description: str
    subjects: list[str] | None = None
    config: dict[str, Any] = field(default_factory=dict)
    # plain publishes before the batch: (subject, header items)
    seed: list[tuple[str, Extras]] = field(
        default_factory=lambda: [("S.a", [("Nats-Msg-Id", "w1")]), ("S.b", [])]
    )


ROWS = [
    Row(
        "expected last msg id",
        [[], [("Nats-Expected-Last-Msg-Id", "w1")]],
        10177,
        "atomic publish unsupported header used: Nats-Expected-Last-Msg-Id",
    ),
    Row(
        "duplicate id in the batch",
        [[("Nats-Msg-Id", "d")], [("Nats-Msg-Id", "d")]],
        10201,
        "atomic publish batch contains duplicate message id",
    ),
    Row(
        "id in the dedupe window",
        [[], [("Nats-Msg-Id", "w1")]],
        10201,
        "atomic publish batch contains duplicate message id",
    ),
    Row(
        "expected last seq on message 1",
        [[("Nats-Expected-Last-Sequence", "1")], []],
        10071,
        "wrong last sequence: 2",
    ),
    Row(
        "expected last seq running",
        [[], [("Nats-Expected-Last-Sequence", "2")]],
        10071,
        "wrong last sequence: 3",
    ),
    Row(
        "expected last seq matching later",
        [[("Nats-Expected-Last-Sequence", "2")], [("Nats-Expected-Last-Sequence", "3")]],
        10164,
        "wrong last sequence",
    ),
    Row(
        "expected last seq garbage",
        [[("Nats-Expected-Last-Sequence", "x")]],
        10071,
        "wrong last sequence: 2",
    ),
    Row(
        "subject seq after the subject",
        [[], [("Nats-Expected-Last-Subject-Sequence", "1")]],
        10164,
        "wrong last sequence",
    ),
    Row(
        "subject seq mismatch",
        [[("Nats-Expected-Last-Subject-Sequence", "5")], []],
        10071,
        "wrong last sequence: 1",
    ),
    Row(
        "subject seq via override",
        [
            [],
            [
                ("Nats-Expected-Last-Subject-Sequence", "1"),
                ("Nats-Expected-Last-Subject-Sequence-Subject", "S.b"),
            ],
        ],
        10071,
        "wrong last sequence: 2",
        subjects=["S.c", "S.d"],
    ),
    Row(
        "subject seq cached mismatch",
        [
            [
                ("Nats-Expected-Last-Subject-Sequence", "2"),
                ("Nats-Expected-Last-Subject-Sequence-Subject", "S.b"),
            ],
            [
                ("Nats-Expected-Last-Subject-Sequence", "1"),
                ("Nats-Expected-Last-Subject-Sequence-Subject", "S.b"),
            ],
        ],
        10071,
        "wrong last sequence: 2",
        subjects=["S.c", "S.d"],
    ),
    Row(
        "override alone",
        [[("Nats-Expected-Last-Subject-Sequence-Subject", "S.b")]],
        10193,
        "missing sequence for expected last sequence per subject",
    ),
    Row(
        "expected stream",
        [[], [("Nats-Expected-Stream", "OTHER")]],
        10060,
        "expected stream does not match",
    ),
    Row(
        "stream source header",
        [[("Nats-Stream-Source", "X 1")]],
        10227,
        "message stream source header is not allowed",
    ),
    Row(
        "ttl on a stream without ttls",
        [[], [("Nats-TTL", "1h")]],
        10166,
        "per-message TTL is disabled",
    ),
    Row(
        "bad ttl on a stream without ttls",
        [[("Nats-TTL", "abc")]],
        10166,
        "per-message TTL is disabled",
    ),
    Row(
        "bad ttl",
        [[("Nats-TTL", "abc")]],
        10165,
        "invalid per-message TTL",
        config={"allow_msg_ttl": True},
    ),
    Row(
        "sub-second ttl",
        [[("Nats-TTL", "500ms")]],
        10165,
        "invalid per-message TTL",
        config={"allow_msg_ttl": True},
    ),
    Row("rollup not permitted", [[("Nats-Rollup", "sub")]], 10111, "rollup not permitted"),
    Row(
        "rollup with deny_purge",
        [[("Nats-Rollup", "all")]],
        10111,
        "rollup not permitted",
        config={"allow_rollup_hdrs": True, "deny_purge": True},
    ),
    Row(
        "rollup all not first",
        [[], [("Nats-Rollup", "all")]],
        10111,
        "batch rollup all invalid",
        config={"allow_rollup_hdrs": True},
    ),
    Row(
        "rollup sub after the subject",
        [[], [("Nats-Rollup", "SUB")]],
        10111,
        "batch rollup sub invalid",
        config={"allow_rollup_hdrs": True},
    ),
    Row(
        "rollup value invalid",
        [[("Nats-Rollup", "Foo")]],
        10111,
        'rollup value invalid: "foo"',
        config={"allow_rollup_hdrs": True},
    ),
    Row(
        "max msgs for the batch as a whole",
        [[], []],
        10077,
        "maximum messages exceeded",
        config={"max_msgs": 3, "discard": "new"},
    ),
    Row(
        "max bytes for the batch as a whole",
        [[], []],
        10077,
        "maximum bytes exceeded",
        config={"max_bytes": 200, "discard": "new"},
    ),
    Row(
        "per subject for the batch",
        [[], []],
        10077,
        "maximum messages per subject exceeded",
        config={"max_msgs_per_subject": 2, "discard": "new", "discard_new_per_subject": True},
    ),
    Row(
        "first failure wins",
        [[("Nats-Expected-Stream", "X")], [("Nats-Expected-Last-Msg-Id", "a")]],
        10060,
        "expected stream does not match",
    ),
    Row(
        "10177 checked before the message's other checks",
        [[], [("Nats-Expected-Stream", "X"), ("Nats-Expected-Last-Msg-Id", "a")]],
        10177,
        "atomic publish unsupported header used: Nats-Expected-Last-Msg-Id",
    ),
    Row(
        "expected stream before ttl",
        [[("Nats-TTL", "1h"), ("Nats-Expected-Stream", "X")]],
        10060,
        "expected stream does not match",
    ),
    Row(
        "ttl before msg id",
        [[("Nats-Msg-Id", "w1"), ("Nats-TTL", "1h")]],
        10166,
        "per-message TTL is disabled",
    ),
    Row(
        "msg id before stream source",
        [[("Nats-Stream-Source", "X"), ("Nats-Msg-Id", "w1")]],
        10201,
        "atomic publish batch contains duplicate message id",
    ),
    Row(
        "stream source before expected seqs",
        [[("Nats-Expected-Last-Sequence", "9"), ("Nats-Stream-Source", "X")]],
        10227,
        "message stream source header is not allowed",
    ),
    Row(
        "expected seqs before rollup",
        [[("Nats-Rollup", "foo"), ("Nats-Expected-Last-Sequence", "9")]],
        10071,
        "wrong last sequence: 2",
    ),
    Row(
        "not enabled at apply",
        [[]],
        10174,
        "atomic publish is disabled",
        config={"allow_atomic": False},
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_commit_checks_reject_the_whole_batch(make_batch_harness: MakeHarness, row: Row) -> None:
    h = make_batch_harness(**row.config)
    for subject, items in row.seed:
        h.ok(subject, b"seed", hdr(*items) if items else b"")
    before = snapshot(h.stream)
    result = commit(h, "b", batch("b", row.extras, row.subjects))
    assert result.error is not None
    assert (result.error.err_code, result.error.description) == (row.err_code, row.description)
    assert (result.seq, result.count) == (0, 0)
    assert snapshot(h.stream) == before
    assert h.live() == [1, 2]


def test_commit_stores_contiguous_seqs(make_batch_harness: MakeHarness) -> None:
    h = make_batch_harness()
    h.ok("S.z")
    msgs = batch("b", [[], [], []], ["S.a", "S.b", "S.a"])
    result = commit(h, "b", msgs)
    assert result == BatchResult(4, 3)
    stored = [h.stream.load(seq) for seq in (2, 3, 4)]
    assert [(m.subject, m.hdr, m.data) for m in stored if m] == [
        (m.subject, m.hdr, m.data) for m in msgs
    ]
    assert len({m.ts_ns for m in stored if m}) == 1
    assert h.stream.state().last_seq == 4


def test_eob_commit_adds_the_commit_header_to_the_last_stored(
    make_batch_harness: MakeHarness,
) -> None:
    h = make_batch_harness()
    msgs = [*batch("b", [[], []])[:-1], bmsg("b", 2, data=b"two")]
    result = commit(h, "b", msgs, eob=True)
    assert result == BatchResult(2, 2)
    last = h.stream.load(2)
    assert last is not None
    assert last.hdr == hdr(
        ("Nats-Batch-Id", "b"), ("Nats-Batch-Sequence", "2"), ("Nats-Batch-Commit", "1")
    )
    first = h.stream.load(1)
    assert first is not None and b"Commit" not in first.hdr


def test_request_info_header_is_stripped(make_batch_harness: MakeHarness) -> None:
    h = make_batch_harness()
    msg = bmsg("b", 1, "1", ("Nats-Request-Info", "{}"), ("X", "y"))
    assert commit(h, "b", [msg]) == BatchResult(1, 1)
    stored = h.stream.load(1)
    assert stored is not None
    assert stored.hdr == hdr(
        ("Nats-Batch-Id", "b"), ("Nats-Batch-Sequence", "1"), ("Nats-Batch-Commit", "1"), ("X", "y")
    )
    size = limits.msg_size_bytes(h.stream.config.storage, len("S.a"), len(stored.hdr), 1)
    assert h.stream.state().bytes == size


def test_batch_msg_ids_enter_the_dedupe_window(make_batch_harness: MakeHarness) -> None:
    h = make_batch_harness()
    commit(h, "b", batch("b", [[("Nats-Msg-Id", "m1")], [("Nats-Msg-Id", "m2")]]))
    assert h.stream.last_msg_id == "m2"
    dup = h.publish("S.a", b"again", hdr(("Nats-Msg-Id", "m1")))
    assert dup.duplicate and dup.seq == 1
    later = commit(h, "c", batch("c", [[("Nats-Msg-Id", "m2")]]))
    assert later.error is not None and later.error.err_code == 10201


def test_expected_sequences_that_hold(make_batch_harness: MakeHarness) -> None:
    h = make_batch_harness()
    h.ok("S.a")
    h.ok("S.b")
    extras: list[Extras] = [
        [("Nats-Expected-Last-Sequence", "2"), ("Nats-Expected-Last-Subject-Sequence", "1")],
        [
            ("Nats-Expected-Last-Subject-Sequence", "2"),
            ("Nats-Expected-Last-Subject-Sequence-Subject", "S.b"),
        ],
        [
            ("Nats-Expected-Last-Subject-Sequence", "2"),
            ("Nats-Expected-Last-Subject-Sequence-Subject", "S.b"),
        ],
    ]
    result = commit(h, "b", batch("b", extras, ["S.a", "S.c", "S.d"]))
    assert result == BatchResult(5, 3)


def test_rollups_apply_after_store(make_batch_harness: MakeHarness) -> None:
    h = make_batch_harness(allow_rollup_hdrs=True)
    for subject in ("S.a", "S.b", "S.a"):
        h.ok(subject)
    result = commit(h, "b", batch("b", [[("Nats-Rollup", "sub")], []], ["S.a", "S.c"]))
    assert result == BatchResult(5, 2)
    assert h.live() == [2, 4, 5]
    result = commit(h, "c", batch("c", [[("Nats-Rollup", "all")], []], ["S.x", "S.y"]))
    assert result == BatchResult(7, 2)
    assert h.live() == [6, 7]


def test_discard_old_limits_apply_per_message(make_batch_harness: MakeHarness) -> None:
    h = make_batch_harness(max_msgs=2)
    result = commit(h, "b", batch("b", [[], [], []]))
    assert result == BatchResult(3, 3)
    assert h.live() == [2, 3]


def test_discard_new_batch_that_fits_exactly(make_batch_harness: MakeHarness) -> None:
    h = make_batch_harness(max_msgs=3, discard="new")
    h.ok("S.a")
    assert commit(h, "b", batch("b", [[], []])) == BatchResult(3, 2)
    result = commit(h, "c", batch("c", [[]]))
    assert result.error is not None and result.error.description == "maximum messages exceeded"


def test_interest_stream_without_consumers_keeps_nothing(make_batch_harness: MakeHarness) -> None:
    h = make_batch_harness(retention="interest")
    assert commit(h, "b", batch("b", [[], []])) == BatchResult(2, 2)
    state = h.stream.state()
    assert (state.messages, state.last_seq) == (0, 2)


def test_ttl_messages_in_a_batch_are_tracked(make_batch_harness: MakeHarness) -> None:
    h = make_batch_harness(allow_msg_ttl=True)
    result = commit(h, "b", batch("b", [[("Nats-TTL", "1s")], [("Nats-TTL", "never")], []]))
    assert result == BatchResult(3, 3)
    assert h.stream.next_expiry_ns() is not None
    removed = h.expire(h.now_ns + 5_000_000_000)
    assert removed == [1]


def test_empty_commit_entry_is_rejected(make_batch_harness: MakeHarness) -> None:
    h = make_batch_harness()
    result = commit(h, "b", [])
    assert result.error is not None and result.error.err_code == 10176
    assert h.stream.state().last_seq == 0


def test_applied_index_advances_even_when_rejected(make_batch_harness: MakeHarness) -> None:
    h = make_batch_harness()
    commit(h, "b", batch("b", [[("Nats-Expected-Stream", "X")]]))
    assert h.stream.applied_index == 1
    commit(h, "c", batch("c", [[]]))
    assert h.stream.applied_index == 2


def test_replay_and_reopen_give_the_same_state(make_batch_harness: MakeHarness) -> None:
    h = make_batch_harness(allow_rollup_hdrs=True)
    h.ok("S.a", b"x", hdr(("Nats-Msg-Id", "p1")))
    commit(h, "b", batch("b", [[("Nats-Msg-Id", "m1")], [("Nats-Rollup", "sub")]], ["S.a", "S.b"]))
    commit(h, "c", batch("c", [[("Nats-Msg-Id", "p1")]]))  # rejected: in the window
    commit(h, "d", [*batch("d", [[], []])[:1], bmsg("d", 2, data=b"eob")], eob=True)
    fresh = h.replay_into_fresh()
    assert fresh.digest() == h.stream.digest()
    digest = h.stream.digest()
    reopened = h.reopen()
    assert reopened.digest() == digest
