"""Runs every Raft group of a node on the node's event loop, and takes what the peers send.

No pysyncobj threads: the driver ticks every group on a timer and immediately after a message or
a proposal for it arrives, fsyncing the groups' journals around each round of ticks (group
commit). The fsyncs of one round run side by side in a small thread pool while the loop waits
for all of them: with many groups a round costs about one fsync, not one per group, and the
order is what it would be inline (nothing is ticked or acknowledged before its sync ended). It is
the ``RaftInbound`` the routes are constructed with: each Raft message from a peer is validated
(protocol/raft_messages.py) before any group sees it, and a bad one raises so the link closes.

Must never: tick a group from anywhere else; hand a group a message that was not validated.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable, Iterable

from cluster.raft.group import RaftGroup
from protocol.raft_messages import APPLY_COMMAND, validate_catchup_message, validate_raft_message

log = logging.getLogger("jetraft.raft")

RAFT_TICK_S = 0.05
RAFT_SYNC_THREADS = 8  # journals fsynced at once in one round (more wait for a free thread)


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

    def start(self) -> None:
        self._timer = asyncio.get_running_loop().create_task(self._tick_forever())

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for group in list(self.groups.values()):
            group.close()
        self.groups.clear()
        self._sync_pool.shutdown(wait=False)

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
        if target is None or target.failed is not None:
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
        groups = [group for group in groups if not group.paused and group.failed is None]
        self._sync_all(groups)  # entries applied in these ticks are on disk here first
        for group in groups:
            if group.failed is not None:
                continue  # its journal is unusable: no tick may count or apply on it
            try:
                group.tick()
            except Exception:
                log.exception("raft group %s: tick failed", group.group_name)
        self._sync_all(groups)  # the leaders' new entries, before the next tick counts them

    def _sync_all(self, groups: list[RaftGroup]) -> None:
        """Sync every group that needs it, the fsyncs side by side, and send the replies that
        waited for them. A group whose sync fails is marked failed (``_sync_failed``).

        Route frames are gathered and written at the end of the loop turn: the ticks' appends
        are flushed before the fsyncs block (the followers fsync meanwhile), and the released
        replies right after (the leaders wait for them; a tick's applies may follow)."""
        pending = [group for group in groups if group.failed is None and group.sync_pending]
        if not pending:
            return
        transports = {id(group.transport): group.transport for group in pending}.values()
        for transport in transports:
            transport.flush()
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
            error = failures.get(position)
            if error is None:
                try:
                    group.release_synced()
                except Exception as exc:
                    error = exc
            if error is not None:
                self._sync_failed(group, error)
        for transport in transports:
            transport.flush()

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
