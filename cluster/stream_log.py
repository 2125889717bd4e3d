"""The log under a stream host: where its entries go to become durable and applied.

One ``StreamHost`` (cluster/stream_host.py) takes publishes, stages batches, coalesces what is
queued into entries and sends the acknowledgements; what it does not know is how an entry becomes
durable. That is the log's job, and there are two:

* ``LocalLog`` (cluster/local_log.py), a single server: applies an entry at once and group-commits
  the fsync (apply and fsync overlap; a lone publish fsyncs inline).
* ``RaftLog`` (cluster/raft_log.py), one replica of a clustered stream: proposes the entry to the
  stream's Raft group (several in flight at once), applies what the group commits on every
  replica, and owns leadership, read barriers, snapshots and state transfer.

The host drives a log in turns: ``poll`` (finish what became durable since), ``append`` while
``has_room``, then ``end_turn``. A log calls back into the host through ``LogOwner``: to change
the engine (``apply``, the only path to ``Stream.apply``), to wake the host's loop, and to report
a change of leadership.

Must never: call an ``append``'s ``on_done`` before the entry is applied and durable (a
majority's disk for Raft); apply entries out of log order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from engine.entries import LogEntry
from engine.stream import Stream
from protocol.errors import ApiError

OnDone = Callable[[Any], None]  # the entry's apply result, once durable
OnFail = Callable[[ApiError], None]  # the entry will never be applied by this proposer


class LogOwner(Protocol):
    """What a log calls on the stream host it serves."""

    stream: Stream

    def apply(self, index: int, entry: LogEntry) -> Any:
        """Apply ``entry`` as log position ``index`` to the engine; returns its result."""
        ...

    def wake(self) -> None:
        """Something the host's commit loop waits for happened (room, durability)."""
        ...

    def role_changed(self) -> None:
        """This node became, or stopped being, the one that may append."""
        ...

    def state_replaced(self) -> None:
        """``stream`` was replaced whole (a state transfer, or a restored backup seeded)."""
        ...


class StreamLog(Protocol):
    # True: closing waits until everything queued was appended and is durable (a local log
    # can always finish); False: what is queued fails on close (a replica may have no quorum).
    drains_on_close: bool

    @property
    def is_leader(self) -> bool:
        """Whether this node may append (take publishes, run expiry)."""
        ...

    @property
    def caught_up(self) -> bool:
        """Whether this node's state is recent enough to answer reads."""
        ...

    def start(self) -> None: ...

    def poll(self) -> None:
        """Before a turn: complete what became durable since the last one (may raise: a failed
        fsync takes the stream offline rather than acknowledge anything more)."""
        ...

    def has_room(self, appended: int) -> bool:
        """Whether another entry may be appended in this turn (``appended`` were already)."""
        ...

    def append(self, entry: LogEntry, on_done: OnDone, on_fail: OnFail) -> None: ...

    def end_turn(self, more_queued: bool) -> None:
        """The turn's appends are in: start making them durable."""
        ...

    def idle(self) -> bool:
        """Nothing appended is still waiting to become durable."""
        ...

    def on_tick(self) -> None:
        """The node's periodic tick (leadership hand-over, flushing)."""
        ...

    async def close(self) -> None: ...
