"""Counter streams, the stream's subject transform and RePublish in the state machine: what is
stored, what the results carry, and that a replay of the log stores the same (the
differential suite checks the same behaviour against nats-server over the wire)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.batch import BatchResult
from engine.entries import (
    BatchCommitEntry,
    ExpireEntry,
    InboundMsg,
    MirroredMsg,
    PublishEntry,
    SourceEntry,
)
from engine.memstore import MemoryStore
from engine.sources import HDR_STREAM_SOURCE, SourceSpec
from engine.stream import Stream
from protocol import errors
from protocol.headers import get_header
from protocol.models import RePublish, StreamSource, SubjectTransform
from protocol.timefmt import parse_rfc3339_unix_ns
from tests.engine.batch.batch_builders import bmsg
from tests.engine.stream.harness import CREATED_NS, Harness, MakeHarness, S, hdr, make_config

INCR = "Nats-Incr"


def incr(value: str) -> bytes:
    return hdr((INCR, value))


def stored_total(stream: Stream, subject: str) -> int:
    last = stream.load_last(subject)
    assert last is not None
    return int(json.loads(last.data)["val"])


# ------------------------------------------------------------------------------ counters


def test_counter_keeps_a_running_total_per_subject(make_harness: MakeHarness) -> None:
    h = make_harness(allow_msg_counter=True)
    assert h.publish("S.a", b"", incr("5")).val == "5"
    assert h.publish("S.a", b"", incr("+3")).val == "8"
    assert h.publish("S.b", b"", incr("-2")).val == "-2"
    assert h.publish("S.a", b"", incr("-10")).val == "-2"
    big = 10**40
    assert h.publish("S.b", b"", incr(str(big))).val == str(big - 2)
    assert stored_total(h.stream, "S.a") == -2
    stored = h.stream.load_last("S.a")
    assert stored is not None and get_header(stored.hdr, INCR) == "-10"
    assert h.stream.state().messages == 5


def test_counter_errors(make_harness: MakeHarness) -> None:
    h = make_harness(allow_msg_counter=True, allow_rollup_hdrs=True)
    assert h.fail("S.a", b"", incr("1.5")).spec == errors.MESSAGE_INCR_INVALID
    assert h.fail("S.a", b"", incr("abc")).spec == errors.MESSAGE_INCR_INVALID
    assert h.fail("S.a", b"x", incr("1")).spec == errors.MESSAGE_INCR_PAYLOAD
    assert h.fail("S.a", b"").spec == errors.MESSAGE_INCR_MISSING
    assert h.fail("S.a", b"", hdr(("Foo", "1"))).spec == errors.MESSAGE_INCR_MISSING
    with_rollup = hdr((INCR, "1"), ("Nats-Rollup", "sub"))
    assert h.fail("S.a", b"", with_rollup).spec == errors.MESSAGE_INCR_INVALID
    with_expected = hdr((INCR, "1"), ("Nats-Expected-Last-Sequence", "0"))
    assert h.fail("S.a", b"", with_expected).spec == errors.MESSAGE_INCR_INVALID
    plain = make_harness()
    assert plain.fail("S.a", b"", incr("1")).spec == errors.MESSAGE_INCR_DISABLED
    assert plain.fail("S.a", b"", incr("x")).spec == errors.MESSAGE_INCR_INVALID


def test_a_broken_counter_is_reported_not_overwritten(make_harness: MakeHarness) -> None:
    # a message that is not a total, stored before the stream counted (the API refuses this
    # update; the engine applies what it is given)
    h = make_harness()
    h.ok("S.a", b"not json")
    h.update(allow_msg_counter=True)
    assert h.fail("S.a", b"", incr("1")).spec == errors.MESSAGE_COUNTER_BROKEN
    assert h.stream.state().messages == 1


def test_counters_in_an_atomic_batch_run_on_from_each_other(make_harness: MakeHarness) -> None:
    h = make_harness(allow_msg_counter=True, allow_atomic=True)
    h.ok("S.a", b"", incr("10"))
    msgs = [
        bmsg("b1", 1, None, (INCR, "1"), data=b""),
        bmsg("b1", 2, None, (INCR, "2"), data=b""),
        bmsg("b1", 3, "1", (INCR, "3"), subject="S.c", data=b""),
    ]
    result = h.apply(BatchCommitEntry(h.tick(), "b1", tuple(msgs), False))
    assert isinstance(result, BatchResult) and result.error is None, result
    assert stored_total(h.stream, "S.a") == 13
    assert stored_total(h.stream, "S.c") == 3
    missing = [bmsg("b2", 1, "1", data=b"")]
    result = h.apply(BatchCommitEntry(h.tick(), "b2", tuple(missing), False))
    assert isinstance(result, BatchResult) and result.error is not None
    assert result.error.spec == errors.MESSAGE_INCR_MISSING


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(-(10**20), 10**20)), max_size=30))
def test_counter_totals_are_the_sums_and_replay_to_the_same(ops: list[tuple[str, int]]) -> None:
    stream = Stream(make_config(allow_msg_counter=True), MemoryStore(), CREATED_NS)
    entries = [
        PublishEntry(i + 1, (InboundMsg(f"S.{subj}", incr(str(n)), b""),))
        for i, (subj, n) in enumerate(ops)
    ]
    for index, entry in enumerate(entries, start=1):
        stream.apply(index, entry)
    for subj in "abc":
        expected = [n for s, n in ops if s == subj]
        if expected:
            assert stored_total(stream, f"S.{subj}") == sum(expected)
    fresh = Stream(make_config(allow_msg_counter=True), MemoryStore(), CREATED_NS)
    for index, entry in enumerate(entries, start=1):
        fresh.apply(index, entry)
    assert fresh.digest() == stream.digest()


# ------------------------------------------------------------------------------ transform


def test_the_subject_transform_changes_what_is_stored(make_harness: MakeHarness) -> None:
    transform = SubjectTransform(src="S.*.*", dest="S.out.{{wildcard(2)}}.$1")
    h = make_harness(subject_transform=transform)
    h.ok("S.a.b")
    h.ok("S.single")  # not matched by the source: stored as it came
    assert [m.subject for m in h.stream.store.scan()] == ["S.out.b.a", "S.single"]


def test_a_random_partition_is_the_same_on_every_replica(make_harness: MakeHarness) -> None:
    transform = SubjectTransform(src="S.*", dest="S.{{random(1000)}}.{{wildcard(1)}}")
    h = make_harness(subject_transform=transform)
    for i in range(20):
        h.ok(f"S.k{i}")
    subjects = [m.subject for m in h.stream.store.scan()]
    assert len({s.split(".")[1] for s in subjects}) > 1  # it does spread
    replayed = h.replay_into_fresh()
    assert [m.subject for m in replayed.store.scan()] == subjects
    assert replayed.digest() == h.stream.digest()


# ------------------------------------------------------------------------------ republish


def test_republish_headers_and_last_sequence(make_harness: MakeHarness) -> None:
    h = make_harness(
        max_msgs_per_subject=1,
        republish=RePublish(src="S.*", dest="R.{{wildcard(1)}}"),
    )
    h.ok("S.a", b"one")
    h.ok("S.a", b"two", hdr(("Foo", "bar")))
    h.ok("S.b.c", b"not matched")
    out = h.stream.take_republished()
    assert [r.subject for r in out] == ["R.a", "R.a"]
    assert out[0].data == b"one" and out[1].data == b"two"
    assert get_header(out[0].hdr, "Nats-Last-Sequence") == "0"
    # the subject's previous message is gone (one per subject) but still named
    assert get_header(out[1].hdr, "Nats-Last-Sequence") == "1"
    assert get_header(out[1].hdr, "Foo") == "bar"
    assert get_header(out[1].hdr, "Nats-Sequence") == "2"
    assert get_header(out[1].hdr, "Nats-Stream") == "S"
    assert get_header(out[1].hdr, "Nats-Subject") == "S.a"
    assert h.stream.take_republished() == []


def test_republish_headers_only(make_harness: MakeHarness) -> None:
    h = make_harness(republish=RePublish(src=">", dest="R.>", headers_only=True))
    h.ok("S.a", b"12345")
    (out,) = h.stream.take_republished()
    assert out.subject == "R.S.a" and out.data == b""
    assert get_header(out.hdr, "Nats-Msg-Size") == "5"


def test_failed_and_duplicate_publishes_are_not_republished(make_harness: MakeHarness) -> None:
    h = make_harness(republish=RePublish(src=">", dest="R.>"), max_msg_size=64)
    h.ok("S.a", b"x", hdr(("Nats-Msg-Id", "1")))
    h.publish("S.a", b"x", hdr(("Nats-Msg-Id", "1")))
    h.fail("S.a", b"x" * 65)
    assert len(h.stream.take_republished()) == 1


# ------------------------------------------------------------------------------ sources


def _upstream(*subjects: str, start: int = 1) -> tuple[MirroredMsg, ...]:
    return tuple(
        MirroredMsg(seq, subject, b"", f"m{seq}".encode(), 1_000 + seq)
        for seq, subject in enumerate(subjects, start=start)
    )


def test_sourced_messages_are_taken_once_with_their_source_header(
    make_harness: MakeHarness,
) -> None:
    src = StreamSource(
        name="O",
        subject_transforms=[SubjectTransform(src="o.*", dest="S.{{wildcard(1)}}")],
    )
    h = make_harness(sources=[src])
    iname = SourceSpec.of(src).iname
    first = SourceEntry(h.tick(), iname, _upstream("o.a", "o.b"), 2, "IDENT123")
    assert [r.seq for r in h.apply(first)] == [1, 2]  # type: ignore[union-attr]
    # the same batch again (a new leader re-proposing it) and an overlapping one take nothing
    # twice
    h.apply(SourceEntry(h.tick(), iname, _upstream("o.a", "o.b"), 2, "IDENT123"))
    h.apply(SourceEntry(h.tick(), iname, _upstream("o.b", "o.c", start=2), 3, "IDENT123"))
    stored = list(h.stream.store.scan())
    assert [m.subject for m in stored] == ["S.a", "S.b", "S.c"]
    assert get_header(stored[2].hdr, HDR_STREAM_SOURCE) == (
        "O 3 o.* S.{{wildcard(1)}} o.c IDENT123"
    )
    assert h.stream.source_position(iname) == 3
    assert h.reopen().source_position(iname) == 3  # the position is in the meta
    assert h.replay_into_fresh().digest() == h.stream.digest()


def test_sourced_headers_drop_expectations_and_old_sources(make_harness: MakeHarness) -> None:
    src = StreamSource(name="O")
    h = make_harness(sources=[src])
    upstream_hdr = hdr(
        ("Nats-Expected-Stream", "elsewhere"),
        (HDR_STREAM_SOURCE, "X 9 > > x"),
        ("Nats-Msg-Id", "one"),
    )
    msg = MirroredMsg(1, "S.a", upstream_hdr, b"x", 5)
    h.apply(SourceEntry(h.tick(), SourceSpec.of(src).iname, (msg, msg), 1))
    (stored,) = list(h.stream.store.scan())
    assert get_header(stored.hdr, "Nats-Expected-Stream") is None
    assert get_header(stored.hdr, HDR_STREAM_SOURCE) == "O 1 > > S.a"
    assert get_header(stored.hdr, "Nats-Msg-Id") == "one"
    # a second source bringing the same msg id is deduplicated (and its position still moves)
    other = StreamSource(name="P")
    h.update(sources=[src, other])
    h.apply(SourceEntry(h.tick(), SourceSpec.of(other).iname, (msg,), 1))
    assert h.stream.state().messages == 1
    assert h.stream.source_position(SourceSpec.of(other).iname) == 1


def test_an_entry_for_a_removed_source_takes_nothing(make_harness: MakeHarness) -> None:
    h = make_harness()
    h.apply(SourceEntry(h.tick(), "GONE > >", _upstream("S.a"), 1))
    assert h.stream.state().messages == 0


def test_a_counter_sums_its_sources_totals(make_harness: MakeHarness) -> None:
    a, b = StreamSource(name="A"), StreamSource(name="B")
    h = make_harness(allow_msg_counter=True, sources=[a, b])

    def total_from(source: StreamSource, seq: int, value: int) -> None:
        header = hdr((INCR, "1"))  # what the source stored with its total
        msg = MirroredMsg(seq, "S.c", header, b'{"val":"%d"}' % value, seq)
        h.apply(SourceEntry(h.tick(), SourceSpec.of(source).iname, (msg,), seq))

    total_from(a, 1, 5)  # A's counter is at 5
    total_from(b, 1, 2)  # B's at 2
    total_from(a, 2, 7)  # A's went up by 2
    assert stored_total(h.stream, "S.c") == 9
    h.ok("S.c", b"", incr("1"))  # a local increment on top
    assert stored_total(h.stream, "S.c") == 10
    last = h.stream.load_last("S.c")
    assert last is not None
    assert json.loads(get_header(last.hdr, "Nats-Counter-Sources") or "") == {
        "A": {"S.c": "7"},
        "B": {"S.c": "2"},
    }


# ------------------------------------------------------------------------------ schedules

SCHEDULED = {"allow_msg_schedules": True, "allow_rollup_hdrs": True, "subjects": ["S.>"]}


def schedule(pattern: str, target: str = "S.out", *extra: tuple[str, str]) -> bytes:
    return hdr(("Nats-Schedule", pattern), ("Nats-Schedule-Target", target), *extra)


def fire(h: Harness, at_ns: int) -> None:
    h.now_ns = at_ns
    h.apply(ExpireEntry(at_ns))


def test_a_repeating_schedule_fires_and_moves_on(make_harness: MakeHarness) -> None:
    h = make_harness(**SCHEDULED)
    h.ok("S.tick", b"beat", schedule("@every 2s"))
    start = h.now_ns
    due = h.stream.next_schedule_ns()
    assert due is not None and S <= due - start <= 3 * S
    fire(h, due)
    fired = h.stream.load_last("S.out")
    assert fired is not None and fired.data == b"beat"
    assert get_header(fired.hdr, "Nats-Scheduler") == "S.tick"
    following = get_header(fired.hdr, "Nats-Schedule-Next") or ""
    assert parse_rfc3339_unix_ns(following) == h.stream.next_schedule_ns()
    assert get_header(fired.hdr, "Nats-Schedule") is None  # schedule headers stripped
    fire(h, h.now_ns + S // 2)  # not due yet: nothing fires
    assert h.stream.state().messages == 2
    next_due = h.stream.next_schedule_ns()
    assert next_due is not None
    fire(h, next_due)
    assert h.stream.state().messages == 3  # the schedule and two fired messages
    # a restart finds the schedule where the log left it
    assert h.reopen().next_schedule_ns() == h.stream.next_schedule_ns()
    assert h.replay_into_fresh().digest() == h.stream.digest()


def test_a_one_off_schedule_fires_once_and_goes(make_harness: MakeHarness) -> None:
    h = make_harness(**SCHEDULED, allow_msg_ttl=True)
    h.ok("S.src", b"latest", hdr(("Foo", "bar")))
    at = "@at 2023-11-14T22:13:25Z"  # a moment after the harness's clock starts
    extra = [("Nats-Schedule-Source", "S.src"), ("Nats-Schedule-TTL", "1h")]
    h.ok("S.once", b"own", schedule(at, "S.out", *extra))
    due = h.stream.next_schedule_ns()
    assert due == parse_rfc3339_unix_ns(at[4:])
    fire(h, max(due, h.now_ns))
    fired = h.stream.load_last("S.out")
    assert fired is not None and fired.data == b"latest"
    assert get_header(fired.hdr, "Foo") == "bar"
    assert get_header(fired.hdr, "Nats-TTL") == "1h"
    assert get_header(fired.hdr, "Nats-Schedule-Next") == "purge"
    assert h.stream.load_last("S.once") is None  # the schedule is purged
    assert h.stream.next_schedule_ns() is None


def test_a_plain_message_cancels_a_schedule(make_harness: MakeHarness) -> None:
    h = make_harness(**SCHEDULED)
    h.ok("S.tick", b"", schedule("0 0 0 * * *"))
    assert h.stream.next_schedule_ns() is not None
    h.ok("S.tick", b"no longer a schedule")
    assert h.stream.next_schedule_ns() is None


def test_schedule_publish_errors(make_harness: MakeHarness) -> None:
    h = make_harness(**SCHEDULED)
    assert (
        h.fail("S.a", b"", schedule("@every 1ms")).spec == errors.MESSAGE_SCHEDULES_PATTERN_INVALID
    )
    assert (
        h.fail("S.a", b"", schedule("@daily", "X.y")).spec
        == errors.MESSAGE_SCHEDULES_TARGET_INVALID
    )
    zone = ("Nats-Schedule-Time-Zone", "Nowhere/Town")
    assert (
        h.fail("S.a", b"", schedule("@daily", "S.b", zone)).spec
        == errors.MESSAGE_SCHEDULES_TIME_ZONE_INVALID
    )
    off = make_harness()
    assert off.fail("S.a", b"", schedule("@daily")).spec == errors.MESSAGE_SCHEDULES_DISABLED
    stored = h.publish(
        "S.a",
        b"",
        schedule("0 30 9 * * mon-fri", "S.b", ("Nats-Schedule-Time-Zone", "Europe/Amsterdam")),
    )
    assert stored.error is None


def test_the_digest_covers_the_sources_positions(make_harness: MakeHarness) -> None:
    """Two replicas holding the same messages but resuming a source at different positions
    would take messages twice or skip them after a leader change: their digests differ."""
    src = StreamSource(name="O")
    iname = SourceSpec.of(src).iname
    msg_id = hdr(("Nats-Msg-Id", "once"))
    digests = []
    for skipped_through in (3, 4):
        h = make_harness(sources=[src])
        h.apply(SourceEntry(h.tick(), iname, (MirroredMsg(1, "o.a", msg_id, b"x", 1_001),), 1))
        # a duplicate (by Nats-Msg-Id) is not stored, but the source's position moves past it
        again = MirroredMsg(skipped_through, "o.a", msg_id, b"x", 1_000 + skipped_through)
        h.apply(SourceEntry(h.tick(), iname, (again,), skipped_through))
        assert h.stream.source_position(iname) == skipped_through
        assert [m.seq for m in h.stream.store.scan()] == [1]
        digests.append(h.stream.digest())
    assert digests[0] != digests[1]
