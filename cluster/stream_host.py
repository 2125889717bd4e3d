"""Hosts one stream on this node: ingest, group commit, expiry timer, and its read responders.

The host is the same on a single server and on every replica of a clustered stream; what differs
is its log (cluster/stream_log.py): ``LocalLog`` applies and fsyncs here, ``RaftLog`` proposes to
the stream's Raft group and applies what it commits. The host decides what goes into an entry and
sends the acknowledgements; the log decides when an entry is durable, and whether this node may
append at all (a replica: while it leads).

A message carrying ``Nats-Batch-Id`` goes to the stream's atomic batch staging
(``cluster/batching.py``) instead; a complete batch enters the queue as one
``BatchCommitEntry`` and gets its PubAck once that entry is applied and durable.

Publishes that arrive while entries are in flight are coalesced into one ``PublishEntry`` (group
commit): one entry, one apply, one fsync (or Raft commit), then every PubAck of the group is
sent. API operations (purge, delete, update, expire) travel the same queue, so every state change
reaches the engine through ``Stream.apply`` in one total order: the log's.

Reads are answered by the host's responders: Direct Get (``cluster/direct_get_responder.py``,
which parks read-your-writes requests until the apply that reaches them: the host wakes it after
every apply) and mirror fetch (``cluster/mirror_fetch_responder.py``).

Must never: change stream state except through ``apply`` (called by the log), acknowledge a
publish before its log says it is durable, or answer a Direct Get from a state older than its
``min_last_seq``.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from cluster.batching import AtomicBatches, BatchContext
from cluster.consumer_host import ConsumerHost
from cluster.direct_get_responder import DirectGetLimits, DirectGetResponder
from cluster.extensions import StreamAttachment
from cluster.mirror_fetch_responder import MirrorFetchResponder
from cluster.router import Router, Subscription
from cluster.stream_log import LogOwner, StreamLog
from engine.batch import BatchResult, batch_id_of
from engine.entries import (
    BatchCommitEntry,
    ExpireEntry,
    InboundMsg,
    LogEntry,
    PublishEntry,
    UpdateConfigEntry,
)
from engine.schedules import FIRE_DELAY_MIN_S
from engine.store import MessageStore
from engine.stream import Stream
from protocol import api_json
from protocol import errors as E
from protocol.errors import ApiError
from protocol.headers import holds
from protocol.models import StreamConfig

log = logging.getLogger("jetraft.stream")

GROUP_COMMIT_MSGS_MAX = 8192  # bounds one PublishEntry, so one apply never stalls the loop long
GROUP_COMMIT_BYTES_MAX = 8 * 1024 * 1024
_BATCH_ID_KEY = b"Nats-Batch-Id:"  # a cheap test before the header lookup on every publish


class QueuedPublish:
    """A publish waiting for the next proposal (one per message: a plain class, see
    engine.entries.InboundMsg)."""

    __slots__ = ("msg", "reply")

    def __init__(self, msg: InboundMsg, reply: str | None) -> None:
        self.msg = msg
        self.reply = reply


@dataclass(slots=True)
class QueuedOp:
    entry: LogEntry
    future: asyncio.Future[Any] | None


@dataclass(slots=True)
class QueuedBatchCommit:
    entry: BatchCommitEntry
    reply: str | None


Log_co = TypeVar("Log_co", bound=StreamLog, covariant=True)


class StreamHost(Generic[Log_co]):
    def __init__(
        self,
        stream: Stream,
        store: MessageStore,
        router: Router,
        make_log: Callable[[LogOwner], Log_co],
        *,
        batch_context: BatchContext | None = None,
        node_name: str = "",
        direct_limits: DirectGetLimits | None = None,
        on_role_change: Callable[[StreamHost[Log_co]], None] | None = None,
    ) -> None:
        self.stream = stream
        self.store = store
        self.router = router
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
        self._on_role_change = on_role_change
        self.offline = False
        self._awaiting_seed = False
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
        self.consumers = ConsumerHost(self)
        self._log = make_log(self)  # last: the log may read the stream and call back

    @property
    def log(self) -> Log_co:
        return self._log

    @property
    def name(self) -> str:
        return self.stream.config.name

    @property
    def config(self) -> StreamConfig:
        return self.stream.config

    @property
    def is_leader(self) -> bool:
        """Whether this host may append (a replica: its Raft group's leader)."""
        return self._log.is_leader

    @property
    def caught_up(self) -> bool:
        """Whether this host may serve reads (a replica: close enough to its leader)."""
        return self._log.caught_up

    # --- lifecycle ---------------------------------------------------------------------
    def start(self) -> None:
        self._log.start()
        self._task = asyncio.get_running_loop().create_task(self._commit_loop())
        self._task.add_done_callback(self._commit_loop_ended)
        self.refresh_subscriptions()
        self._schedule_expiry()

    def refresh_subscriptions(self) -> None:
        """Ingest while this node may append; Direct Get and mirror fetch while it is caught up
        (Direct Get only while allow_direct)."""
        ingest = self.is_leader and not self._closing and not self.offline
        subjects = list(self.config.subjects) if ingest else []
        if [s.subject for s in self._ingest_subs] != subjects:
            for sub in self._ingest_subs:
                self.router.remove(sub)
            self._ingest_subs = [
                self.router.subscribe_internal(subject, self._ingest) for subject in subjects
            ]
        self.consumers.serve(ingest)
        readable = self.caught_up and not self._closing and not self.offline
        self.fetch.serve(readable)
        self.direct.serve(self.name, self.config.allow_direct and readable)

    def unsubscribe_all(self) -> None:
        for sub in self._ingest_subs:
            self.router.remove(sub)
        self._ingest_subs = []
        self.consumers.serve(False)
        self.fetch.serve(False)
        self.direct.close()

    async def close(self) -> None:
        """Stop taking publishes, then finish what is queued (a local log) or fail it (a
        replica, which may have no quorum), and close the store."""
        self._closing = True
        await self.consumers.close()
        await self.close_attachments()
        self.unsubscribe_all()
        self._batches.close()  # staged, uncommitted batches vanish with the process
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
        self._wake.set()
        if self._task is not None:
            if self._log.drains_on_close and not self.offline:
                await self._task
            else:
                self._task.cancel()
        self._fail_queued(ApiError(E.CLUSTER_NOT_LEADER))
        await self._log.close()
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

    def on_tick(self) -> None:
        """The node's periodic tick: keeps the read subscriptions honest, ticks attachments
        and the log."""
        want = self.config.allow_direct and self.caught_up
        if want != self.direct.serving(self.name) or self.caught_up != self.fetch.serving:
            self.refresh_subscriptions()
        for attachment in self.attachments:
            attachment.on_tick()
        self._log.on_tick()

    # --- LogOwner: what the log calls ---------------------------------------------------
    def apply(self, index: int, entry: LogEntry) -> Any:
        result = self.stream.apply(index, entry)
        republished = self.stream.take_republished()
        if republished and self.is_leader:
            # once per committed message, by the leader that applies it (nats-server: the same)
            for msg in republished:
                self.router.publish(msg.subject, None, msg.hdr, msg.data)
        if isinstance(entry, UpdateConfigEntry):
            self._batches.config_changed(self.config)
            loop = asyncio.get_running_loop()
            loop.call_soon(self.refresh_subscriptions)
            for attachment in self.attachments:
                loop.call_soon(attachment.config_changed)
        # the next expiry is known once this entry is applied (not when it was appended: an
        # ExpireEntry in flight would otherwise be proposed again)
        self._schedule_expiry()
        self.direct.wake()  # read-your-writes Direct Gets waiting for this sequence
        self.consumers.applied(entry, result)
        return result

    def wake(self) -> None:
        self._wake.set()

    @property
    def awaiting_seed(self) -> bool:
        """A replica of a restored stream whose state has not reached it yet."""
        return self._awaiting_seed

    def await_seed(self) -> None:
        """Before ``start``: a replica of a stream whose restored backup has not reached it
        yet takes nothing and serves nothing until its state arrives (``state_replaced``)."""
        if self.stream.applied_index == 0:
            self._awaiting_seed = True
            self.offline = True

    def state_replaced(self) -> None:
        if self._awaiting_seed and self.stream.applied_index > 0:
            log.info("stream %s: restored state arrived", self.name)
            self._awaiting_seed = False
            self.offline = False
            self.refresh_subscriptions()
            if self.is_leader:
                self._schedule_expiry()
        self._wake.set()

    def role_changed(self) -> None:
        if not self.is_leader:
            self._batches.close()  # a staged batch never commits on a deposed leader
            if self._expiry_timer is not None:
                self._expiry_timer.cancel()
                self._expiry_timer = None
            self._fail_queued(ApiError(E.CLUSTER_NOT_LEADER))
        asyncio.get_running_loop().call_soon(self._after_role_change)

    def _after_role_change(self) -> None:
        self.refresh_subscriptions()
        if self.is_leader:
            self._schedule_expiry()
            self._wake.set()
        if self._on_role_change is not None:
            self._on_role_change(self)

    # --- ingest and proposals -----------------------------------------------------------
    def _ingest(self, subject: str, reply: str | None, hdr: bytes | None, payload: bytes) -> None:
        if hdr and holds(hdr, _BATCH_ID_KEY):
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

    async def propose(self, entry: LogEntry) -> Any:
        """Append ``entry`` and return its apply result once it is durable."""
        if self.offline:
            raise ApiError(E.STREAM_OFFLINE)
        if not self.is_leader:
            raise ApiError(E.CLUSTER_NOT_LEADER)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append(QueuedOp(entry, future))
        self._wake.set()
        return await future

    def _propose_nowait(self, entry: LogEntry) -> None:
        if self.is_leader and not self.offline:
            self._queue.append(QueuedOp(entry, None))
            self._wake.set()

    async def _commit_loop(self) -> None:
        """Hand what is queued to the log in bounded turns; acknowledgements follow from the log
        once each entry is durable."""
        log_ = self._log
        while True:
            self._wake.clear()
            log_.poll()
            appended = 0
            while self._queue and log_.has_room(appended):
                if not log_.is_leader:
                    self._fail_queued(ApiError(E.CLUSTER_NOT_LEADER))
                    break
                self._append_next()
                appended += 1
            log_.end_turn(bool(self._queue))
            if self._queue and appended:
                await asyncio.sleep(0)  # let the loop breathe between bounded turns
                continue
            if self._closing and not self._queue and log_.idle():
                return
            await self._wake.wait()

    def _append_next(self) -> None:
        """Append the head of the queue (publishes: as many as one entry takes)."""
        head = self._queue[0]
        if isinstance(head, QueuedOp):
            self._queue.popleft()
            self._log.append(
                head.entry, functools.partial(_resolve, head), functools.partial(_reject, head)
            )
        elif isinstance(head, QueuedBatchCommit):
            self._queue.popleft()
            self._log.append(head.entry, functools.partial(self._send_batch_ack, head), _dropped)
        else:
            pubs = self._take_publishes()
            entry = PublishEntry(time.time_ns(), tuple(p.msg for p in pubs))
            self._log.append(entry, functools.partial(self._send_acks, pubs), _dropped)

    def _fail_queued(self, error: ApiError) -> None:
        """Fail the queued API operations; queued publishes go unanswered (the client's request
        times out and it retries, as with nats-server when a leader steps down)."""
        while self._queue:
            item = self._queue.popleft()
            if isinstance(item, QueuedOp):
                _reject(item, error)

    def _commit_loop_ended(self, task: asyncio.Task[None]) -> None:
        """A failed apply or fsync leaves the stream in an unknown state: take it offline (clients
        then get no-responders instead of silence) rather than acknowledge anything more."""
        if task.cancelled() or task.exception() is None:
            return
        log.critical("stream %s is offline: commit failed", self.name, exc_info=task.exception())
        self.offline = True
        self.unsubscribe_all()
        self._batches.close()
        self._fail_queued(ApiError(E.STREAM_OFFLINE))

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

    def _send_acks(self, pubs: list[QueuedPublish], results: Any) -> None:
        if self.config.no_ack:
            return
        name = self.name
        publish = self.router.publish
        plain_head = api_json.pub_ack_head(name)
        for pub, res in zip(pubs, results, strict=True):
            if not pub.reply:
                continue
            if res.error is not None:
                body = api_json.pub_ack_error_json(name, res.error)
            elif res.duplicate or res.val is not None:
                body = api_json.pub_ack_json(name, res.seq, duplicate=res.duplicate, val=res.val)
            else:
                body = plain_head + str(res.seq).encode() + b"}"
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

    # --- MaxAge expiry: the leader's clock only ------------------------------------------
    def _schedule_expiry(self) -> None:
        if self._closing or not self.is_leader or self.offline:
            return
        due_ns = self.stream.next_expiry_ns()
        fire_ns = self.stream.next_schedule_ns()
        if fire_ns is not None:
            # as nats-server, a schedule fires no sooner than FIRE_DELAY_MIN_S from now
            fire_ns = max(fire_ns, time.time_ns() + int(FIRE_DELAY_MIN_S * 1e9))
            due_ns = fire_ns if due_ns is None else min(due_ns, fire_ns)
        if due_ns is None:
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


def _resolve(op: QueuedOp, result: Any) -> None:
    if op.future is not None and not op.future.done():
        op.future.set_result(result)


def _reject(op: QueuedOp, error: ApiError) -> None:
    if op.future is not None and not op.future.done():
        op.future.set_exception(error)


def _dropped(_error: ApiError) -> None:
    """A publish or batch commit its proposer will never see applied: the client's request
    times out and it retries (the entry may still commit under the next leader)."""


# a host over either log: for code that only takes publishes, reads, or attaches to a stream
AnyStreamHost = StreamHost[StreamLog]
