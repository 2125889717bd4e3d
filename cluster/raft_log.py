"""One replica of a clustered stream: the stream host's log is the stream's Raft group.

Every replica applies the group's committed entries to its own engine (through the host's
``apply``, with the Raft index), so all replicas pass through the same states. On top of that:

* **Leader**: the host appends (proposes) while this node leads; up to
  ``PROPOSALS_INFLIGHT_MAX`` entries are in flight at once (pipelining), and an entry's
  ``on_done`` runs when it is committed (on a majority's disk) and applied here. Only the leader
  runs expiry. A new stream's first leader hands leadership to the placement's preferred peer.
* **Every replica** (leader included), once ``caught_up``, serves reads (the host's responders).
* **Read barrier**: ``read_barrier`` returns once a barrier entry proposed after the call was
  applied here as leader: a read then reflects every write acknowledged before it, even if
  leadership changed in between. Concurrent reads share one barrier.
* **Snapshots and state transfer**: a snapshot is "the store holds everything through I"; a
  follower handed a snapshot ahead of its store pauses the group and fetches the missing state
  from the leader (engine/state_transfer.py), over the Raft transport's catch-up messages.

* **Seeding** (a backup restored into a new group): the leader that took the upload first copies
  it into its own replica's store (``prepare_seed``: durable, at applied index 0, the replica
  still offline), then proposes ``CMD_SEED`` naming itself (``seed``). Applying it, the named
  seeder adopts what its store holds as the state at the seed's index (also when it replays the
  seed after a restart); every other replica lets this and the following entries pass unapplied
  and fetches the seeder's state by state transfer, which must reach past every entry it let
  pass. Such a replica keeps ticking its group (it votes and can be elected: a group whose other
  members all wait could not elect anyone otherwise), hands leadership on to a caught-up peer
  should it be elected, and serves no transfer until it holds the state.

Raft command bytes (versioned by their first byte): ``CMD_ENGINE`` + an ``engine.entries`` entry,
``CMD_BARRIER`` (no state change) or ``CMD_SEED`` + JSON naming the seeder and the shape of
the state it prepared (first and last seq, messages, bytes): a seeder whose store no longer
holds that state when it applies or replays the seed (a memory store after a restart, a store
started over after damage) fetches it like any other replica instead of adopting what is left.
A replica fetching a seed's state pauses its group while a transfer is in flight, so the entries
it lets pass cannot outrun the state being sent (they would, under steady writes).

Must never: change stream state other than by applying a committed entry; acknowledge before
commit; expire on a follower's clock; answer a read barrier without a committed barrier entry.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

from cluster.apply_log import NO_APPLY_OBSERVER, ApplyObserver
from cluster.proposed_entries import ProposedEntries
from cluster.raft import NotLeaderError, RaftDriver, RaftGroup, RaftTransport
from cluster.stream_log import LogOwner, OnDone, OnFail
from engine.entries import BatchCommitEntry, LogEntry, PublishEntry, decode_entry, encode_entry
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
from protocol.raft_messages import (
    CATCHUP_CHUNK,
    CATCHUP_ERROR,
    CATCHUP_REQUEST,
    CatchupMessage,
)

log = logging.getLogger("jetraft.replica")

CMD_ENGINE = 1
CMD_BARRIER = 2
CMD_SEED = 3
PROPOSALS_INFLIGHT_MAX = 8
# a follower this many entries behind the leader's commit stops answering Direct Get
DIRECT_GET_LAG_MAX = 1000
CATCHUP_TIMEOUT_S = 30.0
CATCHUP_RETRY_MIN_S = 0.2
CATCHUP_RETRY_MAX_S = 5.0
SEED_COMMIT_TIMEOUT_S = 30.0  # a restore whose seed does not commit by then is undone
SEED_COPY_CHUNKS_PER_TURN = 4  # the seeder's copy yields to the event loop this often
HAND_OFF_INTERVAL_S = 1.0  # a leader without the state asks a peer to take over this often
# Leaders spread over the nodes: placement names a preferred leader per stream (the first peer);
# whoever wins the first election hands leadership to it once it is caught up, within this window
# after the replica opened (later, leadership stays where elections put it: no ping-pong).
PREFERRED_LEADER_WINDOW_S = 15.0
EARLIER_TERM_PROBE_ENTRIES = 4  # log entries read to find one of an earlier term


class RaftLog:
    drains_on_close = False

    def __init__(
        self,
        owner: LogOwner,
        store: MessageStore,
        *,
        raft_dir: Path,
        self_id: str,
        peers: list[str],
        incarnation: int,
        transport: RaftTransport,
        driver: RaftDriver,
        apply_observer: ApplyObserver = NO_APPLY_OBSERVER,
    ) -> None:
        self._owner = owner
        self._store = store
        self.peers = sorted(peers)
        self.preferred = peers[0] if peers else self_id
        self.driver = driver
        self.apply_observer = apply_observer
        self.transfers_received = 0
        self._opened_at = time.monotonic()
        self._handed_over = False
        self._inflight = 0
        self._own_entries = ProposedEntries(4 * PROPOSALS_INFLIGHT_MAX)
        self._barrier: asyncio.Future[int] | None = None
        self._was_leader = False
        self._closing = False
        self._catchup_task: asyncio.Task[None] | None = None
        self._transfer: tuple[int, TransferApplier, asyncio.Future[None]] | None = None
        self._transfer_seq = 0
        # the applied index a state transfer must reach before this replica applies entries
        # again: a snapshot's, or the last entry skipped while waiting for a seed's state
        self._catchup_floor = 0
        # this replica lets entries pass unapplied until a state transfer brings the state a seed
        # named another replica for (unlike a pause, the group keeps ticking)
        self._awaiting_state = False
        self._handed_off_at = 0.0
        self.incarnation = incarnation
        self.group = RaftGroup(
            # one name per incarnation (the assignment's creation time): a re-created stream
            # never hears its predecessor's Raft, nor a restored one its backup's original
            f"S.{owner.stream.config.name}.{incarnation:x}",
            self_id,
            peers,
            raft_dir,
            transport,
            driver,
            self._apply_committed,
            snapshot_fn=self._snapshot,
            restore_fn=self._restore,
            on_state_change=self._role_changed,
            on_catchup=self._on_catchup,
        )

    @property
    def name(self) -> str:
        return self._owner.stream.config.name

    # --- StreamLog ----------------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        return bool(self.group.is_leader)

    @property
    def caught_up(self) -> bool:
        if self._awaiting_state:
            return False  # Raft's applied index moves on, but the engine is not there
        if self.is_leader:
            return True
        if self.group.leader_id is None:
            return False
        applied = int(self.group.last_applied)
        return applied >= self.group.leader_commit_index() - DIRECT_GET_LAG_MAX

    def start(self) -> None:
        self.apply_observer.opened(self._owner.stream)
        self.driver.add(self.group)

    def poll(self) -> None:
        pass  # proposals complete through their futures' callbacks

    def has_room(self, appended: int) -> bool:
        return self._inflight < PROPOSALS_INFLIGHT_MAX

    def append(self, entry: LogEntry, on_done: OnDone, on_fail: OnFail) -> None:
        raw = encode_entry(entry)
        if isinstance(entry, (PublishEntry, BatchCommitEntry)):
            self._own_entries.add(raw, entry)
        payload = bytes([CMD_ENGINE]) + raw
        future = self.group.propose(payload)
        self._inflight += 1

        def done(f: asyncio.Future[Any]) -> None:
            self._inflight -= 1
            self._owner.wake()
            if f.cancelled():
                return
            exc = f.exception()
            if exc is None:
                on_done(f.result())
                return
            if not isinstance(exc, NotLeaderError):
                log.error("stream %s: proposal failed: %r", self.name, exc)
            on_fail(ApiError(E.CLUSTER_NOT_LEADER))

        future.add_done_callback(done)

    def end_turn(self, more_queued: bool) -> None:
        if self._inflight:
            self.driver.kick(self.group.group_name)  # send this turn's proposals now

    def idle(self) -> bool:
        return self._inflight == 0

    def on_tick(self) -> None:
        # hand what was applied to the OS every tick (one write): a killed process then loses
        # at most a tick of applied state, which the Raft log replays (fsync stays with snapshots)
        self._store.flush()
        if not self._handed_over and self.group.leader_id == self.preferred:
            # the preferred peer has led: the hand-over is done for every replica, and a later
            # leader (after a stepdown or a failure) keeps the leadership it was given
            self._handed_over = True
        if self.is_leader and not self._handed_over:
            self._hand_over_to_preferred()
        if self.is_leader and self._awaiting_state:
            self._hand_off_without_state()

    async def close(self) -> None:
        self._closing = True
        if self._catchup_task is not None:
            self._catchup_task.cancel()
        self._fail_barrier()
        self.driver.remove(self.group.group_name)

    # --- leadership ---------------------------------------------------------------------------
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
            self._fail_barrier()
            # what it proposed and may still apply (if a majority had it) is decoded like any
            # other entry: nothing proposed keeps its payload alive past the leadership
            self._own_entries.clear()
        self._owner.role_changed()

    def _hand_over_to_preferred(self) -> None:
        group = self.group
        if self.preferred == group.self_id or self._had_a_leader_before():
            # the hand-over is for a new group's first leader only: one elected after an
            # earlier leader (a stepdown, a failure) keeps the leadership it was given
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

    def _hand_off_without_state(self) -> None:
        """Elected before the seed's state reached this replica: it can serve nothing, so
        leadership goes to a caught-up peer (the seeder first), at most once a second."""
        now = time.monotonic()
        if now - self._handed_off_at < HAND_OFF_INTERVAL_S:
            return
        self._handed_off_at = now
        peers = self.group.caught_up_followers()
        for peer in sorted(peers, key=lambda p: p != self.preferred):
            if self.group.transfer_leadership(peer):
                log.info("stream %s: no state yet: leadership to %s", self.name, peer)
                return

    def step_down(self) -> str | None:
        """Leader only: hand leadership to a follower that holds the whole log (the one that
        answered last); the peer asked, or None when no follower is caught up."""
        group = self.group
        self._handed_over = True
        for peer in group.caught_up_followers():
            if group.transfer_leadership(peer):
                log.info("stream %s: stepping down to %s", self.name, peer)
                return peer
        return None

    def _had_a_leader_before(self) -> bool:
        """Does the log hold an entry of a term before the current one (an earlier leader
        wrote it)? Read from the log itself, so no tick has to have seen that leader."""
        group = self.group
        first = group.status().first_log_index
        last = min(group.last_log_index, first + EARLIER_TERM_PROBE_ENTRIES)
        terms = [t for t in (group.term_of(i) for i in range(first, last + 1)) if t > 0]
        return bool(terms) and min(terms) < group.term

    def lag(self) -> int:
        return max(0, self.group.leader_commit_index() - int(self.group.last_applied))

    # --- read barrier (leader) ----------------------------------------------------------------
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

    def _fail_barrier(self) -> None:
        if self._barrier is not None and not self._barrier.done():
            self._barrier.set_exception(ApiError(E.CLUSTER_NOT_LEADER))
        self._barrier = None

    # --- apply (every replica) ----------------------------------------------------------------
    def _apply_committed(self, index: int, payload: bytes) -> Any:
        if not payload:
            return None
        kind = payload[0]
        if kind == CMD_BARRIER:
            return index
        if kind not in (CMD_ENGINE, CMD_SEED):
            raise AssertionError(f"unknown stream command {kind}")
        if index <= self._owner.stream.applied_index:
            return None  # replayed after a restart: the store already holds its effect
        if self.group.paused or self._awaiting_state:
            # waiting for a state transfer (a pause takes effect after this tick's applies):
            # the transfer must bring a state that includes this entry
            self._catchup_floor = max(self._catchup_floor, index)
            return None
        if kind == CMD_SEED:
            return self._apply_seed(index, payload[1:])
        raw = payload[1:]
        entry = self._own_entries.take(raw) or decode_entry(raw)
        self.apply_observer.applying()
        result = self._owner.apply(index, entry)
        self.apply_observer.applied(self._owner.stream, index, self.group.term_of, raw, entry)
        return result

    # --- seeding a restored stream ---------------------------------------------------------
    async def prepare_seed(self, source: Stream) -> None:
        """Leader, before ``seed``: copy ``source`` (a restored backup in a store of its own)
        into this replica's empty store, durably, as the state at applied index 0 (so the
        replica stays offline and a restart finds it there for the seed to adopt)."""
        stream = self._owner.stream
        if stream.applied_index != 0 or stream.last_seq != 0:
            raise AssertionError(f"stream {self.name}: seeding a stream that has state")
        applier = TransferApplier(self._store, CatchupRequest.fresh())
        for n, chunk in enumerate(plan_transfer(source, CatchupRequest.fresh()), start=1):
            applier.feed(chunk)
            if n % SEED_COPY_CHUNKS_PER_TURN == 0:
                await asyncio.sleep(0)  # a large copy must not stall every group on the node
            if self._closing:
                raise ApiError(E.STREAM_RESTORE, err="the stream went away during the restore")
        prepared = applier.stream
        prepared.adopt(0, stream.config.num_replicas)
        self._store.sync()
        self._owner.stream = prepared

    async def seed(self) -> None:
        """Leader, after ``prepare_seed``: propose ``CMD_SEED`` naming this node; returns once
        this replica adopted its store's state (the followers copy it by state transfer)."""
        if not self.is_leader:
            raise ApiError(E.CLUSTER_NOT_LEADER)
        seed = {"seeder": self.group.self_id, "shape": _shape(self._owner.stream)}
        future = self.group.propose(bytes([CMD_SEED]) + json.dumps(seed).encode())
        self.driver.kick(self.group.group_name)
        try:
            await asyncio.wait_for(future, SEED_COMMIT_TIMEOUT_S)
        except NotLeaderError:
            raise ApiError(E.CLUSTER_NOT_LEADER) from None
        except TimeoutError:
            err = "the restored stream's seed did not commit"
            raise ApiError(E.STREAM_RESTORE, err=err) from None
        if self._owner.stream.applied_index == 0:
            raise ApiError(E.CLUSTER_NOT_LEADER)  # applied on a path that does not seed here

    def _apply_seed(self, index: int, payload: bytes) -> None:
        stream = self._owner.stream
        try:
            seed = json.loads(payload)
            seeder, shape = str(seed["seeder"]), list(seed["shape"])
        except (ValueError, KeyError, TypeError):
            # the first form of the seed: the seeder's name alone
            seeder, shape = payload.decode("utf-8", "replace"), _shape(stream)
        if seeder == self.group.self_id:
            held = _shape(stream)
            # the store holds the upload (prepare_seed made it durable before the proposal),
            # unless it was lost since (a memory store after a restart, a store started over
            # after damage): then the state is fetched like any other replica's, or, with no
            # one else to hold it, what is left is the stream (as for any memory stream)
            if held == shape or len(self.peers) == 1:
                if held != shape:
                    log.warning("stream %s: the restored state is gone (%s)", self.name, held)
                stream.adopt(index, stream.config.num_replicas)
                self._store.sync()
                self.apply_observer.transferred(stream)
                log.info("stream %s: seeded at %d (%d messages)", self.name, index, held[2])
                self._owner.state_replaced()
                return
            log.warning(
                "stream %s: seeding at %d, but the store no longer holds the upload (%s, not %s)",
                self.name,
                index,
                held,
                shape,
            )
        log.info("stream %s: seeded by %s at %d: fetching the state", self.name, seeder, index)
        self._catchup_floor = max(self._catchup_floor, index)
        self._awaiting_state = True
        self._start_catch_up(pause=False)

    # --- snapshots ----------------------------------------------------------------------------
    def _snapshot(self, index: int) -> dict[str, Any]:
        # compaction drops log entries through ``index``: the store must hold them durably first.
        # The engine's applied index may be below ``index``: barriers and Raft no-ops after the
        # last engine entry change no state (asserting equality here failed every snapshot taken
        # after a MSG.GET barrier, so logs were never compacted under read load).
        assert self.group.last_applied >= index, (self.group.last_applied, index)
        self._store.sync()
        stream = self._owner.stream
        # while waiting for a state transfer the store lacks what the compacted entries did:
        # the snapshot says so, and a restart fetches the state again
        waiting = self.group.paused or self._awaiting_state
        applied = max(stream.applied_index, self._catchup_floor if waiting else 0)
        return {"applied_index": applied, "last_seq": stream.last_seq}

    def _restore(self, index: int, state: dict[str, Any]) -> None:
        # the engine state the snapshot stands for: what its writer's engine had applied
        needed = int(state.get("applied_index", index))
        applied = self._owner.stream.applied_index
        if applied >= needed:
            return
        # A snapshot from the leader, ahead of this replica: the log no longer has the entries
        # in between: fetch the state those entries produced from the leader.
        log.warning(
            "stream %s: snapshot at %d is ahead of the local state at %d: state transfer",
            self.name,
            index,
            applied,
        )
        self._catchup_floor = max(self._catchup_floor, needed)
        self._start_catch_up()

    def _start_catch_up(self, *, pause: bool = True) -> None:
        """Stop applying (the driver skips a paused group; appends are still stored and
        acknowledged; without ``pause`` the entries pass unapplied) and fetch the state from the
        leader."""
        if pause:
            self.group.paused = True
        if self._catchup_task is None or self._catchup_task.done():
            self._catchup_task = asyncio.get_running_loop().create_task(self._catch_up())

    # --- state transfer -----------------------------------------------------------------------
    async def _catch_up(self) -> None:
        delay = CATCHUP_RETRY_MIN_S
        while not self._closing:
            leader = self.group.leader_id
            if leader is None or leader == self.group.self_id:
                await asyncio.sleep(delay)
                continue
            resume = resume_request(self._store)
            request = resume if resume is not None else CatchupRequest.of(self._owner.stream)
            try:
                applier = TransferApplier(self._store, request)
            except TransferError:
                log.exception("stream %s: state transfer cannot resume", self.name)
                return
            # fetching a seed's state: hold the floor still while this transfer runs (for at
            # most CATCHUP_TIMEOUT_S: a group paused for good could wedge)
            held = self._awaiting_state and not self.group.paused
            if held:
                self.group.paused = True
            self._transfer_seq += 1
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._transfer = (self._transfer_seq, applier, future)
            if not self.group.send_catchup(
                leader, self._transfer_seq, CATCHUP_REQUEST, request.encode()
            ):
                future.set_exception(TransferError(f"no link to {leader}"))
            try:
                await asyncio.wait_for(future, CATCHUP_TIMEOUT_S)
            except (TimeoutError, TransferError) as exc:
                log.warning("stream %s: state transfer from %s failed: %s", self.name, leader, exc)
                self._transfer = None
                if held:
                    self.group.paused = False
                await asyncio.sleep(delay)
                delay = min(delay * 2, CATCHUP_RETRY_MAX_S)
                continue
            self._transfer = None
            if not applier.skipped:
                self._owner.stream = applier.stream
            self.apply_observer.transferred(self._owner.stream)
            self._store.sync()
            self.transfers_received += 1
            if self._owner.stream.applied_index < self._catchup_floor:
                # the leader's state is older than entries this replica already let pass
                # (a seed's followers): fetch again once it has applied them
                log.info(
                    "stream %s: transferred state at %d, %d needed: again",
                    self.name,
                    self._owner.stream.applied_index,
                    self._catchup_floor,
                )
                if held:
                    self.group.paused = False
                await asyncio.sleep(delay)
                delay = min(delay * 2, CATCHUP_RETRY_MAX_S)
                continue
            log.info(
                "stream %s: state transfer from %s done (%d messages), applied index %d",
                self.name,
                leader,
                applier.messages_appended,
                self._owner.stream.applied_index,
            )
            self._awaiting_state = False
            self.group.paused = False
            self._owner.state_replaced()
            self.driver.kick(self.group.group_name)
            return

    def _on_catchup(self, peer: str, message: CatchupMessage) -> None:
        if message.part == CATCHUP_REQUEST:
            self._send_transfer(peer, message.transfer_id, message.data)
        else:
            self._receive_transfer(message)

    def _send_transfer(self, peer: str, transfer_id: int, request: bytes) -> None:
        """Leader: every chunk a follower that sent ``request`` needs, planned at once (the engine
        must not apply in between) and queued on the link."""
        group = self.group
        try:
            if not self.is_leader:
                raise TransferError("not the leader")
            if self._awaiting_state or self.group.paused:
                raise TransferError("the leader is itself waiting for its state")
            chunks = list(plan_transfer(self._owner.stream, CatchupRequest.decode(request)))
        except TransferError as exc:
            group.send_catchup(peer, transfer_id, CATCHUP_ERROR, str(exc).encode())
            return
        log.info("stream %s: state transfer to %s (%d chunks)", self.name, peer, len(chunks))
        for chunk in chunks:
            group.send_catchup(peer, transfer_id, CATCHUP_CHUNK, chunk)

    def _receive_transfer(self, message: CatchupMessage) -> None:
        pending = self._transfer
        if pending is None or pending[0] != message.transfer_id:
            return
        _, applier, future = pending
        if future.done():
            return
        if message.part != CATCHUP_CHUNK:
            future.set_exception(TransferError(message.data.decode(errors="replace")))
            return
        try:
            if applier.feed(message.data):
                future.set_result(None)
        except TransferError as exc:
            future.set_exception(exc)


def _shape(stream: Stream) -> list[int]:
    """What a seed says of the state its seeder prepared: first and last seq, messages, bytes."""
    state = stream.state()
    return [state.first_seq, state.last_seq, state.messages, state.bytes]
