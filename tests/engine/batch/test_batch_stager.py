"""The staging rules of ``engine.batch.BatchStager`` (docs/nats-differences.md §4), as tables.

Each row opens whatever batches it needs, then sends one message and checks the outcome: staged,
rejected (err_code, whether the batch was dropped, the advisory reason) or ready to commit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from engine.batch import (
    ABANDON_INCOMPLETE,
    ABANDON_LARGE,
    ABANDON_UNSUPPORTED,
    BATCH_IDLE_TIMEOUT_NS,
    BATCH_INFLIGHT_PER_STREAM_MAX,
    BATCH_MSGS_MAX,
    HDR_REQUIRED_API_LEVEL,
    STAGED,
    BatchLimits,
    BatchStager,
    CommitReady,
    InflightCounter,
    Rejected,
    Staged,
    api_level_supported,
    batch_id_of,
    parse_uint64,
)
from engine.entries import InboundMsg
from protocol.models import StreamConfig
from tests.engine.batch.batch_builders import bmsg, hdr
from tests.engine.stream.harness import make_config

T0 = 1_000_000_000_000
ATOMIC = make_config(allow_atomic=True)


def stager(**limits: int) -> tuple[BatchStager, InflightCounter]:
    counter = InflightCounter()
    return BatchStager(BatchLimits(**limits), counter), counter


def stage(s: BatchStager, msg: InboundMsg, config: StreamConfig = ATOMIC, now: int = T0) -> Any:
    batch_id = batch_id_of(msg.hdr)
    assert batch_id, "test messages carry a batch id"
    return s.stage(msg, batch_id, config, now)


@dataclass
class Row:
    name: str
    before: list[InboundMsg]  # staged first, each must be STAGED
    msg: InboundMsg
    err_code: int | None  # None: STAGED
    dropped: bool = False
    reason: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    description: str | None = None


ROWS = [
    Row("first message staged", [], bmsg("b", 1), None),
    Row("second message staged", [bmsg("b", 1)], bmsg("b", 2), None),
    Row("leading spaces of the seq skipped", [], bmsg("b", " 1"), None),
    Row("not enabled", [], bmsg("b", 1), 10174, config={"allow_atomic": False}),
    Row(
        "not enabled beats a bad id",
        [],
        bmsg("x" * 70, "abc"),
        10174,
        config={"allow_atomic": False},
    ),
    Row("sealed first", [], bmsg("b", 1), 10109, config={"sealed": True}),
    Row(
        "sealed before not enabled",
        [],
        bmsg("b", 1),
        10109,
        config={"sealed": True, "allow_atomic": False},
    ),
    Row(
        "max_msg_size before not enabled",
        [],
        bmsg("b", 1, data=b"y" * 200),
        10054,
        config={"max_msg_size": 100, "allow_atomic": False},
    ),
    Row(
        "max_msg_size mid-batch keeps the batch",
        [bmsg("b", 1)],
        bmsg("b", 2, data=b"y" * 200),
        10054,
        config={"max_msg_size": 100},
    ),
    Row("id of 64 bytes", [], bmsg("x" * 64, 1), None),
    Row("id of 65 bytes", [], bmsg("x" * 65, 1), 10179),
    Row("id of 33 two-byte chars", [], bmsg("\u00e9" * 33, 1), 10179),
    Row("id of 32 two-byte chars", [], bmsg("\u00e9" * 32, 1), None),
    Row("id check before seq check", [], bmsg("x" * 65, "abc"), 10179),
    Row("seq missing", [], InboundMsg("S.a", hdr(("Nats-Batch-Id", "b")), b""), 10175),
    Row("seq empty", [], bmsg("b", ""), 10175),
    Row("seq not a number", [], bmsg("b", "abc"), 10175),
    Row("seq trailing space", [], bmsg("b", "1 "), 10175),
    Row("seq signed", [], bmsg("b", "+1"), 10175),
    Row("seq negative", [], bmsg("b", "-1"), 10175),
    Row("seq over uint64", [], bmsg("b", str(1 << 64)), 10175),
    Row("unknown batch seq 2", [], bmsg("b", 2), 10176),
    Row("unknown batch seq 0", [], bmsg("b", 0), 10176),
    Row("unknown batch commit", [], bmsg("b", 2, "1"), 10176),
    Row("unknown batch over the limit", [], bmsg("b", 1001), 10199),
    Row("unknown batch eob at the limit", [], bmsg("b", 1001, "eob"), 10176),
    Row("unknown batch eob over the limit", [], bmsg("b", 1002, "eob"), 10199),
    Row("unknown batch max uint64", [], bmsg("b", str((1 << 64) - 1)), 10199),
    Row("commit value 2", [bmsg("b", 1)], bmsg("b", 2, "2"), 10200, dropped=True),
    Row("commit value empty", [], bmsg("b", 1, ""), 10200, dropped=True),
    Row("commit value EOB", [], bmsg("b", 1, "EOB"), 10200, dropped=True),
    Row("commit value with space", [], bmsg("b", 1, "1 "), 10200, dropped=True),
    Row(
        "commit value checked before a gap", [bmsg("b", 1)], bmsg("b", 5, "x"), 10200, dropped=True
    ),
    Row("gap", [bmsg("b", 1)], bmsg("b", 3), 10176, True, ABANDON_INCOMPLETE),
    Row("repeat", [bmsg("b", 1)], bmsg("b", 1), 10176, True, ABANDON_INCOMPLETE),
    Row("going back", [bmsg("b", 1), bmsg("b", 2)], bmsg("b", 1), 10176, True, ABANDON_INCOMPLETE),
    Row("eob at seq 1", [], bmsg("b", 1, "eob"), 10176, True, ABANDON_INCOMPLETE),
    Row(
        "api level 6",
        [],
        bmsg("b", 1, None, (HDR_REQUIRED_API_LEVEL, "6")),
        10185,
        True,
        ABANDON_UNSUPPORTED,
    ),
    Row(
        "api level not a number",
        [bmsg("b", 1)],
        bmsg("b", 2, "1", (HDR_REQUIRED_API_LEVEL, "abc")),
        10185,
        True,
        ABANDON_UNSUPPORTED,
    ),
    Row(
        "api level trailing space",
        [],
        bmsg("b", 1, None, (HDR_REQUIRED_API_LEVEL, "5 ")),
        10185,
        True,
        ABANDON_UNSUPPORTED,
    ),
    Row(
        "api level beyond int64",
        [],
        bmsg("b", 1, None, (HDR_REQUIRED_API_LEVEL, str(1 << 63))),
        10185,
        True,
        ABANDON_UNSUPPORTED,
    ),
    Row(
        "api level checked before a gap",
        [bmsg("b", 1)],
        bmsg("b", 3, None, (HDR_REQUIRED_API_LEVEL, "9")),
        10185,
        True,
        ABANDON_UNSUPPORTED,
    ),
    Row("api level 5", [], bmsg("b", 1, None, (HDR_REQUIRED_API_LEVEL, "5")), None),
    Row(
        "api level -1 and +5",
        [bmsg("b", 1, None, (HDR_REQUIRED_API_LEVEL, "-1"))],
        bmsg("b", 2, None, (HDR_REQUIRED_API_LEVEL, "+5")),
        None,
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_staging_table(row: Row) -> None:
    s, counter = stager()
    config = make_config(**{"allow_atomic": True, **row.config})
    for msg in row.before:
        assert stage(s, msg, make_config(allow_atomic=True)) is STAGED
    was_open = len(s)
    outcome = stage(s, row.msg, config)
    if row.err_code is None:
        assert outcome is STAGED
        assert isinstance(outcome, Staged)
        return
    assert isinstance(outcome, Rejected), outcome
    assert outcome.error.err_code == row.err_code, outcome.error
    assert outcome.dropped == row.dropped
    assert outcome.abandon_reason == row.reason
    expected_open = 0 if row.dropped else was_open
    assert len(s) == expected_open
    assert counter.count == expected_open


def test_each_message_is_staged_under_the_config_it_comes_with() -> None:
    """The stager keeps the facts it reads per message from the last config object: a new one
    (a stream update) is read again, mid-batch too."""
    s, _ = stager()
    assert stage(s, bmsg("b", 1), ATOMIC) is STAGED
    small = stage(s, bmsg("b", 2), make_config(allow_atomic=True, max_msg_size=1))
    assert isinstance(small, Rejected) and small.error.err_code == 10054
    assert stage(s, bmsg("c", 1), ATOMIC) is STAGED
    sealed = stage(s, bmsg("c", 2), make_config(allow_atomic=True, sealed=True))
    assert isinstance(sealed, Rejected) and sealed.error.err_code == 10109
    off = stage(s, bmsg("c", 2), make_config(allow_atomic=False))
    assert isinstance(off, Rejected) and off.error.err_code == 10174
    assert stage(s, bmsg("c", 2), ATOMIC) is STAGED


def test_too_large_texts_name_the_limit() -> None:
    s, _ = stager(msgs_max=5)
    outcome = stage(s, bmsg("b", 6))
    assert isinstance(outcome, Rejected)
    assert outcome.error.description == "atomic publish batch is too large: 5"
    default, _ = stager()
    outcome = stage(default, bmsg("b", BATCH_MSGS_MAX + 1))
    assert isinstance(outcome, Rejected)
    assert outcome.error.description == "atomic publish batch is too large: 1000"


def test_too_large_mid_batch_drops_with_the_large_reason() -> None:
    s, counter = stager(msgs_max=3)
    for seq in (1, 2, 3):
        assert stage(s, bmsg("b", seq)) is STAGED
    outcome = stage(s, bmsg("b", 4, "1"))
    assert isinstance(outcome, Rejected)
    assert (outcome.error.err_code, outcome.dropped, outcome.abandon_reason) == (
        10199,
        True,
        ABANDON_LARGE,
    )
    assert counter.count == 0
    # An EOB commit message is not counted: 3 stored messages fit.
    for seq in (1, 2, 3):
        assert stage(s, bmsg("c", seq)) is STAGED
    ready = stage(s, bmsg("c", 4, "eob"))
    assert isinstance(ready, CommitReady) and len(ready.msgs) == 3


def test_commit_returns_every_staged_message_in_order() -> None:
    s, counter = stager()
    msgs = [bmsg("b", 1, data=b"1"), bmsg("b", 2, data=b"2")]
    for msg in msgs:
        assert stage(s, msg) is STAGED
    last = bmsg("b", 3, "1", data=b"3")
    ready = stage(s, last)
    assert isinstance(ready, CommitReady)
    assert ready.msgs == (*msgs, last) and not ready.eob and ready.batch_id == "b"
    assert "b" not in s and counter.count == 0
    entry = ready.entry(42)
    assert (entry.ts_ns, entry.batch_id, entry.msgs, entry.eob) == (42, "b", ready.msgs, False)


def test_eob_commit_leaves_the_commit_message_out() -> None:
    s, _ = stager()
    first = bmsg("b", 1)
    assert stage(s, first) is STAGED
    ready = stage(s, bmsg("b", 2, "eob", data=b"not stored"))
    assert isinstance(ready, CommitReady)
    assert ready.msgs == (first,) and ready.eob


def test_single_message_batch() -> None:
    s, counter = stager()
    only = bmsg("b", 1, "1")
    ready = stage(s, only)
    assert isinstance(ready, CommitReady) and ready.msgs == (only,)
    assert counter.count == 0 and len(s) == 0


def test_required_api_level_header_is_removed_unless_empty() -> None:
    s, _ = stager()
    assert stage(s, bmsg("b", 1, None, (HDR_REQUIRED_API_LEVEL, "5"), ("X", "y"))) is STAGED
    ready = stage(s, bmsg("b", 2, "1", (HDR_REQUIRED_API_LEVEL, "")))
    assert isinstance(ready, CommitReady)
    assert ready.msgs[0].hdr == hdr(
        ("Nats-Batch-Id", "b"), ("Nats-Batch-Sequence", "1"), ("X", "y")
    )
    assert HDR_REQUIRED_API_LEVEL.encode() in ready.msgs[1].hdr  # an empty value stays


def test_inflight_limit_per_stream() -> None:
    s, counter = stager()
    for i in range(BATCH_INFLIGHT_PER_STREAM_MAX):
        assert stage(s, bmsg(f"b{i}", 1)) is STAGED
    outcome = stage(s, bmsg("over", 1))
    assert isinstance(outcome, Rejected) and outcome.error.err_code == 10210
    assert outcome.error.code == 429 and not outcome.dropped
    # Even an invalid commit value is answered with 10210 first: no batch could be opened.
    outcome = stage(s, bmsg("over", 1, "bad"))
    assert isinstance(outcome, Rejected) and outcome.error.err_code == 10210
    # A message of an open batch still goes through.
    assert isinstance(stage(s, bmsg("b0", 2, "1")), CommitReady)
    assert stage(s, bmsg("over", 1)) is STAGED
    assert counter.count == BATCH_INFLIGHT_PER_STREAM_MAX


def test_inflight_limit_per_server_is_shared_between_streams() -> None:
    counter = InflightCounter()
    limits = BatchLimits(inflight_total_max=3)
    first, second = BatchStager(limits, counter), BatchStager(limits, counter)
    assert stage(first, bmsg("a", 1)) is STAGED
    assert stage(first, bmsg("b", 1)) is STAGED
    assert stage(second, bmsg("c", 1)) is STAGED
    outcome = stage(second, bmsg("d", 1))
    assert isinstance(outcome, Rejected) and outcome.error.err_code == 10210
    assert counter.count == 3
    assert first.abandon("a")
    assert stage(second, bmsg("d", 1)) is STAGED
    assert counter.count == 3
    assert sorted(first.clear() + second.clear()) == ["b", "c", "d"]
    assert counter.count == 0


def test_idle_timeout_from_the_last_message() -> None:
    s, counter = stager(idle_timeout_ns=100)
    assert stage(s, bmsg("a", 1), now=T0) is STAGED
    assert stage(s, bmsg("b", 1), now=T0 + 50) is STAGED
    assert s.next_deadline_ns() == T0 + 100
    assert stage(s, bmsg("a", 2), now=T0 + 99) is STAGED  # resets a's timer to T0 + 199
    assert s.next_deadline_ns() == T0 + 150
    assert s.expire(T0 + 149) == []
    assert s.expire(T0 + 150) == ["b"]
    assert s.next_deadline_ns() == T0 + 199
    assert s.expire(T0 + 1_000) == ["a"]
    assert s.next_deadline_ns() is None and counter.count == 0
    # After a timeout the batch is unknown: its next message is incomplete, with no advisory.
    outcome = stage(s, bmsg("a", 3, "1"), now=T0 + 1_001)
    assert isinstance(outcome, Rejected)
    assert (outcome.error.err_code, outcome.abandon_reason) == (10176, None)


def test_a_message_after_the_deadline_but_before_expire_is_incomplete() -> None:
    s, counter = stager(idle_timeout_ns=100)
    assert stage(s, bmsg("a", 1), now=T0) is STAGED
    outcome = stage(s, bmsg("a", 2, "1"), now=T0 + 100)
    assert isinstance(outcome, Rejected)
    assert (outcome.error.err_code, outcome.dropped, outcome.abandon_reason) == (
        10176,
        True,
        ABANDON_INCOMPLETE,
    )
    assert counter.count == 0


def test_default_timeout_is_ten_seconds() -> None:
    s, _ = stager()
    assert stage(s, bmsg("a", 1), now=T0) is STAGED
    assert s.next_deadline_ns() == T0 + BATCH_IDLE_TIMEOUT_NS == T0 + 10_000_000_000


def test_limits_must_be_positive() -> None:
    for bad in ({"msgs_max": 0}, {"inflight_per_stream_max": 0}, {"idle_timeout_ns": 0}):
        with pytest.raises(ValueError):
            BatchLimits(**bad)


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("1", 1),
        ("007", 7),
        (str((1 << 64) - 1), (1 << 64) - 1),
        (str(1 << 64), None),
        ("", None),
        (None, None),
        ("1.0", None),
        ("\u0661", None),
        ("-0", None),
    ],
)
def test_parse_uint64(value: str | None, parsed: int | None) -> None:
    assert parse_uint64(value) == parsed


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("5", True),
        ("0", True),
        ("-7", True),
        ("+5", True),
        ("005", True),
        ("6", False),
        ("abc", False),
        ("5 ", False),
        ("5.0", False),
        ("1_0", False),
        (str(1 << 63), False),
        (str(-(1 << 63)), True),
        ("\u0665", False),
    ],
)
def test_api_level_supported(value: str, ok: bool) -> None:
    assert api_level_supported(value) is ok


def test_batch_id_of() -> None:
    assert batch_id_of(b"") == ""
    assert batch_id_of(hdr(("Nats-Batch-Id", "b1"))) == "b1"
    assert batch_id_of(hdr(("Nats-Batch-Id", "  b1 "))) == "b1 "
    assert batch_id_of(hdr(("Nats-Batch-Id", ""))) == ""
    assert batch_id_of(hdr(("nats-batch-id", "b1"))) == ""
    assert batch_id_of(hdr(("X-Nats-Batch-Id", "b1"))) == ""
