"""Subject routing inside one node: who receives a message published on a subject.

Owns the subscription index (client subscriptions and the server's own internal ones: the
JetStream API, stream ingest, Direct Get responders) and the delivery rules of nats-server: every
plain subscriber gets a copy, each queue group gets one member chosen at random, a publisher with
``echo:false`` does not get its own messages, and a request nobody answers gets the 503
no-responders status when the publisher asked for it.

In a cluster the index also holds peers' interest (``Subscription.route`` set, learned over
routes): a message goes once to every peer with matching plain interest, and a queue group's one
member is chosen among local and remote members alike, weighted by each peer's member count — so
requests to a queue group (Direct Get in ``_sys_``) spread over every responder in the cluster.
A message that arrived from a route is delivered locally only (the mesh is full).

A local subscription (``subscribe_local``) is never told to peers and its handler is told which
client connection published the message (None for the server's own publishes and for messages
from a route): it answers this node's own clients only, as nats-server's ``$SYS.REQ.USER.INFO``
(a system subscription whose interest is not propagated, so that the server the client is
connected to is the one that answers).

Must never: block, or await. Delivery appends to connection buffers; internal handlers are plain
callables that schedule their own asynchronous work.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Protocol

from protocol.auth import PermissionChecker
from protocol.session import no_responders_header
from protocol.sublist import Sublist

InternalHandler = Callable[[str, str | None, bytes | None, bytes], None]
# subjects under these prefixes are not delivered to a subscription that excludes them
Excluded = tuple[str, ...]
# (subject, queue, local member count, excluded prefixes): called when this node's interest changes
InterestListener = Callable[[str, str | None, int, Excluded | None], None]


class RouteForwarder(Protocol):
    def forward(
        self,
        peer: str,
        subject: str,
        reply: str | None,
        hdr: bytes | None,
        payload: bytes,
        plain: bool,
        queues: list[str],
        shown: str | None = None,
    ) -> None: ...


class ClientConnection(Protocol):
    """A client connection as the router sees it (``cluster/client_conn.py`` is the real one)."""

    echo: bool
    no_responders: bool
    perms: PermissionChecker | None

    def send_msg(
        self, subject: str, sid: str, reply: str | None, hdr: bytes | None, payload: bytes
    ) -> None: ...

    def forget_sub(self, sub: Subscription) -> None: ...


# a local subscription's handler: (the publishing client connection or None, subject, reply,
# headers, payload)
OriginHandler = Callable[[ClientConnection | None, str, str | None, bytes | None, bytes], None]


class Subscription:
    """A client subscription (``conn`` set), an internal one (``handler`` set) or a local one
    (``origin_handler`` set: never told to peers)."""

    __slots__ = (
        "conn",
        "delivered",
        "exclude",
        "handler",
        "max_msgs",
        "origin_handler",
        "queue",
        "route",
        "sid",
        "subject",
        "weight",
    )

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
        self.origin_handler: OriginHandler | None = None
        self.max_msgs = 0
        self.delivered = 0
        # subjects under this prefix are not this subscription's, though its wildcard matches them
        self.exclude: Excluded | None = None
        # set for a peer's interest: the peer's name, and its member count for a queue group
        self.route: str | None = None
        self.weight = 1


class Router:
    def __init__(self, rng: random.Random | None = None) -> None:
        self.sublist: Sublist[Subscription] = Sublist()
        self._rng = rng or random.Random()
        self._internal_sid = 0
        self.in_msgs = 0
        self.out_msgs = 0
        self.forwarder: RouteForwarder | None = None
        self.interest_listener: InterestListener | None = None
        self._local_interest: dict[tuple[str, str | None], int] = {}
        self._local_exclude: dict[tuple[str, str | None], Excluded] = {}
        self._remote: dict[tuple[str, str, str | None], Subscription] = {}
        # literal subjects someone waits to see interest in (a push consumer's deliver subject)
        self._watched: dict[str, list[Callable[[], None]]] = {}

    def add(self, sub: Subscription) -> None:
        self.sublist.insert(sub.subject, sub.queue, sub)
        self._interest_changed(sub, 1)
        if self._watched:
            self._interest_appeared(sub.subject)

    def watch_interest(self, subject: str, callback: Callable[[], None]) -> None:
        """Call ``callback`` whenever a subscription on exactly ``subject`` appears (here or on
        a peer); ``unwatch_interest`` stops it."""
        self._watched.setdefault(subject, []).append(callback)

    def unwatch_interest(self, subject: str, callback: Callable[[], None]) -> None:
        callbacks = self._watched.get(subject, [])
        if callback in callbacks:
            callbacks.remove(callback)
        if not callbacks:
            self._watched.pop(subject, None)

    def _interest_appeared(self, subject: str) -> None:
        for callback in list(self._watched.get(subject, ())):
            callback()

    def remove(self, sub: Subscription) -> None:
        if self.sublist.remove(sub.subject, sub.queue, sub) and sub.origin_handler is None:
            self._interest_changed(sub, -1)

    def _interest_changed(self, sub: Subscription, delta: int) -> None:
        key = (sub.subject, sub.queue)
        count = self._local_interest.get(key, 0) + delta
        if count > 0:
            self._local_interest[key] = count
            if sub.exclude is not None:
                self._local_exclude[key] = sub.exclude
        else:
            self._local_interest.pop(key, None)
            self._local_exclude.pop(key, None)
            count = 0
        if self.interest_listener is not None:
            self.interest_listener(sub.subject, sub.queue, count, self._local_exclude.get(key))

    def has_literal_interest(self, subject: str) -> bool:
        """Is anyone (here or behind a route) subscribed to exactly ``subject``? A push consumer
        delivers only then: nats-server does not count a wildcard subscription."""
        result = self.sublist.match(subject)
        if any(sub.subject == subject for sub in result.plain):
            return True
        return any(m.subject == subject for members in result.queues.values() for m in members)

    def local_interest(self) -> list[tuple[str, str | None, int, Excluded | None]]:
        """Every (subject, queue, members, excluded prefix) this node has: what a newly
        connected peer is told."""
        return [
            (subj, queue, n, self._local_exclude.get((subj, queue)))
            for (subj, queue), n in self._local_interest.items()
        ]

    # --- peers' interest -------------------------------------------------------------------
    def set_remote(
        self,
        peer: str,
        subject: str,
        queue: str | None,
        weight: int,
        exclude: Excluded | None = None,
    ) -> None:
        key = (peer, subject, queue)
        sub = self._remote.get(key)
        if sub is None:
            sub = Subscription(subject, queue, f"_ROUTE_{peer}")
            sub.route = peer
            self._remote[key] = sub
            self.sublist.insert(subject, queue, sub)
            if self._watched:
                self._interest_appeared(subject)
        sub.weight = max(1, weight)
        sub.exclude = exclude

    def remove_remote(self, peer: str, subject: str, queue: str | None) -> None:
        sub = self._remote.pop((peer, subject, queue), None)
        if sub is not None:
            self.sublist.remove(subject, queue, sub)

    def drop_peer(self, peer: str) -> None:
        for key in [k for k in self._remote if k[0] == peer]:
            sub = self._remote.pop(key)
            self.sublist.remove(sub.subject, sub.queue, sub)

    def subscribe_internal(
        self,
        subject: str,
        handler: InternalHandler,
        queue: str | None = None,
        exclude: Excluded | None = None,
    ) -> Subscription:
        self._internal_sid += 1
        sub = Subscription(subject, queue, f"_INT_{self._internal_sid}", handler=handler)
        sub.exclude = exclude
        self.add(sub)
        return sub

    def subscribe_local(self, subject: str, handler: OriginHandler) -> Subscription:
        """A subscription for this node's own clients: peers are not told of it, and
        ``handler`` gets the connection that published each message (``remove`` ends it)."""
        self._internal_sid += 1
        sub = Subscription(subject, None, f"_INT_{self._internal_sid}")
        sub.origin_handler = handler
        self.sublist.insert(subject, None, sub)
        return sub

    def publish(
        self,
        subject: str,
        reply: str | None,
        hdr: bytes | None,
        payload: bytes,
        origin: ClientConnection | None = None,
        shown: str | None = None,
    ) -> int:
        """Deliver to every matching subscriber; returns how many received it. ``shown`` is the
        subject subscribers see when it is not the one routed on (a consumer delivers a stream
        message, with its own subject, to a deliver subject or a pull request's inbox)."""
        self.in_msgs += 1
        result = self.sublist.match(subject)
        delivered = 0
        plain_peers: set[str] | None = None
        peer_queues: dict[str, list[str]] | None = None
        for sub in result.plain:
            if sub.route is not None:
                if sub.exclude is not None and subject.startswith(sub.exclude):
                    continue
                if plain_peers is None:
                    plain_peers = set()
                plain_peers.add(sub.route)
                continue
            if origin is not None and sub.conn is origin and not origin.echo:
                continue
            if sub.exclude is not None and subject.startswith(sub.exclude):
                continue
            if self._deliver(sub, subject, reply, hdr, payload, shown, origin):
                delivered += 1
        for queue, members in result.queues.items():
            candidates = members
            if origin is not None and not origin.echo:
                candidates = [m for m in members if m.conn is not origin]
                if not candidates:
                    continue
            sub = self._choose(candidates)
            if sub.route is None:
                if self._deliver(sub, subject, reply, hdr, payload, shown):
                    delivered += 1
                    continue
                done, route_sub = self._queue_fallback(
                    sub, candidates, subject, reply, hdr, payload, shown
                )
                if done:
                    delivered += 1
                if route_sub is None:
                    continue
                sub = route_sub
            assert sub.route is not None
            if peer_queues is None:
                peer_queues = {}
            peer_queues.setdefault(sub.route, []).append(queue)
        if (plain_peers or peer_queues) and self.forwarder is not None:
            delivered += self._forward(
                subject, reply, hdr, payload, plain_peers, peer_queues, shown
            )
        if delivered == 0 and reply and origin is not None and origin.no_responders:
            self._no_responders(subject, reply, origin)
        return delivered

    def _queue_fallback(
        self,
        refused: Subscription,
        candidates: list[Subscription],
        subject: str,
        reply: str | None,
        hdr: bytes | None,
        payload: bytes,
        shown: str | None = None,
    ) -> tuple[bool, Subscription | None]:
        """The chosen queue member's permissions dropped the message: nats-server
        (processMsgResults) then tries the group's other local members, and sends it to a
        remote member only if none takes it. Returns (delivered here, route member to forward
        to). Only reached on a refusal, so the copy and shuffle stay off the common path."""
        others = [m for m in candidates if m is not refused]
        self._rng.shuffle(others)
        route_sub: Subscription | None = None
        for member in others:
            if member.route is not None:
                if route_sub is None:
                    route_sub = member
                continue
            if self._deliver(member, subject, reply, hdr, payload, shown):
                return True, None
        return False, route_sub

    def _choose(self, candidates: list[Subscription]) -> Subscription:
        if len(candidates) == 1:
            return candidates[0]
        if any(m.route is not None for m in candidates):
            weights = [m.weight for m in candidates]
            return self._rng.choices(candidates, weights)[0]
        return self._rng.choice(candidates)

    def _forward(
        self,
        subject: str,
        reply: str | None,
        hdr: bytes | None,
        payload: bytes,
        plain_peers: set[str] | None,
        peer_queues: dict[str, list[str]] | None,
        shown: str | None = None,
    ) -> int:
        assert self.forwarder is not None
        peers = set(plain_peers or ()) | set(peer_queues or ())
        for peer in peers:
            queues = peer_queues.get(peer, []) if peer_queues else []
            plain = plain_peers is not None and peer in plain_peers
            self.forwarder.forward(peer, subject, reply, hdr, payload, plain, queues, shown)
        return len(peers)

    def deliver_routed(
        self,
        subject: str,
        reply: str | None,
        hdr: bytes | None,
        payload: bytes,
        plain: bool,
        queues: list[str],
        shown: str | None = None,
    ) -> None:
        """A message a peer forwarded: local subscribers only, and only what the peer chose."""
        self.in_msgs += 1
        result = self.sublist.match(subject)
        if plain:
            for sub in result.plain:
                if sub.route is not None:
                    continue
                if sub.exclude is not None and subject.startswith(sub.exclude):
                    continue
                self._deliver(sub, subject, reply, hdr, payload, shown)
        for queue in queues:
            local = [m for m in result.queues.get(queue, ()) if m.route is None]
            if local:
                sub = self._choose(local)
                if not self._deliver(sub, subject, reply, hdr, payload, shown):
                    self._queue_fallback(sub, local, subject, reply, hdr, payload, shown)

    def _deliver(
        self,
        sub: Subscription,
        subject: str,
        reply: str | None,
        hdr: bytes | None,
        payload: bytes,
        shown: str | None = None,
        origin: ClientConnection | None = None,
    ) -> bool:
        """False when the subscriber's permissions drop the message (nats-server deliverMsg:
        a denied subject under a wildcard subscription); it then does not count. ``origin``:
        the publishing client, told to a local subscription's handler."""
        conn = sub.conn
        if conn is not None:
            perms = conn.perms
            if perms is not None and not perms.on_deliver(subject, reply):
                return False
        self.out_msgs += 1
        sub.delivered += 1
        if sub.max_msgs:
            if sub.delivered >= sub.max_msgs:
                self.remove(sub)
                if sub.conn is not None:
                    sub.conn.forget_sub(sub)
        if shown is not None:
            subject = shown
        if sub.handler is not None:
            sub.handler(subject, reply, hdr, payload)
        elif conn is not None:
            conn.send_msg(subject, sub.sid, reply, hdr, payload)
        elif sub.origin_handler is not None:
            sub.origin_handler(origin, subject, reply, hdr, payload)
        return True

    def _no_responders(self, subject: str, reply: str, origin: ClientConnection) -> None:
        hdr = no_responders_header(subject)
        for sub in self.sublist.match(reply).plain:
            if sub.conn is origin:
                origin.send_msg(reply, sub.sid, None, hdr, b"")
                return
