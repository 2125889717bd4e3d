"""Runs every Raft group of a node on the node's event loop, and takes what the peers send.

No pysyncobj threads: the driver ticks every group on a timer and immediately after a message or
a proposal for it arrives, fsyncing the group's journal around each tick (group commit). It is
the ``RaftInbound`` the routes are constructed with: each Raft message from a peer is validated
(protocol/raft_messages.py) before any group sees it, and a bad one raises so the link closes.

Must never: tick a group from anywhere else; hand a group a message that was not validated.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from cluster.raft.group import RaftGroup
from protocol.raft_messages import APPLY_COMMAND, validate_catchup_message, validate_raft_message

log = logging.getLogger("jetraft.raft")

RAFT_TICK_S = 0.05


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
        if target is None:
            return  # not (yet) a member here; Raft retries
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

    def _run_syncs(self) -> None:
        self._sync_scheduled = False
        names, self._sync_wanted = self._sync_wanted, set()
        for name in names:
            group = self.groups.get(name)
            if group is not None:
                group.sync()

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
        group.sync()  # entries applied in this tick are on disk here first
        try:
            group.tick()
        except Exception:
            log.exception("raft group %s: tick failed", group.group_name)
        group.sync()  # the leader's new entries, before the next tick counts them

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
