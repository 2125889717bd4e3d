"""Routes: the full mesh between cluster nodes on the one cluster port.

Every node listens on its cluster port and dials every configured route URL (its own URL may be
in the list: the HELLO exchange reveals it and that URL is dropped). A node only *sends* on the
connection it dialed and only *receives* on the ones it accepted, so each direction between two
nodes is one ordered byte stream and no duplicate-connection tie-breaking is needed. The acceptor
answers the dialer's HELLO with its own, the one frame that flows back on a dialed connection.

Carried: this node's subscription interest (sent in full when a connection comes up, then as it
changes), messages forwarded by the router, Raft messages for every group, and catch-up frames.
The last three are gathered per peer and written once at the end of the loop turn (one syscall
for many frames; ``RouteManager.flush`` writes them earlier, before Raft blocks on an fsync).
When a peer's connection drops, the interest learned from it is forgotten until it reconnects.
``RouteManager`` is Raft's transport (cluster/raft/transport.py ``RaftTransport``): groups send
through ``send_raft``, and RAFT frames and links coming and going reach the ``RaftInbound`` it
is constructed with.

Who may be a peer (docs/security.md):

* Authentication: with ``cluster { authorization {} }`` the dialer's HELLO carries the user info
  of the route URL it dials, else this node's own credentials (as nats-server does); the acceptor
  compares them in constant time before anything else and closes the connection on a mismatch.
* Until a HELLO was accepted a connection may send one frame of at most ``HELLO_BYTES_MAX``
  bytes, and must do so within the handshake timeout (``authorization.timeout``, 2 s by default,
  also without authorization); any other frame, or silence, closes it.
* Only configured peers: an accepted HELLO must name a node this node reached by dialing its own
  configured route URLs (``RouteManager.resolved``). Others are answered with our HELLO (a real
  peer not dialed yet learns our name) and disconnected; their dial loop retries.
* A second accepted link claiming a connected peer's name replaces the old one only after it
  passed the same checks: with authorization on, a forged HELLO is refused before it can touch
  the existing link. Without authorization there is no identity to check, and the newest link
  wins (a restarted peer must replace its half-open predecessor); a cluster port beyond loopback
  without authorization (or TLS verify) is warned about at start.
* TLS (``cluster { tls {} }``): this node accepts on its cluster port itself and hands each
  connection to ``connect_accepted_socket(ssl=...)``, so a failed handshake (a plain-TCP peer,
  a missing or untrusted client certificate) is logged with the peer's address; a plain port
  that receives a TLS handshake says so too. Mixed TLS and plain nodes never connect.

Must never: block the loop, or let a peer's bad frame take anything down but that connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import ipaddress
import logging
import random
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any, cast

from cluster.client_urls import peer_client_urls
from cluster.raft.transport import RaftInbound
from cluster.router import Excluded, Router
from cluster.security_config import RouteAuthConfig, TLSConfig, route_url_credentials
from protocol.route_frames import (
    FRAME_BYTES_MAX,
    HELLO_BYTES_MAX,
    ROUTE_PROTOCOL_VERSION,
    FrameEncoder,
    FrameError,
    FrameKind,
    FrameReader,
    encode_frame,
)

log = logging.getLogger("jetraft.routes")

RECONNECT_DELAY_MIN_S = 0.05
RECONNECT_DELAY_MAX_S = 1.0
DIAL_WAKE_INTERVAL_S = 0.25  # a stranger knocking cannot make us dial more often than this
LISTEN_TEXT_BYTES_MAX = 300  # a HELLO's listen "host:port"
REFUSED_NAMES_MAX = 1024  # names of refused strangers remembered (each warned about once)
QUICK_REDIAL_LIFETIME_S = 1.0  # a link up this long may be redialed at once again when it drops
HELLO_TIMEOUT_S = 5.0
LISTEN_BACKLOG = 100  # asyncio's create_server default
ACCEPT_RETRY_DELAY_S = 0.1
# a peer that stops reading (paused, partitioned) must not make this node buffer without bound;
# the connection is dropped instead, and Raft and the route resynchronise when it returns
ROUTE_PENDING_BYTES_MAX = 128 * 1024 * 1024
# Frames for a peer are gathered during a loop turn and written once at its end (one send
# instead of one per frame); a turn that gathers this much writes at once.
ROUTE_COALESCE_BYTES_MAX = 256 * 1024

PeerHandler = Callable[[str], None]


def parse_route_url(url: str) -> tuple[str, int]:
    rest = url.split("://", 1)[1] if "://" in url else url
    rest = rest.rsplit("@", 1)[-1].rstrip("/")
    host, _, port = rest.rpartition(":")
    return host.strip("[]"), int(port)


# the frames that carry a message (a forwarded publish, a Raft message, a catch-up chunk): what a
# route's in_msgs / out_msgs count; SUB, UNSUB and HELLO are protocol, as nats-server's RS+/RS-
_MESSAGE_FRAMES = frozenset((FrameKind.MSG, FrameKind.RAFT, FrameKind.CATCHUP))


class LinkStats:
    """What monitoring (/routez, /varz) reads of one route connection. Bytes are the route
    protocol's bytes on the wire (every frame); messages are the frames that carry one."""

    __slots__ = (
        "did_solicit",
        "in_bytes",
        "in_msgs",
        "ip",
        "last_ns",
        "out_bytes",
        "out_msgs",
        "pending",
        "port",
        "remote_id",
        "remote_name",
        "rid",
        "start_ns",
    )

    def __init__(self, rid: int, did_solicit: bool) -> None:
        self.rid = rid
        self.did_solicit = did_solicit
        self.remote_name = ""
        self.remote_id = ""
        self.ip = ""
        self.port = 0
        self.start_ns = self.last_ns = time.time_ns()
        self.in_msgs = self.in_bytes = self.out_msgs = self.out_bytes = 0
        self.pending = 0  # filled in by RouteManager.link_stats


def _same(link: _Link) -> _Link:
    return link


def _listen(host: str, port: int) -> list[socket.socket]:
    """Listening, non-blocking sockets on ``host:port`` bound as ``loop.create_server`` binds
    them: every address ``host`` resolves to ("" is every interface), SO_REUSEADDR, IPv6
    sockets IPv6-only."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    socks: list[socket.socket] = []
    seen: set[tuple[int, Any]] = set()
    try:
        for family, kind, proto, _, address in infos:
            if (family, address) in seen:
                continue
            seen.add((family, address))
            try:
                sock = socket.socket(family, kind, proto)
            except OSError:
                continue  # a family this host has no support for (asyncio skips it too)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(LISTEN_BACKLOG)
            sock.setblocking(False)
    except OSError:
        for sock in socks:
            sock.close()
        raise
    if not socks:
        raise OSError(f"cannot listen on {host}:{port}")
    return socks


# a TLS record of type handshake (0x16), major version 3: what a TLS client sends first
TLS_HANDSHAKE_START = b"\x16\x03"


def _tls_hint(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None) or ""
    if reason in {
        "WRONG_VERSION_NUMBER",
        "HTTP_REQUEST",
        "UNKNOWN_PROTOCOL",
        "RECORD_LAYER_FAILURE",
    }:
        return " (the peer is not speaking TLS: configure cluster { tls {} } on every node)"
    if reason in {"PEER_DID_NOT_RETURN_A_CERTIFICATE", "CERTIFICATE_VERIFY_FAILED"} or (
        "certificate" in str(exc).lower()
    ):
        return " (the peer's certificate is missing or not signed by ca_file)"
    return ""


class _Link(asyncio.Protocol):
    """One TCP connection on the cluster port, dialed or accepted."""

    def __init__(self, mgr: RouteManager, dialed: bool, url: str = "") -> None:
        self.mgr = mgr
        self.dialed = dialed
        self.url = url
        self.peer: str | None = None
        self.client_urls: list[str] = []  # an accepted peer's, from its HELLO
        self.lame_duck = False  # an accepted peer's HELLO said it is leaving
        self.transport: asyncio.Transport | None = None
        # an accepted connection is read a HELLO at a time until it authenticated
        self.reader = FrameReader(FRAME_BYTES_MAX if dialed else HELLO_BYTES_MAX)
        self._encoder = FrameEncoder()
        self._handshake_timer: asyncio.TimerHandle | None = None
        self._address_text = url
        self._lost = False
        self.hello = asyncio.get_running_loop().create_future()
        self.closed = asyncio.get_running_loop().create_future()
        self.stats = LinkStats(mgr.next_rid(), dialed)
        # frames of this loop turn not yet handed to the transport (see ROUTE_COALESCE_BYTES_MAX)
        self._gathered: list[bytes] = []
        self.gathered_bytes = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        if peer:
            self.stats.ip, self.stats.port = str(peer[0]), int(peer[1])
        self.stats.start_ns = self.stats.last_ns = time.time_ns()
        if self.dialed:
            self.send(FrameKind.HELLO, self.mgr.hello_body(self.url))
        else:
            # with route TLS this runs once the TLS handshake succeeded; the HELLO must follow
            self._address_text = self._address()
            self._handshake_timer = asyncio.get_running_loop().call_later(
                self.mgr.auth.timeout_s, self._handshake_expired
            )

    def _handshake_expired(self) -> None:
        if self.peer is None and self.transport is not None:
            log.warning("route from %s: no valid HELLO in time, closing", self._address_text)
            self.transport.abort()

    def _address(self) -> str:
        peer = self.transport.get_extra_info("peername") if self.transport is not None else None
        return f"{peer[0]}:{peer[1]}" if peer else "?"

    def _who(self) -> str:
        if self.dialed:
            return f"to {self.peer or self.url}"
        return f"from {self.peer or self._address_text}"

    def send(self, kind: FrameKind, body: Any) -> bool:
        frame = self._encoder.encode(kind, body)
        if kind not in _MESSAGE_FRAMES:
            return self.write(frame, now=True)  # the handshake and interest: rare, not held
        if not self.write(frame):
            return False
        self.stats.out_msgs += 1
        return True

    def write(self, frame: bytes, *, now: bool = False) -> bool:
        """Queue an encoded frame behind the ones already sent: written at the end of the loop
        turn, or at once (with everything gathered before it) when ``now``."""
        t = self.transport
        if t is None or t.is_closing():
            return False
        if t.get_write_buffer_size() + self.gathered_bytes > ROUTE_PENDING_BYTES_MAX:
            log.warning("route to %s: peer not reading, dropping the connection", self.peer)
            self.mgr.slow_consumers += 1
            self._gathered.clear()
            self.gathered_bytes = 0
            t.abort()
            return False
        gathered = self._gathered
        if not gathered and not now:
            asyncio.get_running_loop().call_soon(self.flush)
        gathered.append(frame)
        self.gathered_bytes += len(frame)
        self.stats.out_bytes += len(frame)
        if now or self.gathered_bytes >= ROUTE_COALESCE_BYTES_MAX:
            self.flush()
        return True

    def close(self) -> None:
        """Close after writing what this turn gathered (a close drops nothing already sent)."""
        if self.transport is not None:
            self.flush()
            self.transport.close()

    def flush(self) -> None:
        """Hand the gathered frames to the transport in one write (a no-op when none wait)."""
        gathered = self._gathered
        if not gathered:
            return
        self._gathered = []
        self.gathered_bytes = 0
        t = self.transport
        if t is not None and not t.is_closing():
            t.writelines(gathered)  # uvloop: one writev, no copy

    def data_received(self, data: bytes) -> None:
        stats = self.stats
        stats.in_bytes += len(data)
        stats.last_ns = time.time_ns()
        if self.peer is None and not self.dialed and data[:2] == TLS_HANDSHAKE_START:
            if self.mgr.tls is None and self.reader.buffered == 0:
                log.warning(
                    "route from %s: the peer starts a TLS handshake but this node's cluster "
                    "port has no tls configured; closing (configure cluster { tls {} } on "
                    "every node or on none)",
                    self._address_text,
                )
                if self.transport is not None:
                    self.transport.abort()
                return
        try:
            frames = self.reader.feed(data)
            for kind, body in frames:
                if self.transport is None or self.transport.is_closing():
                    return  # refused: nothing after the refusal is looked at
                self._on_frame(kind, body)
        except ValueError as exc:  # FrameError, RaftMessageError: the peer's fault, no traceback
            log.warning("route %s: bad frame, closing: %s", self._who(), exc)
            if self.transport is not None:
                self.transport.abort()
        except (TypeError, KeyError, IndexError) as exc:
            log.warning("route %s: bad frame, closing: %r", self._who(), exc, exc_info=True)
            if self.transport is not None:
                self.transport.abort()

    def _on_frame(self, kind: FrameKind, body: Any) -> None:
        if kind == FrameKind.HELLO:
            self._on_hello(body)
            return
        peer = self.peer
        if peer is None or self.dialed:
            raise FrameError(f"unexpected {kind.name} frame")
        if kind in _MESSAGE_FRAMES:
            self.stats.in_msgs += 1
        mgr = self.mgr
        if kind == FrameKind.RAFT:
            if type(body) is not list or len(body) != 2 or type(body[0]) is not str:
                raise FrameError("a RAFT frame is [group, message]")
            if mgr.raft is not None:  # without Raft (tests of the links alone): ignored
                mgr.raft.on_raft(peer, body[0], body[1])
        elif kind == FrameKind.MSG:
            if type(body) is not list or len(body) not in (6, 7):
                raise FrameError("a MSG frame is [subject, reply, hdr, payload, plain, queues]")
            shown = body[6] if len(body) == 7 else None
            if shown is not None and type(shown) is not str:
                raise FrameError("a MSG frame's shown subject is a string")
            subject, reply, hdr, payload, plain, queues = body[:6]
            mgr.router.deliver_routed(subject, reply, hdr, payload, plain, queues, shown)
        elif kind == FrameKind.SUB:
            mgr.router.set_remote(peer, body[0], body[1], int(body[2]), _excluded(body))
        elif kind == FrameKind.UNSUB:
            mgr.router.remove_remote(peer, body[0], body[1])
        elif kind == FrameKind.LAME_DUCK:
            mgr.peer_entered_lame_duck(peer)
        elif kind == FrameKind.CATCHUP:
            if mgr.raft is not None:
                mgr.raft.on_catchup(peer, body)

    def _on_hello(self, body: Any) -> None:
        if not isinstance(body, dict) or self.peer is not None:
            raise FrameError("bad HELLO")
        name = body.get("name")
        if type(name) is not str or not name:
            raise FrameError("HELLO without a name")
        if not self.dialed and not self.mgr.credentials_ok(body):  # before anything else
            log.warning(
                "route from %s as %r: authorization violation, closing", self._address_text, name
            )
            if self.transport is not None:
                self.transport.abort()
            return
        remote_id = body.get("id")
        self.stats.remote_id = remote_id if type(remote_id) is str else ""
        self.stats.remote_name = name
        if body.get("cluster") != self.mgr.cluster_name:
            log.error(
                "route: peer %s is in cluster %r, not %r; closing",
                name,
                body.get("cluster"),
                self.mgr.cluster_name,
            )
            if self.transport is not None:
                self.transport.close()
            return
        if body.get("js", True) is not self.mgr.jetstream:
            log.error(
                "route: peer %s %s JetStream and this node %s; a cluster is all JetStream or all"
                " core NATS; closing",
                name,
                "runs" if body.get("js", True) else "runs without",
                "does not" if not self.mgr.jetstream else "does",
            )
            if self.transport is not None:
                self.transport.close()
            return
        if self.dialed:
            self.peer = name
            if not self.hello.done():
                self.hello.set_result(name)
            return
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
        # the reply tells an authenticated dialer who we are, so it accepts our own dial next
        self.send(FrameKind.HELLO, self.mgr.hello_body())
        if not self.mgr.is_configured_peer(name) and name != self.mgr.name:
            # a peer that started after our last dial: its listen address names one of our
            # route URLs, so it is let in now rather than after our dial resolves it
            self.mgr.resolve_claim(name, body.get("listen"), self.stats.ip)
        if not self.mgr.is_configured_peer(name):
            # a real peer is refused like this until we dialed it: warn once per name
            # (our own dial of our own URL, which tells us which route is us, is expected)
            refused = self.mgr.refused_names
            full = len(refused) >= REFUSED_NAMES_MAX  # a flood of names: no more warnings
            quiet = name in refused or name == self.mgr.name or full
            level = logging.DEBUG if quiet else logging.WARNING
            if not full:
                refused.add(name)
            if len(self.mgr.told_while_refusing) < len(self.mgr.route_urls):
                self.mgr.told_while_refusing.add(name)  # our HELLO went first: it knows us now
            if name != self.mgr.name:
                self.mgr.wake_dialers()
            log.log(
                level,
                "route from %s as %r: not a node of the configured routes (yet); closing",
                self._address_text,
                name,
            )
            if self.transport is not None:
                self.transport.close()
            return
        urls = peer_client_urls(body.get("client_urls", []))
        if urls is None:
            raise FrameError("HELLO with bad client_urls")
        lame_duck = body.get("ldm", False)
        if type(lame_duck) is not bool:
            raise FrameError("HELLO with bad ldm")
        self.client_urls = urls
        self.lame_duck = lame_duck
        self.peer = name
        self.reader.frame_bytes_max = FRAME_BYTES_MAX
        self.mgr.inbound_up(self)
        if not self.hello.done():
            self.hello.set_result(name)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._lost:
            return
        self._lost = True
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
        if not self.dialed and self.peer is not None:
            self.mgr.inbound_down(self)
        if not self.hello.done():
            if self.dialed:  # only the dial loop awaits it
                self.hello.set_exception(ConnectionError("closed before HELLO"))
            else:
                self.hello.cancel()
        if not self.closed.done():
            self.closed.set_result(None)


class RouteManager:
    def __init__(
        self,
        name: str,
        cluster_name: str,
        host: str,
        port: int,
        route_urls: list[str],
        router: Router,
        auth: RouteAuthConfig | None = None,
        tls: TLSConfig | None = None,
        raft: RaftInbound | None = None,
        server_id: str = "",
        jetstream: bool = True,
    ) -> None:
        # a cluster is all JetStream (every node a meta group peer) or all core NATS
        self.jetstream = jetstream
        self.server_id = server_id  # told to peers in the HELLO (their /routez remote_id)
        self._rids = 0
        self.slow_consumers = 0  # links dropped because the peer stopped reading
        self.auth = auth or RouteAuthConfig()
        # given here, not set later: no RAFT frame or link event can arrive before it is known
        self.raft = raft
        self.tls = tls
        self.name = name
        self.cluster_name = cluster_name
        self.host = host
        self.port = port
        self.route_urls = list(route_urls)
        self.router = router
        self.peer_up: list[PeerHandler] = []
        self.peer_down: list[PeerHandler] = []
        # this node's client URLs, told to peers in the HELLO; theirs, while their route is up
        self.client_urls: list[str] = []
        self.peer_client_urls: dict[str, list[str]] = {}
        self.client_urls_changed: list[Callable[[], None]] = []
        self._dial_wake = asyncio.Event()
        self._dial_woken_at = -DIAL_WAKE_INTERVAL_S
        # lame duck mode: this node's, and the peers that said they entered it
        self.lame_duck = False
        self.lame_duck_peers: set[str] = set()
        self._out: dict[str, _Link] = {}
        self._in: dict[str, _Link] = {}
        self.known_peers: set[str] = set()
        self._server: asyncio.Server | None = None
        # with route TLS: the listening sockets this node accepts on itself, and the TLS
        # handshakes under way (see _accept_tls)
        self._listeners: list[socket.socket] = []
        self._accepting: list[asyncio.Task[None]] = []
        self._handshakes: set[asyncio.Task[None]] = set()
        self.refused_names: set[str] = set()
        # peers refused (before we resolved them) since our last dial to them: they read our
        # HELLO first, so they accept our next dial
        self.told_while_refusing: set[str] = set()
        # route URL -> the last dial failure logged, so a peer that stays down is logged once
        self._dial_problem: dict[str, str] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False
        # route URL -> the name of the node behind it (this node's own name for its own URL)
        self.resolved: dict[str, str] = {}
        self.all_resolved = asyncio.Event()
        if not self.route_urls:
            self.all_resolved.set()

    def hello_body(self, url: str = "") -> dict[str, Any]:
        body: dict[str, Any] = {
            "v": ROUTE_PROTOCOL_VERSION,
            "name": self.name,
            "cluster": self.cluster_name,
        }
        if self.server_id:
            body["id"] = self.server_id
        if not self.jetstream:
            body["js"] = False
        if self.client_urls:
            body["client_urls"] = self.client_urls
        if self.lame_duck:  # a link that reconnects during lame duck mode still says so
            body["ldm"] = True
        # where this node listens for routes: a peer that has not dialed us yet can tell from
        # it which of its route URLs we are (see RouteManager.claimed_route_url)
        body["listen"] = f"{self.host}:{self.port}"
        if url:  # dialing: present the URL's credentials, else this node's own (nats-server)
            user, password = route_url_credentials(url)
            if user:
                body["user"], body["pass"] = user, password
            elif self.auth.token:
                body["token"] = self.auth.token
            elif self.auth.user:
                body["user"], body["pass"] = self.auth.user, self.auth.password
        return body

    def credentials_ok(self, hello: dict[str, Any]) -> bool:
        auth = self.auth
        if not auth.enabled:
            return True

        def same(given: object, expected: str) -> bool:
            return type(given) is str and hmac.compare_digest(given.encode(), expected.encode())

        if auth.token:
            return same(hello.get("token"), auth.token)
        # both compared whatever the first gives, so timing does not tell which was wrong
        user_ok = same(hello.get("user"), auth.user)
        pass_ok = same(hello.get("pass"), auth.password)
        return user_ok and pass_ok

    def next_rid(self) -> int:
        self._rids += 1
        return self._rids

    def link_stats(self) -> list[LinkStats]:
        """Every route connection up (dialed, then accepted, each by peer name), with its
        unsent bytes: what /routez lists."""
        out: list[LinkStats] = []
        for links in (self._out, self._in):
            for _peer, link in sorted(links.items()):
                t = link.transport
                buffered = t.get_write_buffer_size() if t is not None else 0
                link.stats.pending = buffered + link.gathered_bytes
                out.append(link.stats)
        return out

    def claimed_route_url(self, listen: object, peer_ip: str) -> str | None:
        """The one configured route URL, not resolved yet, that an authenticated peer's HELLO
        ``listen`` ("host:port", where it accepts routes) names: its port, at the address the
        peer's connection comes from (what the peer says of its host is not trusted, so a route
        URL written with a host name is resolved by our dial alone). None when it names none or
        is malformed."""
        if type(listen) is not str or len(listen) > LISTEN_TEXT_BYTES_MAX:
            return None
        _host, sep, port_text = listen.rpartition(":")
        if not sep or not port_text.isdigit() or not peer_ip:
            return None
        found = [
            url
            for url in self.route_urls
            if url not in self.resolved and parse_route_url(url) == (peer_ip, int(port_text))
        ]
        return found[0] if len(found) == 1 else None

    def resolve_claim(self, name: str, listen: object, peer_ip: str) -> None:
        url = self.claimed_route_url(listen, peer_ip)
        if url is None or name in self.resolved.values():
            return
        log.debug("route %s is %r (its HELLO says it listens there)", url, name)
        self._resolve(url, name)

    def _resolve(self, url: str, name: str) -> None:
        self.resolved[url] = name
        if len(self.resolved) >= len(self.route_urls):
            self.all_resolved.set()

    def is_configured_peer(self, name: str) -> bool:
        """Only nodes behind this node's configured route URLs may join: their names are the
        ones learned by dialing those URLs."""
        return name != self.name and name in self.resolved.values()

    def inbound(self, peer: str) -> _Link | None:
        """The accepted link ``peer`` is authenticated on, if any (the route port's state)."""
        return self._in.get(peer)

    def inbound_peers(self) -> set[str]:
        """The peers authenticated on accepted links."""
        return set(self._in)

    def _server_ssl(self) -> ssl.SSLContext | None:
        tls = self.tls
        if tls is None:
            return None
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(tls.cert_file, tls.key_file)
        if tls.ca_file is not None:
            ctx.load_verify_locations(tls.ca_file)
        ctx.verify_mode = ssl.CERT_REQUIRED if tls.verify else ssl.CERT_NONE
        return ctx

    def _client_ssl(self) -> ssl.SSLContext | None:
        tls = self.tls
        if tls is None:
            return None
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=tls.ca_file)
        ctx.load_cert_chain(tls.cert_file, tls.key_file)  # our identity when peers verify
        if tls.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return ctx

    def _warn_if_open(self) -> None:
        if self.auth.enabled or (self.tls is not None and self.tls.verify):
            return
        try:
            loopback = ipaddress.ip_address(self.host or "0.0.0.0").is_loopback
        except ValueError:
            loopback = self.host == "localhost"
        if not loopback:
            log.warning(
                "the cluster port %s:%d accepts routes without authentication: anyone who can "
                "reach it can join the cluster; set cluster { authorization { ... } } or "
                "cluster { tls { verify: true } }",
                self.host or "0.0.0.0",
                self.port,
            )

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        server_ssl = self._server_ssl()
        if server_ssl is None:
            self._server = await loop.create_server(
                lambda: _Link(self, dialed=False), self.host, self.port, reuse_address=True
            )
            self.port = self._server.sockets[0].getsockname()[1]
        else:
            self._listeners = _listen(self.host, self.port)
            self.port = self._listeners[0].getsockname()[1]
            for sock in self._listeners:
                self._accepting.append(loop.create_task(self._accept_forever(sock, server_ssl)))
        self._warn_if_open()
        self.router.forwarder = self
        self.router.interest_listener = self._on_local_interest
        for url in self.route_urls:
            self._tasks.append(loop.create_task(self._dial_forever(url)))
        log.info("Listening for route connections on %s:%d", self.host, self.port)

    async def close(self) -> None:
        self._closing = True
        for task in self._tasks:
            task.cancel()
        for link in list(self._out.values()) + list(self._in.values()):
            link.close()
        if self._server is not None:
            self._server.close()
        for task in [*self._accepting, *self._handshakes]:
            task.cancel()
        # a socket is closed only once its accept loop let go of it (no reader left on it)
        await asyncio.gather(*self._accepting, return_exceptions=True)
        for sock in self._listeners:
            sock.close()
        self.router.forwarder = None
        self.router.interest_listener = None

    # --- accepting with TLS -------------------------------------------------------------------
    # Why not create_server(ssl=...): a failed server-side handshake (a plain-TCP peer, a missing
    # or untrusted client certificate) is then dropped without a word, and an operator who mixed
    # TLS and plain nodes sees nothing on the TLS side. Why not start_tls in connection_made:
    # uvloop starts reading right after connection_made, so the peer's ClientHello can reach
    # the plain protocol before start_tls takes over, and the handshake stalls. Accepting the
    # socket ourselves and handing it to connect_accepted_socket(ssl=...) raises the handshake
    # failure to us with the peer's address, on both event loops.
    async def _accept_forever(self, sock: socket.socket, ctx: ssl.SSLContext) -> None:
        loop = asyncio.get_running_loop()
        while not self._closing:
            try:
                conn, address = await loop.sock_accept(sock)
            except (ConnectionAbortedError, InterruptedError):
                continue
            except OSError as exc:  # out of file descriptors: do not spin
                if self._closing:
                    return
                log.warning("cluster port: accepting a connection failed: %s", exc)
                await asyncio.sleep(ACCEPT_RETRY_DELAY_S)
                continue
            task = loop.create_task(self._accept_tls(conn, address, ctx))
            self._handshakes.add(task)
            task.add_done_callback(self._handshakes.discard)

    async def _accept_tls(self, conn: socket.socket, address: Any, ctx: ssl.SSLContext) -> None:
        assert self.tls is not None
        where = f"{address[0]}:{address[1]}" if isinstance(address, tuple) else str(address)
        link = _Link(self, dialed=False)
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                functools.partial(_same, link),
                conn,
                ssl=ctx,
                ssl_handshake_timeout=self.tls.timeout_s,
            )
        except (OSError, TimeoutError, ValueError) as exc:  # ssl.SSLError is an OSError
            log.warning(
                "route from %s: TLS handshake failed, closing: %s%s",
                where,
                str(exc) or type(exc).__name__,
                _tls_hint(exc),
            )
            conn.close()

    # --- dialing ----------------------------------------------------------------------------
    async def _dial_forever(self, url: str) -> None:
        host, port = parse_route_url(url)
        loop = asyncio.get_running_loop()
        delay = RECONNECT_DELAY_MIN_S
        client_ssl = self._client_ssl()
        tls_args: dict[str, Any] = {}
        if client_ssl is not None and self.tls is not None:
            tls_args = {
                "ssl": client_ssl,
                "server_hostname": host,
                "ssl_handshake_timeout": self.tls.timeout_s,
            }
        quick_redial = True
        while not self._closing:
            link = _Link(self, dialed=True, url=url)
            try:
                await loop.create_connection(functools.partial(_same, link), host, port, **tls_args)
                peer = await asyncio.wait_for(link.hello, HELLO_TIMEOUT_S)
            except (OSError, TimeoutError, ConnectionError) as exc:
                self._dial_failed(url, link, exc)
                if link.transport is not None:
                    link.transport.abort()
                if await self._backoff(delay * (0.5 + random.random())):
                    delay = RECONNECT_DELAY_MIN_S  # a peer knocked: it may be this URL's
                else:
                    delay = min(delay * 2, RECONNECT_DELAY_MAX_S)
                continue
            if self._dial_problem.pop(url, None) is not None:
                log.info("route to %s: connected again", url)
            self._resolve(url, peer)
            if peer == self.name:
                log.debug("route %s is this node; not dialing it", url)
                link.close()
                return
            delay = RECONNECT_DELAY_MIN_S
            self._outbound_up(peer, link)
            up_at = time.monotonic()
            await link.closed
            self._outbound_down(peer, link)
            if self._closing:
                break
            # a peer that closed us at once had not resolved us yet. Once it dialed us, or
            # read our HELLO while we refused its dial, it accepts ours: redial at once (once
            # in a row, so a peer that keeps closing us is dialed at the usual pace);
            # otherwise its dial to us wakes this loop (inbound_up)
            told = peer in self.told_while_refusing
            self.told_while_refusing.discard(peer)
            quick = quick_redial and (told or self.inbound(peer) is not None)
            quick_redial = not quick or time.monotonic() - up_at >= QUICK_REDIAL_LIFETIME_S
            if not quick:
                await self._backoff(RECONNECT_DELAY_MIN_S)

    async def _backoff(self, seconds: float) -> bool:
        """Sleep before the next dial; True when ``wake_dialers`` cut it short."""
        woken = self._dial_wake
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(woken.wait(), seconds)
        return woken.is_set()

    def wake_dialers(self, *, configured_peer: bool = False) -> None:
        """A node we have not resolved knocked (a peer that just started): dial the unresolved
        route URLs now rather than at the end of their backoff, at most every
        ``DIAL_WAKE_INTERVAL_S``, so that the new peer is let in within a round trip. A
        configured peer's accepted link wakes them at once (it is authenticated and known)."""
        now = time.monotonic()
        if not configured_peer:
            if now - self._dial_woken_at < DIAL_WAKE_INTERVAL_S:
                return
            self._dial_woken_at = now
        self._dial_wake.set()
        self._dial_wake = asyncio.Event()

    def _dial_failed(self, url: str, link: _Link, exc: BaseException) -> None:
        """Log why dialing ``url`` failed, once until it changes: a peer that is down is
        retried every second and must not flood the log."""
        shown = parse_route_url(url)
        where = f"{shown[0]}:{shown[1]}"
        if isinstance(exc, ssl.SSLError | ssl.CertificateError):
            problem = f"TLS handshake failed: {exc}{_tls_hint(exc)}"
        elif link.transport is not None and isinstance(exc, ConnectionError | TimeoutError):
            # connected, then closed (or silent) before the peer's HELLO: it refused us
            problem = (
                "the peer closed the connection before answering HELLO (route credentials, "
                "cluster tls or the peer's configured routes differ?)"
            )
        else:
            problem = f"cannot connect: {str(exc) or type(exc).__name__}"
        if self._dial_problem.get(url) != problem:
            self._dial_problem[url] = problem
            level = logging.DEBUG if problem.startswith("cannot connect") else logging.WARNING
            log.log(level, "route to %s: %s", where, problem)

    def _outbound_up(self, peer: str, link: _Link) -> None:
        old = self._out.get(peer)
        if old is not None:
            old.close()
        self._out[peer] = link
        self.known_peers.add(peer)
        if self.lame_duck:  # its HELLO may have left before this node entered lame duck mode
            link.send(FrameKind.LAME_DUCK, None)
        for subject, queue, count, exclude in self.router.local_interest():
            link.send(FrameKind.SUB, [subject, queue, count, _wire_excluded(exclude)])
        log.info("route to %s is up", peer)
        if self.raft is not None:
            self.raft.on_peer_up(peer)
        for cb in self.peer_up:
            cb(peer)

    def _outbound_down(self, peer: str, link: _Link) -> None:
        if self._out.get(peer) is link:
            del self._out[peer]
            log.info("route to %s is down", peer)
            if self.raft is not None:
                self.raft.on_peer_down(peer)
            for cb in self.peer_down:
                cb(peer)

    def inbound_up(self, link: _Link) -> None:
        assert link.peer is not None
        old = self._in.get(link.peer)
        self._in[link.peer] = link
        if old is not None:
            old.close()
        if link.peer not in self._out:  # it accepts our dial now (see _dial_forever)
            self.wake_dialers(configured_peer=True)
        if link.lame_duck:  # a lame duck's reconnect (its HELLO names no client URL either)
            self.lame_duck_peers.add(link.peer)
        else:  # a new link is a new start
            self.lame_duck_peers.discard(link.peer)
        self._set_peer_client_urls(link.peer, link.client_urls)

    def inbound_down(self, link: _Link) -> None:
        assert link.peer is not None
        if self._in.get(link.peer) is link:
            del self._in[link.peer]
            self.router.drop_peer(link.peer)
            self._set_peer_client_urls(link.peer, None)

    def enter_lame_duck(self) -> None:
        """This node leaves: peers stop advertising it (a HELLO from now on names no client URL)
        and place nothing new on it."""
        self.lame_duck = True
        self.client_urls = []
        for peer in list(self._out):
            self.send(peer, FrameKind.LAME_DUCK, None)

    def peer_entered_lame_duck(self, peer: str) -> None:
        self.lame_duck_peers.add(peer)
        self._set_peer_client_urls(peer, None)

    def _set_peer_client_urls(self, peer: str, urls: list[str] | None) -> None:
        before = self.peer_client_urls.get(peer)
        if urls:
            self.peer_client_urls[peer] = urls
        else:
            self.peer_client_urls.pop(peer, None)
        if self.peer_client_urls.get(peer) != before:
            for listener in self.client_urls_changed:
                listener()

    # --- sending ----------------------------------------------------------------------------
    def connected(self, peer: str) -> bool:
        return peer in self._out

    def connected_peers(self) -> list[str]:
        return sorted(self._out)

    def send(self, peer: str, kind: FrameKind, body: Any) -> bool:
        link = self._out.get(peer)
        return link is not None and link.send(kind, body)

    def send_raft(self, peer: str, group: str, message: dict[str, Any]) -> bool:
        return self.send(peer, FrameKind.RAFT, [group, message])

    def send_catchup(self, peer: str, message: list[Any]) -> bool:
        return self.send(peer, FrameKind.CATCHUP, message)

    def flush(self) -> None:
        for link in self._out.values():
            link.flush()

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
    ) -> None:
        body = [subject, reply, hdr, payload, plain, queues]
        if shown is not None:
            body.append(shown)
        self.send(peer, FrameKind.MSG, body)

    def _on_local_interest(
        self, subject: str, queue: str | None, count: int, exclude: Excluded | None
    ) -> None:
        if count > 0:
            if queue is None and count > 1:
                return  # plain interest is on or off; only the first subscriber matters
            frame = encode_frame(FrameKind.SUB, [subject, queue, count, _wire_excluded(exclude)])
        else:
            frame = encode_frame(FrameKind.UNSUB, [subject, queue])
        for link in self._out.values():
            link.write(frame, now=True)  # in order with the messages sent before it


def _wire_excluded(exclude: Excluded | None) -> list[str] | None:
    return None if exclude is None else list(exclude)


def _excluded(body: list[Any]) -> Excluded | None:
    """A SUB frame's excluded prefixes: absent, null, or a list of strings."""
    raw = body[3] if len(body) > 3 else None
    if raw is None:
        return None
    if type(raw) is not list or not all(type(p) is str for p in raw):
        raise FrameError("a SUB frame's excluded prefixes are a list of strings")
    return tuple(raw)
