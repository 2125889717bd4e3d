"""pysyncobj behind one module: the only place that imports it or touches its private state.

pysyncobj supplies the consensus algorithm (elections, log matching, commit rule, snapshots).
``SyncObjCore`` subclasses its ``SyncObj`` (the hooks jetraft replaces are name-mangled methods,
reachable only from a subclass) and offers the rest of the node a snake_case interface over
peer names, never pysyncobj's ``Node`` objects. pysyncobj keeps its state in name-mangled
private attributes (``_SyncObj__*``); every one jetraft reads or writes is used in this module
only, so an upgrade of the pinned version has one place to check. What this module changes in
pysyncobj's behaviour:

* **No pysyncobj threads and no sockets**: ``autoTick`` off (the driver calls ``tick``), and
  ``_GroupTransport`` hands messages to a ``RaftTransport`` (the routes).
* **No pickle**: pysyncobj pickles an entry of ``appendEntriesBatchSizeBytes`` or more into
  ``transmission`` chunks (which the receiver would unpickle); ``_GroupTransport.send`` sends
  such an entry whole in an ordinary append instead, and peers refuse transmission chunks.
  Membership changes stay off (``dynamicMembershipChange``) and only REGULAR entries are applied
  (``__doApplyCommand`` is replaced), so pysyncobj's pickled MEMBERSHIP/VERSION commands are
  never loaded either.
* **Journal**: pysyncobj's own is replaced right after construction by the ``DurableJournal``
  (our format), and Raft's persistent state is reloaded from it.
* **Group commit**: a follower's positive append reply (``next_node_idx``) is held until a sync
  covers the journal generation it was sent at (``release_held`` after each sync); one whose
  acknowledged entry a new leader replaced meanwhile is dropped.
* **Proposals** are appended by the leader or refused, never forwarded (unless the owner allows
  it); a late append reply never pulls a follower's next index back.

Must never: acknowledge an append before the entries are fsynced; send a ``transmission`` chunk;
let a pysyncobj name or ``Node`` out of this module.
"""

from __future__ import annotations

import logging
import os
import queue as stdlib_queue
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pysyncobj import SyncObj, SyncObjConf
from pysyncobj.config import FAIL_REASON
from pysyncobj.monotonic import monotonic as pysyncobj_monotonic
from pysyncobj.node import Node
from pysyncobj.syncobj import _RAFT_STATE
from pysyncobj.transport import Transport

from cluster.raft.journal import DurableJournal, JournalEntry
from cluster.raft.transport import RaftTransport
from protocol.raft_messages import COMMAND_REGULAR, NEXT_NODE_IDX

log = logging.getLogger("jetraft.raft")

# pysyncobj's numeric failure reasons, by name, so nothing outside needs its FAIL_REASON
_FAIL_NAMES = {
    value: name.lower()
    for name, value in vars(FAIL_REASON).items()
    if name.isupper() and isinstance(value, int)
}
_ROLES = {
    _RAFT_STATE.FOLLOWER: "follower",
    _RAFT_STATE.CANDIDATE: "candidate",
    _RAFT_STATE.LEADER: "leader",
}

ApplyFn = Callable[[int, bytes], Any]
ProposalDone = Callable[[Any, "str | None"], None]  # (result, failure reason or None)
WriteSnapshotFn = Callable[[str, JournalEntry, JournalEntry], None]
ReadSnapshotFn = Callable[[str], tuple[JournalEntry, JournalEntry]]


@dataclass(frozen=True)
class CoreSettings:
    """Raft timing and sizes, in jetraft's terms (group.py chooses them)."""

    election_timeout_min_s: float
    election_timeout_max_s: float
    heartbeat_s: float
    leader_fallback_s: float
    append_bytes_max: int
    compact_entries: int
    compact_interval_s: float


# A positive append reply waiting for the journal's fsync: (journal generation it was sent at,
# peer, message, the log index it acknowledges up to, that entry's term then or None)
_HeldReply = tuple[int, str, dict[str, Any], int, "int | None"]


class _GroupTransport(Transport):  # type: ignore[misc]  # pysyncobj is untyped
    """pysyncobj's transport for one group: sends through the routes, never a pickle, and holds
    positive append replies until the journal has fsynced what they acknowledge."""

    def __init__(
        self,
        group_name: str,
        transport: RaftTransport,
        journal: DurableJournal,
        request_sync: Callable[[], None],
    ) -> None:
        super().__init__(None, None, None)
        self.group_name = group_name
        self.transport = transport
        self.journal = journal
        self.request_sync = request_sync
        self.held: deque[_HeldReply] = deque()

    def send(self, node: Node, message: dict[str, Any]) -> bool:
        journal = self.journal
        if "transmission" in message:
            # pysyncobj splits an entry of appendEntriesBatchSizeBytes or more into pickled
            # chunks (start, process..., finish), and the receiver would unpickle them: peers
            # refuse such frames (protocol/raft_messages.py). The 'start' chunk is replaced by an
            # ordinary append carrying that one entry whole, read from the journal (the frame
            # limit, 256 MiB, is far above any entry); 'process' and 'finish' are dropped. The
            # follower answers the append as usual, so pysyncobj's bookkeeping is unchanged.
            if message["transmission"] != "start":
                return True
            whole = self._whole_entry(message, journal)
            if whole is None:
                return True  # not in the journal (cannot happen): Raft resends on the next tick
            message = whole
        if message.get("type") == NEXT_NODE_IDX and message.get("success") and journal.dirty:
            # the reply promises the entries are stored: not before they are on disk
            acked = int(message["next_node_idx"]) - 1
            held = (journal.append_generation, node.id, message, acked, _term_at(journal, acked))
            self.held.append(held)
            self.request_sync()
            return True
        return self.transport.send_raft(node.id, self.group_name, message)

    @staticmethod
    def _whole_entry(message: dict[str, Any], journal: DurableJournal) -> dict[str, Any] | None:
        """The append pysyncobj would have sent had the entry been small: the one entry right
        after prevLogIdx (pysyncobj chunks an entry only when it is the only one to send)."""
        entry = journal.entry_at(int(message["prevLogIdx"]) + 1)
        if entry is None:
            return None
        data, entry_index, term = entry
        return {
            "type": "append_entries",
            "term": message["term"],
            "commit_index": message["commit_index"],
            "entries": [(data, int(entry_index), int(term))],
            "prevLogIdx": message["prevLogIdx"],
            "prevLogTerm": message["prevLogTerm"],
        }

    def release_held(self) -> None:
        """Send the held replies that the journal's last completed sync covers, in order."""
        held, journal = self.held, self.journal
        synced = journal.synced_generation
        while held and held[0][0] <= synced:
            _gen, peer, message, acked, term = held.popleft()
            now = _term_at(journal, acked)  # None when compacted: applied, so it was committed
            if acked > int(journal[-1][1]) or (now is not None and now != term):
                # truncated (a new leader replaced the entries) while the sync ran: the reply
                # would acknowledge entries this node no longer holds
                log.debug(
                    "group %s: dropping an append reply for replaced entries", self.group_name
                )
                continue
            self.transport.send_raft(peer, self.group_name, message)

    @property
    def holding(self) -> bool:
        return bool(self.held)

    def deliver(self, node: Node, message: dict[str, Any]) -> None:
        self._onMessageReceived(node, message)

    def node_connected(self, node: Node) -> None:
        self._onNodeConnected(node)

    def node_disconnected(self, node: Node) -> None:
        self._onNodeDisconnected(node)


def _term_at(journal: DurableJournal, index: int) -> int | None:
    """The term of the entry at ``index``; None when compacted away or beyond the log."""
    entry = journal.entry_at(index)
    return None if entry is None else entry[2]


class _NoWakeups:
    """Stands in for pysyncobj's pipe notifier and poller (see ``SyncObjCore._drop_wakeups``)."""

    def notify(self) -> None:
        pass

    def poll(self, timeout: float) -> None:
        pass


class SyncObjCore(SyncObj):  # type: ignore[misc]  # pysyncobj is untyped
    """One Raft group's pysyncobj state machine, driven from outside (``tick``, ``receive``).

    Everything it calls back (apply, snapshot write/read, role change) is given here, at
    construction; ``apply_fn(index, payload)`` runs for every committed REGULAR entry, on every
    member, in log order, and its return value reaches the proposer's ``done``.
    """

    def __init__(
        self,
        *,
        group_name: str,
        self_id: str,
        peer_ids: list[str],
        journal: DurableJournal,
        transport: RaftTransport,
        request_sync: Callable[[], None],
        settings: CoreSettings,
        snapshot_path: Path,
        apply_fn: ApplyFn,
        write_snapshot: WriteSnapshotFn,
        read_snapshot: ReadSnapshotFn,
        on_state_change: Callable[[], None],
        forward_proposals: bool,
    ) -> None:
        # only for commands that are harmless twice (the meta group's): see _checkCommandsToApply
        self._forward_proposals = forward_proposals
        self._group_name = group_name
        self._self_id = self_id
        self._apply_fn = apply_fn
        self._write_snapshot_fn = write_snapshot
        self._read_snapshot_fn = read_snapshot
        self._on_state_change = on_state_change
        self._journal = journal
        self._commit_before_tick = 0  # the commit index as the current tick found it
        self._led_at_tick = False  # whether this node led when the current tick began
        self._nodes = {p: Node(p) for p in peer_ids}
        self._transport = _GroupTransport(group_name, transport, journal, request_sync)
        conf = SyncObjConf(
            autoTick=False,
            appendEntriesUseBatch=False,
            dynamicMembershipChange=False,
            raftMinTimeout=settings.election_timeout_min_s,
            raftMaxTimeout=settings.election_timeout_max_s,
            appendEntriesPeriod=settings.heartbeat_s,
            leaderFallbackTimeout=settings.leader_fallback_s,
            appendEntriesBatchSizeBytes=settings.append_bytes_max,
            logCompactionMinEntries=settings.compact_entries,
            logCompactionMinTime=settings.compact_interval_s,
            fullDumpFile=str(snapshot_path),
            serializer=self._serialize,
            deserializer=self._deserialize,
            onStateChanged=lambda _old, _new: self._on_state_change(),
            pollerType="select",
        )
        others = [self._nodes[p] for p in peer_ids if p != self_id]
        super().__init__(self._nodes[self_id], others, conf=conf, transport=self._transport)
        self._adopt_journal()
        self._drop_wakeups()

    def _drop_wakeups(self) -> None:
        """pysyncobj wakes its own thread through a pipe, watched by a poller that every tick
        polls with a ``select``; jetraft runs no pysyncobj thread (the driver ticks a group as
        soon as a proposal or a message for it arrives), so the pipe only cost a write and a read
        per proposal, a ``select`` per tick and two fds per group."""
        untyped: Any = self  # pysyncobj's attributes have no types
        notifier = getattr(self, "_SyncObj__pipeNotifier", None)
        if notifier is not None:
            for name in ("_PipeNotifier__pipeR", "_PipeNotifier__pipeW"):
                fd = getattr(notifier, name, None)
                if isinstance(fd, int):
                    untyped._poller.unsubscribe(fd)
                    os.close(fd)
            untyped._SyncObj__pipeNotifier = _NoWakeups()
        untyped._poller = _NoWakeups()

    def _adopt_journal(self) -> None:
        """Replace pysyncobj's in-memory journal by the durable one and reload Raft's persistent
        state from it (pysyncobj read it from the throwaway journal during construction)."""
        journal = self._journal
        self._SyncObj__raftLog = journal
        self._SyncObj__raftCurrentTerm = max(journal.getCurrentTerm(), journal[-1][2])
        self._SyncObj__votedForNodeId = journal.getVotedForNodeId()
        self._SyncObj__raftCommitIndex = journal.getRaftCommitIndex()

    # --- pysyncobj hooks ---------------------------------------------------------------------
    def _SyncObj__doApplyCommand(self, command: bytes) -> Any:
        if not command or command[0] != COMMAND_REGULAR:
            return None  # no-ops (elections); membership changes are not used
        return self._apply_fn(self.raftLastApplied + 1, command[1:])

    def _SyncObj__applyLogEntries(self) -> bool:
        """A leader's commit counts itself only for what its journal has synced
        (``_count_leader_durable``); a leader whose commit index then moved tells the followers
        first, then applies.
        pysyncobj applies and only then sends the append that carries the new commit index, so
        a follower began its own apply of an entry once the leader had finished it: on a busy
        node (a 1,000-message batch applies for milliseconds) the replicas' applies ran one
        after the other and then held up the next entry's replication. Whether anything more
        goes out after the apply is pysyncobj's own rule (a heartbeat when it is due)."""
        # not only as leader now: a leader whose fallback timer made it a follower in this very
        # tick has the uncounted commit index too
        if self._led_at_tick or self._isLeader():
            self._count_leader_durable()
        if self._isLeader() and self.raftCommitIndex > self.raftLastApplied:
            self._SyncObj__sendAppendEntries()
            self._transport.transport.flush()  # now, not at the end of the loop turn
            SyncObj._SyncObj__applyLogEntries(self)
            return False
        return bool(SyncObj._SyncObj__applyLogEntries(self))

    def _count_leader_durable(self) -> None:
        """Lower the commit index pysyncobj just computed to what a majority holds durably.

        pysyncobj counts the leader for every entry of its log. The driver fsyncs a leader's
        journal in a worker thread while the loop goes on (cluster/raft/driver.py), so an entry
        the leader appended may not be on its disk yet: the leader counts only up to its
        journal's ``synced_index``. Runs before anything reads the new value (the apply, the
        appends that carry it to the followers), also when the leader stepped down later in the
        same tick; the value before this tick was safe, so the result is never below it. An
        entry of an earlier term is never committed by counting (Raft's rule, which pysyncobj's
        own loop keeps): then the commit stays where it was."""
        commit = self._SyncObj__raftCommitIndex
        before = self._commit_before_tick
        if commit <= before:
            return
        durable = self._journal.synced_index
        if durable >= commit:
            return
        match: dict[Node, int] = self._SyncObj__raftMatchIndex
        held = sorted(
            [durable, *(match.get(node, 0) for node in self._SyncObj__otherNodes)], reverse=True
        )
        # held[k] is on at least k + 1 members: k = n // 2 is the first that is a majority
        safe = min(commit, held[len(held) // 2])
        entry = self._journal.entry_at(safe) if safe > before else None
        if entry is None or entry[2] != self._SyncObj__raftCurrentTerm:
            safe = before
        self._SyncObj__raftCommitIndex = safe
        self._SyncObj__leaderCommitIndex = safe
        self._SyncObj__raftLog.setRaftCommitIndex(safe)

    def _checkCommandsToApply(self) -> None:
        """Proposals are appended by the leader or refused — never forwarded. pysyncobj hands a
        queued command to the new leader when this node lost leadership before appending it; a
        deposed leader (paused, partitioned) still receiving publishes through stale interest
        then had them committed by the new leader as well, which stored the same publish twice
        (found by the chaos harness's pause nemesis)."""
        if not self._isLeader() and not self._forward_proposals:
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

    def _serialize(self, path: str, data: tuple[Any, ...]) -> None:
        last, prev, _cluster = data  # the last two applied entries (pysyncobj's order)
        try:
            self._write_snapshot_fn(path, last, prev)
        except Exception:
            # pysyncobj swallows it and only says "Failed to store full dump"
            log.exception("group %s: snapshot failed", self._group_name)
            raise

    def _deserialize(self, path: str) -> tuple[Any, ...]:
        last, prev = self._read_snapshot_fn(path)
        # the membership part is ignored with dynamic membership off; pysyncobj expects a set
        return last, prev, set(self._nodes.values())

    # --- what RaftGroup uses -----------------------------------------------------------------
    def tick(self) -> None:
        self._commit_before_tick = self._SyncObj__raftCommitIndex
        self._led_at_tick = bool(self._isLeader())
        self.doTick(0.0)

    def propose(self, payload: bytes, done: ProposalDone) -> None:
        """Queue ``payload`` as a REGULAR entry; ``done(result, None)`` once applied here, or
        ``done(None, reason)`` when it was not committed by this node as leader."""

        def callback(result: Any, err: int) -> None:
            done(result, None if err == FAIL_REASON.SUCCESS else _FAIL_NAMES.get(err, str(err)))

        self._applyCommand(payload, callback, COMMAND_REGULAR)

    def receive(self, peer: str, message: dict[str, Any]) -> None:
        """Hand a peer's (already validated and vetted) message to pysyncobj."""
        node = self._nodes[peer]
        if message.get("type") == NEXT_NODE_IDX and message.get("success"):
            self._keep_next_index(node, message)
        else:
            self._transport.deliver(node, message)

    def _keep_next_index(self, node: Node, message: dict[str, Any]) -> None:
        """Deliver a follower's append reply without letting a late success pull the leader's
        next index back. pysyncobj sets next = reply + 1 whenever the match index advances; our
        replies wait for the follower's fsync, so one often arrives after later entries were
        already sent, and the rewind made the leader resend them and the follower truncate and
        re-append them."""
        next_index: dict[Node, int] = self._SyncObj__raftNextIndex
        before = next_index.get(node)
        self._transport.deliver(node, message)
        after = next_index.get(node)
        if before is not None and after is not None and after < before and self.is_leader:
            next_index[node] = before

    def peer_connected(self, peer: str) -> None:
        self._transport.node_connected(self._nodes[peer])

    def peer_disconnected(self, peer: str) -> None:
        self._transport.node_disconnected(self._nodes[peer])

    def release_held(self) -> None:
        """Send the append replies that waited for the journal's fsync (call after a sync)."""
        self._transport.release_held()

    @property
    def holding_replies(self) -> bool:
        """Whether append replies still wait for a sync."""
        return bool(self._transport.holding)

    def force_compaction(self) -> None:
        """Compact the log at the next tick (a snapshot at the last applied entry), whatever
        the entry count and time since the last one."""
        self.forceLogCompaction()

    def hold_election(self, seconds: float) -> None:
        """Start no election for ``seconds`` from now (a node that must not campaign)."""
        self._SyncObj__raftElectionDeadline = pysyncobj_monotonic() + seconds

    def transfer_leadership(self, peer: str) -> bool:
        """Leader only: ask ``peer`` (fully caught up) to start an election at once. Whether
        the request went out; the outcome shows later in ``leader_id``."""
        outcome: list[int] = []
        self.transferLeadership(self._nodes[peer], lambda _r, err: outcome.append(err))
        return outcome == [FAIL_REASON.SUCCESS]

    @property
    def is_leader(self) -> bool:
        return bool(self._isLeader())

    @property
    def role(self) -> str:
        return _ROLES.get(self._SyncObj__raftState, "unknown")

    @property
    def leader_id(self) -> str | None:
        leader = self._getLeader()
        return None if leader is None else str(leader.id)

    @property
    def term(self) -> int:
        return int(self.raftCurrentTerm)

    @property
    def commit_index(self) -> int:
        return int(self.raftCommitIndex)

    @property
    def last_applied(self) -> int:
        return int(self.raftLastApplied)

    @property
    def leader_commit_index(self) -> int:
        value = self._SyncObj__leaderCommitIndex
        return int(value) if value is not None else 0

    def peer_progress(self) -> dict[str, tuple[int, float]]:
        """Leader only: per follower (match index, seconds since it last answered)."""
        if not self.is_leader:
            return {}
        match: dict[Node, int] = self._SyncObj__raftMatchIndex
        seen: dict[Node, float] = self._SyncObj__lastResponseTime
        now = pysyncobj_monotonic()
        return {
            node.id: (int(match.get(node, 0)), max(0.0, now - seen.get(node, now)))
            for node in self._nodes.values()
            if node.id != self._self_id
        }

    # --- white-box hooks for tests: pysyncobj's internals stay named in this module only ------
    @property
    def dynamic_membership(self) -> bool:
        return bool(self._SyncObj__conf.dynamicMembershipChange)

    def apply_log_command(self, command: bytes) -> Any:
        """Apply one raw log command as pysyncobj would on commit."""
        return self._SyncObj__doApplyCommand(command)

    def become_leader(self) -> None:
        self._SyncObj__onBecomeLeader()

    def hear_nothing_for(self, seconds: float) -> None:
        """Leader: as if no follower had answered for ``seconds`` (the leader fallback timer)."""
        heard: dict[Node, float] = self._SyncObj__lastResponseTime
        for node in heard:
            heard[node] = pysyncobj_monotonic() - seconds

    def follow(self, peer: str) -> None:
        """Be a follower that knows ``peer`` as its leader."""
        self._SyncObj__raftLeader = self._nodes[peer]

    def check_proposals(self) -> None:
        """What a tick does with the queued proposals (append, forward or refuse)."""
        self._checkCommandsToApply()

    def drain_proposals(self) -> list[tuple[bytes, tuple[str, int] | None]]:
        """The queued proposals, removed: (command, (forwarding peer, request id) or None)."""
        out: list[tuple[bytes, tuple[str, int] | None]] = []
        queue = self._SyncObj__commandsQueue
        while True:
            try:
                command, callback = queue.get_nowait()
            except stdlib_queue.Empty:
                return out
            origin = (callback[0].id, callback[1]) if isinstance(callback, tuple) else None
            out.append((command, origin))
