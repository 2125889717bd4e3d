"""Subject routing inside one node: who receives a message published on a subject.

Owns the subscription index (client subscriptions and the server's own internal ones: the
JetStream API, stream ingest, Direct Get responders) and the delivery rules of nats-server: every
plain subscriber gets a copy, each queue group gets one member chosen at random, a publisher with
``echo:false`` does not get its own messages, and a request nobody answers gets the 503
no-responders status when the publisher asked for it.

Must never: block, or await. Delivery appends to connection buffers; internal handlers are plain
callables that schedule their own asynchronous work.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING

from protocol.headers import encode_header_block
from protocol.sublist import Sublist

if TYPE_CHECKING:
    from cluster.client_conn import ClientConnection

InternalHandler = Callable[[str, str | None, bytes | None, bytes], None]


class Subscription:
    """A client subscription (``conn`` set) or an internal one (``handler`` set)."""

    __slots__ = ("conn", "delivered", "exclude", "handler", "max_msgs", "queue", "sid", "subject")

    def __init__(
        self,
        subject: str,
        queue: str | None,
        sid: str,
        conn: ClientConnection | None = None,
        handler: InternalHandler | None = None,
    ) -> None:
        self.subject = subject
        self.queue = queue
        self.sid = sid
        self.conn = conn
        self.handler = handler
        self.max_msgs = 0
        self.delivered = 0
        # subjects under this prefix are not this subscription's, though its wildcard matches them
        self.exclude: str | None = None


class Router:
    def __init__(self, rng: random.Random | None = None) -> None:
        self.sublist: Sublist[Subscription] = Sublist()
        self._rng = rng or random.Random()
        self._internal_sid = 0
        self.in_msgs = 0
        self.out_msgs = 0

    def add(self, sub: Subscription) -> None:
        self.sublist.insert(sub.subject, sub.queue, sub)

    def remove(self, sub: Subscription) -> None:
        self.sublist.remove(sub.subject, sub.queue, sub)

    def subscribe_internal(
        self,
        subject: str,
        handler: InternalHandler,
        queue: str | None = None,
        exclude: str | None = None,
    ) -> Subscription:
        self._internal_sid += 1
        sub = Subscription(subject, queue, f"_INT_{self._internal_sid}", handler=handler)
        sub.exclude = exclude
        self.add(sub)
        return sub

    def publish(
        self,
        subject: str,
        reply: str | None,
        hdr: bytes | None,
        payload: bytes,
        origin: ClientConnection | None = None,
    ) -> int:
        """Deliver to every matching subscriber; returns how many received it."""
        self.in_msgs += 1
        result = self.sublist.match(subject)
        delivered = 0
        for sub in result.plain:
            if origin is not None and sub.conn is origin and not origin.echo:
                continue
            if sub.exclude is not None and subject.startswith(sub.exclude):
                continue
            self._deliver(sub, subject, reply, hdr, payload)
            delivered += 1
        for members in result.queues.values():
            candidates = members
            if origin is not None and not origin.echo:
                candidates = [m for m in members if m.conn is not origin]
                if not candidates:
                    continue
            sub = candidates[0] if len(candidates) == 1 else self._rng.choice(candidates)
            self._deliver(sub, subject, reply, hdr, payload)
            delivered += 1
        if delivered == 0 and reply and origin is not None and origin.no_responders:
            self._no_responders(subject, reply, origin)
        return delivered

    def _deliver(
        self, sub: Subscription, subject: str, reply: str | None, hdr: bytes | None, payload: bytes
    ) -> None:
        self.out_msgs += 1
        sub.delivered += 1
        if sub.max_msgs:
            if sub.delivered >= sub.max_msgs:
                self.remove(sub)
                if sub.conn is not None:
                    sub.conn.forget_sub(sub)
        if sub.handler is not None:
            sub.handler(subject, reply, hdr, payload)
        elif sub.conn is not None:
            sub.conn.send_msg(subject, sub.sid, reply, hdr, payload)

    def _no_responders(self, subject: str, reply: str, origin: ClientConnection) -> None:
        hdr = encode_header_block([("Nats-Subject", subject)], status="503")
        for sub in self.sublist.match(reply).plain:
            if sub.conn is origin:
                origin.send_msg(reply, sub.sid, None, hdr, b"")
                return
