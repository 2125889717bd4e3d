"""Raft groups on pysyncobj, driven by the node's event loop and multiplexed over the routes.

pysyncobj supplies the consensus algorithm (elections, log matching, commit rule, snapshots).
Around it, jetraft supplies what makes it fit a server that must not lose acknowledged writes:

* **Transport**: pysyncobj messages travel as MessagePack inside ``RAFT`` route frames, tagged
  with the group name, so every group shares the one cluster port. No byte from a peer is ever
  unpickled: every received message is rebuilt from its schema (protocol/raft_messages.py) before
  pysyncobj sees it, and a bad one raises ``RaftMessageError`` so the route closes the link.
  pysyncobj pickles an entry of ``appendEntriesBatchSizeBytes`` or more into ``transmission``
  chunks (which the receiver would unpickle); ``_GroupTransport.send`` sends such an entry whole
  in an ordinary append instead, and peers refuse transmission chunks. A snapshot a leader sends
  is checked as a whole (``_SnapshotReceiver``) before pysyncobj installs it. Proposals forwarded
  by a peer (``apply_command``) are taken by the meta group only; membership changes stay off
  (``dynamicMembershipChange``), and only REGULAR entries are applied (``__doApplyCommand`` is
  replaced), so pysyncobj's pickled MEMBERSHIP/VERSION commands are never loaded either.
* **Journal**: ``DurableJournal`` (our format, no pickle on disk). Appends are group-committed:
  a follower's positive append reply (``next_node_idx``) is held until the entries it covers are
  fsynced, and the driver fsyncs a group's journal before every tick and right after it, so the
  leader's own entries are durable before the next tick's commit rule counts the leader.
* **Apply**: log entries are our own bytes; ``apply_fn(index, payload)`` runs for every committed
  entry, on every member, in log order. Its return value reaches the proposer's future.
* **Snapshots**: small files of our own JSON — "applied through index I" plus whatever small state
  the owner adds (the meta group's assignments). A stream's data is not in it: the engine's store
  persists itself, and the owner fsyncs it before the snapshot is written, so compaction never
  drops an entry the store does not hold durably. Cost is independent of stream size.
* **Driving**: no pysyncobj threads (``autoTick`` off). The driver ticks every group on a timer
  and immediately after a message or a proposal for it arrives.

pysyncobj keeps its state in name-mangled private attributes; the few this module touches are
read or replaced right after construction and are listed in ``_SyncObj__*`` accessors below, so an
upgrade of the pinned version has one place to check.

Must never: acknowledge an append (or count the leader) before the entries are fsynced; tick a
group from anywhere but the driver; hand pysyncobj a peer's message that raft_messages did not
rebuild, or send it a ``transmission`` chunk.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import queue as stdlib_queue
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pysyncobj import SyncObj, SyncObjConf
from pysyncobj.config import FAIL_REASON
from pysyncobj.monotonic import monotonic as pysyncobj_monotonic
from pysyncobj.node import Node
from pysyncobj.transport import Transport

from cluster import sync_ledger
from cluster.raft.journal import DurableJournal
from cluster.routes import RouteManager
from protocol.raft_messages import (
    APPEND_ENTRIES,
    APPLY_COMMAND,
    COMMAND_NO_OP,
    COMMAND_REGULAR,
    NEXT_NODE_IDX,
    RAFT_VALUE_MAX,
    RaftMessageError,
    validate_raft_message,
)

log = logging.getLogger("jetraft.raft")

# Election timing for a 2-core machine running Python: generous enough that a GC pause or an
# fsync does not start elections, short enough that a dead leader is replaced within seconds.
RAFT_ELECTION_TIMEOUT_MIN_S = 1.0
RAFT_ELECTION_TIMEOUT_MAX_S = 2.0
RAFT_HEARTBEAT_S = 0.1
RAFT_LEADER_FALLBACK_S = 3.0  # a leader that hears from no majority this long steps down
RAFT_TICK_S = 0.05
RAFT_APPEND_BYTES_MAX = 32 * 1024 * 1024  # per append message; larger single entries go alone
RAFT_COMPACT_ENTRIES = 4096  # compact the log (tiny snapshot) after this many entries...
RAFT_COMPACT_INTERVAL_S = 120.0  # ...or this long
SNAPSHOT_VERSION = 1
# A snapshot is "applied through I" plus the owner's small state (the meta group's assignments):
# far below this even with very many streams. It bounds what a peer can make a node buffer.
SNAPSHOT_BYTES_MAX = 256 * 1024 * 1024
_SNAPSHOT_KEYS = frozenset({"v", "group", "last", "prev", "peers", "state"})
_REGULAR = COMMAND_REGULAR  # pysyncobj's command type for application entries
_NO_OP = COMMAND_NO_OP

ApplyFn = Callable[[int, bytes], Any]
SnapshotFn = Callable[[int], dict[str, Any]]
RestoreFn = Callable[[int, dict[str, Any]], None]


class NotLeaderError(Exception):
    """The proposal was not committed by this node as leader (lost leadership, no leader)."""

    def __init__(self, reason: int) -> None:
        super().__init__(f"proposal failed: pysyncobj reason {reason}")
        self.reason = reason


class _GroupTransport(Transport):  # type: ignore[misc]
    def __init__(self, group_name: str, routes: RouteManager, driver: RaftDriver) -> None:
        super().__init__(None, None, None)
        self.group_name = group_name
        self.routes = routes
        self.driver = driver
        self.journal: DurableJournal | None = None
        self.held: list[tuple[str, dict[str, Any]]] = []

    def send(self, node: Node, message: dict[str, Any]) -> bool:
        journal = self.journal
        if "transmission" in message:
            # pysyncobj splits an entry of appendEntriesBatchSizeBytes or more into pickled
            # chunks (start, process..., finish), and the receiver would unpickle them: peers
            # refuse such frames (protocol/raft_messages.py). The 'start' chunk is replaced by an
            # ordinary append carrying that one entry whole, read from the journal (the frame
            # limit, 256 MiB, is far above any entry); 'process' and 'finish' are dropped. The
            # follower answers the append as usual, so pysyncobj's bookkeeping is unchanged.
            if message["transmission"] != "start" or journal is None:
                return True
            whole = self._whole_entry(message, journal)
            if whole is None:
                return True  # not in the journal (cannot happen): Raft resends on the next tick
            message = whole
        if (
            message.get("type") == "next_node_idx"
            and message.get("success")
            and journal is not None
            and journal.dirty
        ):
            # the reply promises the entries are stored: not before they are on disk
            self.held.append((node.id, message))
            self.driver.request_sync(self.group_name)
            return True
        return self.routes.send_raft(node.id, self.group_name, message)

    @staticmethod
    def _whole_entry(message: dict[str, Any], journal: DurableJournal) -> dict[str, Any] | None:
        """The append pysyncobj would have sent had the entry been small: the one entry right
        after prevLogIdx (pysyncobj chunks an entry only when it is the only one to send)."""
        index = int(message["prevLogIdx"]) + 1
        first = int(journal[0][1])
        if not first <= index <= int(journal[-1][1]):
            return None
        data, entry_index, term = journal[index - first]
        return {
            "type": "append_entries",
            "term": message["term"],
            "commit_index": message["commit_index"],
            "entries": [(data, int(entry_index), int(term))],
            "prevLogIdx": message["prevLogIdx"],
            "prevLogTerm": message["prevLogTerm"],
        }

    def release_held(self) -> None:
        held, self.held = self.held, []
        for peer, message in held:
            self.routes.send_raft(peer, self.group_name, message)

    def deliver(self, node: Node, message: dict[str, Any]) -> None:
        self._onMessageReceived(node, message)

    def node_connected(self, node: Node) -> None:
        self._onNodeConnected(node)

    def node_disconnected(self, node: Node) -> None:
        self._onNodeDisconnected(node)


class RaftGroup(SyncObj):  # type: ignore[misc]
    def __init__(
        self,
        name: str,
        self_id: str,
        peer_ids: list[str],
        data_dir: Path,
        routes: RouteManager,
        driver: RaftDriver,
        apply_fn: ApplyFn,
        snapshot_fn: SnapshotFn | None = None,
        restore_fn: RestoreFn | None = None,
        on_state_change: Callable[[], None] | None = None,
        forward_proposals: bool = False,
    ) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        # only for commands that are harmless twice (the meta group's): see _checkCommandsToApply
        self.forward_proposals = forward_proposals
        self.group_name = name
        self.self_id = self_id
        self.peer_ids = sorted(set(peer_ids) | {self_id})
        self._apply_fn = apply_fn
        self._snapshot_fn = snapshot_fn
        self._restore_fn = restore_fn
        self._on_state_change = on_state_change
        self.nodes = {p: Node(p) for p in self.peer_ids}
        self.journal = DurableJournal(data_dir / "journal")
        # Lost entries it had synced (disk damage): it may have acknowledged them, so a vote from
        # it could elect a leader without them (the Jepsen NATS 2.12.1 loss). Until a leader has
        # brought its commit index up to the leader's, it neither votes nor campaigns.
        self.abstaining = bool(self.journal.lost_synced_entries)
        if self.abstaining:
            log.warning("group %s: journal lost synced entries: not voting until caught up", name)
        if len(self.journal) == 0:
            self.journal.add(bytes([_NO_OP]), 1, 0)  # pysyncobj's first entry, as it would add
            self.journal.sync()
        self.transport_ = _GroupTransport(name, routes, driver)
        self.transport_.journal = self.journal
        self.snapshot_path = data_dir / "snapshot.json"
        self.snapshot_receiver = _SnapshotReceiver(name)
        self.applying_index = 0
        # set while the owner fetches state the log no longer has: the driver does not tick
        self.paused = False
        self.last_leader_change_ns = time.time_ns()
        conf = SyncObjConf(
            autoTick=False,
            appendEntriesUseBatch=False,
            raftMinTimeout=RAFT_ELECTION_TIMEOUT_MIN_S,
            raftMaxTimeout=RAFT_ELECTION_TIMEOUT_MAX_S,
            appendEntriesPeriod=RAFT_HEARTBEAT_S,
            leaderFallbackTimeout=RAFT_LEADER_FALLBACK_S,
            appendEntriesBatchSizeBytes=RAFT_APPEND_BYTES_MAX,
            logCompactionMinEntries=RAFT_COMPACT_ENTRIES,
            logCompactionMinTime=RAFT_COMPACT_INTERVAL_S,
            fullDumpFile=str(self.snapshot_path),
            serializer=self._write_snapshot,
            deserializer=self._read_snapshot,
            onStateChanged=self._state_changed,
            pollerType="select",
        )
        others = [self.nodes[p] for p in self.peer_ids if p != self_id]
        super().__init__(self.nodes[self_id], others, conf=conf, transport=self.transport_)
        self._adopt_journal()

    def _adopt_journal(self) -> None:
        """Replace pysyncobj's in-memory journal by the durable one and reload Raft's persistent
        state from it (pysyncobj read it from the throwaway journal during construction)."""
        journal = self.journal
        self._SyncObj__raftLog = journal
        self._SyncObj__raftCurrentTerm = max(journal.getCurrentTerm(), journal[-1][2])
        self._SyncObj__votedForNodeId = journal.getVotedForNodeId()
        self._SyncObj__raftCommitIndex = journal.getRaftCommitIndex()

    # --- pysyncobj hooks ---------------------------------------------------------------------
    def _SyncObj__doApplyCommand(self, command: bytes) -> Any:
        if not command or command[0] != _REGULAR:
            return None  # no-ops (elections); membership changes are not used
        index = self.raftLastApplied + 1
        self.applying_index = index
        return self._apply_fn(index, command[1:])

    def _checkCommandsToApply(self) -> None:
        """Proposals are appended by the leader or refused — never forwarded. pysyncobj hands a
        queued command to the new leader when this node lost leadership before appending it; a
        deposed leader (paused, partitioned) still receiving publishes through stale interest
        then had them committed by the new leader as well, which stored the same publish twice
        (found by the chaos harness's pause nemesis)."""
        if not self._isLeader() and not self.forward_proposals:
            queue = self._SyncObj__commandsQueue
            while True:
                try:
                    _command, callback = queue.get_nowait()
                except stdlib_queue.Empty:
                    break
                if callback is not None and not isinstance(callback, tuple):
                    callback(None, FAIL_REASON.NOT_LEADER)
            return
        super()._checkCommandsToApply()

    def _state_changed(self, _old: int, _new: int) -> None:
        self.last_leader_change_ns = time.time_ns()
        if self._on_state_change is not None:
            self._on_state_change()

    def _write_snapshot(self, path: str, data: tuple[Any, ...]) -> None:
        try:
            self._write_snapshot_file(path, data)
        except Exception:
            # pysyncobj swallows it and only says "Failed to store full dump"
            log.exception("group %s: snapshot failed", self.group_name)
            raise

    def _write_snapshot_file(self, path: str, data: tuple[Any, ...]) -> None:
        last, prev, _cluster = data
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
            sync_ledger.fsync(f.fileno())
        log.debug("group %s: snapshot at index %d", self.group_name, last[1])

    def _read_snapshot(self, path: str) -> tuple[Any, ...]:
        with open(path, "rb") as f:
            raw = f.read(SNAPSHOT_BYTES_MAX + 1)
        # the file may have come from a peer (snapshot install): checked again, like on receipt
        try:
            last, prev, state = parse_snapshot(raw, self.group_name)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
        if self._restore_fn is not None:
            self._restore_fn(last[1], state)
        return last, prev, {self.nodes[p] for p in self.peer_ids if p in self.nodes}

    # --- what the owner uses -----------------------------------------------------------------
    def propose(self, payload: bytes) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def done(result: Any, err: int) -> None:
            if future.done():
                return
            if err == FAIL_REASON.SUCCESS:
                future.set_result(result)
            else:
                future.set_exception(NotLeaderError(err))

        self._applyCommand(payload, done, _REGULAR)
        return future

    @property
    def is_leader(self) -> bool:
        return bool(self._isLeader())

    @property
    def leader_id(self) -> str | None:
        leader = self._getLeader()
        return None if leader is None else str(leader.id)

    @property
    def term(self) -> int:
        return int(self.raftCurrentTerm)

    @property
    def last_log_index(self) -> int:
        return int(self.journal[-1][1])

    def term_of(self, index: int) -> int:
        """The term of the log entry at ``index`` (0 if compacted away)."""
        journal = self.journal
        first = int(journal[0][1])
        if first <= index <= int(journal[-1][1]):
            return int(journal[index - first][2])
        return 0

    def peer_progress(self) -> dict[str, tuple[int, float]]:
        """Leader only: per follower (match index, seconds since it last answered)."""
        if not self.is_leader:
            return {}
        match: dict[Node, int] = self._SyncObj__raftMatchIndex
        seen: dict[Node, float] = self._SyncObj__lastResponseTime
        now = pysyncobj_monotonic()
        return {
            node.id: (int(match.get(node, 0)), max(0.0, now - seen.get(node, now)))
            for node in self.nodes.values()
            if node.id != self.self_id
        }

    def leader_commit_index(self) -> int:
        value = self._SyncObj__leaderCommitIndex
        return int(value) if value is not None else 0

    def close(self) -> None:
        self.journal.sync()
        self.journal._destroy()


def _snapshot_entry(value: object) -> tuple[bytes, int, int]:
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


def parse_snapshot(raw: bytes, group_name: str) -> tuple[Any, Any, dict[str, Any]]:
    """(last entry, previous entry, owner state) of a snapshot file, checked as strictly as a
    Raft message: exactly the document ``_write_snapshot_file`` writes, for this group."""
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
    # the last two applied entries (pysyncobj's __tryLogCompaction); the log restarts with them
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


def deliver(group: RaftGroup, node: Node, message: dict[str, Any]) -> None:
    """Hand a peer's (already validated) Raft message to pysyncobj, after checking a snapshot
    transfer whole and dropping append replies beyond the log, and with two corrections of its
    follower/leader bookkeeping (found by the chaos harness and the cluster benchmark)."""
    kind = message.get("type")
    if (
        kind == APPEND_ENTRIES
        and message.get("serialized") is not None
        and message["term"] >= group.raftCurrentTerm  # else pysyncobj ignores the message
    ):
        if not group.snapshot_receiver.check(message["serialized"]):
            log.debug("group %s: snapshot chunk outside a transfer dropped", group.group_name)
            return
    if kind == NEXT_NODE_IDX and message.get("success") and group.is_leader:
        if int(message["next_node_idx"]) > group.last_log_index + 1:
            # acknowledges entries this leader does not have: a reply to an earlier leadership
            # of this node (replies carry no term) or a lie. pysyncobj would count it as
            # replicated and could commit on it.
            log.debug("group %s: ignoring an append reply beyond the log", group.group_name)
            return
    if group.abstaining:
        if kind == "request_vote":
            return  # no answer is a refusal
        if kind == "append_entries" and "prevLogIdx" in message:
            leader_commit = int(message.get("commit_index") or 0)
            group.transport_.deliver(node, message)
            if group.raftCommitIndex >= leader_commit:
                group.abstaining = False
                log.warning("group %s: caught up with the leader: voting again", group.group_name)
            return
    if kind == "next_node_idx" and message.get("success"):
        _keep_next_index(group, node, message)
        return
    if kind == "append_entries" and "prevLogIdx" not in message:
        # A snapshot chunk (or an empty one) carries the leader's commit index but no log
        # position to check against. pysyncobj would still raise the follower's commit index
        # to min(leader's, own last index) — committing whatever the follower's log holds there,
        # possibly entries of a deposed leader that were never committed (a replica applied
        # them and diverged). Only a verified append may move the commit index.
        message = dict(message)
        message["commit_index"] = min(int(message.get("commit_index") or 0), group.raftCommitIndex)
    group.transport_.deliver(node, message)


def _keep_next_index(group: RaftGroup, node: Node, message: dict[str, Any]) -> None:
    """Deliver a follower's append reply without letting a late success pull the leader's next
    index back. pysyncobj sets next = reply + 1 whenever the match index advances; our replies
    wait for the follower's fsync, so one often arrives after later entries were already sent,
    and the rewind made the leader resend them and the follower truncate and re-append them."""
    next_index: dict[Node, int] = group._SyncObj__raftNextIndex
    before = next_index.get(node)
    group.transport_.deliver(node, message)
    after = next_index.get(node)
    if before is not None and after is not None and after < before and group.is_leader:
        next_index[node] = before


class RaftDriver:
    """Ticks every Raft group of this node on the event loop and routes their messages."""

    def __init__(self, routes: RouteManager) -> None:
        self.routes = routes
        self.groups: dict[str, RaftGroup] = {}
        self._kicked: set[str] = set()
        self._sync_wanted: set[str] = set()
        self._timer: asyncio.Task[None] | None = None
        self._kick_scheduled = False
        self._sync_scheduled = False
        self.tick_callbacks: list[Callable[[], None]] = []
        routes.on_raft = self._on_raft
        routes.peer_up.append(self._peer_up)
        routes.peer_down.append(self._peer_down)

    def start(self) -> None:
        self._timer = asyncio.get_running_loop().create_task(self._tick_forever())

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for group in list(self.groups.values()):
            group.close()
        self.groups.clear()

    def add(self, group: RaftGroup) -> None:
        self.groups[group.group_name] = group
        for peer in group.peer_ids:
            if peer != group.self_id and self.routes.connected(peer):
                group.transport_.node_connected(group.nodes[peer])
        self.kick(group.group_name)

    def remove(self, name: str) -> RaftGroup | None:
        group = self.groups.pop(name, None)
        if group is not None:
            group.close()
        return group

    # --- routing ----------------------------------------------------------------------------
    def _on_raft(self, peer: str, group_name: str, message: object) -> None:
        # checked before anything else: a bad message raises and the route closes the link
        checked = validate_raft_message(message)
        group = self.groups.get(group_name)
        if group is None:
            return  # not (yet) a member here; Raft retries
        node = group.nodes.get(peer)
        if node is None or peer == group.self_id:
            return
        if checked["type"] == APPLY_COMMAND and not group.forward_proposals:
            # stream groups take proposals from their own leader only (_checkCommandsToApply):
            # one forwarded by a peer would be appended as if this node had proposed it
            log.debug("group %s: dropping a proposal forwarded by %s", group_name, peer)
            return
        deliver(group, node, checked)
        self.kick(group_name)

    def _peer_up(self, peer: str) -> None:
        for group in self.groups.values():
            node = group.nodes.get(peer)
            if node is not None and peer != group.self_id:
                group.transport_.node_connected(node)

    def _peer_down(self, peer: str) -> None:
        for group in self.groups.values():
            node = group.nodes.get(peer)
            if node is not None and peer != group.self_id:
                group.transport_.node_disconnected(node)

    # --- ticking ----------------------------------------------------------------------------
    def kick(self, name: str) -> None:
        self._kicked.add(name)
        if not self._kick_scheduled:
            self._kick_scheduled = True
            asyncio.get_running_loop().call_soon(self._run_kicked)

    def request_sync(self, name: str) -> None:
        self._sync_wanted.add(name)
        if not self._sync_scheduled:
            self._sync_scheduled = True
            asyncio.get_running_loop().call_soon(self._run_syncs)

    def _run_syncs(self) -> None:
        self._sync_scheduled = False
        names, self._sync_wanted = self._sync_wanted, set()
        for name in names:
            group = self.groups.get(name)
            if group is not None:
                self._sync(group)

    @staticmethod
    def _sync(group: RaftGroup) -> None:
        # the commit index is persisted lazily (pysyncobj's one-second timer): a lower one on
        # disk only means more entries re-applied, and the engine skips what it already holds
        group.journal.sync(commit_index=False)
        group.transport_.release_held()

    def _run_kicked(self) -> None:
        self._kick_scheduled = False
        names, self._kicked = self._kicked, set()
        for name in names:
            group = self.groups.get(name)
            if group is not None:
                self.tick(group)

    def tick(self, group: RaftGroup) -> None:
        if group.paused:
            return
        self._sync(group)  # entries applied in this tick are on disk here first
        if group.abstaining:  # never campaign: keep the election deadline ahead
            group._SyncObj__raftElectionDeadline = (
                pysyncobj_monotonic() + RAFT_ELECTION_TIMEOUT_MAX_S
            )
        try:
            group.doTick(0.0)
        except Exception:
            log.exception("raft group %s: tick failed", group.group_name)
        self._sync(group)  # the leader's new entries, before the next tick counts them

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(RAFT_TICK_S)
            for group in list(self.groups.values()):
                self.tick(group)
            for cb in self.tick_callbacks:
                try:
                    cb()
                except Exception:
                    log.exception("raft tick callback failed")
