"""Consumers through nats-py 2.16, the way applications use them: pull subscriptions with
fetch/ack/nak, push subscriptions with manual acks, ordered consumers, and what nats-py builds on
them (KV keys/history/watch/purge_deletes, the object store). The same assertions run on
nats-server (the oracle) and on a single jetraft server (``server`` is parametrized).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from itertools import pairwise
from typing import Any

import nats.errors
import pytest
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, ConsumerInfo, DeliverPolicy, SequenceInfo
from nats.js.client import JetStreamContext
from nats.js.errors import NotFoundError
from nats.js.kv import KeyValue

pytestmark = pytest.mark.integration

STREAM = "ORDERS"
SUBJECTS = ["orders.>"]
FETCH_TIMEOUT_S = 2.0
EMPTY_FETCH_TIMEOUT_S = 0.5
NEXT_MSG_TIMEOUT_S = 2.0
ACK_WAIT_S = 1.0
REDELIVERY_TIMEOUT_S = 8.0  # nats-server checks pending acks on an ack_wait timer: up to ~3 s
KV_BUCKET = "cfg"
KV_HISTORY = 5
WATCH_TIMEOUT_S = 3.0
PURGE_DELETES_ATTEMPTS = 5  # nats-py may miss the markers on one call (see the test)
OBJ_BUCKET = "files"
POLL_TIMEOUT_S = 5.0
POLL_INTERVAL_S = 0.05
BIG_OBJECT_BYTES = 300_000  # more than two 128 KiB chunks
BACKOFF_S = (1.0, 2.0)
BACKOFF_MAX_DELIVER = 3
BACKOFF_MSGS = 10
BACKOFF_FETCH_TIMEOUT_S = 3.0  # longer than any backoff step: a timeout means no more come
BACKOFF_MIN_GAP_S = 0.5  # the smallest step is 1 s


async def _stream(js: JetStreamContext, **config: Any) -> None:
    await js.add_stream(name=STREAM, subjects=SUBJECTS, **config)


async def _publish(js: JetStreamContext, *items: tuple[str, bytes]) -> None:
    for subject, data in items:
        await js.publish(subject, data)


async def _consumer_info_when(
    js: JetStreamContext, consumer: str, ready: Callable[[ConsumerInfo], bool]
) -> ConsumerInfo:
    """Consumer info polled until ready(info) (acks without reply are applied asynchronously)."""
    deadline = asyncio.get_running_loop().time() + POLL_TIMEOUT_S
    while True:
        info: ConsumerInfo = await js.consumer_info(STREAM, consumer)
        if ready(info) or asyncio.get_running_loop().time() > deadline:
            return info
        await asyncio.sleep(POLL_INTERVAL_S)


def sseq(seq: SequenceInfo | None) -> int:
    assert seq is not None
    return seq.stream_seq


def cseq(seq: SequenceInfo | None) -> int:
    assert seq is not None
    return seq.consumer_seq


async def _update(watcher: KeyValue.KeyWatcher) -> KeyValue.Entry | None:
    """The watcher's next update (None: the end-of-initial-values marker)."""
    entry: KeyValue.Entry | None = await watcher.updates(timeout=WATCH_TIMEOUT_S)  # type: ignore[no-untyped-call]
    return entry


async def _entry(watcher: KeyValue.KeyWatcher) -> KeyValue.Entry:
    """The watcher's next update, which must be an entry (not the marker)."""
    entry = await _update(watcher)
    assert entry is not None, "got the end-of-initial-values marker"
    return entry


async def _stop(watcher: KeyValue.KeyWatcher) -> None:
    await watcher.stop()  # type: ignore[no-untyped-call]


# --- pull ---------------------------------------------------------------------------------------


async def test_pull_fetch_ack_and_consumer_info(js: JetStreamContext) -> None:
    await _stream(js)
    await _publish(js, ("orders.new", b"a"), ("orders.paid", b"b"), ("orders.new", b"c"))
    psub = await js.pull_subscribe("orders.*", durable="worker")

    first = await psub.fetch(2, timeout=FETCH_TIMEOUT_S)
    assert [(m.subject, m.data) for m in first] == [("orders.new", b"a"), ("orders.paid", b"b")]
    meta = first[0].metadata
    assert (meta.stream, meta.consumer) == (STREAM, "worker")
    assert (meta.sequence.stream, meta.sequence.consumer) == (1, 1)
    assert (meta.num_delivered, meta.num_pending) == (1, 2)
    assert first[1].metadata.num_pending == 1

    info = await psub.consumer_info()
    assert (info.num_ack_pending, info.num_pending) == (2, 1)
    assert sseq(info.delivered) == 2
    assert sseq(info.ack_floor) == 0

    for msg in first:
        await msg.ack_sync()
    rest = await psub.fetch(5, timeout=FETCH_TIMEOUT_S)  # only one is left
    assert [m.data for m in rest] == [b"c"]
    await rest[0].ack_sync()

    info = await psub.consumer_info()
    assert (info.num_ack_pending, info.num_pending, info.num_redelivered) == (0, 0, 0)
    assert (sseq(info.ack_floor), cseq(info.ack_floor)) == (3, 3)
    assert info.config.durable_name == "worker"
    assert info.config.ack_policy == AckPolicy.EXPLICIT
    assert info.config.filter_subject == "orders.*"

    with pytest.raises(nats.errors.TimeoutError):
        await psub.fetch(1, timeout=EMPTY_FETCH_TIMEOUT_S)


async def test_pull_fetch_waits_for_a_later_publish(js: JetStreamContext) -> None:
    await _stream(js)
    psub = await js.pull_subscribe("orders.>", durable="waiter")
    fetching = asyncio.create_task(psub.fetch(1, timeout=FETCH_TIMEOUT_S * 2))
    await asyncio.sleep(0.3)
    await js.publish("orders.late", b"late")
    msgs = await fetching
    assert [(m.subject, m.data) for m in msgs] == [("orders.late", b"late")]
    await msgs[0].ack()


async def test_pull_nak_redelivers_at_once(js: JetStreamContext) -> None:
    await _stream(js)
    await js.publish("orders.new", b"a")
    psub = await js.pull_subscribe("orders.new", durable="nakker")
    (msg,) = await psub.fetch(1, timeout=FETCH_TIMEOUT_S)
    await msg.nak()  # published without reply: the next fetch waits for its effect
    (again,) = await psub.fetch(1, timeout=FETCH_TIMEOUT_S)
    assert again.data == b"a"
    assert again.metadata.num_delivered == 2
    assert again.metadata.sequence.consumer == 2
    await again.ack_sync()
    await js.publish("orders.new", b"b")
    (second,) = await psub.fetch(1, timeout=FETCH_TIMEOUT_S)
    assert (second.data, second.metadata.sequence.stream) == (b"b", 2)
    await second.term()

    info = await _consumer_info_when(js, "nakker", lambda i: i.num_ack_pending == 0)
    assert info.num_redelivered == 0  # the nak'd message was acked since
    assert sseq(info.ack_floor) == 2


async def test_pull_unacked_message_is_redelivered_after_ack_wait(js: JetStreamContext) -> None:
    await _stream(js)
    await js.publish("orders.new", b"a")
    config = ConsumerConfig(ack_wait=ACK_WAIT_S)
    psub = await js.pull_subscribe("orders.new", durable="slow", config=config)
    (msg,) = await psub.fetch(1, timeout=FETCH_TIMEOUT_S)
    assert msg.metadata.num_delivered == 1
    (again,) = await psub.fetch(1, timeout=REDELIVERY_TIMEOUT_S)
    assert again.data == b"a"
    assert again.metadata.num_delivered >= 2
    info = await psub.consumer_info()
    assert info.num_redelivered == 1
    assert info.config.ack_wait == ACK_WAIT_S
    await again.ack_sync()


async def test_pull_backoff_redelivers_each_message_once_per_step(js: JetStreamContext) -> None:
    """Unacked messages fetched one at a time come back once per backoff step, each up to
    max_deliver times. (nats.py's test_add_consumer_with_backoff: jetraft's timer queued a
    message for redelivery again while its redelivery was being proposed, so it went out twice
    at once and another message lost its last delivery.) The deliveries a few ms apart give
    deadlines a few ms apart: the timer fires while a redelivery is in flight."""
    await _stream(js)
    await _publish(js, *[(f"orders.{i}", b"x") for i in range(BACKOFF_MSGS)])
    config = ConsumerConfig(
        max_deliver=BACKOFF_MAX_DELIVER, backoff=list(BACKOFF_S), max_ack_pending=BACKOFF_MSGS
    )
    psub = await js.pull_subscribe("orders.>", durable="backoff", config=config)
    loop = asyncio.get_running_loop()
    seen: dict[str, list[tuple[float, int]]] = {}
    while True:
        try:
            msgs = await psub.fetch(1, timeout=BACKOFF_FETCH_TIMEOUT_S)
        except nats.errors.TimeoutError:
            break
        for msg in msgs:
            seen.setdefault(msg.subject, []).append((loop.time(), msg.metadata.num_delivered))
    assert sorted(seen) == sorted(f"orders.{i}" for i in range(BACKOFF_MSGS))
    for subject, deliveries in seen.items():
        counts = [n for _t, n in deliveries]
        assert counts == list(range(1, BACKOFF_MAX_DELIVER + 1)), (subject, deliveries)
        gaps = [later - earlier for (earlier, _), (later, _) in pairwise(deliveries)]
        assert all(gap > BACKOFF_MIN_GAP_S for gap in gaps), (subject, gaps)


async def test_pull_in_progress_and_ack_all_policy(js: JetStreamContext) -> None:
    await _stream(js)
    await _publish(js, *[("orders.new", str(i).encode()) for i in range(4)])
    config = ConsumerConfig(ack_policy=AckPolicy.ALL)
    psub = await js.pull_subscribe("orders.new", durable="all", config=config)
    msgs = await psub.fetch(4, timeout=FETCH_TIMEOUT_S)
    assert len(msgs) == 4
    await msgs[0].in_progress()
    await msgs[2].ack_sync()  # acks 1..3
    info = await psub.consumer_info()
    assert sseq(info.ack_floor) == 3
    assert info.num_ack_pending == 1


async def test_add_consumer_info_list_and_delete(js: JetStreamContext) -> None:
    await _stream(js)
    await _publish(js, ("orders.a", b"1"), ("orders.b", b"2"), ("orders.a", b"3"))
    created = await js.add_consumer(
        STREAM,
        ConsumerConfig(
            durable_name="reader",
            ack_policy=AckPolicy.EXPLICIT,
            deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
            filter_subject="orders.*",
        ),
    )
    assert created.name == "reader"
    assert created.num_pending == 2  # the last message of orders.a and of orders.b
    assert created.config.max_ack_pending == 1000
    assert created.config.max_waiting == 512

    again = await js.consumer_info(STREAM, "reader")
    assert again.config.deliver_policy == DeliverPolicy.LAST_PER_SUBJECT
    listed = await js._jsm.consumers_info(STREAM)
    assert [c.name for c in listed] == ["reader"]

    assert await js.delete_consumer(STREAM, "reader") is True
    with pytest.raises(NotFoundError):
        await js.consumer_info(STREAM, "reader")


# --- push ---------------------------------------------------------------------------------------


async def test_push_subscribe_with_manual_ack(js: JetStreamContext) -> None:
    await _stream(js)
    await _publish(js, ("orders.new", b"a"), ("orders.paid", b"b"))
    sub = await js.subscribe("orders.>", durable="pusher", manual_ack=True)
    got: list[Msg] = []
    for _ in range(2):
        msg = await sub.next_msg(timeout=NEXT_MSG_TIMEOUT_S)
        got.append(msg)
    assert [(m.subject, m.data) for m in got] == [("orders.new", b"a"), ("orders.paid", b"b")]
    await js.publish("orders.live", b"c")
    live = await sub.next_msg(timeout=NEXT_MSG_TIMEOUT_S)
    assert (live.subject, live.data, live.metadata.sequence.stream) == ("orders.live", b"c", 3)

    for msg in [*got, live]:
        await msg.ack_sync()
    info = await sub.consumer_info()
    assert (info.num_ack_pending, info.num_pending) == (0, 0)
    assert sseq(info.ack_floor) == 3
    assert info.config.deliver_subject is not None
    await sub.unsubscribe()


async def test_push_subscribe_with_callback_redelivers_nak(js: JetStreamContext) -> None:
    await _stream(js)
    seen: list[tuple[bytes, int]] = []
    done = asyncio.Event()

    async def handler(msg: Msg) -> None:
        seen.append((msg.data, msg.metadata.num_delivered))
        if msg.metadata.num_delivered == 1 and msg.data == b"x":
            await msg.nak()
            return
        await msg.ack()
        if len(seen) == 3:
            done.set()

    sub = await js.subscribe("orders.>", durable="cb", cb=handler, manual_ack=True)
    await _publish(js, ("orders.new", b"x"), ("orders.new", b"y"))
    await asyncio.wait_for(done.wait(), NEXT_MSG_TIMEOUT_S * 2)
    assert sorted(seen) == [(b"x", 1), (b"x", 2), (b"y", 1)]
    await sub.unsubscribe()


# --- ordered consumer ---------------------------------------------------------------------------


async def test_ordered_consumer_reads_everything_in_order(js: JetStreamContext) -> None:
    await _stream(js)
    await _publish(js, *[(f"orders.{i % 2}", str(i).encode()) for i in range(5)])
    sub = await js.subscribe("orders.>", ordered_consumer=True)
    got = [await sub.next_msg(timeout=NEXT_MSG_TIMEOUT_S) for _ in range(5)]
    assert [m.data for m in got] == [b"0", b"1", b"2", b"3", b"4"]
    assert [m.metadata.sequence.stream for m in got] == [1, 2, 3, 4, 5]
    assert [m.metadata.sequence.consumer for m in got] == [1, 2, 3, 4, 5]
    assert got[-1].metadata.num_pending == 0

    await js.publish("orders.9", b"live")
    live = await sub.next_msg(timeout=NEXT_MSG_TIMEOUT_S)
    assert (live.data, live.metadata.sequence.stream) == (b"live", 6)
    info = await sub.consumer_info()
    assert info.config.ack_policy == AckPolicy.NONE
    assert info.config.flow_control is True
    assert info.config.mem_storage is True
    await sub.unsubscribe()


# --- key-value on consumers -------------------------------------------------------------------


async def _kv(js: JetStreamContext) -> KeyValue:
    return await js.create_key_value(bucket=KV_BUCKET, history=KV_HISTORY)


async def test_kv_keys_and_history(js: JetStreamContext) -> None:
    kv = await _kv(js)
    await kv.put("b", b"1")
    await kv.put("a", b"1")
    await kv.put("b", b"2")
    await kv.put("c", b"1")
    await kv.delete("c")
    assert sorted(await kv.keys()) == ["a", "b"]  # deleted keys are left out

    history = await kv.history("b")
    assert [(e.key, e.value, e.revision) for e in history] == [("b", b"1", 1), ("b", b"2", 3)]
    deleted = await kv.history("c")
    assert [(e.revision, e.operation) for e in deleted] == [(4, None), (5, "DEL")]

    await kv.purge("a")
    with pytest.raises(nats.js.errors.NoKeysError):
        await kv.keys(filters=["a"])


async def test_kv_keys_on_an_empty_bucket(js: JetStreamContext) -> None:
    kv = await _kv(js)
    with pytest.raises(nats.js.errors.NoKeysError):
        await kv.keys()


async def test_kv_watch_initial_values_marker_then_updates(js: JetStreamContext) -> None:
    kv = await _kv(js)
    await kv.put("x", b"1")
    await kv.put("y", b"1")
    await kv.put("x", b"2")

    watcher = await kv.watchall()
    initial = [await _entry(watcher) for _ in range(2)]
    assert [(e.key, e.value, e.revision) for e in initial] == [("y", b"1", 2), ("x", b"2", 3)]
    assert await _update(watcher) is None  # end of the initial values

    await kv.put("z", b"new")
    await kv.delete("x")
    live = [await _entry(watcher) for _ in range(2)]
    assert [(e.key, e.value, e.revision, e.operation) for e in live] == [
        ("z", b"new", 4, None),
        ("x", b"", 5, "DEL"),
    ]
    await _stop(watcher)


async def test_kv_watch_one_key_and_empty_bucket_marker(js: JetStreamContext) -> None:
    kv = await _kv(js)
    empty = await kv.watchall()
    assert await _update(empty) is None  # nothing stored: marker first
    await kv.put("k", b"v")
    first = await _entry(empty)
    assert (first.key, first.value) == ("k", b"v")
    await _stop(empty)

    await kv.put("other", b"o")
    one = await kv.watch("k")
    entry = await _entry(one)
    assert (entry.key, entry.revision) == ("k", 1)
    assert await _update(one) is None
    await kv.put("other", b"o2")
    await kv.put("k", b"v2")
    nxt = await _entry(one)
    assert (nxt.key, nxt.value, nxt.revision) == ("k", b"v2", 4)
    await _stop(one)


async def test_kv_watch_include_history(js: JetStreamContext) -> None:
    kv = await _kv(js)
    for value in (b"1", b"2", b"3"):
        await kv.put("k", value)
    watcher = await kv.watch("k", include_history=True)
    got = [await _entry(watcher) for _ in range(3)]
    assert [e.value for e in got] == [b"1", b"2", b"3"]
    assert await _update(watcher) is None
    await _stop(watcher)


async def test_kv_purge_deletes_removes_markers(js: JetStreamContext) -> None:
    kv = await _kv(js)
    await kv.put("keep", b"1")
    await kv.put("gone", b"1")
    await kv.put("gone", b"2")
    await kv.delete("gone")
    await kv.put("purged", b"1")
    await kv.purge("purged")
    info = await js.stream_info(f"KV_{KV_BUCKET}")
    assert info.state.messages == 5  # keep, gone twice, the DEL marker, the PURGE marker

    # nats-py's purge_deletes races its own watcher: when the consumer info it reads says
    # nothing is pending before the delivered markers were handled, it ends with no markers and
    # purges nothing (seen against nats-server). Another call then finds them.
    for _attempt in range(PURGE_DELETES_ATTEMPTS):
        assert await kv.purge_deletes(olderthan=-1) is True
        info = await js.stream_info(f"KV_{KV_BUCKET}")
        if info.state.messages == 1:
            break
    assert info.state.messages == 1
    assert await kv.keys() == ["keep"]
    assert [e.key for e in await kv.history("keep")] == ["keep"]


# --- object store -------------------------------------------------------------------------------


async def test_object_store_put_get_list_delete(js: JetStreamContext) -> None:
    obs = await js.create_object_store(OBJ_BUCKET)
    small = await obs.put("small.txt", b"hello")
    assert (small.name, small.size, small.chunks) == ("small.txt", 5, 1)
    big_data = bytes(range(256)) * (BIG_OBJECT_BYTES // 256)
    big = await obs.put("big.bin", big_data)
    assert (big.size, big.chunks) == (len(big_data), 3)

    got = await obs.get("small.txt")
    assert got.data == b"hello"
    assert got.info.digest == small.digest
    got_big = await obs.get("big.bin")
    assert got_big.data == big_data

    listed = await obs.list()
    assert sorted((i.name, i.size) for i in listed) == [
        ("big.bin", len(big_data)),
        ("small.txt", 5),
    ]

    await obs.put("small.txt", b"replaced")
    assert (await obs.get("small.txt")).data == b"replaced"

    await obs.delete("big.bin")
    with pytest.raises(nats.js.errors.ObjectNotFoundError):
        await obs.get("big.bin")
    remaining = await obs.list(ignore_deletes=True)
    assert [i.name for i in remaining] == ["small.txt"]


async def test_object_store_list_empty_and_missing_object(js: JetStreamContext) -> None:
    obs = await js.create_object_store(OBJ_BUCKET)
    with pytest.raises(NotFoundError):
        await obs.list()
    with pytest.raises(nats.js.errors.ObjectNotFoundError):
        await obs.get("missing")
