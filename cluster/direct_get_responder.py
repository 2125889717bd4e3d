"""Answers Direct Get for one stream host: its subscriptions, and the requests parked on them.

A host answers Direct Get for its own stream and, when it is a mirror with ``mirror_direct``, for
its upstream's name as well: each name is a set of subscriptions in queue group ``_sys_``,
switched on and off with ``serve``. Whatever the name asked, the answer comes from the host's
engine with the host's own stream name in ``Nats-Stream`` (as nats-server's mirrors answer).

Read-your-writes: a request whose ``min_last_seq`` is above the engine's ``last_seq`` is parked
(at most ``waiters_max`` requests and ``waiters_bytes_max`` request bytes per host) and answered
right after the apply that reaches it (the host calls ``wake`` after every apply), or with
``412 Min Last Sequence Not Applied`` after ``wait_s``. Past either bound a request is answered
412 at once.

Must never: answer from a state older than the request's ``min_last_seq``, or leave a parked
request unanswered when its subscription goes away.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from cluster.router import Router, Subscription
from engine.direct_get import (
    DIRECT_GET_GROUP,
    DIRECT_GET_PREFIX,
    REPLY_MIN_SEQ_NOT_APPLIED,
    DirectReply,
    NotApplied,
    direct_get_subjects,
    try_direct_get,
)
from engine.stream import Stream
from protocol.headers import holds

# A Direct Get request carrying this header (any value; nats-server ignores it) gets the name of
# the node that answered in the same header of each reply: how the chaos harness and Spark tell
# which replica served a read. Without it the reply is byte-for-byte nats-server's.
SERVED_BY_HEADER: Final = "Jetraft-Served-By"
_SERVED_BY_HEADER_BYTES: Final = SERVED_BY_HEADER.encode()  # a cheap test on every request
DIRECT_GET_MIN_SEQ_WAIT_S: Final = 0.5
DIRECT_GET_WAITERS_MAX: Final = 1024
DIRECT_GET_WAITERS_BYTES_MAX: Final = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class DirectGetLimits:
    wait_s: float = DIRECT_GET_MIN_SEQ_WAIT_S
    waiters_max: int = DIRECT_GET_WAITERS_MAX
    waiters_bytes_max: int = DIRECT_GET_WAITERS_BYTES_MAX


@dataclass(slots=True, eq=False)
class _ParkedGet:
    """A Direct Get waiting for the stream to apply ``min_last_seq``."""

    min_last_seq: int
    reply: str
    hdr: bytes | None
    payload: bytes
    key: str | None
    via: str  # the stream name the request was addressed to
    timer: asyncio.TimerHandle | None = None
    done: bool = False

    @property
    def size(self) -> int:
        return len(self.payload) + len(self.hdr or b"") + len(self.reply)


class DirectGetResponder:
    def __init__(
        self,
        router: Router,
        stream: Callable[[], Stream],
        reply_name: Callable[[], str],
        *,
        served_by: str = "",
        limits: DirectGetLimits | None = None,
    ) -> None:
        self._router = router
        self._stream = stream  # a replica's engine object is replaced by a state transfer
        self._reply_name = reply_name
        self.served_by = served_by
        self.limits = limits or DirectGetLimits()
        self._subs: dict[str, list[Subscription]] = {}
        # a heap by min_last_seq (ties in arrival order); answered or expired entries stay in it,
        # marked done, until popped or compacted away
        self._waiters: list[tuple[int, int, _ParkedGet]] = []
        self._order = itertools.count()
        self._closed = False
        self.waiting = 0
        self.waiting_bytes = 0
        self.served = 0  # requests answered or parked here
        self.parked = 0  # requests that had to wait for their min_last_seq

    def serving(self, name: str) -> bool:
        return name in self._subs

    def serve(self, name: str, want: bool) -> None:
        """Answer Direct Gets addressed to stream ``name`` (or stop: its parked requests are
        answered now, 412 unless their sequence was applied meanwhile)."""
        if want and not self._closed and name not in self._subs:
            self._subs[name] = [
                self._router.subscribe_internal(s, self._on_request, queue=DIRECT_GET_GROUP)
                for s in direct_get_subjects(name)
            ]
        elif not want and name in self._subs:
            for sub in self._subs.pop(name):
                self._router.remove(sub)
            self._flush_waiters(lambda parked: parked.via == name)

    def close(self) -> None:
        """Stop serving every name; no request is parked from now on."""
        self._closed = True
        for name in list(self._subs):
            self.serve(name, False)
        self._flush_waiters(lambda _parked: True)

    def _on_request(
        self, subject: str, reply: str | None, hdr: bytes | None, payload: bytes
    ) -> None:
        if not reply:
            return
        # the name token and the key that may follow it (``DIRECT.GET.<name>.<key>``)
        start = len(DIRECT_GET_PREFIX)
        dot = subject.find(".", start)
        via = subject[start:dot] if dot >= 0 else subject[start:]
        key = subject[dot + 1 :] if dot >= 0 else None
        # answered now or, for a min_last_seq not applied yet, once it is (``key`` as for
        # ``engine.direct_get``)
        self.served += 1
        replies = self._look_up(hdr, payload, key)
        if isinstance(replies, NotApplied):
            self._park(_ParkedGet(replies.min_last_seq, reply, hdr, payload, key, via))
            return
        self._send(reply, hdr, replies)

    def wake(self) -> None:
        """After an apply: answer every parked request whose ``min_last_seq`` is now applied."""
        waiters = self._waiters
        if not waiters:
            return
        last_seq = self._stream().last_seq
        while waiters and waiters[0][0] <= last_seq:
            parked = heapq.heappop(waiters)[2]
            if not parked.done:
                self._unpark(parked)
                self._answer_parked(parked)

    # --- internals ------------------------------------------------------------------------
    def _send(self, reply: str, hdr: bytes | None, replies: list[DirectReply]) -> None:
        publish = self._router.publish
        tag = hdr is not None and holds(hdr, _SERVED_BY_HEADER_BYTES)
        for r in replies:
            publish(reply, None, _with_served_by(r.hdr, self.served_by) if tag else r.hdr, r.data)

    def _park(self, parked: _ParkedGet) -> None:
        size = parked.size
        limits = self.limits
        if (
            self._closed
            or self.waiting >= limits.waiters_max
            or self.waiting_bytes + size > limits.waiters_bytes_max
        ):
            self._send(parked.reply, parked.hdr, [REPLY_MIN_SEQ_NOT_APPLIED])
            return
        self.parked += 1
        loop = asyncio.get_running_loop()
        parked.timer = loop.call_later(limits.wait_s, self._wait_over, parked)
        self.waiting += 1
        self.waiting_bytes += size
        if len(self._waiters) >= 2 * limits.waiters_max:
            # expired waiters whose sequence never came: drop them so the heap stays bounded
            self._waiters = [w for w in self._waiters if not w[2].done]
            heapq.heapify(self._waiters)
        heapq.heappush(self._waiters, (parked.min_last_seq, next(self._order), parked))

    @property
    def heap_size(self) -> int:
        """Entries in the waiter heap, answered ones not yet compacted away included."""
        return len(self._waiters)

    def _unpark(self, parked: _ParkedGet) -> None:
        parked.done = True
        self.waiting -= 1
        self.waiting_bytes -= parked.size
        if parked.timer is not None:
            parked.timer.cancel()

    def _wait_over(self, parked: _ParkedGet) -> None:
        if parked.done:
            return
        self._unpark(parked)
        self._answer_parked(parked)

    def _answer_parked(self, parked: _ParkedGet) -> None:
        """The answer from the state now; 412 if it still lacks the sequence (never stale)."""
        replies = self._look_up(parked.hdr, parked.payload, parked.key)
        if isinstance(replies, NotApplied):
            replies = [REPLY_MIN_SEQ_NOT_APPLIED]
        self._send(parked.reply, parked.hdr, replies)

    def _look_up(
        self, hdr: bytes | None, payload: bytes, key: str | None
    ) -> list[DirectReply] | NotApplied:
        return try_direct_get(
            self._stream(),
            reply_stream_name=self._reply_name(),
            request_hdr=hdr,
            payload=payload,
            subject_key=key,
        )

    def _flush_waiters(self, which: Callable[[_ParkedGet], bool]) -> None:
        keep: list[tuple[int, int, _ParkedGet]] = []
        for item in self._waiters:
            parked = item[2]
            if parked.done:
                continue
            if which(parked):
                self._unpark(parked)
                self._answer_parked(parked)
            else:
                keep.append(item)
        heapq.heapify(keep)
        self._waiters = keep


def _with_served_by(hdr: bytes | None, name: str) -> bytes:
    line = f"{SERVED_BY_HEADER}: {name}\r\n".encode()
    if not hdr:
        return b"NATS/1.0\r\n" + line + b"\r\n"
    assert hdr.endswith(b"\r\n\r\n"), hdr
    return hdr[:-2] + line + b"\r\n"
