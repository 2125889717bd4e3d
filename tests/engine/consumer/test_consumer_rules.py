"""The consumer rules one by one: ack floor, ack-all, max_deliver, NAK / WPI / TERM, backoff,
max_ack_pending, deliver policies, create / update / delete, retention, snapshots, config."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.consumer.config import ConsumerConfigError, parse_config
from engine.consumer.consumer import Consumer
from engine.consumer.consumers import ConsumerSet
from engine.consumer.entries import (
    Ack,
    AckEntry,
    AckKind,
    AckTimeoutEntry,
    CreateAction,
    CreateConsumerEntry,
    DeleteConsumerEntry,
    DeliverEntry,
    ResetConsumerEntry,
)
from engine.consumer.limits import ACK_WAIT_DEFAULT_NS, MAX_ACK_PENDING_DEFAULT
from engine.consumer.results import (
    REFUSED_CONFIG,
    REFUSED_EXISTS,
    REFUSED_NOT_FOUND,
    REFUSED_UPDATE,
    AckResult,
    CreateResult,
    DeleteResult,
    DeliverResult,
    Refusal,
    ResetResult,
    SeqRange,
    TimeoutResult,
)
from engine.consumer.retention import removable_seqs
from engine.consumer.snapshot import ConsumerSnapshotError
from tests.engine.consumer.fake_stream import FakeStream


class Harness:
    def __init__(self, subjects: list[str] | None = None) -> None:
        self.stream = FakeStream()
        for subject in subjects or []:
            self.stream.publish(subject, 0)
        self.consumers = ConsumerSet()
        self.index = 0

    def apply(self, entry: object) -> object:
        self.index += 1
        return self.consumers.apply(self.index, entry, self.stream)  # type: ignore[arg-type]

    def create(
        self, name: str = "c", action: CreateAction = CreateAction.CREATE_OR_UPDATE, **cfg: object
    ) -> object:
        return self.apply(CreateConsumerEntry(0, name, json.dumps(cfg).encode(), action))

    def deliver(self, *seqs: int, now: int = 0, name: str = "c") -> DeliverResult:
        result = self.apply(DeliverEntry(now, name, seqs))
        assert isinstance(result, DeliverResult)
        return result

    def ack(
        self, kind: AckKind, seq: int, cseq: int = 0, now: int = 0, delay: int = 0, name: str = "c"
    ) -> AckResult:
        reason = "r" if kind == AckKind.TERM else ""
        result = self.apply(AckEntry(now, (Ack(name, kind, seq, cseq, delay, reason),)))
        assert isinstance(result, AckResult)
        return result

    def timeout(self, now: int, name: str = "c") -> TimeoutResult:
        result = self.apply(AckTimeoutEntry(now, name))
        assert isinstance(result, TimeoutResult)
        return result

    @property
    def c(self) -> Consumer:
        consumer = self.consumers.get("c")
        assert consumer is not None
        return consumer


EXPLICIT = {"ack_policy": "explicit", "ack_wait": 100}


# ------------------------------------------------------------------ ack floor


def test_ack_floor_advances_over_contiguous_acks_only() -> None:
    h = Harness(["s"] * 5)
    h.create(**EXPLICIT)
    h.deliver(1, 2, 3, 4, 5)
    h.ack(AckKind.ACK, 2)
    assert tuple(h.c.ack_floor) == (0, 0)  # 1 still pending
    h.ack(AckKind.ACK, 1)
    assert tuple(h.c.ack_floor) == (2, 2)  # jumps to just below 3, the next pending
    h.ack(AckKind.ACK, 4)
    assert tuple(h.c.ack_floor) == (2, 2)
    h.ack(AckKind.ACK, 3)
    assert tuple(h.c.ack_floor) == (4, 4)
    h.ack(AckKind.ACK, 5)
    assert tuple(h.c.ack_floor) == tuple(h.c.delivered) == (5, 5)
    assert h.c.num_ack_pending == 0


def test_ack_past_delivered_and_duplicate_acks_are_ignored() -> None:
    h = Harness(["s"] * 3)
    h.create(**EXPLICIT)
    h.deliver(1)
    assert not h.ack(AckKind.ACK, 2).applied
    assert h.ack(AckKind.ACK, 1).applied
    assert not h.ack(AckKind.ACK, 1).applied
    assert not h.ack(AckKind.ACK, 1, name="nobody").applied


# ------------------------------------------------------------------ ack all


@settings(max_examples=100)
@given(st.integers(1, 10), st.integers(0, 10))
def test_ack_all_acknowledges_everything_up_to_the_seq(n: int, pick: int) -> None:
    h = Harness(["s"] * n)
    h.create(ack_policy="all", ack_wait=100)
    delivered = h.deliver(*range(1, n + 1)).delivered
    target = delivered[pick % n]
    result = h.ack(AckKind.ACK, target.stream_seq, target.consumer_seq)
    assert result.applied
    assert [s for s, _ in h.c.pending.items()] == list(range(target.stream_seq + 1, n + 1))
    assert tuple(h.c.ack_floor) == (target.consumer_seq, target.stream_seq)
    # acking below the floor again changes nothing
    assert not h.ack(AckKind.ACK, target.stream_seq, target.consumer_seq).applied


def test_ack_all_term_also_acknowledges_below() -> None:
    h = Harness(["s"] * 3)
    h.create(ack_policy="all", ack_wait=100)
    h.deliver(1, 2, 3)
    result = h.ack(AckKind.TERM, 2, 2)
    assert result.terminated and h.c.num_ack_pending == 1


def test_ack_none_moves_the_floor_with_delivery() -> None:
    h = Harness(["s"] * 3)
    h.create(ack_policy="none")
    h.deliver(1, 3)
    assert tuple(h.c.ack_floor) == tuple(h.c.delivered) == (2, 3)
    assert h.c.num_ack_pending == 0
    assert not h.ack(AckKind.ACK, 3).applied
    assert h.c.next_redelivery_ns() is None


# ------------------------------------------------------------------ redelivery, max_deliver


def test_redelivery_keeps_the_first_consumer_seq_and_counts_deliveries() -> None:
    h = Harness(["s"] * 2)
    h.create(**EXPLICIT)
    h.deliver(1, 2, now=0)
    assert h.c.next_redelivery_ns() == 100
    assert h.c.redelivery_due(99).redeliver == ()
    assert h.c.redelivery_due(100).redeliver == (1, 2)
    again = h.deliver(1, now=100).delivered
    assert [tuple(d) for d in again] == [(1, 3, 2)]
    pending = h.c.pending.get(1)
    assert pending is not None and pending.consumer_seq == 1 and pending.ts_ns == 100
    assert h.c.redelivered == {1: 1} and h.c.num_redelivered == 1
    h.ack(AckKind.ACK, 1, 3)
    assert h.c.redelivered == {}


def test_max_deliver_stops_deliveries_and_reports_exhaustion() -> None:
    h = Harness(["s"])
    h.create(ack_policy="explicit", ack_wait=10, max_deliver=2)
    h.deliver(1, now=0)
    h.deliver(1, now=10)
    assert h.deliver(1, now=20).refused == (1,)  # a third delivery is refused
    plan = h.c.redelivery_due(20)
    assert plan.exhausted == (1,) and plan.redeliver == ()
    result = h.timeout(20)
    assert [tuple(e) for e in result.exhausted] == [(1, 2)]
    assert h.c.num_ack_pending == 0 and 1 in h.c.redelivered
    assert h.c.needs_ack(1)  # an interest stream keeps it
    assert h.c.next_redelivery_ns() is None


def test_timeout_drops_messages_that_left_the_stream() -> None:
    h = Harness(["s"] * 3)
    h.create(**EXPLICIT)
    h.deliver(1, 2, 3)
    h.stream.remove(1)
    h.stream.remove(3)
    result = h.timeout(50)  # 1 is below the first seq; 3 is not due yet
    assert result.gone == (1,)
    result = h.timeout(100)
    assert result.gone == (3,)
    assert [s for s, _ in h.c.pending.items()] == [2]


def test_redelivering_a_deleted_message_drops_it() -> None:
    h = Harness(["s"] * 2)
    h.create(**EXPLICIT)
    h.deliver(1, 2)
    h.stream.remove(2)
    result = h.deliver(2, now=100)
    assert result.gone == (2,) and result.delivered == ()
    assert 2 not in h.c.pending


# ------------------------------------------------------------------ nak, wpi, term, backoff


def test_nak_without_delay_is_due_now_and_with_delay_later() -> None:
    h = Harness(["s"] * 2)
    h.create(**EXPLICIT)
    h.deliver(1, 2, now=0)
    h.ack(AckKind.NAK, 1, now=10)
    assert h.c.redelivery_due(10).redeliver == (1,)
    h.ack(AckKind.NAK, 2, now=10, delay=500)
    assert h.c.pending.deadline(2) == 510
    assert h.c.redelivery_due(509).redeliver == (1,)


def test_wpi_restarts_the_ack_timer() -> None:
    h = Harness(["s"])
    h.create(**EXPLICIT)
    h.deliver(1, now=0)
    h.ack(AckKind.WPI, 1, now=90)
    assert h.c.next_redelivery_ns() == 190
    assert h.c.redelivery_due(150).redeliver == ()


def test_term_removes_without_redelivery() -> None:
    h = Harness(["s"])
    h.create(**EXPLICIT)
    h.deliver(1, now=0)
    result = h.ack(AckKind.TERM, 1)
    assert result.terminated and h.c.num_ack_pending == 0
    assert h.c.redelivery_due(10**9).redeliver == ()
    assert h.deliver(1).refused == (1,)


def test_backoff_steps_per_redelivery_and_the_last_repeats() -> None:
    h = Harness(["s"])
    h.create(ack_policy="explicit", backoff=[10, 50, 200], max_deliver=10)
    assert h.c.config.ack_wait == 10
    h.deliver(1, now=0)
    assert h.c.next_redelivery_ns() == 10
    h.deliver(1, now=10)
    assert h.c.next_redelivery_ns() == 60
    h.deliver(1, now=60)
    assert h.c.next_redelivery_ns() == 260
    h.deliver(1, now=260)
    assert h.c.next_redelivery_ns() == 460


# ------------------------------------------------------------------ max_ack_pending


def test_max_ack_pending_blocks_first_deliveries_but_not_redeliveries() -> None:
    h = Harness(["s"] * 4)
    h.create(ack_policy="explicit", ack_wait=10, max_ack_pending=2)
    assert h.c.next_new_seqs(h.stream, 10) == [1, 2]
    result = h.deliver(1, 2, 3)
    assert result.refused == (3,) and not h.c.may_deliver()
    assert h.deliver(1, now=10).delivered  # a redelivery is still allowed
    h.ack(AckKind.ACK, 1)
    assert h.c.ack_pending_room() == 1 and h.c.next_new_seqs(h.stream, 10) == [3]


# ------------------------------------------------------------------ deliver policies


@pytest.mark.parametrize(
    ("cfg", "first_new"),
    [
        ({"deliver_policy": "all"}, [1, 2, 3, 4, 5]),
        ({"deliver_policy": "new"}, []),
        ({"deliver_policy": "last"}, [5]),
        ({"deliver_policy": "last", "filter_subject": "a.*"}, [5]),
        ({"deliver_policy": "by_start_sequence", "opt_start_seq": 3}, [3, 4, 5]),
        (
            {"deliver_policy": "by_start_time", "opt_start_time": "1970-01-01T00:00:00.000000003Z"},
            [3, 4, 5],
        ),
        ({"deliver_policy": "last_per_subject"}, [3, 4, 5]),
        ({"deliver_policy": "last_per_subject", "filter_subject": "a.*"}, [4, 5]),
    ],
)
def test_deliver_policies_choose_the_start(cfg: dict[str, object], first_new: list[int]) -> None:
    h = Harness()
    for ts, subject in enumerate(["a.1", "a.2", "b", "a.2", "a.1"], start=1):
        h.stream.publish(subject, ts)
    assert isinstance(h.create(**cfg), CreateResult)
    assert h.c.next_new_seqs(h.stream, 10) == first_new
    assert h.c.num_pending(h.stream) == len(first_new)


def test_last_per_subject_skips_then_resumes_after_creation() -> None:
    h = Harness(["a", "b", "a", "b"])
    h.create(deliver_policy="last_per_subject", ack_policy="explicit")
    assert h.c.skip_seqs == [3, 4]
    h.stream.publish("a")
    assert h.deliver(2).refused == (2,)  # not the last of its subject
    assert h.c.num_pending(h.stream) == 3
    assert [d.stream_seq for d in h.deliver(3, 4, 5).delivered] == [3, 4, 5]
    assert h.c.skip_seqs == [] and h.c.delivered.stream_seq == 5


def test_filtered_consumer_refuses_other_subjects() -> None:
    h = Harness(["a", "b"])
    h.create(filter_subjects=["b", "c"], ack_policy="explicit")
    assert h.deliver(1, 2).refused == (1,)


# ------------------------------------------------------------------ create, update, delete


def test_create_update_and_delete() -> None:
    h = Harness()
    assert isinstance(h.create(action=CreateAction.UPDATE, **EXPLICIT), Refusal)
    created = h.create(action=CreateAction.CREATE, **EXPLICIT)
    assert isinstance(created, CreateResult) and created.created
    same = h.create(action=CreateAction.CREATE, **EXPLICIT)
    assert isinstance(same, CreateResult) and not same.created
    other = h.create(action=CreateAction.CREATE, ack_policy="explicit", ack_wait=5)
    assert isinstance(other, Refusal) and other.reason == REFUSED_EXISTS
    updated = h.create(ack_policy="explicit", ack_wait=5)
    assert isinstance(updated, CreateResult) and h.c.config.ack_wait == 5
    changed = h.create(ack_policy="all")
    assert isinstance(changed, Refusal) and changed.reason == REFUSED_UPDATE
    bad = h.create(ack_policy="sometimes")
    assert isinstance(bad, Refusal) and bad.reason == REFUSED_CONFIG
    assert isinstance(h.apply(DeleteConsumerEntry(0, "c")), DeleteResult)
    gone = h.apply(DeleteConsumerEntry(0, "c"))
    assert isinstance(gone, Refusal) and gone.reason == REFUSED_NOT_FOUND


def test_an_update_retimes_what_is_pending() -> None:
    h = Harness(["s"])
    h.create(**EXPLICIT)
    h.deliver(1, now=0)
    h.create(ack_policy="explicit", ack_wait=1000)
    assert h.c.next_redelivery_ns() == 1000


def test_apply_index_must_increase() -> None:
    h = Harness()
    h.create(**EXPLICIT)
    with pytest.raises(AssertionError):
        h.consumers.apply(1, DeleteConsumerEntry(0, "c"), h.stream)


# ------------------------------------------------------------------ retention


def test_interest_retention_waits_for_every_interested_consumer() -> None:
    h = Harness(["a", "b", "a"])
    h.create("x", **EXPLICIT)
    h.create("y", filter_subject="a", **EXPLICIT)
    everything = [SeqRange(1, 3)]
    assert removable_seqs("interest", h.consumers, h.stream, everything) == []
    h.deliver(1, 2, 3, name="x")
    h.deliver(1, 3, name="y")
    x_acks = h.ack(AckKind.ACK, 2, name="x").released
    assert removable_seqs("interest", h.consumers, h.stream, x_acks) == [2]  # y does not see b
    h.stream.remove(2)  # what the stream does with the answer, in the same apply
    h.ack(AckKind.ACK, 1, name="x")
    assert removable_seqs("interest", h.consumers, h.stream, everything) == []
    released = h.ack(AckKind.ACK, 1, name="y").released
    assert removable_seqs("interest", h.consumers, h.stream, released) == [1]
    assert removable_seqs("limits", h.consumers, h.stream, everything) == []


def test_interest_retention_after_a_consumer_is_deleted() -> None:
    h = Harness(["a", "a"])
    h.create("x", **EXPLICIT)
    h.create("y", **EXPLICIT)
    h.deliver(1, 2, name="x")
    h.ack(AckKind.ACK, 1, name="x")
    h.ack(AckKind.ACK, 2, name="x")
    result = h.apply(DeleteConsumerEntry(0, "y"))
    assert isinstance(result, DeleteResult)
    assert removable_seqs("interest", h.consumers, h.stream, result.released) == [1, 2]


def test_workqueue_keeps_what_no_consumer_matches() -> None:
    h = Harness(["a", "b"])
    h.create("x", filter_subject="a", **EXPLICIT)
    h.deliver(1, name="x")
    released = h.ack(AckKind.ACK, 1, name="x").released
    assert removable_seqs("workqueue", h.consumers, h.stream, released) == [1]
    assert removable_seqs("workqueue", h.consumers, h.stream, [SeqRange(1, 2)]) == [1]
    assert removable_seqs("interest", h.consumers, h.stream, [SeqRange(2, 2)]) == [2]


# ------------------------------------------------------------------ snapshots and config


def test_snapshot_round_trips_and_rejects_garbage() -> None:
    h = Harness(["a", "b", "a"])
    h.create("x", ack_policy="explicit", backoff=[5, 9], max_deliver=3)
    h.create("y", deliver_policy="last_per_subject")
    h.deliver(1, 2, name="x")
    h.deliver(1, now=5, name="x")
    raw = h.consumers.to_json()
    restored = ConsumerSet.from_json(raw)
    assert restored.to_json() == raw and restored.digest() == h.consumers.digest()
    for bad in (b"", b"[]", raw.replace(b'"version":1', b'"version":2'), raw[:-1]):
        with pytest.raises(ConsumerSnapshotError):
            ConsumerSet.from_json(bad)


def test_digest_changes_with_state() -> None:
    h = Harness(["a"])
    h.create(**EXPLICIT)
    before = h.consumers.digest()
    h.deliver(1)
    assert h.consumers.digest() != before


def test_config_defaults_follow_nats_server() -> None:
    cfg = parse_config(b'{"ack_policy":"explicit"}')
    assert cfg.ack_wait == ACK_WAIT_DEFAULT_NS
    assert cfg.max_ack_pending == MAX_ACK_PENDING_DEFAULT
    assert cfg.max_deliver == -1
    assert parse_config(cfg.to_json()) == cfg
    kept = parse_config(b'{"headers_only":true,"metadata":{"k":"v"}}')
    assert parse_config(kept.to_json()) == kept and b"headers_only" in kept.to_json()


@pytest.mark.parametrize(
    "raw",
    [
        b"nope",
        b"[]",
        b'{"ack_policy":1}',
        b'{"filter_subject":"a","filter_subjects":["b"]}',
        b'{"filter_subjects":["a","a"]}',
        b'{"filter_subject":"a..b"}',
        b'{"deliver_policy":"by_start_sequence"}',
        b'{"opt_start_seq":5}',
        b'{"deliver_policy":"by_start_time","opt_start_time":"yesterday"}',
        b'{"ack_policy":"explicit","backoff":[1,2,3],"max_deliver":2}',
        b'{"ack_policy":"explicit","backoff":[0]}',
        b'{"name":"a.b"}',
        b'{"ack_wait":true}',
    ],
)
def test_bad_configs_are_refused(raw: bytes) -> None:
    with pytest.raises(ConsumerConfigError):
        parse_config(raw)


# ------------------------------------------------------------------ reset


def test_reset_starts_over_from_a_seq_with_nothing_pending() -> None:
    h = Harness(["s"] * 6)
    h.create(**EXPLICIT)
    h.deliver(1, 2, 3, now=5)
    h.ack(AckKind.ACK, 1, now=6)
    h.ack(AckKind.NAK, 2, now=6)
    h.deliver(2, now=7)  # a redelivery: counted
    assert h.c.num_redelivered == 1 and h.c.num_ack_pending == 2
    result = h.apply(ResetConsumerEntry(8, "c", 5))
    assert result == ResetResult("c", 5)
    assert tuple(h.c.delivered) == tuple(h.c.ack_floor) == (0, 4)
    assert h.c.num_ack_pending == 0 and h.c.num_redelivered == 0
    assert (h.c.delivered_active_ns, h.c.acked_active_ns) == (0, 0)
    assert h.c.next_new_seqs(h.stream, 10) == [5, 6]
    delivered = h.deliver(5)
    assert [d.consumer_seq for d in delivered.delivered] == [1]  # consumer seqs start over


def test_reset_without_a_seq_goes_back_to_the_ack_floor() -> None:
    h = Harness(["s"] * 4)
    h.create(**EXPLICIT)
    h.deliver(1, 2, 3)
    h.ack(AckKind.ACK, 1)
    assert h.apply(ResetConsumerEntry(0, "c")) == ResetResult("c", 2)
    assert h.c.next_new_seqs(h.stream, 10) == [2, 3, 4]
    assert h.apply(ResetConsumerEntry(0, "nobody")) == Refusal(REFUSED_NOT_FOUND, REFUSED_NOT_FOUND)


def test_reset_of_a_last_per_subject_consumer_is_the_same_on_a_restored_replica() -> None:
    h = Harness(["a", "b", "a", "b", "c", "d", "d"])  # the last of each: 3, 4, 5, 7
    h.create(deliver_policy="last_per_subject", **EXPLICIT)
    assert h.c.next_new_seqs(h.stream, 10) == [3, 4, 5, 7]
    h.deliver(3, 4)
    restored = ConsumerSet.from_json(h.consumers.to_json())  # a replica from a snapshot
    for seq in (4, 1):
        entry = ResetConsumerEntry(0, "c", seq)
        h.index += 1
        assert h.consumers.apply(h.index, entry, h.stream) == restored.apply(
            h.index, entry, h.stream
        )
        copy = restored.get("c")
        assert copy is not None
        assert h.c.next_new_seqs(h.stream, 10) == copy.next_new_seqs(h.stream, 10)
        assert h.consumers.to_json() == restored.to_json()
    # what is left of its list (5, 7) comes first, then on from where it stood at creation
    assert h.c.next_new_seqs(h.stream, 10) == [5, 7]
