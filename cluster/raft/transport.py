"""How Raft meets the network: the two interfaces between the groups and the cluster's routes.

* ``RaftTransport`` is how a group sends: one message to one peer, tagged with the group's name
  (``RouteManager`` implements it with ``RAFT`` route frames, and a stream replica's state
  transfer with ``CATCHUP`` frames).
* ``RaftInbound`` is how everything from the peers reaches the groups: their Raft messages, the
  state transfers between replicas, and their links coming and going (``RaftDriver`` implements
  it). The transport is handed one when it is constructed, so a frame can never arrive before
  someone is there to take it.

Must never: carry anything but plain data; a message is validated by the inbound side
(protocol/raft_messages.py) before any group sees it.
"""

from __future__ import annotations

from typing import Any, Protocol


class RaftTransport(Protocol):
    def send_raft(self, peer: str, group: str, message: dict[str, Any]) -> bool:
        """Queue ``message`` for ``peer``; False when there is no link (Raft resends)."""
        ...

    def connected(self, peer: str) -> bool:
        """Whether a message sent to ``peer`` now has a link to travel on."""
        ...

    def send_catchup(self, peer: str, message: list[Any]) -> bool:
        """Queue a state-transfer message ``[group, transfer id, part, data]`` for ``peer``."""
        ...

    def flush(self) -> None:
        """Write what was queued now, not at the end of the loop turn: called before the caller
        blocks (an inline fsync), so the peers work on it meanwhile."""
        ...


class RaftInbound(Protocol):
    def on_raft(self, peer: str, group: str, message: object) -> None:
        """A Raft message from ``peer`` for ``group``, exactly as decoded: raises ValueError
        (``RaftMessageError``) for a bad one, and the transport then closes that link."""
        ...

    def on_catchup(self, peer: str, message: object) -> None:
        """A state-transfer message from ``peer``, exactly as decoded; raises ValueError for a bad
        one, like ``on_raft``."""
        ...

    def on_peer_up(self, peer: str) -> None:
        """The link to ``peer`` is up: groups may send to it."""
        ...

    def on_peer_down(self, peer: str) -> None:
        """The link to ``peer`` is gone."""
        ...
