"""Expiry by TTL and max_age through ``ExpireEntry(ts)``, and subject delete markers.

Every timestamp is explicit: an expire entry's ts is the only clock (docs/nats-differences.md §3;
nats-server filestore/memstore ``expireMsgs``, probed where noted).
"""

from __future__ import annotations

from engine.entries import ExpireEntry
from engine.ttl import marker_header
from tests.engine.stream.harness import T0_NS, Harness, MakeHarness, S, hdr

TTL = "Nats-TTL"
TTL_ON = {"allow_msg_ttl": True}


def markers(ttl_s: int, **extra: object) -> dict[str, object]:
    return {
        "allow_msg_ttl": True,
        "allow_rollup_hdrs": True,
        "subject_delete_marker_ttl": ttl_s * S,
        **extra,
    }


def pub(
    h: Harness, subject: str, at_s: float, ttl: str | None = None, *extra: tuple[str, str]
) -> int:
    items = [*(((TTL, ttl),) if ttl is not None else ()), *extra]
    result = h.publish(subject, headers=hdr(*items) if items else b"", ts_ns=T0_NS + int(at_s * S))
    assert result.error is None, result
    return result.seq


def at(seconds: float) -> int:
    return T0_NS + int(seconds * S)


def stored(h: Harness) -> list[tuple[int, str, bytes, int]]:
    return [(m.seq, m.subject, m.hdr, m.ts_ns) for m in h.store.scan()]


# ------------------------------------------------------------------------------------- TTL


def test_ttl_deadline_is_inclusive_and_only_the_entry_ts_counts(make_harness: MakeHarness) -> None:
    h = make_harness(**TTL_ON)
    pub(h, "S.a", 0, "2s")
    pub(h, "S.b", 0.5, "1s")
    pub(h, "S.c", 0.6)
    assert h.stream.next_expiry_ns() == at(1.5)
    assert h.expire(at(1.5) - 1) == []
    assert h.expire(at(1.5)) == [2]
    assert h.stream.next_expiry_ns() == at(2)
    assert h.expire(at(2)) == [1]
    assert h.live() == [3]
    assert h.stream.next_expiry_ns() is None
    assert h.expire(at(10_000)) == []


def test_ttl_due_messages_are_removed_in_seq_order_whatever_their_deadlines(
    make_harness: MakeHarness,
) -> None:
    h = make_harness(**TTL_ON)
    pub(h, "S.a", 0, "5s")
    pub(h, "S.b", 1, "1s")
    pub(h, "S.c", 2, "2s")
    assert h.expire(at(10)) == [1, 2, 3]


def test_huge_ttl_overflows_and_is_due_at_once(make_harness: MakeHarness) -> None:
    """Probed: 99999999999999999999 and 9223372037 expired at once, ~31 years did not."""
    h = make_harness(**TTL_ON)
    pub(h, "S.a", 0, "99999999999999999999")
    pub(h, "S.b", 0, "9223372037")
    pub(h, "S.c", 0, "1000000000.999999999s")
    next_ns = h.stream.next_expiry_ns()
    assert next_ns is not None and next_ns < T0_NS
    assert h.expire(at(0.001)) == [1, 2]
    assert h.live() == [3]


def test_never_escapes_max_age_and_a_long_ttl_does_not(make_harness: MakeHarness) -> None:
    h = make_harness(max_age=2 * S, **TTL_ON)
    pub(h, "S.a", 0, "never")
    pub(h, "S.b", 0, "NEVER")
    pub(h, "S.c", 0.5, "1h")
    pub(h, "S.d", 1, "1s")
    pub(h, "S.e", 1.5)
    assert h.stream.next_expiry_ns() == at(2)  # the TTL of seq 4
    assert h.expire(at(2)) == [4]
    assert h.stream.next_expiry_ns() == at(2.5)  # max_age of seq 3 ("never"s are skipped)
    assert h.expire(at(2.5) - 1) == []
    assert h.expire(at(2.5)) == [3]  # by max_age: its 1h TTL does not help
    assert h.stream.next_expiry_ns() == at(3.5)
    assert h.expire(at(1e6)) == [5]
    assert h.live() == [1, 2]
    assert h.stream.next_expiry_ns() is None


def test_ttl_needs_allow_msg_ttl_but_never_is_read_without_it(make_harness: MakeHarness) -> None:
    """The deadline index exists only with allow_msg_ttl (nats-server keeps its hash wheel only
    then); switching TTLs on later finds the deadlines of what is stored (recoverTTLState)."""
    h = make_harness(max_age=10 * S)
    pub(h, "S.a", 0, "00")
    pub(h, "S.b", 0)
    assert h.update(allow_msg_ttl=True) is None
    pub(h, "S.c", 1, "1s")
    pub(h, "S.d", 1, "never")
    assert h.stream.next_expiry_ns() == at(2)
    assert h.expire(at(2)) == [3]
    assert h.expire(at(11)) == [1, 2]
    assert h.live() == [4]


def test_turning_ttls_on_tracks_messages_already_stored(make_harness: MakeHarness) -> None:
    h = make_harness(**TTL_ON)
    pub(h, "S.a", 0, "1s")
    # the engine itself accepts a config that drops TTLs (the API refuses it: 10052)
    assert h.update(allow_msg_ttl=False) is None
    assert h.stream.next_expiry_ns() is None
    assert h.expire(at(5)) == []
    assert h.update(allow_msg_ttl=True) is None
    assert h.stream.next_expiry_ns() == at(1)
    assert h.expire(at(5)) == [1]


def test_removed_messages_leave_the_deadline_index(make_harness: MakeHarness) -> None:
    h = make_harness(max_msgs=2, **TTL_ON)
    pub(h, "S.a", 0, "1s")
    pub(h, "S.b", 0, "2s")
    pub(h, "S.c", 0, "3s")  # max_msgs drops seq 1
    assert h.stream.next_expiry_ns() == at(2)
    assert h.delete(2) is None
    assert h.stream.next_expiry_ns() == at(3)
    assert h.purge() == 1
    assert h.stream.next_expiry_ns() is None
    pub(h, "S.d", 1, "1s")
    pub(h, "S.e", 1, "4s")
    assert h.purge(seq=5) == 1  # compaction below seq 5
    assert h.stream.next_expiry_ns() == at(5)


# ------------------------------------------------------------------------------ markers


def test_marker_replaces_the_last_message_of_a_subject(make_harness: MakeHarness) -> None:
    h = make_harness(**markers(5))
    pub(h, "S.a", 0, "5s", ("Foo", "bar"))
    pub(h, "S.b", 1)
    pub(h, "S.b", 2, "5s")
    assert h.expire(at(7)) == [1, 3]
    assert stored(h) == [(2, "S.b", b"", at(1)), (4, "S.a", marker_header(5), at(7))]
    state = h.stream.state()
    assert (state.messages, state.last_seq, state.last_ts_ns) == (2, 4, at(7))
    assert h.stream.last_msg_id == ""  # probed: Nats-Expected-Last-Msg-Id "" matches then
    # the marker expires after its own TTL and leaves no marker behind
    assert h.stream.next_expiry_ns() == at(12)
    assert h.expire(at(12)) == [4]
    assert h.live() == [2]
    assert h.stream.state().last_seq == 4


def test_markers_are_numbered_in_the_order_of_the_expired_seqs(make_harness: MakeHarness) -> None:
    """max_age candidates are always a prefix of the seqs (timestamps do not decrease), so
    nats-server's two passes (max_age, then TTL) number markers in seq order."""
    h = make_harness(max_age=10 * S, **markers(5))
    pub(h, "S.m1", 0)  # max_age at 10
    pub(h, "S.m2", 1)  # max_age at 11
    pub(h, "S.t1", 5, "5s")  # TTL at 10
    pub(h, "S.t2", 6, "5s")  # TTL at 11
    assert h.expire(at(11.5)) == [1, 2, 3, 4]
    subjects = [(seq, subject) for seq, subject, _, _ in stored(h)]
    assert subjects == [(5, "S.m1"), (6, "S.m2"), (7, "S.t1"), (8, "S.t2")]


def test_no_marker_while_the_subject_keeps_a_message(make_harness: MakeHarness) -> None:
    h = make_harness(**markers(5))
    pub(h, "S.a", 0, "5s")
    pub(h, "S.a", 1, "5s")
    pub(h, "S.a", 2, "never")
    assert h.expire(at(10)) == [1, 2]
    assert h.live() == [3]
    # two due messages on one subject: only the last one leaves a marker
    pub(h, "S.b", 3, "5s")
    pub(h, "S.b", 4, "5s")
    assert h.expire(at(20)) == [4, 5]
    assert [(s, subj) for s, subj, _, _ in stored(h)] == [(3, "S.a"), (6, "S.b")]


def test_no_marker_for_markers_and_kv_purges(make_harness: MakeHarness) -> None:
    h = make_harness(**markers(5))
    pub(h, "S.a", 0, "5s", ("KV-Operation", "PURGE"))
    pub(h, "S.b", 0, "5s", ("Nats-Marker-Reason", "Remove"))
    pub(h, "S.c", 0, "5s", ("KV-Operation", "purge"))
    pub(h, "S.d", 0, "5s", ("Nats-Marker-Reason", ""))
    assert h.expire(at(5)) == [1, 2, 3, 4]
    assert [(s, subj) for s, subj, _, _ in stored(h)] == [(5, "S.c"), (6, "S.d")]


def test_no_marker_for_limits_purge_or_delete(make_harness: MakeHarness) -> None:
    h = make_harness(max_msgs_per_subject=1, max_msgs=3, **markers(5))
    pub(h, "S.a", 0, "5s")
    pub(h, "S.a", 1, "5s")  # per-subject limit drops seq 1
    pub(h, "S.b", 1)
    pub(h, "S.c", 1)
    pub(h, "S.d", 1)  # max_msgs drops seq 2
    assert h.delete(3) is None
    assert h.purge("S.c") == 1
    assert h.live() == [5]
    assert h.stream.state().last_seq == 5


def test_marker_is_subject_to_max_age(make_harness: MakeHarness) -> None:
    """Probed: with max_age 1 s and a 2 s marker TTL the marker vanished after ~1 s."""
    h = make_harness(max_age=S, **markers(2))
    pub(h, "S.a", 0)
    assert h.expire(at(1)) == [1]
    assert stored(h) == [(2, "S.a", marker_header(2), at(1))]
    assert h.stream.next_expiry_ns() == at(2)
    assert h.expire(at(2)) == [2]
    assert h.live() == []
    state = h.stream.state()
    assert (state.messages, state.first_seq, state.last_seq) == (0, 3, 2)


def test_ttl_raised_to_the_marker_ttl_then_marker_then_empty(make_harness: MakeHarness) -> None:
    """§3.4: Nats-TTL 1s on a 2 s marker stream → marker at ~t+2, empty at ~t+4, first_seq 3."""
    h = make_harness(**markers(2))
    pub(h, "S.a", 0, "1s")
    assert h.expire(at(1.5)) == []
    assert h.expire(at(2)) == [1]
    assert h.expire(at(4)) == [2]
    state = h.stream.state()
    assert (state.messages, state.first_seq, state.last_seq) == (0, 3, 2)


def test_marker_timestamp_never_goes_back(make_harness: MakeHarness) -> None:
    h = make_harness(**markers(5))
    pub(h, "S.a", 0, "5s")
    pub(h, "S.b", 100)
    assert h.expire(at(50)) == [1]
    assert stored(h)[-1] == (3, "S.a", marker_header(5), at(100))


def test_marker_with_discard_old_limits_keeps_the_stream_in_bounds(
    make_harness: MakeHarness,
) -> None:
    """The marker is stored first and the limits run, then its rollup removes the expired
    message (stream.go order): a full max_msgs stream loses its oldest message too."""
    h = make_harness(max_msgs=2, **markers(5))
    pub(h, "S.old", 0)
    pub(h, "S.a", 1, "5s")
    assert h.expire(at(6)) == [2]
    assert [(s, subj) for s, subj, _, _ in stored(h)] == [(3, "S.a")]


def test_interest_stream_keeps_no_marker(make_harness: MakeHarness) -> None:
    h = make_harness(retention="interest", **markers(5))
    pub(h, "S.a", 0, "5s")
    assert h.expire(at(6)) == []
    assert h.live() == []


# ----------------------------------------------------------------------------- refused


def test_sealed_stream_refuses_the_marker_and_keeps_the_message(make_harness: MakeHarness) -> None:
    """Probed: sealed with markers on, the due message stays; without markers it goes."""
    h = make_harness(**markers(1))
    pub(h, "S.a", 0, "1s")
    pub(h, "S.b", 0, "1s")
    pub(h, "S.b", 0, "1s")
    assert h.update(sealed=True) is None
    assert h.expire(at(1)) == [2]  # not the last of S.b: removed without a marker
    assert h.live() == [1, 3]
    # not re-proposed at once (that would spin), but MARKER_RETRY later
    assert h.stream.next_expiry_ns() == at(3)
    assert h.expire(at(3)) == []
    assert h.live() == [1, 3]
    plain = make_harness(**TTL_ON)
    pub(plain, "S.a", 0, "1s")
    assert plain.update(sealed=True) is None
    assert plain.expire(at(1)) == [1]


def test_full_discard_new_stream_refuses_the_marker(make_harness: MakeHarness) -> None:
    """Probed: max_msgs 1, discard new: the message stays, retried later."""
    h = make_harness(max_msgs=1, discard="new", **markers(1))
    pub(h, "S.a", 0, "1s")
    assert h.expire(at(1)) == []
    assert h.live() == [1]
    assert h.stream.next_expiry_ns() == at(3)
    # once the marker fits (room made by a larger limit), the retry succeeds
    assert h.update(max_msgs=2) is None
    assert h.expire(at(3)) == [1]
    assert [(s, subj) for s, subj, _, _ in stored(h)] == [(2, "S.a")]


def test_refusal_does_not_delay_other_expiries(make_harness: MakeHarness) -> None:
    h = make_harness(max_msgs=2, discard="new", **markers(1))
    pub(h, "S.a", 0, "1s")
    pub(h, "S.b", 0.5, "1h")
    assert h.expire(at(1)) == []
    assert h.stream.next_expiry_ns() == at(3)
    h2 = make_harness(max_msgs=3, discard="new", **markers(1))
    pub(h2, "S.a", 0, "1s")
    pub(h2, "S.b", 0)
    pub(h2, "S.b", 0, "2s")
    assert h2.expire(at(1)) == []  # the stream is full: S.a's marker does not fit
    # S.b's TTL message is due at 2 s, before the retry of S.a, and needs no marker
    assert h2.stream.next_expiry_ns() == at(2)
    assert h2.expire(at(2)) == [3]  # S.a was retried first (seq order): still full then
    assert h2.stream.next_expiry_ns() == at(4)
    assert h2.expire(at(4)) == [1]  # now there is room for the marker
    assert [(s, subj) for s, subj, _, _ in stored(h2)] == [(2, "S.b"), (4, "S.a")]


# ------------------------------------------------------------------------ restart/replay


def test_reopen_keeps_deadlines_and_due_messages_go_at_the_first_expiry(
    make_harness: MakeHarness,
) -> None:
    h = make_harness(max_age=60 * S, **markers(2))
    pub(h, "S.a", 0, "1s")
    pub(h, "S.b", 0, "never")
    pub(h, "S.c", 0, "1h")
    h.reopen()
    assert h.stream.next_expiry_ns() == at(2)
    # "down" until t=100: the first expire entry after the restart removes what is due
    assert h.expire(at(100)) == [1, 3]
    assert [(s, subj) for s, subj, _, _ in stored(h)] == [(2, "S.b"), (4, "S.a"), (5, "S.c")]
    h.reopen()
    assert h.stream.next_expiry_ns() == at(102)
    assert h.expire(at(102)) == [4, 5]
    assert h.live() == [2]


def test_replaying_the_log_gives_the_same_digest(make_harness: MakeHarness) -> None:
    h = make_harness(max_age=30 * S, **markers(2))
    for i in range(12):
        pub(h, f"S.{i % 4}", i * 0.5, ["1s", "3s", None, "never"][i % 4])
        if i % 3 == 2:
            h.apply(ExpireEntry(at(i * 0.5 + 1)))
    h.expire(at(40))
    replayed = h.replay_into_fresh()
    assert replayed.digest() == h.stream.digest()
    assert replayed.next_expiry_ns() == h.stream.next_expiry_ns()
