"""Hosts one stream on this node: ingest, group commit, expiry timer, Direct Get responder.

A message carrying ``Nats-Batch-Id`` goes to the stream's atomic batch staging
(``cluster/batching.py``) instead; a complete batch enters the queue as one
``BatchCommitEntry`` and gets its PubAck once that entry is applied and durable.

Publishes that arrive while a commit is in flight are coalesced into one ``PublishEntry`` (group
commit): one apply, one flush, one fsync, then every PubAck of the group is sent. API operations
(purge, delete, update, expire) travel the same queue, so every state change reaches the engine
through ``Stream.apply`` in one total order — the order a Raft log will impose in the cluster.

Read-your-writes Direct Get: a request whose ``min_last_seq`` is above the stream's ``last_seq`` is
parked (at most ``DIRECT_GET_WAITERS_MAX`` per stream) and answered right after the apply that
reaches it, or with ``412 Min Last Sequence Not Applied`` after ``DIRECT_GET_MIN_SEQ_WAIT_S``;
replicas and mirrors use the same waiters, fed by their own applies.

Must never: change stream state except through ``Stream.apply``, acknowledge a publish before
the store has fsynced it, or answer a Direct Get from a state older than its ``min_last_seq``.
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cluster.batching import AtomicBatches, BatchContext
from cluster.extensions import StreamAttachment
from cluster.router import Router, Subscription
from engine import mirror_fetch
from engine.batch import BatchResult, batch_id_of
from engine.direct_get import (
    DIRECT_GET_GROUP,
    DIRECT_GET_PREFIX,
    REPLY_MIN_SEQ_NOT_APPLIED,
    DirectReply,
    NotApplied,
    direct_get_subjects,
    try_direct_get,
)
from engine.entries import (
    BatchCommitEntry,
    Entry,
    ExpireEntry,
    InboundMsg,
    PublishEntry,
    UpdateConfigEntry,
)
from engine.store import MessageStore
from engine.stream import Stream
from protocol import api_json
from protocol import errors as E
from protocol.errors import ApiError
from protocol.models import StreamConfig

log = logging.getLogger("jetraft.stream")

GROUP_COMMIT_MSGS_MAX = 8192  # bounds one PublishEntry, so one apply never stalls the loop long
GROUP_COMMIT_BYTES_MAX = 8 * 1024 * 1024
COMMIT_ITEMS_PER_TURN_MAX = 4  # entries applied before the loop gets a turn again
_BATCH_ID_KEY = b"Nats-Batch-Id:"  # a cheap test before the header lookup on every publish
# A Direct Get request carrying this header (any value; nats-server ignores it) gets the name of
# the node that answered in the same header of each reply: how the chaos harness and Spark tell
# which replica served a read. Without it the reply is byte-for-byte nats-server's.
SERVED_BY_HEADER = "Jetraft-Served-By"
# Mirror fetches (engine/mirror_fetch.py) are asked on this prefix + the stream name: only the
# stream's own replicas answer it (its mirrors answer its Direct Get subjects too).
MIRROR_FETCH_PREFIX = "$JSC.MF."
SERVED_BY_HEADER_BYTES = (
    SERVED_BY_HEADER.encode()
)  # a cheap test before the header lookup on every publish
# Read-your-writes Direct Get: how long a request whose min_last_seq is not applied yet may wait
# for it, and how many such requests (and request bytes) one stream holds at once; past either
# bound the request is answered "412 Min Last Sequence Not Applied" at once.
DIRECT_GET_MIN_SEQ_WAIT_S = 0.5
DIRECT_GET_WAITERS_MAX = 1024
DIRECT_GET_WAITERS_BYTES_MAX = 4 * 1024 * 1024


@dataclass(slots=True)
class _Pub:
    msg: InboundMsg
    reply: str | None


@dataclass(slots=True)
class _Op:
    entry: Entry
    future: asyncio.Future[Any] | None


@dataclass(slots=True)
class _BatchCommit:
    entry: BatchCommitEntry
    reply: str | None


@dataclass(slots=True, eq=False)
class _ParkedGet:
    """A Direct Get waiting for the stream to apply ``min_last_seq``."""

    min_last_seq: int
    reply: str
    hdr: bytes | None
    payload: bytes
    key: str | None
    timer: asyncio.TimerHandle | None = None
    done: bool = False

    @property
    def size(self) -> int:
        return len(self.payload) + len(self.hdr or b"") + len(self.reply)


class StreamHost:
    def __init__(
        self,
        stream: Stream,
        store: MessageStore,
        router: Router,
        *,
        durable: bool,
        batch_context: BatchContext | None = None,
    ) -> None:
        self.stream = stream
        self.store = store
        self.router = router
        self.durable = durable
        self._queue: collections.deque[_Pub | _Op | _BatchCommit] = collections.deque()
        self._batches = AtomicBatches(
            lambda: self.stream.config.name, router, batch_context or BatchContext()
        )
        self._wake = asyncio.Event()
        self._ingest_subs: list[Subscription] = []
        self._direct_subs: list[Subscription] = []
        self._task: asyncio.Task[None] | None = None
        self._expiry_timer: asyncio.TimerHandle | None = None
        self._expiry_at_ns = 0
        self._closing = False
        self.offline = False
        self.served_by = ""  # this node's name, for Direct Gets that ask who answered
        self.attachments: list[StreamAttachment] = []  # cluster/extensions.py (mirror/ ...)
        self._fetch_subs: list[Subscription] = []
        # parked read-your-writes Direct Gets: a heap by min_last_seq (ties in arrival order);
        # answered or expired ones stay in it, marked done, until popped or compacted away
        self._waiters: list[tuple[int, int, _ParkedGet]] = []
        self._waiter_order = itertools.count()
        self._waiting = 0
        self._waiting_bytes = 0
        self.direct_gets_parked = 0  # how many Direct Gets had to wait for their min_last_seq

    @property
    def name(self) -> str:
        return self.stream.config.name

    @property
    def config(self) -> StreamConfig:
        return self.stream.config

    @property
    def is_leader(self) -> bool:
        """Whether this host may propose (a replica: its Raft group's leader)."""
        return True

    @property
    def caught_up(self) -> bool:
        """Whether this host may serve reads (a replica: close enough to its leader)."""
        return True

    # --- lifecycle ---------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._commit_loop())
        self._task.add_done_callback(self._commit_loop_ended)
        self.refresh_subscriptions()
        self._schedule_expiry()

    def refresh_subscriptions(self) -> None:
        """(Re)subscribe to the stream's subjects and, while allow_direct, to Direct Get."""
        for sub in self._ingest_subs:
            self.router.remove(sub)
        self._ingest_subs = [
            self.router.subscribe_internal(subject, self._ingest)
            for subject in self.config.subjects
        ]
        self._want_fetch(True)
        want_direct = self.config.allow_direct
        if want_direct and not self._direct_subs:
            self._direct_subs = [
                self.router.subscribe_internal(s, self._direct_get, queue=DIRECT_GET_GROUP)
                for s in direct_get_subjects(self.name)
            ]
        elif not want_direct and self._direct_subs:
            for sub in self._direct_subs:
                self.router.remove(sub)
            self._direct_subs = []
            self.fail_direct_waiters()

    def _want_fetch(self, want: bool) -> None:
        """Answer mirror fetches (while this replica may serve reads) or stop."""
        if want and not self._fetch_subs:
            self._fetch_subs = [
                self.router.subscribe_internal(
                    MIRROR_FETCH_PREFIX + self.name, self._mirror_fetch, queue=DIRECT_GET_GROUP
                )
            ]
        elif not want and self._fetch_subs:
            for sub in self._fetch_subs:
                self.router.remove(sub)
            self._fetch_subs = []

    def unsubscribe_all(self) -> None:
        for sub in self._ingest_subs + self._direct_subs + self._fetch_subs:
            self.router.remove(sub)
        self._ingest_subs = []
        self._direct_subs = []
        self._fetch_subs = []
        self.fail_direct_waiters()

    async def close(self) -> None:
        """Stop taking publishes, commit what is queued, then close the store."""
        await self.close_attachments()
        self.unsubscribe_all()
        self._batches.close()  # staged, uncommitted batches vanish with the process
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
        self._closing = True
        self._wake.set()
        if self._task is not None and not self.offline:
            await self._task
        self.store.sync()
        self.store.close()

    async def close_attachments(self) -> None:
        for attachment in self.attachments:
            try:
                await attachment.close()
            except Exception:
                log.exception("stream %s: an attachment failed to close", self.name)
        self.attachments = []

    def attachment_info(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for attachment in self.attachments:
            out.update(attachment.info())
        return out

    # --- ingest and proposals -----------------------------------------------------------
    def _ingest(self, subject: str, reply: str | None, hdr: bytes | None, payload: bytes) -> None:
        if hdr and _BATCH_ID_KEY in hdr:
            batch_id = batch_id_of(hdr)
            if batch_id:  # an empty Nats-Batch-Id is a plain publish (probed)
                self._ingest_batch_msg(InboundMsg(subject, hdr, payload), reply, batch_id)
                return
        self._queue.append(_Pub(InboundMsg(subject, hdr or b"", payload), reply))
        self._wake.set()

    def _ingest_batch_msg(self, msg: InboundMsg, reply: str | None, batch_id: str) -> None:
        """Stage (and answer) an atomic batch message; a complete batch is queued as one entry."""
        ready = self._batches.on_message(msg, reply, batch_id, self.config)
        if ready is not None:
            self._queue.append(_BatchCommit(ready.entry(time.time_ns()), reply))
            self._wake.set()

    async def propose(self, entry: Entry) -> Any:
        if self.offline:
            raise ApiError(E.STREAM_OFFLINE)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append(_Op(entry, future))
        self._wake.set()
        return await future

    def _propose_nowait(self, entry: Entry) -> None:
        self._queue.append(_Op(entry, None))
        self._wake.set()

    async def _commit_loop(self) -> None:
        """Apply what is queued, fsync it in a worker thread, and only then acknowledge it.

        While one fsync runs, newly arrived publishes are already applied and flushed to the OS,
        so the next fsync covers them all: apply and fsync overlap, and the cost of an fsync is
        shared by everything that arrived while the previous one ran.
        """
        loop = asyncio.get_running_loop()
        unsynced: list[Callable[[], None]] = []
        inflight: asyncio.Future[None] | None = None
        inflight_done: list[Callable[[], None]] = []
        while True:
            self._wake.clear()
            if inflight is not None and inflight.done():
                inflight.result()  # an fsync failure must not be acknowledged
                inflight = None
                for done in inflight_done:
                    done()
                inflight_done = []
            applied = 0
            while self._queue and applied < COMMIT_ITEMS_PER_TURN_MAX:
                unsynced.append(self._apply_next())
                applied += 1
            if unsynced and inflight is None:
                self.store.flush()
                if self.durable and len(unsynced) == 1 and not self._queue:
                    # nothing to overlap with: an inline fsync (~0.1 ms) beats the hand-off to a
                    # worker thread and back, which would add to every lone publisher's latency
                    self.store.fsync()
                    unsynced.pop()()
                elif self.durable:
                    inflight = loop.run_in_executor(None, self.store.fsync)
                    inflight.add_done_callback(lambda _f: self._wake.set())
                    inflight_done, unsynced = unsynced, []
                else:
                    for done in unsynced:
                        done()
                    unsynced = []
            self._schedule_expiry()
            if self._queue and applied:
                await asyncio.sleep(0)  # let the loop breathe between bounded turns
                continue
            if not self._queue and inflight is None and not unsynced and self._closing:
                return
            await self._wake.wait()

    def _apply_next(self) -> Callable[[], None]:
        """Apply the head of the queue; returns what to do once it is durable."""
        head = self._queue[0]
        if isinstance(head, _Op):
            self._queue.popleft()
            outcome = self._apply(head.entry)
            future = head.future
            if isinstance(head.entry, UpdateConfigEntry):
                self._batches.config_changed(self.config)

            def resolve() -> None:
                if future is not None and not future.done():
                    future.set_result(outcome)

            return resolve
        if isinstance(head, _BatchCommit):
            self._queue.popleft()
            result = self._apply(head.entry)
            return lambda: self._send_batch_ack(head, result)
        pubs = self._take_publishes()
        results = self._apply(PublishEntry(time.time_ns(), tuple(p.msg for p in pubs)))
        return lambda: self._send_acks(pubs, results)

    def _commit_loop_ended(self, task: asyncio.Task[None]) -> None:
        """A failed apply or fsync leaves the stream in an unknown state: take it offline (clients
        then get no-responders instead of silence) rather than acknowledge anything more."""
        if task.cancelled() or task.exception() is None:
            return
        log.critical("stream %s is offline: commit failed", self.name, exc_info=task.exception())
        self.offline = True
        self.unsubscribe_all()
        self._batches.close()
        while self._queue:
            item = self._queue.popleft()
            if isinstance(item, _Op) and item.future is not None and not item.future.done():
                item.future.set_exception(ApiError(E.STREAM_OFFLINE))

    def _take_publishes(self) -> list[_Pub]:
        pubs: list[_Pub] = []
        size = 0
        queue = self._queue
        while queue and isinstance(queue[0], _Pub) and len(pubs) < GROUP_COMMIT_MSGS_MAX:
            pub = queue.popleft()
            assert isinstance(pub, _Pub)
            pubs.append(pub)
            size += len(pub.msg.data) + len(pub.msg.hdr)
            if size >= GROUP_COMMIT_BYTES_MAX:
                break
        return pubs

    def _apply(self, entry: Entry) -> Any:
        result = self.stream.apply(self.stream.applied_index + 1, entry)
        self.wake_direct_waiters()
        return result

    def _send_acks(self, pubs: list[_Pub], results: Any) -> None:
        if self.config.no_ack:
            return
        name = self.name
        publish = self.router.publish
        for pub, res in zip(pubs, results, strict=True):
            if not pub.reply:
                continue
            if res.error is not None:
                body = api_json.pub_ack_error_json(name, res.error)
            else:
                body = api_json.pub_ack_json(name, res.seq, duplicate=res.duplicate)
            publish(pub.reply, None, None, body)

    def _send_batch_ack(self, commit: _BatchCommit, result: BatchResult) -> None:
        """The commit's PubAck: ``{"stream","seq","batch","count"}`` or the error PubAck."""
        if self.config.no_ack or not commit.reply:
            return
        if result.error is not None:
            body = api_json.pub_ack_error_json(self.name, result.error)
        else:
            batch_id = commit.entry.batch_id
            body = api_json.pub_ack_json(self.name, result.seq, batch=batch_id, count=result.count)
        self.router.publish(commit.reply, None, None, body)

    # --- MaxAge expiry -------------------------------------------------------------------
    def _schedule_expiry(self) -> None:
        due_ns = self.stream.next_expiry_ns()
        if due_ns is None or self._closing:
            return
        if self._expiry_timer is not None and self._expiry_at_ns <= due_ns:
            return
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
        delay_s = max(0.0, (due_ns - time.time_ns()) / 1e9)
        self._expiry_at_ns = due_ns
        self._expiry_timer = asyncio.get_running_loop().call_later(delay_s, self._expire_due)

    def _expire_due(self) -> None:
        self._expiry_timer = None
        self._propose_nowait(ExpireEntry(time.time_ns()))

    # --- Direct Get ----------------------------------------------------------------------
    def direct_get(
        self, subject: str, reply: str | None, hdr: bytes | None, payload: bytes
    ) -> None:
        """Direct Get subscription handler, also for the subjects of a mirror's upstream."""
        self._direct_get(subject, reply, hdr, payload)

    def _mirror_fetch(
        self, _subject: str, reply: str | None, _hdr: bytes | None, payload: bytes
    ) -> None:
        if not reply:
            return
        try:
            answer = mirror_fetch.answer(self.stream, payload)
        except mirror_fetch.FetchError as exc:
            status = f"NATS/1.0 400 {str(exc)[:200]}\r\n\r\n".encode(errors="replace")
            self.router.publish(reply, None, status, b"")
            return
        self.router.publish(reply, None, None, answer)

    def _direct_get(
        self, subject: str, reply: str | None, hdr: bytes | None, payload: bytes
    ) -> None:
        if not reply:
            return
        # The key follows the stream token of the subject the request was addressed to, which
        # need not be this stream's name (a mirror answers for its upstream).
        dot = subject.find(".", len(DIRECT_GET_PREFIX))
        key = subject[dot + 1 :] if dot >= 0 else None
        self.serve_direct_get(reply, hdr, payload, key)

    def serve_direct_get(
        self, reply: str, hdr: bytes | None, payload: bytes, key: str | None
    ) -> None:
        """Answer one Direct Get (``key`` as for ``engine.direct_get``) with ``Nats-Stream`` set to
        this stream's name, now or, for a ``min_last_seq`` not applied yet, once it is."""
        replies = try_direct_get(
            self.stream,
            reply_stream_name=self.name,
            request_hdr=hdr,
            payload=payload,
            subject_key=key,
        )
        if isinstance(replies, NotApplied):
            self._park_direct_get(_ParkedGet(replies.min_last_seq, reply, hdr, payload, key))
            return
        self._send_direct(reply, hdr, replies)

    def _send_direct(self, reply: str, hdr: bytes | None, replies: list[DirectReply]) -> None:
        publish = self.router.publish
        tag = hdr is not None and SERVED_BY_HEADER_BYTES in hdr
        for r in replies:
            publish(reply, None, _with_served_by(r.hdr, self.served_by) if tag else r.hdr, r.data)

    def _park_direct_get(self, parked: _ParkedGet) -> None:
        size = parked.size
        if (
            self._closing
            or self._waiting >= DIRECT_GET_WAITERS_MAX
            or self._waiting_bytes + size > DIRECT_GET_WAITERS_BYTES_MAX
        ):
            self._send_direct(parked.reply, parked.hdr, [REPLY_MIN_SEQ_NOT_APPLIED])
            return
        self.direct_gets_parked += 1
        loop = asyncio.get_running_loop()
        parked.timer = loop.call_later(DIRECT_GET_MIN_SEQ_WAIT_S, self._direct_wait_over, parked)
        self._waiting += 1
        self._waiting_bytes += size
        if len(self._waiters) >= 2 * DIRECT_GET_WAITERS_MAX:
            # expired waiters whose sequence never came: drop them so the heap stays bounded
            self._waiters = [w for w in self._waiters if not w[2].done]
            heapq.heapify(self._waiters)
        heapq.heappush(self._waiters, (parked.min_last_seq, next(self._waiter_order), parked))

    def _unpark(self, parked: _ParkedGet) -> None:
        parked.done = True
        self._waiting -= 1
        self._waiting_bytes -= parked.size
        if parked.timer is not None:
            parked.timer.cancel()

    def _direct_wait_over(self, parked: _ParkedGet) -> None:
        if parked.done:
            return
        self._unpark(parked)
        self._answer_parked(parked)

    def _answer_parked(self, parked: _ParkedGet) -> None:
        """The answer from the state now; 412 if it still lacks the sequence (never stale)."""
        replies = try_direct_get(
            self.stream,
            reply_stream_name=self.name,
            request_hdr=parked.hdr,
            payload=parked.payload,
            subject_key=parked.key,
        )
        if isinstance(replies, NotApplied):
            replies = [REPLY_MIN_SEQ_NOT_APPLIED]
        self._send_direct(parked.reply, parked.hdr, replies)

    def wake_direct_waiters(self) -> None:
        """After an apply: answer every parked Direct Get whose ``min_last_seq`` is now applied."""
        waiters = self._waiters
        if not waiters:
            return
        last_seq = self.stream.last_seq
        while waiters and waiters[0][0] <= last_seq:
            parked = heapq.heappop(waiters)[2]
            if not parked.done:
                self._unpark(parked)
                self._answer_parked(parked)

    def fail_direct_waiters(self) -> None:
        """This host stops answering Direct Get (closing, unsubscribed): every parked request gets
        its answer now, which is 412 unless its sequence was applied meanwhile."""
        waiters, self._waiters = self._waiters, []
        for _, _, parked in waiters:
            if not parked.done:
                self._unpark(parked)
                self._answer_parked(parked)


def _with_served_by(hdr: bytes | None, name: str) -> bytes:
    line = f"{SERVED_BY_HEADER}: {name}\r\n".encode()
    if not hdr:
        return b"NATS/1.0\r\n" + line + b"\r\n"
    assert hdr.endswith(b"\r\n\r\n"), hdr
    return hdr[:-2] + line + b"\r\n"
