"""One client connection: glue between a socket (asyncio Protocol) and protocol.session.

Bytes from the socket go into the sans-I/O ``ClientSession``; its actions become subscriptions,
publishes through the router, or bytes back to the client. Outgoing bytes are collected and
written once per event-loop turn, so a burst of deliveries costs one send. A client that cannot
keep up is cut off as a slow consumer, as nats-server does, rather than letting it stall
publishers or hold memory: when more than ``max_pending`` bytes are unsent (ours and the
transport's buffers), or when bytes handed to the socket have not left within
``write_deadline_s``. With client TLS the INFO goes out in plain text and the client then starts
the handshake (nats-server's default, not ``handshake_first``).

Must never: block the loop, or let one client's bad input affect another connection.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from cluster.password_pool import check_password
from cluster.router import Subscription
from protocol import session as ps
from protocol.auth import ERR_AUTH_TIMEOUT, PermissionChecker, new_nonce
from protocol.auth_config import ClientAuthConfig
from protocol.parser import ERR_MAX_CONTROL_LINE, ERR_MAX_PAYLOAD, MAX_CONTROL_LINE_BYTES_DEFAULT
from protocol.timefmt import format_go_duration

if TYPE_CHECKING:
    from cluster.router import Router

log = logging.getLogger("jetraft.client")

PENDING_BYTES_MAX = 64 * 1024 * 1024  # nats-server MAX_PENDING_SIZE
FIRST_PING_INTERVAL_S = 2.0  # nats-server firstClientPingInterval
PING_INTERVAL_S = 120.0  # nats-server DEFAULT_PING_INTERVAL
PINGS_OUTSTANDING_MAX = 2  # nats-server DEFAULT_PING_MAX_OUT
WRITE_DEADLINE_S = 10.0  # nats-server DEFAULT_FLUSH_DEADLINE
# Output gathered within one loop turn is written at its end, or as soon as this much has
# gathered: a burst of replies (a group commit's PubAcks, Direct Gets) then starts reaching the
# client while the rest is still being built, and the client answers sooner.
OUT_FLUSH_BYTES = 64 * 1024
TLS_TIMEOUT_S = 2.0  # nats-server TLS_TIMEOUT
TLS_FIRST_PEEK_INTERVAL_S = 0.005  # how often handshake_first's fallback looks for a ClientHello
TLS_FIRST_PEEK_INTERVAL_MAX_S = 0.05  # (the interval doubles up to this)
ERR_STALE_CONNECTION = "Stale Connection"
# CPython 3.11 specializes attribute access on an object only while its __dict__ fits the
# class's shared keys: a 30th instance attribute on ClientConnection made send_raw, run for every
# delivery, ~20% slower (measured). State most connections never need lives in class-level
# defaults or in the small slotted objects below, one attribute each.
ATTRIBUTES_FAST_MAX = 29
# why a connection closed, in nats-server's words (ClosedState.String), for /connz?state=closed
CLOSED_BY_CLIENT = "Client Closed"
CLOSED_SLOW_PENDING = "Slow Consumer (Pending Bytes)"
CLOSED_SLOW_DEADLINE = "Slow Consumer (Write Deadline)"
CLOSED_STALE = "Stale Connection"
CLOSED_AUTH_TIMEOUT = "Authentication Timeout"
CLOSED_AUTH_FAILURE = "Authentication Failure"
CLOSED_TLS_FAILURE = "TLS Handshake Failure"
CLOSED_PROTOCOL = "Protocol Violation"
_CLOSED_BY_ERR = {
    ps.ERR_AUTHORIZATION_VIOLATION: CLOSED_AUTH_FAILURE,
    ERR_MAX_PAYLOAD: "Maximum Message Payload Exceeded",
    ERR_MAX_CONTROL_LINE: "Maximum Control Line Exceeded",
}


class ConnStats:
    """What monitoring (/connz, /varz) reads of one connection: its traffic in nats-server's
    units (messages, and their header plus payload bytes), when it started and was last heard
    from, what its CONNECT said, and why it closed. One slotted object, so the connection stays
    within ATTRIBUTES_FAST_MAX."""

    __slots__ = (
        "in_bytes",
        "in_msgs",
        "ip",
        "lang",
        "last_ns",
        "out_bytes",
        "out_msgs",
        "port",
        "reason",
        "start_ns",
        "user",
        "version",
    )

    def __init__(self, start_ns: int) -> None:
        self.start_ns = start_ns
        self.last_ns = start_ns
        self.in_msgs = 0
        self.in_bytes = 0
        self.out_msgs = 0
        self.out_bytes = 0
        self.lang = ""
        self.version = ""
        self.user = ""
        self.reason = ""
        self.ip = ""
        self.port = 0


class _SendLimits:
    """What a client may be owed (max_pending), for how long (write_deadline), and whom to tell
    when it is cut off as a slow consumer or a stale connection."""

    __slots__ = ("max_pending", "on_slow_consumer", "on_stale_connection", "write_deadline_s")

    def __init__(
        self,
        max_pending: int,
        write_deadline_s: float,
        on_slow_consumer: Callable[[], None] | None,
        on_stale_connection: Callable[[], None] | None = None,
    ) -> None:
        self.max_pending = max_pending
        self.write_deadline_s = write_deadline_s
        self.on_slow_consumer = on_slow_consumer
        self.on_stale_connection = on_stale_connection


class _Stall:
    """A client whose socket fell behind: the write deadline's timer, what had been written when
    it was armed, and the writes since the socket last took everything."""

    __slots__ = ("mark", "timer", "writes")

    def __init__(self) -> None:
        self.mark = 0
        self.timer: asyncio.TimerHandle | None = None
        self.writes = 0


def _peek_has_bytes(wire: asyncio.Transport) -> bool:
    """Whether the client sent anything (or is gone), looked at through a duplicate of its
    socket with MSG_PEEK, so that the bytes stay queued for the TLS handshake."""
    sock = wire.get_extra_info("socket")
    if sock is None:
        return True  # cannot look: handshake, as for a client that spoke (a failure closes it)
    try:
        fd = os.dup(sock.fileno())
    except OSError:  # out of descriptors: handshake now rather than leave it waiting
        return True
    with socket.socket(fileno=fd) as raw:
        try:
            raw.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True  # reset: the handshake fails and closes the connection
    return True


class _TLS:
    """Client TLS: the context, the handshake timeout and task, and the socket's own transport
    beneath the TLS one, which holds the encrypted bytes not yet sent (the TLS transport does not
    count them)."""

    __slots__ = (
        "context",
        "early",
        "fallback_at",
        "fallback_s",
        "first",
        "handshake",
        "peek_every",
        "timeout_s",
        "wire",
    )

    def __init__(
        self, context: ssl.SSLContext, timeout_s: float, first: bool, fallback_s: float
    ) -> None:
        self.context = context
        self.timeout_s = timeout_s
        # handshake_first: the client starts TLS before the INFO, which then goes out encrypted;
        # with a fallback delay, a client silent for that long gets the INFO in the clear
        self.first = first
        self.fallback_s = fallback_s
        self.fallback_at = 0.0
        self.peek_every = TLS_FIRST_PEEK_INTERVAL_S / 2  # doubled before each wait
        self.early = b""  # handshake bytes read before reading could be paused
        self.wire: asyncio.Transport | None = None
        self.handshake: asyncio.Task[None] | None = None


class ClientConnection(asyncio.Protocol):
    # client authentication (require_auth): the logged-in user's permissions (None: any), and
    # the timer that closes a connection that has not sent CONNECT in time
    perms: PermissionChecker | None = None
    _auth_timeout_s = 0.0
    _auth_timer: asyncio.TimerHandle | None = None
    # set only on TLS connections, and once a client's socket falls behind (ATTRIBUTES_FAST_MAX)
    _tls: _TLS | None = None
    _stall: _Stall | None = None
    # a websocket client: its INFO never lists the TCP client URLs (nats-server sends it the
    # websocket URLs, which jetraft does not advertise)
    websocket = False

    def __init__(
        self,
        router: Router,
        info: dict[str, Any],
        max_payload: int,
        cid: int,
        *,
        ping_interval_s: float = PING_INTERVAL_S,
        pings_outstanding_max: int = PINGS_OUTSTANDING_MAX,
        max_pending: int = PENDING_BYTES_MAX,
        max_control_line: int = MAX_CONTROL_LINE_BYTES_DEFAULT,
        on_slow_consumer: Callable[[], None] | None = None,
        write_deadline_s: float = WRITE_DEADLINE_S,
        tls: ssl.SSLContext | None = None,
        tls_timeout_s: float = TLS_TIMEOUT_S,
        tls_first: bool = False,
        tls_first_fallback_s: float = 0.0,
        on_stale_connection: Callable[[], None] | None = None,
    ) -> None:
        self._limits = _SendLimits(
            max_pending, write_deadline_s, on_slow_consumer, on_stale_connection
        )
        if tls is not None:
            self._tls = _TLS(tls, tls_timeout_s, tls_first, tls_first_fallback_s)
        self._peer = ""
        # What _out may hold before the exact check (which asks the transports) runs: the limit
        # less what the transports held at the last flush. They only drain in between, so this
        # errs on the safe side and keeps the per-send cost at one comparison.
        self._room = max_pending
        self._written = 0  # bytes handed to the transport so far
        self.ping_interval_s = ping_interval_s
        self.pings_outstanding_max = pings_outstanding_max
        self.router = router
        self.cid = cid
        self._info = info
        self.session = ps.ClientSession(info, max_payload, max_control_line)
        self.transport: asyncio.Transport | None = None
        self.subs: dict[str, Subscription] = {}
        self.echo = True
        self.no_responders = False
        self.name = ""
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._flush_scheduled = False
        self._closed = False
        self.on_close: list[Any] = []
        self._pings_sent = 0
        self._ping_timer: asyncio.TimerHandle | None = None
        self._refusal: str | None = None
        self.stats = ConnStats(time.time_ns())

    # --- asyncio.Protocol -------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        if peer:  # the INFO tells a client the address the server sees it at
            self.session.set_info({**self._info, "client_ip": peer[0]})
            self._peer = f"{peer[0]}:{peer[1]}"
            self.stats.ip, self.stats.port = str(peer[0]), int(peer[1])
        if self._refusal is not None:
            # before any TLS: nats-server refuses in plain text, INFO first
            self.send_raw(self.session.initial_bytes())
            self.send_raw(ps.encode_err(self._refusal))
            self.close()
            return
        if self._tls is not None:
            # Nothing may go out in the clear after the INFO, so there is no transport to write
            # to until the handshake is done. The INFO is written one loop turn later, once
            # reading can be paused: uvloop starts reading only after connection_made returns
            # (a pause here would be undone), and the client's ClientHello, which follows the
            # INFO, must reach start_tls and not this plain protocol.
            self._tls.wire = self.transport
            self.transport = None
            asyncio.get_running_loop().call_soon(self._begin_tls)
            return
        self.send_raw(self.session.initial_bytes())
        self._established()

    def _established(self) -> None:
        """The connection speaks the NATS protocol now (after the TLS handshake, if any).

        nats-server starts its timers only here, so that none fires into a TLS handshake."""
        if self._auth_timeout_s > 0:
            self._auth_timer = asyncio.get_running_loop().call_later(
                self._auth_timeout_s, self._auth_timed_out
            )
        self._ping_timer = asyncio.get_running_loop().call_later(
            min(FIRST_PING_INTERVAL_S, self.ping_interval_s), self._ping
        )

    def _tls_to_begin(self) -> tuple[_TLS, asyncio.Transport] | None:
        """The TLS state and the socket's transport of a connection whose handshake is still to
        begin (None once closed, or begun, as by a ClientHello that came at once)."""
        tls = self._tls
        wire = None if tls is None else tls.wire
        if self._closed or tls is None or wire is None or wire.is_closing():
            return None
        return None if tls.handshake is not None else (tls, wire)

    def _begin_tls(self) -> None:
        pending = self._tls_to_begin()
        if pending is None:
            return
        tls, wire = pending
        wire.pause_reading()  # start_tls resumes it with its own protocol in place
        if not tls.first:
            wire.write(self.session.initial_bytes())
            self._handshake(tls, wire)
        elif tls.fallback_s <= 0:
            self._handshake(tls, wire)  # the INFO follows, encrypted
        else:
            tls.fallback_at = asyncio.get_running_loop().time() + tls.fallback_s
            self._tls_first_or_fallback()

    def _tls_first_or_fallback(self) -> None:
        """handshake_first with a fallback delay: any byte from the client (its ClientHello)
        starts the handshake; silence until the delay ends gets the INFO in the clear, after
        which the client upgrades as usual. Reading is paused, so the bytes wait in the socket
        for the handshake: they are only peeked at."""
        pending = self._tls_to_begin()
        if pending is None:
            return
        tls, wire = pending
        if _peek_has_bytes(wire):
            self._handshake(tls, wire)
            return
        loop = asyncio.get_running_loop()
        if loop.time() >= tls.fallback_at:
            tls.first = False
            wire.write(self.session.initial_bytes())
            self._handshake(tls, wire)
            return
        # looked at every 5 ms at first, then less often (at most every 50 ms), so that a long
        # fallback delay costs a silent connection few system calls
        tls.peek_every = min(tls.peek_every * 2, TLS_FIRST_PEEK_INTERVAL_MAX_S)
        wait = min(tls.peek_every, max(tls.fallback_at - loop.time(), 0.0))
        loop.call_later(wait, self._tls_first_or_fallback)

    def _handshake(self, tls: _TLS, wire: asyncio.Transport) -> None:
        tls.handshake = asyncio.get_running_loop().create_task(self._start_tls(tls, wire))

    async def _start_tls(self, tls: _TLS, wire: asyncio.Transport) -> None:
        loop = asyncio.get_running_loop()
        if tls.early:
            # start_tls puts its TLS protocol in place, then schedules that protocol's
            # connection_made and the resumed reading: this runs before both, so the bytes
            # already read reach the handshake first and in order
            loop.call_soon(self._feed_early, tls, wire)
        try:
            # a timeout ends in ConnectionAbortedError; plain protocol bytes in ssl.SSLError
            upgraded = await loop.start_tls(
                wire,
                self,
                tls.context,
                server_side=True,
                ssl_handshake_timeout=tls.timeout_s,
            )
        except Exception as exc:  # whatever failed, the client is not connected
            # nats-server logs this at debug level too: a port scanner is not news
            log.debug("%s - cid:%d - TLS handshake error: %s", self._peer, self.cid, exc)
            self.stats.reason = CLOSED_TLS_FAILURE
            if not self._closed:  # (a timeout may have closed it through connection_lost)
                wire.abort()
                self._teardown()
            return
        if upgraded is None or self._closed:
            if upgraded is not None:
                upgraded.abort()
            return
        self.transport = upgraded
        log.debug("%s - cid:%d - TLS handshake complete", self._peer, self.cid)
        if tls.first:
            self.send_raw(self.session.initial_bytes())
        self._established()
        if self._out:  # answers to what arrived with the handshake's last flight
            self._flush()

    def _feed_early(self, tls: _TLS, wire: asyncio.Transport) -> None:
        data, tls.early = tls.early, b""
        log.debug("%s - cid:%d - TLS handshake begun early: %d B", self._peer, self.cid, len(data))
        proto = wire.get_protocol()
        if proto is self or not hasattr(proto, "buffer_updated"):
            wire.abort()  # no TLS protocol to hand them to: the handshake cannot succeed
            return
        buffered = cast(asyncio.BufferedProtocol, proto)
        while data:
            buf = memoryview(buffered.get_buffer(len(data)))
            n = min(len(buf), len(data))
            buf[:n] = data[:n]
            buffered.buffer_updated(n)
            data = data[n:]

    def require_auth(self, cfg: ClientAuthConfig) -> None:
        """Clients must log in: INFO says ``auth_required`` (and carries a fresh ``nonce`` when
        nkey users exist), CONNECT is checked, and it must come within ``cfg.timeout_s``."""
        nonce = new_nonce() if cfg.uses_nkeys else ""
        info = {**self._info, "auth_required": True}
        if nonce:
            info["nonce"] = nonce
        self._info = ps.order_info(info)
        self.session.set_info(self._info)
        self.session.require_auth(cfg, nonce, asyncio.get_running_loop().time, defer_bcrypt=True)
        self._auth_timeout_s = cfg.timeout_s

    def _auth_timed_out(self) -> None:
        self._auth_timer = None
        if not self._closed and self.session.awaiting_auth:
            log.error("%s - cid:%d - authentication timeout", self._peer, self.cid)
            self.stats.reason = CLOSED_AUTH_TIMEOUT
            self.send_raw(ps.encode_err(ERR_AUTH_TIMEOUT))
            self.close()

    def _check_password(self, action: ps.CheckPassword) -> None:
        """A CONNECT's bcrypt password goes to a worker thread (cluster/password_pool.py). The
        session holds back everything after it; reading pauses so nothing piles up meanwhile."""
        if self.transport is not None:
            self.transport.pause_reading()
        done = check_password(action.check, lambda: not self._closed)
        done.add_done_callback(self._password_checked)

    def _password_checked(self, done: asyncio.Future[bool]) -> None:
        if self._closed:
            return
        ok = False
        if not done.cancelled():
            exc = done.exception()
            if exc is not None:
                log.error("%s - cid:%d - password check failed: %r", self._peer, self.cid, exc)
            else:
                ok = done.result()
        if self.transport is not None:
            self.transport.resume_reading()
        self.session.password_checked(ok)
        while (action := self.session.next_action()) is not None:
            self._act(action)
            if self._closed:
                return

    def refuse_at_connect(self, err: str) -> None:
        """Send the INFO, then ``-ERR`` and close once connected (max_connections)."""
        self._refusal = err

    def _ping(self) -> None:
        """Probe the client as nats-server does; one that stops answering is cut off, so a
        vanished peer's subscriptions do not linger."""
        if self._closed:
            return
        if self._pings_sent - self.session.pongs_received >= self.pings_outstanding_max:
            log.info("stale connection cid=%d name=%r: closing", self.cid, self.name)
            self.stats.reason = CLOSED_STALE
            if self._limits.on_stale_connection is not None:
                self._limits.on_stale_connection()
            self.send_raw(ps.encode_err(ERR_STALE_CONNECTION))
            self.close()
            return
        self._pings_sent += 1
        self.send_raw(ps.PING)
        self._ping_timer = asyncio.get_running_loop().call_later(self.ping_interval_s, self._ping)

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        tls = self._tls
        if self.transport is None and tls is not None and tls.first and tls.handshake is None:
            if tls.wire is not None:  # a ClientHello read before reading could be paused
                tls.early += data
                tls.wire.pause_reading()
                self._handshake(tls, tls.wire)
            return
        if self.transport is None and tls is not None and tls.handshake is None:
            # Bytes before the INFO on a TLS port (a client that handshakes first, or plain
            # protocol): nats-server would still send its INFO, which such a client cannot take
            # for a ServerHello, and its handshake would fail. The client sees the same here.
            log.debug("%s - cid:%d - TLS handshake error: data before INFO", self._peer, self.cid)
            self._closed = True
            if tls.wire is not None:
                tls.wire.write(self.session.initial_bytes())
                tls.wire.close()
            self._teardown()
            return
        # After start_tls this is decrypted data, possibly before the handshake task resumed
        # (transport still None): its answers wait in _out for the first flush.
        self.stats.last_ns = time.time_ns()
        self.session.receive_data(data)
        while (action := self.session.next_action()) is not None:
            self._act(action)
            if self._closed:
                return

    def connection_lost(self, exc: Exception | None) -> None:
        self._teardown()

    def pause_writing(self) -> None:
        # The socket stopped taking data: what it holds must leave within write_deadline.
        if not self._closed and (self._stall is None or self._stall.timer is None):
            self._arm_write_deadline()

    def resume_writing(self) -> None:
        # Drained below the low-water mark: the room for new output is known again.
        if not self._closed:
            self._room = self._limits.max_pending - self._unsent_in_transports()

    # --- actions ------------------------------------------------------------------------
    def _act(self, action: object) -> None:
        if type(action) is ps.Publish:
            stats = self.stats
            stats.in_msgs += 1
            hdr = action.hdr
            stats.in_bytes += len(action.payload) + (len(hdr) if hdr else 0)
            self.router.publish(action.subject, action.reply, hdr, action.payload, self)
        elif isinstance(action, ps.Send):
            self.send_raw(action.data)
        elif isinstance(action, ps.Subscribe):
            if action.sid in self.subs:
                return  # nats-server keeps the first subscription for a reused sid
            sub = Subscription(action.subject, action.queue, action.sid, conn=self)
            self.subs[action.sid] = sub
            self.router.add(sub)
        elif isinstance(action, ps.Unsubscribe):
            existing = self.subs.get(action.sid)
            if existing is None:
                return
            if action.max_msgs and action.max_msgs > existing.delivered:
                existing.max_msgs = action.max_msgs
                return
            self.forget_sub(existing)
            self.router.remove(existing)
        elif isinstance(action, ps.Connected):
            self.echo = action.echo
            self.no_responders = action.no_responders
            self.name = action.name
            self.stats.lang = action.lang
            self.stats.version = action.version
        elif isinstance(action, ps.Close):
            if action.err is not None:
                self.stats.reason = _CLOSED_BY_ERR.get(action.err, CLOSED_PROTOCOL)
                if action.err == ps.ERR_AUTHORIZATION_VIOLATION:
                    log.error("%s - cid:%d - authentication error", self._peer, self.cid)
                self.send_raw(ps.encode_err(action.err))
            self.close()
        elif isinstance(action, ps.Authorized):
            self.perms = action.perms
            self.stats.user = action.user
            if self._auth_timer is not None:
                self._auth_timer.cancel()
                self._auth_timer = None
        elif isinstance(action, ps.CheckPassword):
            self._check_password(action)

    def forget_sub(self, sub: Subscription) -> None:
        if self.subs.get(sub.sid) is sub:
            del self.subs[sub.sid]
            self.session.forget_subscription(sub.sid)

    # --- output ------------------------------------------------------------------------
    def send_msg(
        self, subject: str, sid: str, reply: str | None, hdr: bytes | None, payload: bytes
    ) -> None:
        stats = self.stats
        stats.out_msgs += 1
        if hdr:
            stats.out_bytes += len(hdr) + len(payload)
            self.send_raw(ps.encode_hmsg(subject, sid, reply, hdr, payload))
        else:
            stats.out_bytes += len(payload)
            self.send_raw(ps.encode_msg(subject, sid, reply, payload))

    def send_raw(self, data: bytes) -> None:
        if self._closed:
            return
        self._out.append(data)
        self._out_bytes += len(data)
        # Checked per send, not per flush: replies built within one loop turn (a burst of
        # Direct Gets) must not pile up past the limit before the flush sees them.
        if self._out_bytes > self._room and self._over_max_pending():
            return
        if self._out_bytes >= OUT_FLUSH_BYTES:
            self._flush()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def tls_session(self) -> tuple[str, str] | None:
        """(TLS version as nats-server writes it, e.g. "1.3"; cipher suite) once the TLS
        handshake is done, else None (/connz)."""
        if self._tls is None or self.transport is None:
            return None
        ssl_object = self.transport.get_extra_info("ssl_object")
        if ssl_object is None:
            return None
        version = str(ssl_object.version() or "").removeprefix("TLSv")
        cipher = ssl_object.cipher()
        return version, str(cipher[0]) if cipher else ""

    def pending_bytes(self) -> int:
        """Bytes owed to the client and not yet sent: ours and the transports' (/connz)."""
        return self._out_bytes + self._unsent_in_transports()

    def _unsent_in_transports(self) -> int:
        size = 0 if self.transport is None else self.transport.get_write_buffer_size()
        tls = self._tls
        if tls is not None and tls.wire is not None:
            size += tls.wire.get_write_buffer_size()
        return size

    def _over_max_pending(self) -> bool:
        """The exact check: ours plus the transports' unsent bytes against max_pending."""
        max_pending = self._limits.max_pending
        self._room = max_pending - self._unsent_in_transports()
        if self._out_bytes <= self._room:
            return False
        self._slow_consumer(f"MaxPending of {max_pending} Exceeded", CLOSED_SLOW_PENDING)
        return True

    def _flush(self) -> None:
        self._flush_scheduled = False
        transport = self.transport
        if self._closed or transport is None or not self._out:
            return
        data = b"".join(self._out) if len(self._out) > 1 else self._out[0]
        self._out.clear()
        self._out_bytes = 0
        transport.write(data)
        self._written += len(data)
        unsent = self._unsent_in_transports()
        max_pending = self._limits.max_pending
        if unsent:  # the socket did not take it all: the client is behind, for now
            if unsent > max_pending:
                self._slow_consumer(f"MaxPending of {max_pending} Exceeded", CLOSED_SLOW_PENDING)
                return
            stall = self._stall
            if stall is None or stall.timer is None:
                stall = self._arm_write_deadline()
            stall.writes += 1
        self._room = max_pending - unsent

    def _arm_write_deadline(self) -> _Stall:
        stall = self._stall
        if stall is None:
            stall = self._stall = _Stall()
        stall.mark = self._written
        stall.timer = asyncio.get_running_loop().call_later(
            self._limits.write_deadline_s, self._check_write_deadline
        )
        return stall

    def _check_write_deadline(self) -> None:
        """nats-server's write deadline: bytes handed to the socket must have left it within
        write_deadline. Those written before the deadline was armed are checked now; later
        ones by the next check. (Under TLS the unsent bytes are counted encrypted, a little
        more than the clear text they carry, which errs towards the client being late.)"""
        stall = self._stall
        if stall is None or self._closed:
            return
        stall.timer = None
        unsent = self._unsent_in_transports()
        if unsent == 0:
            stall.writes = 0
            return
        if self._written - unsent >= stall.mark:
            self._arm_write_deadline()  # on time; newer bytes are still on their way
            return
        deadline = format_go_duration(round(self._limits.write_deadline_s * 1e9))
        self._slow_consumer(
            f"WriteDeadline of {deadline} exceeded with {max(stall.writes, 1)} chunks of "
            f"{unsent} total bytes.",
            CLOSED_SLOW_DEADLINE,
        )

    def _slow_consumer(self, why: str, reason: str) -> None:
        """Cut the client off and drop what it was owed, as nats-server does: keeping (and
        still delivering) the buffer is what let one reader hold gigabytes."""
        log.warning(
            "%s - cid:%d - Slow Consumer Detected: %s (name=%r)",
            self._peer,
            self.cid,
            why,
            self.name,
        )
        self.stats.reason = reason
        if self._limits.on_slow_consumer is not None:
            self._limits.on_slow_consumer()
        self._abort()

    def _abort(self) -> None:
        """Close at once, dropping every unsent byte (ours and the transports')."""
        self._out.clear()
        self._out_bytes = 0
        self._closed = True
        if self.transport is not None:
            self.transport.abort()
        tls = self._tls
        if tls is not None and tls.wire is not None:
            tls.wire.abort()
        self._teardown()

    def send_lame_duck_info(self, connect_urls: list[str]) -> None:
        """Tell the client this server is leaving (``"ldm": true``) and where the others are,
        if it takes async INFO."""
        if self.websocket:
            self._send_async_info(ldm=True)
            return
        self._send_async_info(ldm=True, connect_urls=connect_urls)

    def update_info(self, **changes: Any) -> None:
        """Change this connection's INFO (what a later connect_info INFO carries) and tell the
        client now, if it takes async INFO."""
        self._info = ps.order_info({**self._info, **changes})
        self.session.update_info(**changes)
        self._send_async_info()

    def _send_async_info(self, **changes: Any) -> None:
        info = self.session.async_info(**changes)
        if info is not None:
            self.send_raw(info)

    def close(self, flush: bool = True) -> None:
        if self._closed:
            return
        if flush:
            self._flush()
        self._closed = True
        if self.transport is not None:
            self.transport.close()
        elif self._tls is not None and self._tls.wire is not None:
            self._tls.wire.abort()  # mid TLS handshake: nothing is owed to the client yet
        self._teardown()

    def _teardown(self) -> None:
        self._closed = True
        if self._ping_timer is not None:
            self._ping_timer.cancel()
            self._ping_timer = None
        stall = self._stall
        if stall is not None and stall.timer is not None:
            stall.timer.cancel()
            stall.timer = None
        if self._auth_timer is not None:
            self._auth_timer.cancel()
            self._auth_timer = None
        handshake = None if self._tls is None else self._tls.handshake
        if (
            handshake is not None
            and not handshake.done()
            and handshake is not asyncio.current_task()
        ):
            handshake.cancel()
        if not self.stats.reason:
            self.stats.reason = CLOSED_BY_CLIENT
        # before the subscriptions go: a closed connection's record lists them (/connz)
        callbacks, self.on_close = self.on_close, []
        for cb in callbacks:
            cb(self)
        for sub in list(self.subs.values()):
            self.router.remove(sub)
        self.subs.clear()
