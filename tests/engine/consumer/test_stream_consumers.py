"""Consumers inside a stream: their entries share the stream's log and its engine meta.

Random histories of publishes, consumer creates and deletes, deliveries, acks and timeouts on
``interest``, ``workqueue`` and ``limits`` streams, on both stores. Checked after every step:

* retention: a live message of an interest stream is one some consumer whose filter matches it
  still needs; of a work-queue stream, one not yet acked by the consumer that matches it; and
  no message is removed while a consumer that sees it still needs it;
* persistence: reopening the store gives the same stream and consumer state (the same digest);
* replay: the encoded log applied to a fresh stream gives the same digest.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.consumer.entries import (
    Ack,
    AckEntry,
    AckKind,
    AckTimeoutEntry,
    CreateConsumerEntry,
    DeleteConsumerEntry,
    DeliverEntry,
    ResetConsumerEntry,
)
from engine.consumer.results import DeliverResult
from tests.engine.stream.harness import Harness, make_config

SUBJECTS = ["q.a", "q.b", "q.c"]
FILTERS = ["", "q.a", "q.b", "q.*"]
NAMES = ["c1", "c2", "c3"]

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("publish"), st.sampled_from(SUBJECTS)),
        st.tuples(
            st.just("create"),
            st.sampled_from(NAMES),
            st.sampled_from(FILTERS),
            st.sampled_from(["explicit", "all", "none"]),
        ),
        st.tuples(st.just("delete"), st.sampled_from(NAMES)),
        st.tuples(st.just("deliver"), st.sampled_from(NAMES), st.integers(1, 4)),
        st.tuples(
            st.just("ack"),
            st.sampled_from(NAMES),
            st.integers(0, 6),
            st.sampled_from([AckKind.ACK, AckKind.NAK, AckKind.TERM, AckKind.WPI]),
        ),
        st.tuples(st.just("timeout"), st.sampled_from(NAMES), st.integers(0, 3)),
        st.tuples(st.just("purge"), st.sampled_from(["", "q.a", "q.*"])),
        st.tuples(st.just("reset"), st.sampled_from(NAMES), st.integers(0, 8)),
    ),
    max_size=40,
)
ACK_WAIT_NS = 1_000_000_000


def _config(filter_subject: str, ack_policy: str) -> bytes:
    obj: dict[str, Any] = {"ack_policy": ack_policy, "ack_wait": ACK_WAIT_NS, "max_deliver": 3}
    if filter_subject:
        obj["filter_subject"] = filter_subject
    return json.dumps(obj).encode()


def _run(h: Harness, ops: list[tuple[Any, ...]], retention: str) -> None:
    delivered: dict[str, list[int]] = {}
    refiltered = False  # a consumer's filter changed, or it was reset: see _check_retention
    for op in ops:
        before = {seq: h.stream.subject_of(seq) for seq in h.live()}
        kind = op[0]
        if kind == "publish":
            h.publish(op[1])
        elif kind == "create":
            _, name, filt, policy = op
            if retention == "workqueue":
                policy = "explicit"
            existing = h.stream.consumers.get(name)
            old_filters = existing.config.filters if existing is not None else None
            h.apply(CreateConsumerEntry(h.tick(), name, _config(filt, policy)))
            updated = h.stream.consumers.get(name)
            if old_filters is not None and updated is not None:
                refiltered |= old_filters != updated.config.filters
        elif kind == "delete":
            h.apply(DeleteConsumerEntry(h.tick(), op[1]))
        elif kind == "deliver":
            _, name, n = op
            consumer = h.stream.consumers.get(name)
            if consumer is None:
                continue
            due = consumer.redelivery_due(h.now_ns).redeliver
            seqs = list(due[:n]) or consumer.next_new_seqs(h.stream, n)
            if seqs:
                result = h.apply(DeliverEntry(h.tick(), name, tuple(seqs)))
                assert isinstance(result, DeliverResult)
                delivered.setdefault(name, []).extend(d.stream_seq for d in result.delivered)
        elif kind == "ack":
            _, name, pick, ack_kind = op
            seqs = delivered.get(name, [])
            if not seqs:
                continue
            seq = seqs[pick % len(seqs)]
            h.apply(AckEntry(h.tick(), (Ack(name, ack_kind, seq),)))
        elif kind == "purge":
            h.purge(op[1])
        elif kind == "reset":
            _, name, seq = op
            h.apply(ResetConsumerEntry(h.tick(), name, seq))
            refiltered |= h.stream.consumers.get(name) is not None
        else:
            _, name, seconds = op
            h.tick(seconds * ACK_WAIT_NS)
            h.apply(AckTimeoutEntry(h.now_ns, name))
        _check_retention(h, retention, refiltered)
        if kind != "purge":  # a purge removes by request
            _check_removals(h, retention, before)
        _check_consumer_invariants(h)
        assert h.replay_into_fresh().digest() == h.stream.digest()
    digest = h.stream.digest()
    names = h.stream.consumers.names()
    h.reopen()
    assert h.stream.digest() == digest
    assert h.stream.consumers.names() == names


def _check_removals(h: Harness, retention: str, before: dict[int, str | None]) -> None:
    """Nothing a consumer still needs was removed (no limits are set, so only retention
    removes)."""
    live = set(h.live())
    consumers = list(h.stream.consumers)
    for seq, subject in before.items():
        if seq in live or subject is None:
            continue
        assert retention != "limits", f"a limits stream lost seq {seq}"
        needed = [c.name for c in consumers if c.sees(subject) and c.needs_ack(seq)]
        assert not needed, f"seq {seq} removed while {needed} still need it"


def _check_consumer_invariants(h: Harness) -> None:
    for c in h.stream.consumers:
        assert c.ack_floor.stream_seq <= c.delivered.stream_seq, c.name
        assert c.ack_floor.consumer_seq <= c.delivered.consumer_seq, c.name
        assert all(seq > c.ack_floor.stream_seq for seq in c.pending.seqs()), c.name


def _check_retention(h: Harness, retention: str, refiltered: bool) -> None:
    """Every message left is owed to an interested consumer. On a work queue, once a consumer's
    filter changed, a message may be left that the consumer passed while it did not see it, and
    once a consumer was reset past messages, those: nats-server keeps them too (it cleans up
    after a filter change or a reset on interest streams only)."""
    if retention == "workqueue" and refiltered:
        return
    stream = h.stream
    consumers = list(stream.consumers)
    for seq in h.live():
        subject = stream.subject_of(seq)
        assert subject is not None
        interested = [c for c in consumers if c.sees(subject)]
        if retention == "interest":
            assert any(c.needs_ack(seq) for c in interested), (seq, subject)
        elif retention == "workqueue" and interested:
            assert any(c.needs_ack(seq) for c in interested), (seq, subject)


@settings(max_examples=60, deadline=None)
@given(
    OPS, st.sampled_from(["interest", "workqueue", "limits"]), st.sampled_from(["memory", "file"])
)
def test_random_consumer_histories(ops: list[tuple[Any, ...]], retention: str, store: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config = make_config(subjects=["q.>"], retention=retention)
        h = Harness(store, Path(tmp), config)
        try:
            _run(h, ops, retention)
        finally:
            h.close()


def test_an_interest_stream_keeps_a_message_until_every_interested_consumer_acked() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        h = Harness("file", Path(tmp), make_config(subjects=["q.>"], retention="interest"))
        h.publish("q.a")  # nobody is interested yet: not kept
        assert h.live() == []
        for name in ("c1", "c2"):
            h.apply(CreateConsumerEntry(h.tick(), name, _config("", "explicit")))
        seq = h.publish("q.a").seq
        for name in ("c1", "c2"):
            h.apply(DeliverEntry(h.tick(), name, (seq,)))
        h.apply(AckEntry(h.tick(), (Ack("c1", AckKind.ACK, seq),)))
        assert h.live() == [seq]  # c2 still owes its ack
        h.apply(AckEntry(h.tick(), (Ack("c2", AckKind.ACK, seq),)))
        assert h.live() == []
        h.close()
