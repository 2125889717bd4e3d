"""Hosts one stream on this node: ingest, group commit, expiry timer, and its read responders.

A message carrying ``Nats-Batch-Id`` goes to the stream's atomic batch staging
(``cluster/batching.py``) instead; a complete batch enters the queue as one
``BatchCommitEntry`` and gets its PubAck once that entry is applied and durable.

Publishes that arrive while a commit is in flight are coalesced into one ``PublishEntry`` (group
commit): one apply, one flush, one fsync, then every PubAck of the group is sent. API operations
(purge, delete, update, expire) travel the same queue, so every state change reaches the engine
through ``Stream.apply`` in one total order — the order a Raft log will impose in the cluster.

Reads are answered by the host's responders: Direct Get (``cluster/direct_get_responder.py``,
which parks read-your-writes requests until the apply that reaches them: the host wakes it after
every apply) and mirror fetch (``cluster/mirror_fetch_responder.py``).

Must never: change stream state except through ``Stream.apply``, acknowledge a publish before
the store has fsynced it, or answer a Direct Get from a state older than its ``min_last_seq``.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cluster.batching import AtomicBatches, BatchContext
from cluster.direct_get_responder import DirectGetLimits, DirectGetResponder
from cluster.extensions import StreamAttachment
from cluster.mirror_fetch_responder import MirrorFetchResponder
from cluster.router import Router, Subscription
from engine.batch import BatchResult, batch_id_of
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


@dataclass(slots=True)
class QueuedPublish:
    msg: InboundMsg
    reply: str | None


@dataclass(slots=True)
class QueuedOp:
    entry: Entry
    future: asyncio.Future[Any] | None


@dataclass(slots=True)
class QueuedBatchCommit:
    entry: BatchCommitEntry
    reply: str | None


class StreamHost:
    def __init__(
        self,
        stream: Stream,
        store: MessageStore,
        router: Router,
        *,
        durable: bool,
        batch_context: BatchContext | None = None,
        node_name: str = "",
        direct_limits: DirectGetLimits | None = None,
    ) -> None:
        self.stream = stream
        self.store = store
        self.router = router
        self.durable = durable
        self._queue: collections.deque[QueuedPublish | QueuedOp | QueuedBatchCommit] = (
            collections.deque()
        )
        self._batches = AtomicBatches(
            lambda: self.stream.config.name, router, batch_context or BatchContext()
        )
        self._wake = asyncio.Event()
        self._ingest_subs: list[Subscription] = []
        self._task: asyncio.Task[None] | None = None
        self._expiry_timer: asyncio.TimerHandle | None = None
        self._expiry_at_ns = 0
        self._closing = False
        self.offline = False
        self.attachments: list[StreamAttachment] = []  # cluster/extensions.py (mirror/ ...)
        # ``node_name`` answers Direct Gets that ask which node served them
        self.direct = DirectGetResponder(
            router,
            lambda: self.stream,
            lambda: self.name,
            served_by=node_name,
            limits=direct_limits,
        )
        self.fetch = MirrorFetchResponder(router, lambda: self.stream)

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
        self.fetch.serve(True)
        self.direct.serve(self.name, self.config.allow_direct)

    def unsubscribe_all(self) -> None:
        for sub in self._ingest_subs:
            self.router.remove(sub)
        self._ingest_subs = []
        self.fetch.serve(False)
        self.direct.close()

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
        self._queue.append(QueuedPublish(InboundMsg(subject, hdr or b"", payload), reply))
        self._wake.set()

    def _ingest_batch_msg(self, msg: InboundMsg, reply: str | None, batch_id: str) -> None:
        """Stage (and answer) an atomic batch message; a complete batch is queued as one entry."""
        ready = self._batches.on_message(msg, reply, batch_id, self.config)
        if ready is not None:
            self._queue.append(QueuedBatchCommit(ready.entry(time.time_ns()), reply))
            self._wake.set()

    async def propose(self, entry: Entry) -> Any:
        if self.offline:
            raise ApiError(E.STREAM_OFFLINE)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append(QueuedOp(entry, future))
        self._wake.set()
        return await future

    def _propose_nowait(self, entry: Entry) -> None:
        self._queue.append(QueuedOp(entry, None))
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
        if isinstance(head, QueuedOp):
            self._queue.popleft()
            outcome = self._apply(head.entry)
            future = head.future
            if isinstance(head.entry, UpdateConfigEntry):
                self._batches.config_changed(self.config)

            def resolve() -> None:
                if future is not None and not future.done():
                    future.set_result(outcome)

            return resolve
        if isinstance(head, QueuedBatchCommit):
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
            if isinstance(item, QueuedOp) and item.future is not None and not item.future.done():
                item.future.set_exception(ApiError(E.STREAM_OFFLINE))

    def _take_publishes(self) -> list[QueuedPublish]:
        pubs: list[QueuedPublish] = []
        size = 0
        queue = self._queue
        while queue and isinstance(queue[0], QueuedPublish) and len(pubs) < GROUP_COMMIT_MSGS_MAX:
            pub = queue.popleft()
            assert isinstance(pub, QueuedPublish)
            pubs.append(pub)
            size += len(pub.msg.data) + len(pub.msg.hdr)
            if size >= GROUP_COMMIT_BYTES_MAX:
                break
        return pubs

    def _apply(self, entry: Entry) -> Any:
        result = self.stream.apply(self.stream.applied_index + 1, entry)
        self.direct.wake()
        return result

    def _send_acks(self, pubs: list[QueuedPublish], results: Any) -> None:
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

    def _send_batch_ack(self, commit: QueuedBatchCommit, result: BatchResult) -> None:
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
