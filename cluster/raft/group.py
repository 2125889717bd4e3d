"""A Raft group: the interface the node uses, over pysyncobj (cluster/raft/adapter.py).

pysyncobj supplies the consensus algorithm; the adapter is the only module that knows it. Around
it, this module supplies what makes it fit a server that must not lose acknowledged writes:

* **Vetting what peers send**: every message was rebuilt from its schema
  (protocol/raft_messages.py) by the driver before it gets here, and a bad one raised
  ``RaftMessageError`` so the route closed the link. A snapshot a leader sends is checked as a
  whole (``_SnapshotReceiver``) before pysyncobj installs it; an append reply beyond the log is
  dropped; a snapshot chunk never raises the commit index (``receive``). Proposals forwarded
  by a peer are taken by the meta group only (``forward_proposals``, checked by the driver).
* **Journal**: ``DurableJournal`` (our format, no pickle on disk). Appends are group-committed:
  the driver syncs the journals after each round of ticks (``sync_journal``, then
  ``release_synced``). A follower's append reply goes out only once its entries are durable (the
  adapter holds it until then; the loop waits for followers' syncs, in worker threads when
  there are several). A leader's sync runs in a worker thread while the loop goes on, and the
  commit rule counts the leader only for entries its journal has synced (the adapter). A
  failed sync stops the group on this node (``failed``) until it restarts.
* **Apply**: log entries are our own bytes; ``apply_fn(index, payload)`` runs for every committed
  entry, on every member, in log order. Its return value reaches the proposer's future.
* **Snapshots**: small files of our own JSON — "applied through index I" plus whatever small state
  the owner adds (the meta group's assignments). A stream's data is not in it: the engine's store
  persists itself, and the owner fsyncs it before the snapshot is written, so compaction never
  drops an entry the store does not hold durably. Cost is independent of stream size.
* **Abstaining**: a node whose journal lost entries it had synced neither votes nor campaigns
  until a leader has brought it back (the Jepsen NATS 2.12.1 loss).

Must never: acknowledge an append (or count the leader) before the entries are fsynced; be ticked
from anywhere but the driver; hand pysyncobj a peer's message that raft_messages did not rebuild.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from cluster.raft.adapter import CoreSettings, SyncObjCore
from cluster.raft.journal import DurableJournal, JournalEntry
from cluster.raft.transport import RaftTransport
from engine import disk
from protocol.raft_messages import (
    APPEND_ENTRIES,
    COMMAND_NO_OP,
    NEXT_NODE_IDX,
    RAFT_VALUE_MAX,
    CatchupMessage,
    RaftMessageError,
)

log = logging.getLogger("jetraft.raft")

# Election timing for a 2-core machine running Python: generous enough that a GC pause or an
# fsync does not start elections, short enough that a dead leader is replaced within seconds.
RAFT_ELECTION_TIMEOUT_MIN_S = 1.0
RAFT_ELECTION_TIMEOUT_MAX_S = 2.0
RAFT_HEARTBEAT_S = 0.1
RAFT_LEADER_FALLBACK_S = 3.0  # a leader that hears from no majority this long steps down
RAFT_APPEND_BYTES_MAX = 32 * 1024 * 1024  # per append message; larger single entries go alone
RAFT_COMPACT_ENTRIES = 4096  # compact the log (tiny snapshot) after this many entries...
RAFT_COMPACT_INTERVAL_S = 120.0  # ...or this long
# ...or once the log file grew by this much since the last compaction: every entry is also held
# in memory until compaction, and 4,096 entries of 1,000-message batches are about a gigabyte
RAFT_COMPACT_BYTES = 128 * 1024 * 1024
SNAPSHOT_VERSION = 1
# A snapshot is "applied through I" plus the owner's small state (the meta group's assignments):
# far below this even with very many streams. It bounds what a peer can make a node buffer.
SNAPSHOT_BYTES_MAX = 256 * 1024 * 1024
_SNAPSHOT_KEYS = frozenset({"v", "group", "last", "prev", "peers", "state"})

ApplyFn = Callable[[int, bytes], Any]
SnapshotFn = Callable[[int], dict[str, Any]]
RestoreFn = Callable[[int, dict[str, Any]], None]
# (peer, message): a state transfer between this group's replicas (the owner's, not Raft's)
CatchupFn = Callable[[str, CatchupMessage], None]


class NotLeaderError(Exception):
    """The proposal was not committed by this node as leader (lost leadership, no leader)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"proposal failed: {reason}")
        self.reason = reason


class SyncScheduler(Protocol):
    """Who fsyncs a group's journal soon (the driver): asked when a reply waits for it."""

    def request_sync(self, name: str) -> None: ...


@dataclass(frozen=True)
class RaftStatus:
    """One group's Raft state, for monitoring and logs."""

    group: str
    role: str  # "leader", "candidate" or "follower"
    leader: str | None
    term: int
    commit_index: int
    last_applied: int
    first_log_index: int
    last_log_index: int
    abstaining: bool
    paused: bool


class RaftGroup:
    def __init__(
        self,
        name: str,
        self_id: str,
        peer_ids: list[str],
        data_dir: Path,
        transport: RaftTransport,
        driver: SyncScheduler,
        apply_fn: ApplyFn,
        snapshot_fn: SnapshotFn | None = None,
        restore_fn: RestoreFn | None = None,
        on_state_change: Callable[[], None] | None = None,
        forward_proposals: bool = False,
        on_catchup: CatchupFn | None = None,
    ) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        # only for commands that are harmless twice (the meta group's): see the adapter
        self.forward_proposals = forward_proposals
        self.group_name = name
        self.self_id = self_id
        self.peer_ids = sorted(set(peer_ids) | {self_id})
        self.transport = transport
        self._snapshot_fn = snapshot_fn
        self._restore_fn = restore_fn
        self._on_state_change = on_state_change
        self._on_catchup = on_catchup
        self.journal = DurableJournal(data_dir / "journal")
        # Lost entries it had synced (disk damage): it may have acknowledged them, so a vote from
        # it could elect a leader without them (the Jepsen NATS 2.12.1 loss). Until a leader has
        # brought its commit index up to the leader's, it neither votes nor campaigns.
        self.abstaining = bool(self.journal.lost_synced_entries)
        if self.abstaining:
            log.warning("group %s: journal lost synced entries: not voting until caught up", name)
        if len(self.journal) == 0:
            self.journal.add(bytes([COMMAND_NO_OP]), 1, 0)  # pysyncobj's first entry, as it would
            self.journal.sync()
        self.snapshot_path = data_dir / "snapshot.json"
        self.snapshot_receiver = _SnapshotReceiver(name)
        # set while the owner fetches state the log no longer has: the driver does not tick
        self.paused = False
        # why the group stopped on this node (its journal's fsync failed); None while it runs
        self.failed: str | None = None
        self.last_leader_change_ns = time.time_ns()
        # settings read here, not at import, so tests can shrink them per group
        settings = CoreSettings(
            election_timeout_min_s=RAFT_ELECTION_TIMEOUT_MIN_S,
            election_timeout_max_s=RAFT_ELECTION_TIMEOUT_MAX_S,
            heartbeat_s=RAFT_HEARTBEAT_S,
            leader_fallback_s=RAFT_LEADER_FALLBACK_S,
            append_bytes_max=RAFT_APPEND_BYTES_MAX,
            compact_entries=RAFT_COMPACT_ENTRIES,
            compact_interval_s=RAFT_COMPACT_INTERVAL_S,
        )
        self._compact_bytes = RAFT_COMPACT_BYTES
        self._compact_base = self.journal.size_bytes  # the log's size after the last compaction
        # the pysyncobj adapter; only this package (and white-box tests) touch it
        self.core = SyncObjCore(
            group_name=name,
            self_id=self_id,
            peer_ids=self.peer_ids,
            journal=self.journal,
            transport=transport,
            request_sync=lambda: driver.request_sync(name),
            settings=settings,
            snapshot_path=self.snapshot_path,
            apply_fn=apply_fn,
            write_snapshot=self._write_snapshot,
            read_snapshot=self._read_snapshot,
            on_state_change=self._state_changed,
            forward_proposals=forward_proposals,
        )

    def _state_changed(self) -> None:
        self.last_leader_change_ns = time.time_ns()
        if self._on_state_change is not None:
            self._on_state_change()

    # --- snapshots ---------------------------------------------------------------------------
    def _write_snapshot(self, path: str, last: JournalEntry, prev: JournalEntry) -> None:
        extra = self._snapshot_fn(int(last[1])) if self._snapshot_fn is not None else {}
        doc = {
            "v": SNAPSHOT_VERSION,
            "group": self.group_name,
            "last": [base64.b64encode(last[0]).decode(), int(last[1]), int(last[2])],
            "prev": [base64.b64encode(prev[0]).decode(), int(prev[1]), int(prev[2])],
            "peers": self.peer_ids,
            "state": extra,
        }
        with open(path, "wb") as f:
            f.write(json.dumps(doc).encode())
            f.flush()
            disk.fsync(f.fileno())
        log.debug("group %s: snapshot at index %d", self.group_name, last[1])

    def _read_snapshot(self, path: str) -> tuple[JournalEntry, JournalEntry]:
        with open(path, "rb") as f:
            raw = f.read(SNAPSHOT_BYTES_MAX + 1)
        # the file may have come from a peer (snapshot install): checked again, like on receipt
        try:
            last, prev, state = parse_snapshot(raw, self.group_name)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
        if self._restore_fn is not None:
            self._restore_fn(last[1], state)
        return last, prev

    # --- what the owner uses -----------------------------------------------------------------
    def propose(self, payload: bytes) -> asyncio.Future[Any]:
        """Append ``payload`` as leader; the future gets ``apply_fn``'s result once committed
        and applied here, or ``NotLeaderError``."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def done(result: Any, failure: str | None) -> None:
            if future.done():
                return
            if failure is None:
                future.set_result(result)
            else:
                future.set_exception(NotLeaderError(failure))

        self.core.propose(payload, done)
        return future

    @property
    def is_leader(self) -> bool:
        return self.failed is None and self.core.is_leader

    @property
    def leader_id(self) -> str | None:
        # a stopped group knows no leader: its owner neither leads nor serves reads
        return None if self.failed is not None else self.core.leader_id

    def stop(self, reason: str) -> None:
        """Stop the group on this node for good (its journal failed): the driver no longer
        syncs, ticks or feeds it, and the owner hears of it as of a change of role."""
        self.failed = reason
        self._state_changed()

    @property
    def term(self) -> int:
        return self.core.term

    @property
    def commit_index(self) -> int:
        return self.core.commit_index

    @property
    def last_applied(self) -> int:
        return self.core.last_applied

    @property
    def last_log_index(self) -> int:
        return int(self.journal[-1][1])

    def term_of(self, index: int) -> int:
        """The term of the log entry at ``index`` (0 if compacted away)."""
        entry = self.journal.entry_at(index)
        return 0 if entry is None else entry[2]

    def peer_progress(self) -> dict[str, tuple[int, float]]:
        """Leader only: per follower (match index, seconds since it last answered)."""
        return self.core.peer_progress()

    def leader_commit_index(self) -> int:
        """The commit index the leader last told this node (0 before it heard one)."""
        return self.core.leader_commit_index

    def caught_up_followers(self) -> list[str]:
        """Leader only: the followers that hold the whole log, the one heard from last first
        (the candidates a leadership transfer may go to)."""
        last = self.last_log_index
        progress = self.peer_progress().items()
        return [peer for _idle, peer in sorted((idle, p) for p, (m, idle) in progress if m == last)]

    def transfer_leadership(self, peer: str) -> bool:
        """Leader only: hand leadership to ``peer``, which must hold the whole log. Whether the
        request went out; the new leader shows in ``leader_id`` once elected."""
        if peer == self.self_id or peer not in self.peer_ids:
            return False
        return self.core.transfer_leadership(peer)

    def status(self) -> RaftStatus:
        return RaftStatus(
            group=self.group_name,
            role=self.core.role,
            leader=self.leader_id,
            term=self.term,
            commit_index=self.commit_index,
            last_applied=self.last_applied,
            first_log_index=int(self.journal[0][1]),
            last_log_index=self.last_log_index,
            abstaining=self.abstaining,
            paused=self.paused,
        )

    def close(self) -> None:
        # a failed journal refuses every sync (it may have failed in a worker thread, before the
        # driver stopped the group)
        if self.failed is None and self.journal.failed is None:
            self.journal.sync()
        self.journal._destroy()

    # --- what the driver uses ----------------------------------------------------------------
    def tick(self) -> None:
        if self.abstaining:  # never campaign: keep the election deadline ahead
            self.core.hold_election(RAFT_ELECTION_TIMEOUT_MAX_S)
        size = self.journal.size_bytes
        if size < self._compact_base:
            self._compact_base = size  # compacted (or truncated) since
        elif size - self._compact_base > self._compact_bytes:
            # at most once per RAFT_COMPACT_BYTES of growth: a compaction that can drop little
            # (this replica applied little of its log yet) is not retried every tick
            self._compact_base = size
            self.core.force_compaction()
        self.core.tick()

    @property
    def sync_pending(self) -> bool:
        """Whether a sync has anything to do (journal changes, replies waiting for them)."""
        return self.journal.dirty or self.core.holding_replies

    def sync_journal(self) -> None:
        """Make the journal durable; may run in a worker thread while the loop waits for it."""
        # the commit index is persisted lazily (pysyncobj's one-second timer): a lower one on
        # disk only means more entries re-applied, and the engine skips what it already holds
        self.journal.sync(commit_index=False)

    def release_synced(self) -> None:
        """Send the append replies the journal's last sync covers (on the loop)."""
        self.core.release_held()

    def peer_connected(self, peer: str) -> None:
        if peer != self.self_id and peer in self.peer_ids:
            self.core.peer_connected(peer)

    def peer_disconnected(self, peer: str) -> None:
        if peer != self.self_id and peer in self.peer_ids:
            self.core.peer_disconnected(peer)

    def send_catchup(self, peer: str, transfer_id: int, part: str, data: bytes) -> bool:
        """Send a state-transfer message to ``peer``'s replica of this group."""
        return self.transport.send_catchup(peer, [self.group_name, transfer_id, part, data])

    def receive_catchup(self, peer: str, message: CatchupMessage) -> None:
        """A checked state-transfer message from ``peer`` (a member: the driver checked)."""
        if self._on_catchup is not None:
            self._on_catchup(peer, message)

    def receive(self, peer: str, message: dict[str, Any]) -> None:
        """Hand a peer's (already validated) Raft message to Raft, after checking a snapshot
        transfer whole and dropping append replies beyond the log, and with a correction of the
        follower's commit rule (found by the chaos harness)."""
        if peer == self.self_id or peer not in self.peer_ids:
            return
        kind = message.get("type")
        if (
            kind == APPEND_ENTRIES
            and message.get("serialized") is not None
            and message["term"] >= self.term  # else pysyncobj ignores the message
        ):
            if not self.snapshot_receiver.check(message["serialized"]):
                log.debug("group %s: snapshot chunk outside a transfer dropped", self.group_name)
                return
        if kind == NEXT_NODE_IDX and message.get("success") and self.is_leader:
            if int(message["next_node_idx"]) > self.last_log_index + 1:
                # acknowledges entries this leader does not have: a reply to an earlier
                # leadership of this node (replies carry no term) or a lie. pysyncobj would
                # count it as replicated and could commit on it.
                log.debug("group %s: ignoring an append reply beyond the log", self.group_name)
                return
        if self.abstaining:
            if kind == "request_vote":
                return  # no answer is a refusal
            if kind == APPEND_ENTRIES and "prevLogIdx" in message:
                leader_commit = int(message.get("commit_index") or 0)
                self.core.receive(peer, message)
                if self.commit_index >= leader_commit:
                    self.abstaining = False
                    log.warning(
                        "group %s: caught up with the leader: voting again", self.group_name
                    )
                return
        if kind == APPEND_ENTRIES and "prevLogIdx" not in message:
            # A snapshot chunk (or an empty one) carries the leader's commit index but no log
            # position to check against. pysyncobj would still raise the follower's commit index
            # to min(leader's, own last index) — committing whatever the follower's log holds
            # there, possibly entries of a deposed leader that were never committed (a replica
            # applied them and diverged). Only a verified append may move the commit index.
            message = dict(message)
            message["commit_index"] = min(int(message.get("commit_index") or 0), self.commit_index)
        self.core.receive(peer, message)


def _snapshot_entry(value: object) -> JournalEntry:
    if (
        type(value) is not list
        or len(value) != 3
        or type(value[0]) is not str
        or any(type(v) is not int or not 0 <= v <= RAFT_VALUE_MAX for v in value[1:])
    ):
        raise ValueError("snapshot entry must be [base64, index, term]")
    try:
        data = base64.b64decode(value[0], validate=True)
    except ValueError:  # binascii.Error
        raise ValueError("snapshot entry data is not base64") from None
    return data, int(value[1]), int(value[2])


def parse_snapshot(
    raw: bytes, group_name: str
) -> tuple[JournalEntry, JournalEntry, dict[str, Any]]:
    """(last entry, previous entry, owner state) of a snapshot file, checked as strictly as a
    Raft message: exactly the document ``RaftGroup._write_snapshot`` writes, for this group."""
    if len(raw) > SNAPSHOT_BYTES_MAX:
        raise ValueError(f"snapshot exceeds {SNAPSHOT_BYTES_MAX} bytes")
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"snapshot is not JSON: {type(exc).__name__}") from None
    if type(doc) is not dict or set(doc) != _SNAPSHOT_KEYS:
        raise ValueError(f"snapshot must be an object with exactly {sorted(_SNAPSHOT_KEYS)}")
    if type(doc["v"]) is not int or doc["v"] != SNAPSHOT_VERSION:
        raise ValueError("snapshot version not supported")
    if doc["group"] != group_name:
        raise ValueError("snapshot is for another group")
    peers = doc["peers"]
    if type(peers) is not list or any(type(p) is not str for p in peers):
        raise ValueError("snapshot peers must be a list of names")
    if type(doc["state"]) is not dict:
        raise ValueError("snapshot state must be an object")
    last, prev = _snapshot_entry(doc["last"]), _snapshot_entry(doc["prev"])
    # the last two applied entries (what pysyncobj compacts to); the log restarts with them
    if prev[1] + 1 != last[1] or prev[2] > last[2]:
        raise ValueError("snapshot entries do not follow each other")
    return last, prev, doc["state"]


class _SnapshotReceiver:
    """Assembles the snapshot a leader sends in ``serialized`` chunks, alongside pysyncobj, so
    the whole file is checked (``parse_snapshot``) before pysyncobj installs it: a bad one
    raises ``RaftMessageError`` on its last chunk, which pysyncobj then never sees, and the
    snapshot file on disk stays as it was. Follows pysyncobj's Serializer.setTransmissionData: a
    first chunk restarts a transfer. A later chunk without a transfer started here is not
    delivered at all: after a refusal pysyncobj still holds the refused transfer's temporary file
    open, and a forged "last" chunk would otherwise complete and install it unchecked."""

    def __init__(self, group_name: str) -> None:
        self.group_name = group_name
        self.buffer: bytearray | None = None

    def check(self, chunk: tuple[bytes, bool, bool]) -> bool:
        """Whether pysyncobj may see this chunk; raises RaftMessageError for a bad snapshot."""
        data, first, last = chunk
        if first:
            self.buffer = bytearray()
        buffer = self.buffer
        if buffer is None:
            return False  # no transfer this receiver checked: pysyncobj must not write it
        buffer += data
        if len(buffer) > SNAPSHOT_BYTES_MAX:
            self.buffer = None
            raise RaftMessageError(f"snapshot transfer exceeds {SNAPSHOT_BYTES_MAX} bytes")
        if last:
            self.buffer = None
            try:
                parse_snapshot(bytes(buffer), self.group_name)
            except ValueError as exc:
                raise RaftMessageError(f"snapshot from the leader refused: {exc}") from None
        return True
