"""One replica of a clustered stream: its Raft group, the leader's ingest, every replica's reads.

Every replica applies the group's committed entries to its own engine (``Stream.apply`` with the
Raft index), so all replicas pass through the same states. Roles on top of that:

* **Leader**: subscribes to the stream's subjects, stages atomic batches, and proposes. Publishes
  that arrive while proposals are in flight are coalesced into one entry (group commit); up to
  ``PROPOSALS_INFLIGHT_MAX`` entries are in flight at once (pipelining). A PubAck is sent when the
  entry is committed (on a majority's disk) and applied. Only the leader's timer proposes expiry.
  On losing leadership it stops ingesting, abandons staged batches and fails what it queued.
* **Every replica** (leader included), once caught up, answers Direct Get in queue group ``_sys_``
  from its local engine.
* **Read barrier**: ``$JS.API.STREAM.MSG.GET`` is answered by the leader after a barrier entry
  proposed after the request arrived has been applied: the read then reflects every write
  acknowledged before it, even if leadership changed in between. Concurrent reads share one
  barrier.

Raft command bytes (versioned by their first byte): ``CMD_ENGINE`` + an ``engine.entries`` entry,
or ``CMD_BARRIER`` (no state change).

Must never: change stream state other than by applying a committed entry; acknowledge before
commit; expire on a follower's clock; answer MSG.GET without a barrier.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cluster.apply_log import NO_APPLY_OBSERVER, ApplyObserver
from cluster.batching import BatchContext
from cluster.raft import NotLeaderError, RaftDriver, RaftGroup
from cluster.router import Router
from cluster.routes import RouteManager
from cluster.stream_host import QueuedBatchCommit, QueuedOp, StreamHost
from engine.entries import (
    Entry,
    ExpireEntry,
    PublishEntry,
    UpdateConfigEntry,
    decode_entry,
    encode_entry,
)
from engine.state_transfer import (
    CatchupRequest,
    TransferApplier,
    TransferError,
    plan_transfer,
    resume_request,
)
from engine.store import MessageStore
from engine.stream import Stream
from protocol import errors as E
from protocol.errors import ApiError

log = logging.getLogger("jetraft.replica")

CMD_ENGINE = 1
CMD_BARRIER = 2
PROPOSALS_INFLIGHT_MAX = 8
# a follower this many entries behind the leader's commit stops answering Direct Get
DIRECT_GET_LAG_MAX = 1000
CATCHUP_TIMEOUT_S = 30.0
CATCHUP_RETRY_MIN_S = 0.2
CATCHUP_RETRY_MAX_S = 5.0
# Leaders spread over the nodes: placement names a preferred leader per stream (the first peer);
# whoever wins the first election hands leadership to it once it is caught up, within this window
# after the replica opened (later, leadership stays where elections put it: no ping-pong).
PREFERRED_LEADER_WINDOW_S = 15.0


class ReplicatedStreamHost(StreamHost):
    def __init__(
        self,
        stream: Stream,
        store: MessageStore,
        router: Router,
        *,
        raft_dir: Path,
        self_id: str,
        peers: list[str],
        routes: RouteManager,
        driver: RaftDriver,
        batch_context: BatchContext | None = None,
        on_leader_change: Callable[[ReplicatedStreamHost], None] | None = None,
        apply_observer: ApplyObserver = NO_APPLY_OBSERVER,
    ) -> None:
        super().__init__(
            stream, store, router, durable=False, batch_context=batch_context, node_name=self_id
        )
        self.peers = sorted(peers)
        self.preferred = peers[0] if peers else self_id
        self._opened_at = time.monotonic()
        self._handed_over = False
        self.driver = driver
        self._inflight = 0
        self._barrier: asyncio.Future[int] | None = None
        self._was_leader = False
        self._on_leader_change = on_leader_change
        self.apply_observer = apply_observer
        self.transfers_received = 0
        self._catchup_task: asyncio.Task[None] | None = None
        self._transfer: tuple[int, TransferApplier, asyncio.Future[None]] | None = None
        self._transfer_seq = 0
        self.send_catchup: Callable[[str, list[Any]], None] = lambda _peer, _body: None
        self.group = RaftGroup(
            # one name per incarnation: a re-created stream never hears its predecessor's Raft
            f"S.{stream.config.name}.{stream.created_ns:x}",
            self_id,
            peers,
            raft_dir,
            routes,
            driver,
            self._apply_committed,
            snapshot_fn=self._snapshot,
            restore_fn=self._restore,
            on_state_change=self._role_changed,
        )

    # --- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        self.apply_observer.opened(self.stream)
        self.driver.add(self.group)
        self._task = asyncio.get_running_loop().create_task(self._propose_loop())
        self.refresh_subscriptions()

    async def close(self) -> None:
        self._closing = True
        await self.close_attachments()
        self.unsubscribe_all()
        self._batches.close()
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
        if self._task is not None:
            self._task.cancel()
        if self._catchup_task is not None:
            self._catchup_task.cancel()
        self._fail_queued()
        self.driver.remove(self.group.group_name)
        self.store.sync()
        self.store.close()

    @property
    def is_leader(self) -> bool:
        return bool(self.group.is_leader)

    @property
    def caught_up(self) -> bool:
        if self.is_leader:
            return True
        if self.group.leader_id is None:
            return False
        applied = int(self.group.last_applied)
        return applied >= self.group.leader_commit_index() - DIRECT_GET_LAG_MAX

    def refresh_subscriptions(self) -> None:
        """Ingest only as leader; Direct Get on every caught-up replica while allow_direct."""
        leader = self.is_leader and not self._closing
        if leader and not self._ingest_subs:
            self._ingest_subs = [
                self.router.subscribe_internal(subject, self._ingest)
                for subject in self.config.subjects
            ]
        elif leader:
            current = [s.subject for s in self._ingest_subs]
            if current != list(self.config.subjects):
                for sub in self._ingest_subs:
                    self.router.remove(sub)
                self._ingest_subs = []
                self.refresh_subscriptions()
                return
        elif self._ingest_subs:
            for sub in self._ingest_subs:
                self.router.remove(sub)
            self._ingest_subs = []
        readable = self.caught_up and not self._closing
        self.fetch.serve(readable)
        self.direct.serve(self.name, self.config.allow_direct and readable)

    def _role_changed(self) -> None:
        leader = self.is_leader
        if leader == self._was_leader:
            return
        self._was_leader = leader
        log.info(
            "stream %s: %s leader (term %d)",
            self.name,
            "became" if leader else "no longer",
            self.group.term,
        )
        if not leader:
            self._batches.close()  # a staged batch never commits on a deposed leader
            if self._expiry_timer is not None:
                self._expiry_timer.cancel()
                self._expiry_timer = None
            self._fail_queued()
        asyncio.get_running_loop().call_soon(self._after_role_change)

    def _after_role_change(self) -> None:
        self.refresh_subscriptions()
        if self.is_leader:
            self._schedule_expiry()
            self._wake.set()
        if self._on_leader_change is not None:
            self._on_leader_change(self)

    def on_tick(self) -> None:
        """Called by the node every Raft tick: keeps the Direct Get subscription honest and hands
        a new stream's leadership to its preferred peer."""
        want = self.config.allow_direct and self.caught_up
        if want != self.direct.serving(self.name) or self.caught_up != self.fetch.serving:
            self.refresh_subscriptions()
        for attachment in self.attachments:
            attachment.on_tick()
        # hand what was applied to the OS every tick (one write): a killed process then loses
        # at most a tick of applied state, which the Raft log replays (fsync stays with snapshots)
        self.store.flush()
        if self.is_leader and not self._handed_over:
            self._hand_over_to_preferred()

    def _hand_over_to_preferred(self) -> None:
        group = self.group
        if self.preferred == group.self_id:
            self._handed_over = True
            return
        if time.monotonic() - self._opened_at > PREFERRED_LEADER_WINDOW_S:
            self._handed_over = True
            return
        progress = group.peer_progress().get(self.preferred)
        if progress is None or progress[0] != group.last_log_index:
            return  # not caught up yet: Raft would refuse the transfer
        self._handed_over = True
        log.info("stream %s: handing leadership to preferred %s", self.name, self.preferred)
        group.transfer_leadership(self.preferred)

    def _fail_queued(self) -> None:
        while self._queue:
            item = self._queue.popleft()
            if isinstance(item, QueuedOp) and item.future is not None and not item.future.done():
                item.future.set_exception(ApiError(E.CLUSTER_NOT_LEADER))
        if self._barrier is not None and not self._barrier.done():
            self._barrier.set_exception(ApiError(E.CLUSTER_NOT_LEADER))
        self._barrier = None

    # --- proposals (leader) -----------------------------------------------------------------
    async def propose(self, entry: Entry) -> Any:
        if not self.is_leader:
            raise ApiError(E.CLUSTER_NOT_LEADER)
        return await super().propose(entry)

    def _propose_nowait(self, entry: Entry) -> None:
        if self.is_leader:
            super()._propose_nowait(entry)

    async def _propose_loop(self) -> None:
        while True:
            self._wake.clear()
            while self._queue and self._inflight < PROPOSALS_INFLIGHT_MAX:
                if not self.is_leader:
                    self._fail_queued()
                    break
                self._propose_head()
            await self._wake.wait()

    def _propose_head(self) -> None:
        head = self._queue[0]
        if isinstance(head, QueuedOp):
            self._queue.popleft()
            op = head
            self._submit(op.entry, functools.partial(_resolve, op), op)
            return
        if isinstance(head, QueuedBatchCommit):
            self._queue.popleft()
            self._submit(head.entry, functools.partial(self._send_batch_ack, head), head)
            return
        pubs = self._take_publishes()
        entry = PublishEntry(time.time_ns(), tuple(p.msg for p in pubs))
        self._submit(entry, functools.partial(self._send_acks, pubs), None)

    def _submit(self, entry: Entry, on_result: Callable[[Any], None], op: object) -> None:
        future = self.group.propose(bytes([CMD_ENGINE]) + encode_entry(entry))
        self._inflight += 1
        self.driver.kick(self.group.group_name)

        def done(f: asyncio.Future[Any]) -> None:
            self._inflight -= 1
            self._wake.set()
            if f.cancelled():
                return
            exc = f.exception()
            if exc is None:
                on_result(f.result())
            elif isinstance(op, QueuedOp) and op.future is not None and not op.future.done():
                op.future.set_exception(ApiError(E.CLUSTER_NOT_LEADER))
            elif not isinstance(exc, NotLeaderError):
                log.error("stream %s: proposal failed: %r", self.name, exc)

        future.add_done_callback(done)

    async def read_barrier(self) -> None:
        """Return once an entry proposed after this call has been applied here as leader."""
        if not self.is_leader:
            raise ApiError(E.CLUSTER_NOT_LEADER)
        barrier = self._barrier
        if barrier is None:
            barrier = self._barrier = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_soon(self._propose_barrier, barrier)
        await asyncio.shield(barrier)

    def _propose_barrier(self, barrier: asyncio.Future[int]) -> None:
        if self._barrier is barrier:
            self._barrier = None  # reads from now on need a later barrier
        if barrier.done():
            return
        future = self.group.propose(bytes([CMD_BARRIER]))
        self.driver.kick(self.group.group_name)

        def done(f: asyncio.Future[Any]) -> None:
            if barrier.done():
                return
            if f.cancelled() or f.exception() is not None:
                barrier.set_exception(ApiError(E.CLUSTER_NOT_LEADER))
            else:
                barrier.set_result(int(f.result()))

        future.add_done_callback(done)

    # --- apply (every replica) --------------------------------------------------------------
    def _apply_committed(self, index: int, payload: bytes) -> Any:
        if not payload:
            return None
        kind = payload[0]
        if kind == CMD_BARRIER:
            return index
        if kind != CMD_ENGINE:
            raise AssertionError(f"unknown stream command {kind}")
        if index <= self.stream.applied_index:
            return None  # replayed after a restart: the store already holds its effect
        raw = payload[1:]
        entry = decode_entry(raw)
        self.apply_observer.applying()
        result = self.stream.apply(index, entry)
        self.apply_observer.applied(self.stream, index, self.group.term_of, raw, entry)
        if isinstance(entry, UpdateConfigEntry):
            self._batches.config_changed(self.config)
            asyncio.get_running_loop().call_soon(self.refresh_subscriptions)
        if self.is_leader and not self._closing:
            self._schedule_expiry()
        self.direct.wake()  # read-your-writes Direct Gets waiting for this sequence
        return result

    def _expire_due(self) -> None:
        self._expiry_timer = None
        if self.is_leader:
            self._propose_nowait(ExpireEntry(time.time_ns()))

    def _schedule_expiry(self) -> None:
        if self.is_leader:
            super()._schedule_expiry()

    # --- snapshots --------------------------------------------------------------------------
    def _snapshot(self, index: int) -> dict[str, Any]:
        # compaction drops log entries through ``index``: the store must hold them durably first.
        # The engine's applied index may be below ``index``: barriers and Raft no-ops after the
        # last engine entry change no state (asserting equality here failed every snapshot taken
        # after a MSG.GET barrier, so logs were never compacted under read load).
        assert self.group.last_applied >= index, (self.group.last_applied, index)
        self.store.sync()
        return {"applied_index": self.stream.applied_index, "last_seq": self.stream.last_seq}

    def _restore(self, index: int, state: dict[str, Any]) -> None:
        # the engine state the snapshot stands for: what its writer's engine had applied
        needed = int(state.get("applied_index", index))
        if self.stream.applied_index >= needed:
            return
        # A snapshot from the leader, ahead of this replica: the log no longer has the entries
        # in between. Stop applying (the driver skips a paused group; appends are still stored
        # and acknowledged) and fetch the state those entries produced from the leader.
        log.warning(
            "stream %s: snapshot at %d is ahead of the local state at %d: state transfer",
            self.name,
            index,
            self.stream.applied_index,
        )
        self.group.paused = True
        if self._catchup_task is None or self._catchup_task.done():
            self._catchup_task = asyncio.get_running_loop().create_task(self._catch_up())

    async def _catch_up(self) -> None:
        delay = CATCHUP_RETRY_MIN_S
        while not self._closing:
            leader = self.group.leader_id
            if leader is None or leader == self.group.self_id:
                await asyncio.sleep(delay)
                continue
            resume = resume_request(self.store)
            request = resume if resume is not None else CatchupRequest.of(self.stream)
            try:
                applier = TransferApplier(self.store, request)
            except TransferError:
                log.exception("stream %s: state transfer cannot resume", self.name)
                return
            self._transfer_seq += 1
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._transfer = (self._transfer_seq, applier, future)
            self.send_catchup(leader, [self.name, self._transfer_seq, "req", request.encode()])
            try:
                await asyncio.wait_for(future, CATCHUP_TIMEOUT_S)
            except (TimeoutError, TransferError) as exc:
                log.warning("stream %s: state transfer from %s failed: %s", self.name, leader, exc)
                self._transfer = None
                await asyncio.sleep(delay)
                delay = min(delay * 2, CATCHUP_RETRY_MAX_S)
                continue
            self._transfer = None
            if not applier.skipped:
                self.stream = applier.stream
                self.direct.wake()
            self.apply_observer.transferred(self.stream)
            self.store.sync()
            self.transfers_received += 1
            log.info(
                "stream %s: state transfer from %s done (%d messages), applied index %d",
                self.name,
                leader,
                applier.messages_appended,
                self.stream.applied_index,
            )
            self.group.paused = False
            self.driver.kick(self.group.group_name)
            return

    def on_transfer_chunk(self, transfer_id: int, part: str, data: bytes) -> None:
        pending = self._transfer
        if pending is None or pending[0] != transfer_id:
            return
        _, applier, future = pending
        if future.done():
            return
        if part != "chunk":
            future.set_exception(TransferError(data.decode(errors="replace")))
            return
        try:
            if applier.feed(data):
                future.set_result(None)
        except TransferError as exc:
            future.set_exception(exc)

    def transfer_chunks(self, request: bytes) -> list[bytes]:
        """Leader: every chunk a follower that sent ``request`` needs, taken at once (the
        engine must not apply in between)."""
        if not self.is_leader:
            raise TransferError("not the leader")
        return list(plan_transfer(self.stream, CatchupRequest.decode(request)))

    # --- cluster info -----------------------------------------------------------------------
    def lag(self) -> int:
        return max(0, self.group.leader_commit_index() - int(self.group.last_applied))


def _resolve(op: QueuedOp, result: Any) -> None:
    if op.future is not None and not op.future.done():
        op.future.set_result(result)
