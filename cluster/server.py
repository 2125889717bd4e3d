"""One jetraft node: the client listener, the router, JetStream and the monitoring endpoint.

Shutdown runs in phases, as a well-behaved server should: stop accepting, close client
connections after flushing what they were sent, let every stream commit what it queued and close
its store (flush + fsync), then stop monitoring. ``SIGUSR2`` starts lame duck mode first
(``cluster/lame_duck.py``): no new clients, leaderships handed on, clients told and then closed
one by one, then that shutdown.

Must never: hold protocol or engine logic; it wires components together.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import secrets
import signal
import ssl
import string
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster.apply_log import ApplyLog
from cluster.authority import StreamAuthority
from cluster.batching import BatchContext
from cluster.client_conn import (
    PING_INTERVAL_S,
    PINGS_OUTSTANDING_MAX,
    WRITE_DEADLINE_S,
    ClientConnection,
)
from cluster.client_urls import advertised_client_urls, split_advertise
from cluster.identity import GIT_COMMIT, GO_VERSION, PROTO, VERSION
from cluster.jetstream import JetStream
from cluster.jsz import JetStreamSetup
from cluster.lame_duck import LEADER_HANDOFF_WAIT_S, LameDuckSettings, close_pauses
from cluster.local_streams import LocalStreams
from cluster.meta_streams import MetaStreams
from cluster.monitor import MonitorServer
from cluster.monitoring import CpuSampler, NodeCounters
from cluster.raft import RaftDriver
from cluster.router import Router
from cluster.routes import RouteManager
from cluster.security_config import RouteAuthConfig, TLSConfig, server_ssl_context
from cluster.sys_requests import SystemRequests
from cluster.websocket import (
    WS_MESSAGE_BYTES_MIN,
    WS_PROTOCOL_ROOM_BYTES,
    WebSocketOptions,
    WebSocketSession,
    websocket_ssl_context,
)
from engine.batch import BatchLimits
from protocol import native
from protocol.auth_config import ClientAuthConfig
from protocol.parser import MAX_CONTROL_LINE_BYTES_DEFAULT
from protocol.session import order_info
from protocol.stream_config import SERVER_API_LEVEL

log = logging.getLogger("jetraft.server")

MAX_PAYLOAD_BYTES = 1024 * 1024
SHUTDOWN_DRAIN_S = 5.0
# at shutdown, how long closed clients' transports may take to hand their last bytes to the
# kernel before the process exits, and how often that is looked at
SHUTDOWN_FLUSH_S = 1.0
SHUTDOWN_FLUSH_POLL_S = 0.001
MAX_CONNECTIONS_DEFAULT = 64 * 1024  # nats-server DEFAULT_MAX_CONNECTIONS
MAX_PENDING_BYTES_DEFAULT = 64 * 1024 * 1024  # nats-server MAX_PENDING_SIZE
ERR_MAX_CONNECTIONS = "maximum connections exceeded"  # nats-server ErrTooManyConnections


@dataclass
class ServerOptions:
    host: str = "127.0.0.1"
    port: int = 4222
    server_name: str = ""
    store_dir: Path = field(default_factory=lambda: Path("./data"))
    # JetStream on: the in-process default; `jetraft server` turns it on only with -js or a
    # config jetstream block, as nats-server does. Off: no $JS.API, no streams, no store.
    jetstream: bool = True
    http_port: int = 0
    http_host: str = ""  # the monitoring address when it differs from the client one (`http:`)
    max_payload: int = MAX_PAYLOAD_BYTES
    ping_interval_s: float = PING_INTERVAL_S
    ping_max: int = PINGS_OUTSTANDING_MAX
    # jetstream { limits { batch { ... } } }: atomic batch publish limits (ADR-50)
    batch_limits: BatchLimits = field(default_factory=BatchLimits)
    # cluster { name, listen, routes }: absent listen = a single server without Raft
    cluster_name: str = ""
    cluster_host: str = ""
    cluster_port: int = 0
    routes: list[str] = field(default_factory=list)
    # --apply_log: write one JSON row per applied message event (cluster/apply_log.py)
    apply_log: Path | None = None
    # authorization { ... } and no_auth_user, or --user/--pass/--auth
    client_auth: ClientAuthConfig = field(default_factory=ClientAuthConfig)
    # tls { ... } or --tls* flags: clients must upgrade to TLS after the INFO line
    tls: TLSConfig | None = None
    https_port: int = 0  # monitoring over TLS (needs tls)
    websocket: WebSocketOptions | None = None  # websocket { ... }: NATS over WebSocket
    max_connections: int = MAX_CONNECTIONS_DEFAULT
    max_pending: int = MAX_PENDING_BYTES_DEFAULT
    max_control_line: int = MAX_CONTROL_LINE_BYTES_DEFAULT
    write_deadline_s: float = WRITE_DEADLINE_S
    # cluster { authorization { ... } tls { ... } }: what peers must present on the route port
    route_auth: RouteAuthConfig = field(default_factory=RouteAuthConfig)
    route_tls: TLSConfig | None = None
    debug: bool = False
    logtime: bool = True
    pid_file: Path | None = None
    # client_advertise, cluster { no_advertise }: INFO connect_urls (cluster/client_urls.py)
    client_advertise: str = ""
    no_advertise: bool = False
    # lame_duck_duration and lame_duck_grace_period: what SIGUSR2 does
    lame_duck: LameDuckSettings = field(default_factory=LameDuckSettings)

    @property
    def clustered(self) -> bool:
        return bool(self.cluster_host or self.cluster_port)


def _server_id() -> str:
    alphabet = string.ascii_uppercase + string.digits
    return "N" + "".join(secrets.choice(alphabet) for _ in range(55))


class Server:
    def __init__(self, opts: ServerOptions) -> None:
        self.opts = opts
        self.server_id = _server_id()
        # nats-server advertises a curve key for encrypted auth callouts; clients ignore it
        self.xkey = "X" + self.server_id[1:]
        self.name = opts.server_name or self.server_id
        self.router = Router()
        self.routes: RouteManager | None = None
        # atomic batch limits and the count of open batches, shared by all streams
        batches = BatchContext(opts.batch_limits)
        authority: StreamAuthority | None = None
        if opts.clustered:
            # Raft first: the routes are built with it, so the first RAFT frame or link event
            # already has its receiver; the streams' groups then send through the routes. A
            # core NATS cluster has no Raft: its routes carry interest and messages, and the
            # HELLO refuses a JetStream peer (whose meta group would count this node).
            raft = RaftDriver() if opts.jetstream else None
            self.routes = RouteManager(
                self.name,
                opts.cluster_name,
                opts.cluster_host,
                opts.cluster_port,
                opts.routes,
                self.router,
                auth=opts.route_auth,
                tls=opts.route_tls,
                raft=raft,
                server_id=self.server_id,
                jetstream=opts.jetstream,
            )
            if raft is not None:
                authority = MetaStreams(
                    self.router,
                    opts.store_dir,
                    self.name,
                    self.routes,
                    opts.cluster_name,
                    raft,
                    batches,
                    apply_log=ApplyLog(opts.apply_log, self.name) if opts.apply_log else None,
                )
        elif opts.jetstream:
            authority = LocalStreams(self.router, opts.store_dir, self.name, batches)
        # None without JetStream: every $JS.API request then finds no responders
        self.jetstream = (
            JetStream(self.router, authority, server_id=self.server_id)
            if authority is not None
            else None
        )
        self.monitor: MonitorServer | None = None
        self._listener: asyncio.Server | None = None
        self._ws_listener: asyncio.Server | None = None
        self.ws_port = 0
        self._conns: dict[int, ClientConnection] = {}
        self._next_cid = 0
        self._stopped = asyncio.Event()
        self._lame_duck: asyncio.Task[None] | None = None
        self._own_client_urls: list[str] = []
        self.port = opts.port
        # what monitoring reports that outlives a connection (cluster/monitoring.py)
        self.counters = NodeCounters()
        self._cpu = CpuSampler(self.counters.start_mono)
        self.http_req_stats: dict[str, int] = {}  # requests per monitoring endpoint
        self.js_setup = JetStreamSetup(self.server_id, self.name, opts.store_dir, opts.batch_limits)
        # $SYS.REQ.SERVER.*: the monitoring documents over NATS, for the one account
        self.sys_requests = SystemRequests(self, self._cpu, self.http_req_stats)
        # built in start(), so a certificate that cannot be loaded stops the server there
        self._client_tls: ssl.SSLContext | None = None
        self.https_monitor: MonitorServer | None = None

    def info(self, cid: int) -> dict[str, Any]:
        host, port = self.opts.host, self.port
        if self.opts.client_advertise:  # nats-server setInfoHostPort
            host, port = split_advertise(self.opts.client_advertise, self.port)
        info: dict[str, Any] = {
            "server_id": self.server_id,
            "server_name": self.name,
            "version": VERSION,
            "proto": PROTO,
            "git_commit": GIT_COMMIT,
            "go": GO_VERSION,
            "host": host,
            "port": port,
            "headers": True,
            "max_payload": self.opts.max_payload,
        }
        if self.jetstream is not None:  # nats-server leaves the key out without JetStream
            info["jetstream"] = True
        info.update(client_id=cid, client_ip="", api_lvl=SERVER_API_LEVEL, xkey=self.xkey)
        if self.opts.clustered:
            info["cluster"] = self.opts.cluster_name
            info["connect_urls"] = self.connect_urls()  # order_info leaves an empty one out
        if self.opts.tls is not None:  # sent in the clear; the client upgrades after reading it
            info["tls_required"] = True
            if self.opts.tls.verify:
                info["tls_verify"] = True
        return order_info(info)

    def websocket_info(self, cid: int) -> dict[str, Any]:
        """A websocket client's INFO (nats-server's): the websocket listener's host, port and
        TLS, and no connect_urls (websocket URLs are not advertised)."""
        ws = self.opts.websocket
        assert ws is not None
        info = {k: v for k, v in self.info(cid).items() if not k.startswith("tls_")}
        info.pop("connect_urls", None)
        info.update(host=ws.host, port=self.ws_port)
        if ws.tls is not None:
            info.update(tls_required=True, tls_available=True)
        return order_info(info)

    def connect_urls(self, *, own: bool = True) -> list[str]:
        """INFO ``connect_urls`` (cluster/client_urls.py): this node's client URLs, unless
        ``own`` is False, then those of the peers whose routes are up."""
        routes = self.routes
        if routes is None or self.opts.no_advertise:
            return []
        if not routes.peer_client_urls:
            return []  # nats-server lists none until a peer's route is up
        urls = list(self._own_client_urls) if own else []
        for peer in sorted(routes.peer_client_urls):
            urls += [u for u in routes.peer_client_urls[peer] if u not in urls]
        return urls

    def _client_urls_changed(self) -> None:
        """A peer's route came or went: clients that take async INFO hear the new list."""
        if self.opts.no_advertise:
            return
        urls = self.connect_urls(own=self._lame_duck is None)  # a lame duck: only the others
        for conn in list(self._conns.values()):
            if not conn.websocket:
                conn.update_info(connect_urls=urls)

    def _new_connection(self, *, websocket: bool = False) -> ClientConnection:
        self._next_cid += 1
        cid = self._next_cid
        opts = self.opts
        conn = ClientConnection(
            self.router,
            self.websocket_info(cid) if websocket else self.info(cid),
            opts.max_payload,
            cid,
            ping_interval_s=opts.ping_interval_s,
            pings_outstanding_max=opts.ping_max,
            max_pending=opts.max_pending,
            max_control_line=opts.max_control_line,
            on_slow_consumer=self.counters.count_slow_consumer,
            write_deadline_s=opts.write_deadline_s,
            tls=None if websocket else self._client_tls,  # wss: TLS below the websocket
            tls_timeout_s=opts.tls.timeout_s if opts.tls is not None else 0.0,
            tls_first=opts.tls is not None and opts.tls.handshake_first,
            tls_first_fallback_s=opts.tls.handshake_first_fallback_s if opts.tls else 0.0,
            on_stale_connection=self.counters.count_stale_connection,
        )
        conn.websocket = websocket
        if opts.client_auth.enabled:
            conn.require_auth(opts.client_auth)
        if len(self._conns) >= opts.max_connections:
            # nats-server sends its INFO, then this error, and closes
            conn.refuse_at_connect(ERR_MAX_CONNECTIONS)
            return conn
        self._conns[cid] = conn
        self.counters.total_connections += 1
        conn.on_close.append(self._connection_closed)
        return conn

    def _connection_closed(self, conn: ClientConnection) -> None:
        if self._conns.pop(conn.cid, None) is not None:
            self.counters.connection_closed(conn)

    # --- what monitoring reads (cluster/monitoring.py MonitoredNode) -----------------------
    @property
    def connections(self) -> Mapping[int, ClientConnection]:
        return self._conns

    @property
    def https_port(self) -> int:
        return self.https_monitor.port if self.https_monitor is not None else 0

    async def start(self) -> None:
        tls = self.opts.tls
        if tls is not None:  # first: a certificate that cannot be loaded starts nothing
            try:
                self._client_tls = server_ssl_context(tls)
            except OSError as exc:  # ssl.SSLError included
                raise SystemExit(
                    f"jetraft: tls: cannot load cert_file {str(tls.cert_file)!r} with key_file "
                    f"{str(tls.key_file)!r}"
                    + (f" and ca_file {str(tls.ca_file)!r}" if tls.ca_file else "")
                    + f": {exc}"
                ) from exc
        if self.jetstream is not None:
            self._make_store_dir()
        if self.opts.pid_file is not None:
            self.opts.pid_file.write_text(f"{os.getpid()}\n")
        # bound first, served last: the port (-p -1: any) is known before the routes' HELLO
        # tells the peers this node's client URLs, and no client gets in before JetStream
        loop = asyncio.get_running_loop()
        try:
            self._listener = await loop.create_server(
                self._new_connection,
                self.opts.host,
                self.opts.port,
                reuse_address=True,
                start_serving=False,
            )
        except OSError as exc:  # nats-server names the port: "Error listening on port: ..."
            raise _listen_error(
                exc, "error listening on port", self.opts.host, self.opts.port
            ) from exc
        self.port = self._listener.sockets[0].getsockname()[1]
        if self.routes is not None:
            self._own_client_urls = advertised_client_urls(
                self.opts.client_advertise, self.opts.host, self.port
            )
            if not self.opts.no_advertise:
                self.routes.client_urls = self._own_client_urls
            self.routes.client_urls_changed.append(self._client_urls_changed)
            await self.routes.start()
        if self.jetstream is not None:
            self.jetstream.start()
        self.sys_requests.start()
        await self._listener.start_serving()
        if self.opts.websocket is not None:
            await self._start_websocket(self.opts.websocket)
        if self.opts.http_port:  # -1: any free port
            self.monitor = MonitorServer(
                self,
                self.opts.http_host or self.opts.host,
                max(self.opts.http_port, 0),
                cpu=self._cpu,
                http_req_stats=self.http_req_stats,
            )
            await self.monitor.start()
            log.info(
                "Starting http monitor on %s:%d",
                self.opts.http_host or self.opts.host,
                self.monitor.port,
            )
        if self.opts.https_port and self.opts.tls is not None:
            # the client port's certificate; no client certificate is asked for (as nats-server)
            self.https_monitor = MonitorServer(
                self,
                self.opts.http_host or self.opts.host,
                self.opts.https_port,
                ssl_context=server_ssl_context(self.opts.tls, verify_clients=False),
                cpu=self._cpu,
                http_req_stats=self.http_req_stats,
            )
            await self.https_monitor.start()
        log.info("Listening for client connections on %s:%d", self.opts.host, self.port)
        if self.opts.tls is not None:
            log.info("TLS required for client connections")
            if self.opts.tls.handshake_first and not self.opts.tls.handshake_first_fallback_s:
                log.warning(
                    'Clients that are not using "TLS Handshake First" option will fail to connect'
                )
        compiled, why = native.status()
        log.info("%s: %s", "Compiled modules" if compiled else "Pure Python", why)
        log.info("Server is ready (name=%s, store_dir=%s)", self.name, self.opts.store_dir)

    async def _start_websocket(self, ws: WebSocketOptions) -> None:
        ctx = websocket_ssl_context(ws)
        bound = max(WS_MESSAGE_BYTES_MIN, 2 * self.opts.max_payload + WS_PROTOCOL_ROOM_BYTES)

        def session() -> WebSocketSession:
            return WebSocketSession(ws, lambda: self._new_connection(websocket=True), bound)

        loop = asyncio.get_running_loop()
        try:
            self._ws_listener = await loop.create_server(
                session,
                ws.host,
                max(ws.port, 0),
                reuse_address=True,
                ssl=ctx,
                ssl_handshake_timeout=ws.handshake_timeout_s if ctx is not None else None,
            )
        except OSError as exc:
            what = "unable to listen for websocket connections"
            raise _listen_error(exc, what, ws.host, ws.port) from exc
        self.ws_port = self._ws_listener.sockets[0].getsockname()[1]
        log.info("Listening for websocket clients on %s://%s:%d", ws.scheme, ws.host, self.ws_port)
        if ctx is None:
            log.warning("Websocket not configured with TLS. DO NOT USE IN PRODUCTION!")

    def _make_store_dir(self) -> None:
        """nats-server's two errors for a store directory it cannot use."""
        where = self.opts.store_dir
        if where.exists() and not where.is_dir():
            raise SystemExit(f"jetraft: storage directory is not a directory: {str(where)!r}")
        try:
            where.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SystemExit(
                f"jetraft: could not create storage directory - {exc.strerror or exc}: "
                f"{str(where)!r}"
            ) from None

    def _listeners(self) -> list[asyncio.Server]:
        return [x for x in (self._listener, self._ws_listener) if x is not None]

    def _close_listeners(self) -> None:
        """No new clients, on the client port or the websocket port."""
        for listener in self._listeners():
            listener.close()

    def request_stop(self) -> None:
        self._stopped.set()

    def _on_sigterm(self) -> None:
        lame_duck = self._lame_duck
        if lame_duck is None or lame_duck.done():  # nats-server: a lame duck ends its own way
            self.request_stop()

    async def serve_until_stopped(self) -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, self._on_sigterm)
        loop.add_signal_handler(signal.SIGINT, self.request_stop)
        loop.add_signal_handler(signal.SIGUSR2, self.enter_lame_duck)
        await self._stopped.wait()
        await self.shutdown()

    def enter_lame_duck(self) -> None:
        """Lame duck mode (cluster/lame_duck.py); once, and not while shutting down."""
        if self._lame_duck is not None or self._stopped.is_set() or self._listener is None:
            return
        self._lame_duck = asyncio.get_running_loop().create_task(self._run_lame_duck())

    async def _run_lame_duck(self) -> None:
        """Whatever happens in it, the lame duck ends in the shutdown: its listener is closed and
        SIGTERM no longer stops it."""
        try:
            await self._lame_duck_steps()
        except Exception:
            log.exception("lame duck mode failed; shutting down now")
        finally:
            self.request_stop()

    async def _lame_duck_steps(self) -> None:
        log.info("Entering lame duck mode, stop accepting new clients")
        self._close_listeners()
        if self.routes is not None:
            self.routes.enter_lame_duck()  # the peers stop advertising this node's client URLs
        handed = 0
        if self.jetstream is not None:
            try:
                handed = self.jetstream.authority.hand_off_leaderships()
            except Exception:  # the clients are still to be told and closed one by one
                log.exception("lame duck: handing leaderships on failed")
        if handed and await self._stop_within(LEADER_HANDOFF_WAIT_S):
            return
        clients = list(self._conns.values())
        if not clients:
            return
        others = self.connect_urls(own=False)  # where the clients can go (nats-server too)
        for conn in clients:
            conn.send_lame_duck_info(others)
        settings = self.opts.lame_duck
        if await self._stop_within(settings.grace_period_s):
            return
        log.info("Closing existing clients")
        pauses = close_pauses(len(clients), settings, random.Random())
        for conn, pause in zip(clients, [*pauses, 0.0], strict=True):
            conn.close()
            if pause and await self._stop_within(pause):
                return

    async def _stop_within(self, seconds: float) -> bool:
        """Wait ``seconds``; True when a stop was asked for meanwhile."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopped.wait(), seconds)
        return self._stopped.is_set()

    async def shutdown(self) -> None:
        log.info("Initiating shutdown")
        if self._lame_duck is not None and not self._lame_duck.done():
            self._lame_duck.cancel()
        self._close_listeners()
        if self.jetstream is not None:
            # waiting pull requests hear "409 Server Shutdown" while their clients can
            self.jetstream.server_shutdown()
        self.sys_requests.close()
        if self.jetstream is not None:
            await self.jetstream.close()
        if self.routes is not None:
            await self.routes.close()
        if self.monitor is not None:
            await self.monitor.stop()
        if self.https_monitor is not None:
            await self.https_monitor.stop()
        # the clients go last, as in nats-server: one that reconnects elsewhere at once finds
        # this process gone, not still closing its stores
        conns = list(self._conns.values())
        transports = [c.transport for c in conns if c.transport is not None]
        for conn in conns:
            conn.close()
        await _until_written(transports, SHUTDOWN_FLUSH_S)
        for listener in self._listeners():
            await asyncio.wait_for(listener.wait_closed(), SHUTDOWN_DRAIN_S)
        if self.opts.pid_file is not None:
            self.opts.pid_file.unlink(missing_ok=True)
        log.info("Server exiting")


def _listen_error(exc: OSError, what: str, host: str, port: int) -> OSError:
    """A listener's bind failure in nats-server's words: ``what: host:port, reason``, the
    reason as Go words it (lower case)."""
    why = os.strerror(exc.errno).lower() if exc.errno else str(exc)
    return OSError(exc.errno, f"{what}: {host}:{port}, {why}")


async def _until_written(transports: list[asyncio.Transport], timeout_s: float) -> None:
    """Until every closed client transport has handed what it still held to the kernel (the
    process exits right after the shutdown, and the kernel sends what it was given), or
    ``timeout_s``: a client that stopped reading does not hold the exit up for long."""
    deadline = time.monotonic() + timeout_s

    def held(transport: asyncio.Transport) -> int:
        try:
            return transport.get_write_buffer_size()
        except Exception:  # a transport already gone holds nothing
            return 0

    while any(held(t) for t in transports) and time.monotonic() < deadline:
        await asyncio.sleep(SHUTDOWN_FLUSH_POLL_S)
