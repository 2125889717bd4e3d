"""One client connection: glue between a socket (asyncio Protocol) and protocol.session.

Bytes from the socket go into the sans-I/O ``ClientSession``; its actions become subscriptions,
publishes through the router, or bytes back to the client. Outgoing bytes are collected and
written once per event-loop turn, so a burst of deliveries costs one send. A client that cannot
keep up (more than ``PENDING_BYTES_MAX`` unsent) is cut off as a slow consumer, as nats-server
does, rather than letting it stall publishers.

Must never: block the loop, or let one client's bad input affect another connection.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, cast

from cluster.router import Subscription
from protocol import session as ps
from protocol.auth import ERR_AUTH_TIMEOUT, PermissionChecker, new_nonce
from protocol.auth_config import ClientAuthConfig
from protocol.parser import MAX_CONTROL_LINE_BYTES_DEFAULT

if TYPE_CHECKING:
    from cluster.router import Router

log = logging.getLogger("jetraft.client")

PENDING_BYTES_MAX = 64 * 1024 * 1024  # nats-server MAX_PENDING_SIZE
FIRST_PING_INTERVAL_S = 2.0  # nats-server firstClientPingInterval
PING_INTERVAL_S = 120.0  # nats-server DEFAULT_PING_INTERVAL
PINGS_OUTSTANDING_MAX = 2  # nats-server DEFAULT_PING_MAX_OUT
ERR_STALE_CONNECTION = "Stale Connection"


class ClientConnection(asyncio.Protocol):
    # client authentication (require_auth): the logged-in user's permissions (None: any), and
    # the timer that closes a connection that has not sent CONNECT in time
    perms: PermissionChecker | None = None
    _auth_timeout_s = 0.0
    _auth_timer: asyncio.TimerHandle | None = None

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
        on_slow_consumer: Any = None,
    ) -> None:
        self.max_pending = max_pending
        self._on_slow_consumer = on_slow_consumer
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

    # --- asyncio.Protocol -------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        if peer:  # the INFO tells a client the address the server sees it at
            self.session.set_info({**self._info, "client_ip": peer[0]})
        self.send_raw(self.session.initial_bytes())
        if self._refusal is not None:
            self.send_raw(ps.encode_err(self._refusal))
            self.close()
            return
        self._ping_timer = asyncio.get_running_loop().call_later(
            min(FIRST_PING_INTERVAL_S, self.ping_interval_s), self._ping
        )
        if self._auth_timeout_s > 0:
            self._auth_timer = asyncio.get_running_loop().call_later(
                self._auth_timeout_s, self._auth_timed_out
            )

    def require_auth(self, cfg: ClientAuthConfig) -> None:
        """Clients must log in: INFO says ``auth_required`` (and carries a fresh ``nonce`` when
        nkey users exist), CONNECT is checked, and it must come within ``cfg.timeout_s``."""
        nonce = new_nonce() if cfg.uses_nkeys else ""
        info = {**self._info, "auth_required": True}
        if nonce:
            info["nonce"] = nonce
        self._info = ps.order_info(info)
        self.session.set_info(self._info)
        self.session.require_auth(cfg, nonce, asyncio.get_running_loop().time)
        self._auth_timeout_s = cfg.timeout_s

    def _auth_timed_out(self) -> None:
        self._auth_timer = None
        if not self._closed and self.session.awaiting_auth:
            log.error("cid:%d - authentication timeout", self.cid)
            self.send_raw(ps.encode_err(ERR_AUTH_TIMEOUT))
            self.close()

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
            self.send_raw(ps.encode_err(ERR_STALE_CONNECTION))
            self.close()
            return
        self._pings_sent += 1
        self.send_raw(ps.PING)
        self._ping_timer = asyncio.get_running_loop().call_later(self.ping_interval_s, self._ping)

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        self.session.receive_data(data)
        while (action := self.session.next_action()) is not None:
            self._act(action)
            if self._closed:
                return

    def connection_lost(self, exc: Exception | None) -> None:
        self._teardown()

    # --- actions ------------------------------------------------------------------------
    def _act(self, action: object) -> None:
        if type(action) is ps.Publish:
            self.router.publish(action.subject, action.reply, action.hdr, action.payload, self)
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
        elif isinstance(action, ps.Close):
            if action.err is not None:
                if action.err == ps.ERR_AUTHORIZATION_VIOLATION:
                    log.error("cid:%d - authentication error", self.cid)
                self.send_raw(ps.encode_err(action.err))
            self.close()
        elif isinstance(action, ps.Authorized):
            self.perms = action.perms
            if self._auth_timer is not None:
                self._auth_timer.cancel()
                self._auth_timer = None

    def forget_sub(self, sub: Subscription) -> None:
        if self.subs.get(sub.sid) is sub:
            del self.subs[sub.sid]
            self.session.forget_subscription(sub.sid)

    # --- output ------------------------------------------------------------------------
    def send_msg(
        self, subject: str, sid: str, reply: str | None, hdr: bytes | None, payload: bytes
    ) -> None:
        if hdr:
            self.send_raw(ps.encode_hmsg(subject, sid, reply, hdr, payload))
        else:
            self.send_raw(ps.encode_msg(subject, sid, reply, payload))

    def send_raw(self, data: bytes) -> None:
        if self._closed:
            return
        self._out.append(data)
        self._out_bytes += len(data)
        if self._out_bytes > self.max_pending:
            # checked per send, not per flush: replies built within one loop turn (a burst of
            # Direct Gets) must not pile up past the limit before the flush sees them
            pending = self._out_bytes
            if self.transport is not None:
                pending += self.transport.get_write_buffer_size()
            if pending > self.max_pending:
                self._slow_consumer()
                return
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._closed or self.transport is None or not self._out:
            return
        data = b"".join(self._out) if len(self._out) > 1 else self._out[0]
        self._out.clear()
        self._out_bytes = 0
        self.transport.write(data)
        if self.transport.get_write_buffer_size() > self.max_pending:
            self._slow_consumer()

    def _slow_consumer(self) -> None:
        """Cut the client off and drop what it was owed, as nats-server does: keeping (and
        still delivering) the buffer is what let one reader hold gigabytes."""
        log.warning("Slow Consumer Detected: cid=%d name=%r: disconnecting", self.cid, self.name)
        self._out.clear()
        self._out_bytes = 0
        self._closed = True
        if self.transport is not None:
            self.transport.abort()
        if self._on_slow_consumer is not None:
            self._on_slow_consumer()
        self._teardown()

    def close(self, flush: bool = True) -> None:
        if self._closed:
            return
        if flush:
            self._flush()
        self._closed = True
        if self.transport is not None:
            self.transport.close()
        self._teardown()

    def _teardown(self) -> None:
        self._closed = True
        if self._ping_timer is not None:
            self._ping_timer.cancel()
            self._ping_timer = None
        if self._auth_timer is not None:
            self._auth_timer.cancel()
            self._auth_timer = None
        for sub in list(self.subs.values()):
            self.router.remove(sub)
        self.subs.clear()
        callbacks, self.on_close = self.on_close, []
        for cb in callbacks:
            cb(self)
