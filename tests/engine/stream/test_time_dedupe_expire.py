"""Time comes only from entries: timestamps, the dedupe window and MaxAge expiry."""

from __future__ import annotations

import pytest

from engine.entries import PublishEntry
from engine.stream import PubResult
from tests.engine.stream.harness import T0_NS, MakeHarness, S, hdr

MSG_ID = "Nats-Msg-Id"


def test_timestamps_come_from_the_entry_and_never_go_backwards(make_harness: MakeHarness) -> None:
    h = make_harness()
    h.publish("S.a", ts_ns=T0_NS + 10 * S)
    h.publish("S.a", ts_ns=T0_NS + 5 * S)  # a leader with a slower clock
    h.publish("S.a", ts_ns=T0_NS + 12 * S)
    assert [h.stream.load(seq).ts_ns for seq in (1, 2, 3)] == [  # type: ignore[union-attr]
        T0_NS + 10 * S,
        T0_NS + 10 * S,
        T0_NS + 12 * S,
    ]
    state = h.stream.state()
    assert (state.first_ts_ns, state.last_ts_ns) == (T0_NS + 10 * S, T0_NS + 12 * S)


def test_dedupe_window_expires_by_entry_time(make_harness: MakeHarness) -> None:
    h = make_harness(duplicate_window=2 * S)
    assert h.publish("S.a", headers=hdr((MSG_ID, "d")), ts_ns=T0_NS).seq == 1
    dup = h.publish("S.a", headers=hdr((MSG_ID, "d")), ts_ns=T0_NS + 2 * S - 1)
    assert dup == PubResult(1, duplicate=True)
    # exactly one window later the id is forgotten (stream.go purgeMsgIds: now-ts >= window)
    assert h.publish("S.a", headers=hdr((MSG_ID, "d")), ts_ns=T0_NS + 2 * S).seq == 2
    again = h.publish("S.a", headers=hdr((MSG_ID, "d")), ts_ns=T0_NS + 3 * S)
    assert again == PubResult(2, duplicate=True)


def test_dedupe_window_zero_disables_dedupe(make_harness: MakeHarness) -> None:
    h = make_harness(duplicate_window=0)
    assert h.ok("S.a", headers=hdr((MSG_ID, "d"))) == 1
    assert h.ok("S.a", headers=hdr((MSG_ID, "d"))) == 2


def test_dedupe_survives_purge_and_delete(make_harness: MakeHarness) -> None:
    """Probed: after a purge the same id is still a duplicate of the purged seq."""
    h = make_harness()
    h.ok("S.a", headers=hdr((MSG_ID, "x1")))
    h.ok("S.a", headers=hdr((MSG_ID, "x2")))
    h.purge()
    assert h.publish("S.a", headers=hdr((MSG_ID, "x1"))) == PubResult(1, duplicate=True)
    h.ok("S.a", headers=hdr((MSG_ID, "x3")))
    h.delete(3)
    assert h.publish("S.a", headers=hdr((MSG_ID, "x3"))) == PubResult(3, duplicate=True)


def test_dedupe_is_rebuilt_on_reopen_from_stored_ids(make_harness: MakeHarness) -> None:
    h = make_harness(duplicate_window=10 * S)
    h.publish("S.a", headers=hdr((MSG_ID, "old")), ts_ns=T0_NS)
    h.publish("S.a", headers=hdr((MSG_ID, "new")), ts_ns=T0_NS + 9 * S)
    h.publish("S.a", headers=hdr((MSG_ID, "last")), ts_ns=T0_NS + 10 * S)
    h.reopen()
    # "old" was a full window older than the last message: forgotten, as a live stream would
    assert h.publish("S.a", headers=hdr((MSG_ID, "old")), ts_ns=T0_NS + 10 * S).seq == 4
    assert h.publish("S.a", headers=hdr((MSG_ID, "new")), ts_ns=T0_NS + 10 * S).duplicate
    assert h.publish("S.a", headers=hdr((MSG_ID, "last")), ts_ns=T0_NS + 10 * S).duplicate


def test_expire_removes_messages_older_than_max_age(make_harness: MakeHarness) -> None:
    h = make_harness(max_age=10 * S)
    for offset_s in (0, 1, 5, 9):
        h.publish("S.a", ts_ns=T0_NS + offset_s * S)
    assert h.stream.next_expiry_ns() == T0_NS + 10 * S
    assert h.expire(T0_NS + 10 * S - 1) == []
    assert h.expire(T0_NS + 11 * S) == [1, 2]  # ts <= now - max_age
    assert h.live() == [3, 4]
    assert h.stream.next_expiry_ns() == T0_NS + 15 * S
    assert h.expire(T0_NS + 100 * S) == [3, 4]
    state = h.stream.state()
    assert (state.messages, state.first_seq, state.last_seq, state.first_ts_ns) == (0, 5, 4, 0)
    assert h.stream.next_expiry_ns() is None


def test_expire_without_max_age_does_nothing(make_harness: MakeHarness) -> None:
    h = make_harness()
    h.ok("S.a")
    assert h.stream.next_expiry_ns() is None
    assert h.expire(T0_NS + 10**6 * S) == []
    assert h.stream.state().messages == 1


def test_apply_requires_increasing_index(make_harness: MakeHarness) -> None:
    h = make_harness()
    h.ok("S.a")
    entry = PublishEntry(T0_NS, ())
    with pytest.raises(AssertionError):
        h.stream.apply(h.index, entry)
    with pytest.raises(AssertionError):
        h.stream.apply(h.index - 1, entry)
    assert h.stream.apply(h.index + 5, entry) == []
    assert h.stream.applied_index == h.index + 5
