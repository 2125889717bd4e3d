"""The node's monitoring documents in nats-server's shapes: ``/varz``, ``/connz``, ``/routez``,
``/subsz``, ``/accountz`` and ``/healthz`` (monitor.go ``Varz``, ``Connz``, ``Routez``,
``Subsz``, ``Accountz``, ``HealthStatus``), and the statsz, gatewayz and leafz documents only the
system requests serve (``cluster/sys_requests.py``), with nats-server 2.15.1's keys, key order
and JSON types, probed from the binary.

Every number is one jetraft really has: the process's CPU and resident memory from
``resource`` and ``/proc/self/statm``, the connections' and routes' own counters, the
subscription index. A key nats-server fills from something jetraft does not have (Go runtime
settings, leaf nodes, gateways, a system account, round-trip times) is left out, or given the
zero value nats-server gives with that feature off; docs/nats-differences.md lists them.

Must never: change state, block, or count anything on the publish path itself (the counters
live with the connections and routes and are only read here).
"""

from __future__ import annotations

import os
import resource
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from cluster.client_conn import TLS_TIMEOUT_S, ClientConnection
from cluster.identity import GIT_COMMIT, GO_VERSION, JETRAFT_VERSION, PROTO, VERSION
from cluster.jetstream import JetStream
from cluster.jsz import ACCOUNT, JetStreamSetup, statsz_jetstream, varz_jetstream
from cluster.router import Router, Subscription
from cluster.routes import LinkStats, RouteManager, parse_route_url
from cluster.security_config import RouteAuthConfig, TLSConfig
from cluster.websocket import WebSocketOptions, websocket_varz
from engine.batch import BatchLimits
from protocol.auth_config import ClientAuthConfig
from protocol.subjects import is_valid_literal_subject, subject_matches, subjects_overlap
from protocol.timefmt import format_rfc3339nano

NS_PER_S = 1_000_000_000
CONN_LIST_DEFAULT = 1024  # nats-server DefaultConnListSize
SUB_LIST_DEFAULT = 1024  # nats-server DefaultSubListSize
CLOSED_CONNECTIONS_MAX = 10_000  # nats-server's default max_closed_clients
CPU_SAMPLE_MIN_S = 1.0  # nats-server samples the CPU once a second
SORT_OPTIONS = (
    "cid",
    "start",
    "subs",
    "pending",
    "msgs_to",
    "msgs_from",
    "bytes_to",
    "bytes_from",
    "last",
    "idle",
    "uptime",
    "stop",
    "reason",
    "rtt",
)
CONN_STATES = {"open": "open", "closed": "closed", "any": "all", "all": "all"}


class MonitorError(ValueError):
    """A request nats-server answers with 400 and this text."""


def go_uptime(ns: int) -> str:
    """nats-server's ``myUptime``: whole seconds as ``1y2d3h4m5s``, leading zero units left
    out (``7s``, ``1m2s``, ``3h0m1s``)."""
    secs = max(0, ns) // NS_PER_S
    mins, hours = secs // 60, secs // 3600
    days = hours // 24
    years = days // 365
    if years:
        return f"{years}y{days % 365}d{hours % 24}h{mins % 60}m{secs % 60}s"
    if days:
        return f"{days}d{hours % 24}h{mins % 60}m{secs % 60}s"
    if hours:
        return f"{hours}h{mins % 60}m{secs % 60}s"
    if mins:
        return f"{mins}m{secs % 60}s"
    return f"{secs}s"


def _time(ns: int) -> str:
    return format_rfc3339nano(ns)


def go_float(value: float) -> float | int:
    """A float64 as Go's encoding/json writes it: a whole number without ``.0``."""
    return int(value) if float(value).is_integer() else value


def cores() -> int:
    """CPUs this process may run on (Go's ``runtime.NumCPU``: the affinity mask)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def resident_bytes() -> int:
    """The process's resident set size now (``/proc/self/statm``), 0 where there is none."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class CpuSampler:
    """The process's CPU use in percent of one core, as nats-server's ``cpu``: over the time
    since the previous sample once at least a second has passed (nats-server samples every
    second), else the last figure; the first figure covers the time since the server was made.
    Read at request time: no thread of its own."""

    def __init__(self, start_mono: float) -> None:
        self._last_mono = start_mono
        self._last_cpu = _cpu_seconds()
        self._value = 0.0
        self._sampled = False

    def percent(self) -> float:
        now, cpu = time.monotonic(), _cpu_seconds()
        elapsed = now - self._last_mono
        if elapsed > 0 and (elapsed >= CPU_SAMPLE_MIN_S or not self._sampled):
            self._value = round(100.0 * (cpu - self._last_cpu) / elapsed, 1)
            self._sampled = True
            if elapsed >= CPU_SAMPLE_MIN_S:
                self._last_mono, self._last_cpu = now, cpu
        return self._value


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass
class ConnRecord:
    """A connection as /connz lists it: its ConnInfo (without the optional lists), the times it
    sorts by (``stop_ns`` 0 while open), its user and its subscriptions. Closed connections are
    kept as such records."""

    info: dict[str, Any]
    start_ns: int
    last_ns: int
    stop_ns: int
    user: str
    subs: list[dict[str, Any]]


@dataclass
class NodeCounters:
    """The node's running totals that outlive connections (nats-server keeps them on the
    server): connections ever accepted, slow consumers and stale connections cut off, the
    traffic of closed connections, and the last closed connections for /connz."""

    start_ns: int = field(default_factory=time.time_ns)
    start_mono: float = field(default_factory=time.monotonic)
    total_connections: int = 0
    slow_consumers: int = 0
    stale_connections: int = 0
    closed_in_msgs: int = 0
    closed_in_bytes: int = 0
    closed_out_msgs: int = 0
    closed_out_bytes: int = 0
    closed: deque[ConnRecord] = field(default_factory=lambda: deque(maxlen=CLOSED_CONNECTIONS_MAX))

    def count_slow_consumer(self) -> None:
        self.slow_consumers += 1

    def count_stale_connection(self) -> None:
        self.stale_connections += 1

    def connection_closed(self, conn: ClientConnection) -> None:
        st = conn.stats
        self.closed_in_msgs += st.in_msgs
        self.closed_in_bytes += st.in_bytes
        self.closed_out_msgs += st.out_msgs
        self.closed_out_bytes += st.out_bytes
        stop = time.time_ns()
        info = _conn_info(conn, stop, stopped=True)
        info["stop"] = _time(stop)
        info["reason"] = st.reason
        subs = [_sub_detail(s) for s in conn.subs.values()]
        self.closed.append(ConnRecord(info, st.start_ns, st.last_ns, stop, st.user, subs))


class NodeOptions(Protocol):
    """The server options the documents report (``cluster/server.py``'s ``ServerOptions``)."""

    host: str
    http_host: str
    http_port: int
    store_dir: Path
    max_payload: int
    max_connections: int
    max_pending: int
    max_control_line: int
    write_deadline_s: float
    ping_interval_s: float
    ping_max: int
    tls: TLSConfig | None
    client_auth: ClientAuthConfig
    cluster_name: str
    cluster_host: str
    routes: list[str]
    route_auth: RouteAuthConfig
    route_tls: TLSConfig | None
    batch_limits: BatchLimits
    websocket: WebSocketOptions | None


class MonitoredNode(Protocol):
    """What the documents read of the node (``cluster/server.py``'s ``Server``)."""

    server_id: str
    name: str
    router: Router
    counters: NodeCounters

    @property
    def opts(self) -> NodeOptions: ...

    @property
    def port(self) -> int: ...

    @property
    def routes(self) -> RouteManager | None: ...

    @property
    def jetstream(self) -> JetStream | None: ...

    @property
    def connections(self) -> Mapping[int, ClientConnection]: ...

    @property
    def https_port(self) -> int: ...

    ws_port: int

    @property
    def js_setup(self) -> JetStreamSetup: ...

    def connect_urls(self) -> list[str]: ...


# --- /varz ----------------------------------------------------------------------------------
def varz(node: MonitoredNode, cpu: CpuSampler, http_req_stats: Mapping[str, int]) -> dict[str, Any]:
    """nats-server's ``Varz``, in its key order."""
    opts, counters = node.opts, node.counters
    now = time.time_ns()
    tls = opts.tls
    out: dict[str, Any] = {
        "server_id": node.server_id,
        "server_name": node.name,
        "version": VERSION,
        "proto": PROTO,
        "git_commit": GIT_COMMIT,
        "go": GO_VERSION,
        "host": opts.host,
        "port": node.port,
    }
    if opts.client_auth.enabled:
        out["auth_required"] = True
    if tls is not None:
        out["tls_required"] = True
        if tls.verify:
            out["tls_verify"] = True
    urls = node.connect_urls()
    if urls:
        out["connect_urls"] = urls
    out["max_connections"] = opts.max_connections
    out["ping_interval"] = round(opts.ping_interval_s * NS_PER_S)
    out["ping_max"] = opts.ping_max
    out["http_host"] = opts.http_host or opts.host
    out["http_port"] = max(opts.http_port, 0)
    out["http_base_path"] = ""
    out["https_port"] = node.https_port
    out["auth_timeout"] = go_float(opts.client_auth.timeout_s)
    out["max_control_line"] = opts.max_control_line
    out["max_payload"] = opts.max_payload
    out["max_pending"] = opts.max_pending
    out["cluster"] = _cluster_varz(node)
    # no gateways, leaf nodes or MQTT: nats-server's objects with those off
    out["gateway"] = {}
    out["leaf"] = {}
    out["mqtt"] = {}
    out["websocket"] = websocket_varz(opts.websocket, node.ws_port)
    out["jetstream"] = varz_jetstream(node.jetstream, node.js_setup)
    out["tls_timeout"] = go_float(tls.timeout_s if tls is not None else TLS_TIMEOUT_S)
    out["write_deadline"] = round(opts.write_deadline_s * NS_PER_S)
    out["start"] = _time(counters.start_ns)
    out["now"] = _time(now)
    out["uptime"] = go_uptime(now - counters.start_ns)
    out["mem"] = resident_bytes()
    out["cores"] = cores()
    out["cpu"] = go_float(cpu.percent())
    t = _totals(node)
    out["connections"] = t.connections
    out["total_connections"] = counters.total_connections
    out["routes"] = len(t.routes)
    out["remotes"] = len({r.remote_name for r in t.routes})
    out["leafnodes"] = 0
    out["in_msgs"] = t.in_msgs
    out["in_bytes"] = t.in_bytes
    out["in_client_msgs"] = t.client_in_msgs
    out["in_client_bytes"] = t.client_in_bytes
    out["out_msgs"] = t.out_msgs
    out["out_bytes"] = t.out_bytes
    out["out_client_msgs"] = t.client_out_msgs
    out["out_client_bytes"] = t.client_out_bytes
    out["slow_consumers"] = counters.slow_consumers + t.route_slow_consumers
    out["stale_connections"] = counters.stale_connections
    out["stalled_clients"] = 0  # jetraft never stalls a publisher: it cuts the slow reader off
    out["subscriptions"] = node.router.sublist.count()
    out["http_req_stats"] = dict(http_req_stats)
    out["config_load_time"] = _time(counters.start_ns)  # no reload: loaded at start
    out["config_digest"] = ""
    out["slow_consumer_stats"] = _slow_consumer_stats(node, t)
    out["stale_connection_stats"] = _stale_connection_stats(node)
    out["jetraft_version"] = JETRAFT_VERSION
    out["pid"] = os.getpid()
    return out


@dataclass(frozen=True)
class _Totals:
    """The node's traffic now: its clients' (open and closed) and, in all, its routes' too."""

    connections: int
    routes: list[LinkStats]
    client_in_msgs: int
    client_in_bytes: int
    client_out_msgs: int
    client_out_bytes: int
    route_slow_consumers: int

    @property
    def in_msgs(self) -> int:
        return self.client_in_msgs + sum(r.in_msgs for r in self.routes)

    @property
    def in_bytes(self) -> int:
        return self.client_in_bytes + sum(r.in_bytes for r in self.routes)

    @property
    def out_msgs(self) -> int:
        return self.client_out_msgs + sum(r.out_msgs for r in self.routes)

    @property
    def out_bytes(self) -> int:
        return self.client_out_bytes + sum(r.out_bytes for r in self.routes)


def _totals(node: MonitoredNode) -> _Totals:
    counters = node.counters
    conns = list(node.connections.values())
    return _Totals(
        connections=len(conns),
        routes=node.routes.link_stats() if node.routes is not None else [],
        client_in_msgs=counters.closed_in_msgs + sum(c.stats.in_msgs for c in conns),
        client_in_bytes=counters.closed_in_bytes + sum(c.stats.in_bytes for c in conns),
        client_out_msgs=counters.closed_out_msgs + sum(c.stats.out_msgs for c in conns),
        client_out_bytes=counters.closed_out_bytes + sum(c.stats.out_bytes for c in conns),
        route_slow_consumers=node.routes.slow_consumers if node.routes is not None else 0,
    )


def _slow_consumer_stats(node: MonitoredNode, t: _Totals) -> dict[str, int]:
    return {
        "clients": node.counters.slow_consumers,
        "routes": t.route_slow_consumers,
        "gateways": 0,
        "leafs": 0,
    }


def _stale_connection_stats(node: MonitoredNode) -> dict[str, int]:
    return {"clients": node.counters.stale_connections, "routes": 0, "gateways": 0, "leafs": 0}


def _cluster_varz(node: MonitoredNode) -> dict[str, Any]:
    """``ClusterOptsVarz``: empty on a single server, as nats-server's without a cluster."""
    opts = node.opts
    if node.routes is None:
        return {}
    out: dict[str, Any] = {
        "name": opts.cluster_name,
        "addr": opts.cluster_host,
        "cluster_port": node.routes.port,
        "auth_timeout": go_float(opts.route_auth.timeout_s),
    }
    urls = []
    for url in opts.routes:  # host:port only, as nats-server (no credentials)
        host, port = parse_route_url(url)
        urls.append(f"{host}:{port}")
    if urls:
        out["urls"] = urls
    route_tls = opts.route_tls
    out["tls_timeout"] = go_float(route_tls.timeout_s if route_tls is not None else TLS_TIMEOUT_S)
    if route_tls is not None:
        out["tls_required"] = True
        out["tls_verify"] = True
    return out


# --- /connz ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ConnzOptions:
    sort: str = ""
    auth: bool = False
    subs: bool = False
    subs_detail: bool = False
    offset: int = 0
    limit: int = 0
    cid: int = 0
    state: str = "open"
    user: str = ""
    account: str = ""
    mqtt_client: str = ""
    # open connections with a subscription that collides with it (the system request's option;
    # with ``account`` only)
    filter_subject: str = ""


def _sub_detail(sub: Subscription, *, account: bool = False) -> dict[str, Any]:
    """nats-server's ``SubDetail``; internal subscriptions have no connection (cid 0)."""
    out: dict[str, Any] = {}
    if account:
        out["account"] = ACCOUNT
        out["account_tag"] = ACCOUNT
    out["subject"] = sub.subject
    if sub.queue:
        out["qgroup"] = sub.queue
    out["sid"] = sub.sid
    out["msgs"] = sub.delivered
    if sub.max_msgs:
        out["max"] = sub.max_msgs
    conn = sub.conn
    out["cid"] = conn.cid if isinstance(conn, ClientConnection) else 0
    return out


class _Counted(Protocol):
    in_msgs: int
    out_msgs: int
    in_bytes: int
    out_bytes: int


def _activity(start_ns: int, last_ns: int, now_ns: int) -> dict[str, Any]:
    """A connection's or route's start, last activity, uptime and idle time."""
    return {
        "start": _time(start_ns),
        "last_activity": _time(last_ns),
        "uptime": go_uptime(now_ns - start_ns),
        "idle": go_uptime(now_ns - last_ns),
    }


def _traffic(counted: _Counted) -> dict[str, int]:
    return {
        "in_msgs": counted.in_msgs,
        "out_msgs": counted.out_msgs,
        "in_bytes": counted.in_bytes,
        "out_bytes": counted.out_bytes,
    }


def _conn_info(conn: ClientConnection, now_ns: int, *, stopped: bool = False) -> dict[str, Any]:
    """nats-server's ``ConnInfo`` of a connection (without the optional lists)."""
    st = conn.stats
    out: dict[str, Any] = {
        "cid": conn.cid,
        "kind": "Client",
        "type": "nats",
        "ip": st.ip,
        "port": st.port,
        **_activity(st.start_ns, st.last_ns, now_ns),
        "pending_bytes": 0 if stopped else conn.pending_bytes(),
        **_traffic(st),
        "subscriptions": len(conn.subs),
    }
    for key, value in (("name", conn.name), ("lang", st.lang), ("version", st.version)):
        if value:
            out[key] = value
    tls = conn.tls_session()
    if tls is not None:
        out["tls_version"], out["tls_cipher_suite"] = tls
    return out


def _sort_key(sort: str, now_ns: int) -> tuple[Callable[[ConnRecord], Any], bool]:
    """(key, descending) for a sort option; only cid, start, uptime and reason ascend."""
    simple = {
        "subs": "subscriptions",
        "pending": "pending_bytes",
        "msgs_to": "out_msgs",
        "msgs_from": "in_msgs",
        "bytes_to": "out_bytes",
        "bytes_from": "in_bytes",
    }
    if sort in simple:
        name = simple[sort]
        return (lambda r: r.info[name]), True
    if sort == "last":
        return (lambda r: r.last_ns), True
    if sort == "idle":
        return (lambda r: now_ns - r.last_ns), True
    if sort == "uptime":
        return (lambda r: (r.stop_ns or now_ns) - r.start_ns), False
    if sort == "stop":
        return (lambda r: r.stop_ns), True
    if sort == "reason":
        return (lambda r: r.info.get("reason", "")), False
    if sort == "rtt":
        return (lambda r: 0), True  # no round-trip times are measured: the order stays by cid
    return (lambda r: r.info["cid"]), False


def connz(node: MonitoredNode, opts: ConnzOptions) -> dict[str, Any]:
    """nats-server's ``Connz``: open (and kept closed) client connections, paged and sorted."""
    sort = opts.sort or "cid"
    if sort not in SORT_OPTIONS:
        raise MonitorError(f"invalid sorting option: {sort}")
    if sort in ("stop", "reason") and opts.state != "closed":
        raise MonitorError(f"sort by {sort} only valid on closed connections")
    offset = max(opts.offset, 0)
    limit = opts.limit if opts.limit > 0 else CONN_LIST_DEFAULT
    if opts.cid > 0:
        limit = 1
    subject_filter = opts.filter_subject if opts.filter_subject != ">" else ""
    if subject_filter and not opts.account:
        raise MonitorError("filter by subject only valid with account filtering")
    now = time.time_ns()
    out: dict[str, Any] = {"server_id": "", "now": _time(now)}
    if opts.account and opts.account != ACCOUNT:
        # nats-server answers an unknown account with an empty, id-less document
        out.update(num_connections=0, total=0, offset=offset, limit=limit, connections=None)
        return out
    out["server_id"] = node.server_id
    rows: list[ConnRecord] = []
    total = 0
    if opts.state in ("open", "all"):
        open_conns = list(node.connections.values())
        total += len(open_conns)
        for conn in open_conns:
            if opts.cid and conn.cid != opts.cid:
                continue
            if (opts.user and conn.stats.user != opts.user) or opts.mqtt_client:
                continue
            if subject_filter and not any(
                subjects_overlap(subject_filter, sub.subject) for sub in conn.subs.values()
            ):
                continue
            subs = [_sub_detail(s) for s in conn.subs.values()]
            st = conn.stats
            rows.append(
                ConnRecord(_conn_info(conn, now), st.start_ns, st.last_ns, 0, st.user, subs)
            )
    if opts.state in ("closed", "all"):
        closed = list(node.counters.closed)
        total += len(closed)
        if not (opts.cid and any(r.info["cid"] == opts.cid for r in rows)):
            for cc in closed:
                if opts.cid and cc.info["cid"] != opts.cid:
                    continue
                if (opts.user and cc.user != opts.user) or opts.mqtt_client:
                    continue
                rows.append(cc)
    key, descending = _sort_key(sort, now)
    rows.sort(key=key, reverse=descending)
    page = rows[min(offset, len(rows)) :][:limit]
    conns = []
    for row in page:
        info = dict(row.info)
        if row.subs:
            if opts.subs_detail:
                info["subscriptions_list_detail"] = row.subs
            elif opts.subs:
                info["subscriptions_list"] = [s["subject"] for s in row.subs]
        if opts.auth:
            if row.user:
                info["authorized_user"] = row.user
            info["name_tag"] = ACCOUNT  # the account's name tag (nats-server: its name)
        conns.append(info)
    out.update(num_connections=len(conns), total=total, offset=offset, limit=limit)
    out["connections"] = conns
    return out


# --- /routez --------------------------------------------------------------------------------
@dataclass(frozen=True)
class RoutezOptions:
    subs: bool = False
    subs_detail: bool = False


def routez(node: MonitoredNode, opts: RoutezOptions) -> dict[str, Any]:
    """nats-server's ``Routez``: one entry per route connection. jetraft sends on the
    connection it dialed and receives on the one it accepted, so each peer shows twice."""
    now = time.time_ns()
    links = node.routes.link_stats() if node.routes is not None else []
    remote: dict[str, list[Subscription]] = {}
    if links:
        for sub in node.router.sublist.subscribers():
            if sub.route is not None:
                remote.setdefault(sub.route, []).append(sub)
    routes = [_route_info(link, remote, now, opts) for link in links]
    return {
        "server_id": node.server_id,
        "server_name": node.name,
        "now": _time(now),
        "num_routes": len(routes),
        "routes": routes,
    }


def _route_info(
    link: LinkStats, remote: Mapping[str, list[Subscription]], now: int, opts: RoutezOptions
) -> dict[str, Any]:
    # a peer's interest arrives on the connection it dialed (the one this node accepted)
    subs = [] if link.did_solicit else remote.get(link.remote_name, [])
    out: dict[str, Any] = {
        "rid": link.rid,
        "remote_id": link.remote_id,
        "remote_name": link.remote_name,
        "did_solicit": link.did_solicit,
        "is_configured": True,  # only nodes of the configured routes are admitted
        "ip": link.ip,
        "port": link.port,
        **_activity(link.start_ns, link.last_ns, now),
        "pending_size": link.pending,
        **_traffic(link),
        "subscriptions": len(subs),
    }
    if subs and opts.subs_detail:
        out["subscriptions_list_detail"] = [_sub_detail(s) for s in subs]
    elif subs and opts.subs:
        out["subscriptions_list"] = [s.subject for s in subs]
    return out


# --- /subsz ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class SubszOptions:
    subs: bool = False
    offset: int = 0
    limit: int = 0
    test: str = ""
    account: str = ""


def sublist_stats(router: Router) -> dict[str, Any]:
    """nats-server's ``SublistStats`` but ``num_matches`` and ``cache_hit_rate``: jetraft does
    not count matches (it would cost every publish a counter)."""
    sublist = router.sublist
    inserts, removes = sublist.changes()
    max_fanout, avg_fanout = sublist.fanout()
    return {
        "num_subscriptions": sublist.count(),
        "num_cache": sublist.cache_count(),
        "num_inserts": inserts,
        "num_removes": removes,
        "max_fanout": max_fanout,
        "avg_fanout": go_float(avg_fanout),
    }


def _local_subs(router: Router) -> Iterable[Subscription]:
    """Clients' and the server's own subscriptions, not peers' interest (``localSubs``)."""
    return (s for s in router.sublist.subscribers() if s.route is None)


def subsz(node: MonitoredNode, opts: SubszOptions) -> dict[str, Any]:
    """nats-server's ``Subsz``: the subscription index's statistics and, with ``subs``, its
    local subscriptions (those a literal ``test`` subject would reach), paged."""
    if opts.test and not is_valid_literal_subject(opts.test):
        raise MonitorError(f"invalid test subject, must be valid publish subject: {opts.test}")
    offset = max(opts.offset, 0)
    limit = opts.limit if opts.limit > 0 else SUB_LIST_DEFAULT
    ours = not opts.account or opts.account == ACCOUNT
    out: dict[str, Any] = {"server_id": node.server_id, "now": _time(time.time_ns())}
    if ours:
        out.update(sublist_stats(node.router))
    else:
        out.update(num_subscriptions=0, num_cache=0, num_inserts=0, num_removes=0)
        out.update(max_fanout=0, avg_fanout=0)
    details: list[dict[str, Any]] = []
    if opts.subs and ours:
        details = [
            _sub_detail(s, account=True)
            for s in _local_subs(node.router)
            if not opts.test or subject_matches(s.subject, opts.test)
        ]
    out["total"] = len(details)
    out["offset"] = offset
    out["limit"] = limit
    page = details[min(offset, len(details)) :][:limit]
    if page:
        out["subscriptions_list"] = page
    return out


# --- /accountz ------------------------------------------------------------------------------
def accountz(node: MonitoredNode, account: str) -> dict[str, Any]:
    """nats-server's ``Accountz``: jetraft has one account (``$G``) and no system account."""
    out: dict[str, Any] = {"server_id": node.server_id, "now": _time(time.time_ns())}
    if not account:
        out["accounts"] = [ACCOUNT]
        return out
    if account != ACCOUNT:
        raise MonitorError(f"Account {account} does not exist")
    sublist = node.router.sublist
    out["account_detail"] = {
        "account_name": ACCOUNT,
        "update_time": _time(node.counters.start_ns),
        "expired": False,
        "complete": True,
        "jetstream_enabled": node.jetstream is not None,
        "leafnode_connections": 0,
        "client_connections": len(node.connections),
        "subscriptions": sublist.count(),
        "name_tag": ACCOUNT,
        "sublist_stats": sublist_stats(node.router),
    }
    return out


# --- the system requests' own documents ---------------------------------------------------------
def statsz(node: MonitoredNode, cpu: CpuSampler) -> dict[str, Any]:
    """nats-server's ``ServerStats`` (what ``$SYS.REQ.SERVER.PING`` answers), in its key order,
    from the counters /varz reads; the optional keys only when nats-server writes them."""
    counters = node.counters
    t = _totals(node)
    out: dict[str, Any] = {
        "start": _time(counters.start_ns),
        "mem": resident_bytes(),
        "cores": cores(),
        "cpu": go_float(cpu.percent()),
        "connections": t.connections,
        "total_connections": counters.total_connections,
        # accounts with a client: the one account always holds the server's own subscriptions
        "active_accounts": 1,
        "subscriptions": node.router.sublist.count(),
        "sent": _msg_bytes(t.out_msgs, t.out_bytes),
        "sent_to_clients": _msg_bytes(t.client_out_msgs, t.client_out_bytes),
        "received": _msg_bytes(t.in_msgs, t.in_bytes),
        "received_from_clients": _msg_bytes(t.client_in_msgs, t.client_in_bytes),
        "slow_consumers": counters.slow_consumers + t.route_slow_consumers,
    }
    if counters.slow_consumers or t.route_slow_consumers:
        out["slow_consumer_stats"] = _slow_consumer_stats(node, t)
    if counters.stale_connections:
        out["stale_connections"] = counters.stale_connections
        out["stale_connection_stats"] = _stale_connection_stats(node)
    if t.routes:
        out["routes"] = [
            {
                "rid": r.rid,
                "name": r.remote_name,
                "sent": _msg_bytes(r.out_msgs, r.out_bytes),
                "received": _msg_bytes(r.in_msgs, r.in_bytes),
                "pending": r.pending,
            }
            for r in t.routes
        ]
    # this server and the peers it reaches (nats-server: the servers it hears statsz from)
    peers = node.routes.connected_peers() if node.routes is not None else []
    out["active_servers"] = 1 + len(peers)
    js = statsz_jetstream(node.jetstream, node.js_setup)
    if js is not None:
        out["jetstream"] = js
    return out


def _msg_bytes(msgs: int, size: int) -> dict[str, int]:
    return {"msgs": msgs, "bytes": size}


def gatewayz(node: MonitoredNode) -> dict[str, Any]:
    """nats-server's ``Gatewayz`` without gateways (jetraft has none)."""
    out: dict[str, Any] = {"server_id": node.server_id, "now": _time(time.time_ns())}
    out.update(outbound_gateways={}, inbound_gateways={})
    return out


def leafz(node: MonitoredNode) -> dict[str, Any]:
    """nats-server's ``Leafz`` without leaf nodes (jetraft has none)."""
    return {"server_id": node.server_id, "now": _time(time.time_ns()), "leafnodes": 0, "leafs": []}


# --- /healthz --------------------------------------------------------------------------------

GLOBAL_ACCOUNT = "$G"
HTTP_BAD_REQUEST = 400
HTTP_NOT_FOUND = 404
HTTP_UNAVAILABLE = 503


@dataclass(frozen=True)
class HealthCheck:
    """``/healthz``'s options (nats-server ``HealthzOptions``)."""

    js_enabled_only: bool = False  # also the deprecated js-enabled
    js_server_only: bool = False
    js_meta_only: bool = False
    account: str = ""
    stream: str = ""
    consumer: str = ""


@dataclass(frozen=True)
class HealthProblem:
    """One reason for a non-200 ``/healthz`` (nats-server ``HealthzError``)."""

    code: int
    status: str  # "unavailable", or "error" for a bad request
    kind: str  # CONNECTION, BAD_REQUEST, JETSTREAM, ACCOUNT, STREAM, CONSUMER
    error: str
    account: str = ""
    stream: str = ""
    consumer: str = ""


def health_problem(node: MonitoredNode, check: HealthCheck) -> HealthProblem | None:
    """What nats-server's ``healthz`` would report for this node, in its order: the options'
    own errors, then (unless only the server is asked about) JetStream's meta layer, then the
    account, stream and consumer asked about, or every hosted stream."""
    if check.stream and not check.account:
        error = '"account" must not be empty when checking stream health'
        return HealthProblem(HTTP_BAD_REQUEST, "error", "BAD_REQUEST", error)
    if check.consumer and not check.stream:
        error = '"stream" must not be empty when checking consumer health'
        return HealthProblem(HTTP_BAD_REQUEST, "error", "BAD_REQUEST", error)
    js = node.jetstream
    if check.js_server_only or js is None or check.js_enabled_only:
        return None
    authority = js.authority

    def unavailable(kind: str, error: str, **names: str) -> HealthProblem:
        return HealthProblem(HTTP_UNAVAILABLE, "unavailable", kind, error, **names)

    def not_found(kind: str, error: str, **names: str) -> HealthProblem:
        return HealthProblem(HTTP_NOT_FOUND, "unavailable", kind, error, **names)

    meta = authority.meta_health()
    if meta is None and not authority.ready.is_set():
        meta = "JetStream has not established contact with a meta leader"
    if meta is not None:
        return unavailable("JETSTREAM", meta)
    if check.js_meta_only:
        return None
    if check.account and check.account != GLOBAL_ACCOUNT:
        return not_found(
            "ACCOUNT", f'JetStream account "{check.account}" not found', account=check.account
        )
    if not check.stream:
        why = authority.health()
        return None if why is None else unavailable("STREAM", why, account=GLOBAL_ACCOUNT)
    names = {"account": check.account, "stream": check.stream}
    host = authority.hosts.get(check.stream)
    if host is None:
        error = f'JetStream stream "{check.stream}" not found on account "{check.account}"'
        return not_found("STREAM", error, **names)
    why = authority.stream_health(check.stream)
    if why is not None:
        return unavailable("STREAM", why, **names)
    if check.consumer and check.consumer not in host.consumers.names():
        error = (
            f'JetStream consumer "{check.consumer}" not found for stream "{check.stream}" '
            f'on account "{check.account}"'
        )
        return not_found("CONSUMER", error, consumer=check.consumer, **names)
    return None


def healthz(problem: HealthProblem | None, details: bool) -> tuple[int, dict[str, Any]]:
    """The status and document: ``{"status":"ok"}``, or the problem as ``error`` (or, with
    ``details``, an ``errors`` list with its type and names)."""
    if problem is None:
        return 200, {"status": "ok"}
    # nats-server names the code in the body only for an unhealthy node (503)
    code = {"status_code": problem.code} if problem.code == HTTP_UNAVAILABLE else {}
    if not details:
        return problem.code, {"status": problem.status, **code, "error": problem.error}
    item: dict[str, Any] = {"type": problem.kind}
    for key in ("account", "stream", "consumer"):
        if getattr(problem, key):
            item[key] = getattr(problem, key)
    item["error"] = problem.error
    return problem.code, {"status": "error", **code, "errors": [item]}
