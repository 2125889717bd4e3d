"""Runs every Raft group of a node on the node's event loop, and takes what the peers send.

No pysyncobj threads: the driver ticks every group on a timer and immediately after a message or
a proposal for it arrives, fsyncing the groups' journals around each round of ticks (group
commit). A follower's fsyncs of one round run side by side in a small thread pool while the loop
waits for all of them: with many groups a round costs about one fsync, not one per group, and the
order is what it would be inline (no append reply goes out before its sync ended). A leader's
journal is fsynced in that pool while the loop goes on (``_sync_behind``): the leader takes more
publishes, proposes and hears its followers meanwhile, and its commit counts itself only for
entries its journal has synced (the adapter's ``_count_leader_durable``); when the sync ends the
group is ticked again, and the next sync starts if more was appended meanwhile. It is
the ``RaftInbound`` the routes are constructed with: each Raft message from a peer is validated
(protocol/raft_messages.py) before any group sees it, and a bad one raises so the link closes.

Must never: tick a group from anywhere else; hand a group a message that was not validated; run
two background syncs of one journal at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable, Iterable

from cluster.raft.group import RaftGroup
from cluster.raft.journal import JournalFailedError
from protocol.raft_messages import APPLY_COMMAND, validate_catchup_message, validate_raft_message

log = logging.getLogger("jetraft.raft")

RAFT_TICK_S = 0.05
RAFT_SYNC_THREADS = 8  # journals fsynced at once in one round (more wait for a free thread)
# A leader syncs behind the loop only when the fsync has this much to write: a small one (a
# lone publish) ends sooner than the hand-off to a worker thread and back (measured: R3 sync
# publish p50 ~3% slower behind the loop, pipelined publish ~4.5% faster)
RAFT_SYNC_BEHIND_BYTES_MIN = 64 * 1024


class RaftDriver:
    """Ticks every Raft group of this node on the event loop and routes their messages."""

    def __init__(self) -> None:
        self.groups: dict[str, RaftGroup] = {}
        self._kicked: set[str] = set()
        self._sync_wanted: set[str] = set()
        self._timer: asyncio.Task[None] | None = None
        self._kick_scheduled = False
        self._sync_scheduled = False
        self.tick_callbacks: list[Callable[[], None]] = []
        self._sync_pool = concurrent.futures.ThreadPoolExecutor(
            RAFT_SYNC_THREADS, thread_name_prefix="raft-sync"
        )
        # leaders whose journal sync runs in a thread while the loop goes on: their own pool, so
        # that followers' syncs, which the loop waits for, never queue behind them
        self._behind: set[RaftGroup] = set()
        self._behind_pool = concurrent.futures.ThreadPoolExecutor(
            RAFT_SYNC_THREADS, thread_name_prefix="raft-sync-behind"
        )

    def start(self) -> None:
        self._timer = asyncio.get_running_loop().create_task(self._tick_forever())

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for group in list(self.groups.values()):
            group.close()
        self.groups.clear()
        self._sync_pool.shutdown(wait=False)
        self._behind_pool.shutdown(wait=False)

    def add(self, group: RaftGroup) -> None:
        self.groups[group.group_name] = group
        for peer in group.peer_ids:
            if peer != group.self_id and group.transport.connected(peer):
                group.peer_connected(peer)
        self.kick(group.group_name)

    def remove(self, name: str) -> RaftGroup | None:
        group = self.groups.pop(name, None)
        if group is not None:
            group.close()
        return group

    # --- RaftInbound: what the routes deliver -----------------------------------------------
    def on_raft(self, peer: str, group: str, message: object) -> None:
        # checked before anything else: a bad message raises and the route closes the link
        checked = validate_raft_message(message)
        target = self.groups.get(group)
        if target is None or not self._usable(target):
            return  # not (yet) a member here, or its journal is unusable; Raft retries
        if peer == target.self_id or peer not in target.peer_ids:
            return
        if checked["type"] == APPLY_COMMAND and not target.forward_proposals:
            # stream groups take proposals from their own leader only (see the adapter): one
            # forwarded by a peer would be appended as if this node had proposed it
            log.debug("group %s: dropping a proposal forwarded by %s", group, peer)
            return
        target.receive(peer, checked)
        self.kick(group)

    def on_catchup(self, peer: str, message: object) -> None:
        checked = validate_catchup_message(message)  # a bad one raises: the route closes
        target = self.groups.get(checked.group)
        if target is None or peer == target.self_id or peer not in target.peer_ids:
            return  # not a member here (any more): the requester retries
        target.receive_catchup(peer, checked)

    def on_peer_up(self, peer: str) -> None:
        for group in self.groups.values():
            group.peer_connected(peer)

    def on_peer_down(self, peer: str) -> None:
        for group in self.groups.values():
            group.peer_disconnected(peer)

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

    def _named(self, names: Iterable[str]) -> list[RaftGroup]:
        return [group for name in names if (group := self.groups.get(name)) is not None]

    def _run_syncs(self) -> None:
        self._sync_scheduled = False
        names, self._sync_wanted = self._sync_wanted, set()
        self._sync_all(self._named(names))

    def _run_kicked(self) -> None:
        self._kick_scheduled = False
        names, self._kicked = self._kicked, set()
        self.tick_all(self._named(names))

    def tick(self, group: RaftGroup) -> None:
        self.tick_all([group])

    def tick_all(self, groups: list[RaftGroup]) -> None:
        groups = [group for group in groups if not group.paused and self._usable(group)]
        # a follower's entries applied in these ticks are on disk first (a leader's may not be:
        # it applies only what a durable majority holds, see the adapter)
        self._sync_all(groups)
        for group in groups:
            if not self._usable(group):
                continue  # its journal is unusable: no tick may count or apply on it
            try:
                group.tick()
            except Exception:
                log.exception("raft group %s: tick failed", group.group_name)
        # the ticks' new entries: a follower's before its append replies go out, a leader's
        # before the commit counts it (behind the loop when large)
        self._sync_all(groups)

    def _sync_all(self, groups: list[RaftGroup]) -> None:
        """Sync every group that needs it, the fsyncs side by side, and send the replies that
        waited for them. A group whose sync fails is marked failed (``_sync_failed``).

        Route frames are gathered and written at the end of the loop turn: the ticks' appends
        are flushed before the fsyncs block (the followers fsync meanwhile), and the released
        replies right after (the leaders wait for them; a tick's applies may follow)."""
        behind = self._behind
        pending = [
            group
            for group in groups
            if self._usable(group) and group.sync_pending and group not in behind
        ]
        if not pending:
            return
        transports = {id(group.transport): group.transport for group in pending}.values()
        for transport in transports:
            transport.flush()
        # a leader with followers and no append reply waiting does not wait for a large sync of
        # its own (a lone member would only wait for it elsewhere: inline is quicker)
        waiting = []
        for group in pending:
            if (
                group.is_leader
                and not group.core.holding_replies
                and len(group.peer_ids) > 1
                and group.journal.unsynced_bytes >= RAFT_SYNC_BEHIND_BYTES_MIN
            ):
                self._sync_behind(group)
            else:
                waiting.append(group)
        pending = waiting
        if not pending:
            return
        failures: dict[int, Exception] = {}
        if len(pending) == 1:  # inline: a hand-off to a worker thread and back costs more
            try:
                pending[0].sync_journal()
            except Exception as exc:
                failures[0] = exc
        else:
            futures = [self._sync_pool.submit(group.sync_journal) for group in pending]
            concurrent.futures.wait(futures)  # all, even on errors
            for position, future in enumerate(futures):
                raised = future.exception()
                if isinstance(raised, Exception):
                    failures[position] = raised
                elif raised is not None:
                    raise raised
        for position, group in enumerate(pending):
            self._after_sync(group, failures.get(position))
        for transport in transports:
            transport.flush()

    def _usable(self, group: RaftGroup) -> bool:
        """Whether the group may be ticked, synced or fed. A journal that failed in a worker
        thread (a sync behind the loop) refuses everything at once: the group stops here,
        before anything else reaches it, as if the failure had happened on the loop."""
        if group.failed is not None:
            return False
        reason = group.journal.failed
        if reason is not None:
            self._sync_failed(group, JournalFailedError(reason))
            return False
        return True

    def _sync_behind(self, group: RaftGroup) -> None:
        """Sync a leader's journal in a thread; the loop is told when it ended."""
        loop = asyncio.get_running_loop()

        def tell_loop(done: concurrent.futures.Future[None]) -> None:
            try:
                loop.call_soon_threadsafe(self._synced_behind, group, done)
            except RuntimeError:
                pass  # the loop closed meanwhile (the node stopped): nothing is waiting

        try:
            future = self._behind_pool.submit(group.sync_journal)
        except RuntimeError:
            return  # the pool is shut down: the driver is closing
        self._behind.add(group)
        future.add_done_callback(tell_loop)

    def _synced_behind(self, group: RaftGroup, done: concurrent.futures.Future[None]) -> None:
        """On the loop: a background sync ended. Send what it covers, then tick the group so
        the commit counts the leader's newly durable entries (which starts the next sync if
        more was appended meanwhile)."""
        name = group.group_name
        self._behind.discard(group)
        if self.groups.get(name) is not group or group.failed is not None:
            return  # removed or stopped meanwhile: nothing more to do for it
        error = done.exception()
        if error is not None and not isinstance(error, Exception):
            raise error
        if self._after_sync(group, error):
            self.kick(name)

    def _after_sync(self, group: RaftGroup, error: Exception | None) -> bool:
        """Send the replies a sync covered, or stop the group when it (or that) failed; whether
        the group goes on."""
        if error is None:
            try:
                group.release_synced()
                return True
            except Exception as exc:
                error = exc
        self._sync_failed(group, error)
        return False

    @staticmethod
    def _sync_failed(group: RaftGroup, exc: Exception) -> None:
        """A failed fsync may have lost what was appended, and the journal refuses everything
        after it: the group stops here (no tick, no reply, no peer message) until the node
        restarts and recovers the journal from disk. Logged once."""
        reason = f"journal sync failed: {exc!r}"
        log.critical(
            "raft group %s: %s; the group is stopped on this node until it restarts",
            group.group_name,
            reason,
            exc_info=exc,
        )
        try:
            group.stop(reason)
        except Exception:
            log.exception("raft group %s: its owner failed to take the stop", group.group_name)

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(RAFT_TICK_S)
            self.tick_all(list(self.groups.values()))
            for cb in self.tick_callbacks:
                try:
                    cb()
                except Exception:
                    log.exception("raft tick callback failed")
