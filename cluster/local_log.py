"""A single server's stream log: apply at once, then group-commit the fsync.

While one fsync runs in a worker thread, newly arrived entries are already applied and flushed to
the OS, so the next fsync covers them all: apply and fsync overlap, and the cost of an fsync is
shared by everything that arrived while the previous one ran. A lone entry with nothing queued
behind it is fsynced inline: that (~0.1 ms) beats the hand-off to a worker thread and back, which
would add to every lone publisher's latency.

Must never: call an entry's ``on_done`` before the fsync that covers it returned (memory storage:
before it was applied); call any more once an fsync failed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from cluster.stream_log import LogOwner, OnDone, OnFail
from engine.entries import LogEntry
from engine.store import MessageStore

COMMIT_ITEMS_PER_TURN_MAX = 4  # entries applied before the event loop gets a turn again


class LocalLog:
    drains_on_close = True

    def __init__(self, owner: LogOwner, store: MessageStore, *, durable: bool) -> None:
        self._owner = owner
        self._store = store
        self._durable = durable
        self._unsynced: list[Callable[[], None]] = []  # applied, not yet covered by an fsync
        self._inflight: asyncio.Future[None] | None = None  # the fsync running in a thread
        self._inflight_done: list[Callable[[], None]] = []  # what that fsync covers

    @property
    def is_leader(self) -> bool:
        return True

    @property
    def caught_up(self) -> bool:
        return True

    def start(self) -> None:
        pass

    def poll(self) -> None:
        inflight = self._inflight
        if inflight is None or not inflight.done():
            return
        inflight.result()  # an fsync failure must not be acknowledged: raises
        self._inflight = None
        done, self._inflight_done = self._inflight_done, []
        for call in done:
            call()

    def has_room(self, appended: int) -> bool:
        return appended < COMMIT_ITEMS_PER_TURN_MAX

    def append(self, entry: LogEntry, on_done: OnDone, on_fail: OnFail) -> None:
        result = self._owner.apply(self._owner.stream.applied_index + 1, entry)
        self._unsynced.append(lambda: on_done(result))

    def end_turn(self, more_queued: bool) -> None:
        if not self._unsynced or self._inflight is not None:
            return  # the running fsync's completion starts the next one
        self._store.flush()
        if not self._durable:
            done, self._unsynced = self._unsynced, []
            for call in done:
                call()
        elif len(self._unsynced) == 1 and not more_queued:
            self._store.fsync()
            self._unsynced.pop()()
        else:
            inflight = asyncio.get_running_loop().run_in_executor(None, self._store.fsync)
            inflight.add_done_callback(lambda _f: self._owner.wake())
            self._inflight = inflight
            self._inflight_done, self._unsynced = self._unsynced, []

    def idle(self) -> bool:
        return self._inflight is None and not self._unsynced

    def on_tick(self) -> None:
        pass

    async def close(self) -> None:
        pass
