"""The monitoring HTTP endpoint: nats-server's ``/varz``, ``/jsz``, ``/connz``, ``/routez``,
``/subsz``, ``/accountz`` and ``/healthz``, an index page at ``/``, and jetraft's own
``/jetraftz`` (the stream replicas' Raft view) and ``/metrics`` (Prometheus).

A deliberately tiny HTTP/1.0 responder on asyncio: GET only, one request per connection. Query
options are decoded as nats-server's handlers decode them (Go's ``strconv`` rules), and a bad
one gets nats-server's 400 and text. The documents are built in ``cluster/monitoring.py``
(the node) and ``cluster/jsz.py`` (JetStream); ``/metrics`` in ``cluster/metrics.py``.
Monitoring must stay available while the node is busy, and must never change state.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qsl, urlsplit

from cluster.jsz import JszError, JszOptions, jetraftz, jsz
from cluster.metrics import metrics_text
from cluster.monitoring import (
    CONN_STATES,
    ConnzOptions,
    CpuSampler,
    HealthCheck,
    MonitoredNode,
    MonitorError,
    RoutezOptions,
    SubszOptions,
    accountz,
    connz,
    health_problem,
    healthz,
    routez,
    subsz,
    varz,
)

if TYPE_CHECKING:
    import ssl

REQUEST_LINE_BYTES_MAX = 8192  # a longer request line gets 431, as from Go's net/http
REQUEST_HEAD_BYTES_MAX = 64 * 1024  # request line and headers together
REQUEST_TIMEOUT_S = 5.0  # a client that does not finish its request head by then is dropped
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}
_REASONS[431] = "Request Header Fields Too Large"
_REASONS[503] = "Service Unavailable"
JSON = "application/json"
TEXT = "text/plain; charset=utf-8"
HTML = "text/html; charset=utf-8"
NOT_FOUND_TEXT = "404 page not found\n"  # Go's http.NotFound
# (path, title) as nats-server's index page lists them, for the endpoints jetraft serves
INDEX = (
    ("/varz", "General"),
    ("/jsz", "JetStream"),
    ("/connz", "Connections"),
    ("/accountz", "Accounts"),
    ("/subsz", "Subscriptions"),
    ("/routez", "Routes"),
    ("/healthz", "Health Probe"),
    ("/jetraftz", "Stream Replicas (jetraft)"),
    ("/metrics", "Prometheus Metrics (jetraft)"),
)
Answer = tuple[int, str, bytes]  # status, content type, body


class _BadRequest(Exception):
    def __init__(self, status: int, error: str) -> None:
        super().__init__(error)
        self.status = status
        self.error = error


class Monitored(MonitoredNode, Protocol):
    """What the endpoints read from the node (``cluster/server.py``'s ``Server``)."""


class Query:
    """A request's query options, decoded as nats-server's monitor handlers decode them (the
    first value of a key; Go's ``strconv`` rules and error texts)."""

    def __init__(self, raw: str) -> None:
        self._values: dict[str, str] = {}
        for key, value in parse_qsl(raw, keep_blank_values=True):
            self._values.setdefault(key, value)

    def text(self, name: str) -> str:
        return self._values.get(name, "")

    def flag(self, name: str) -> bool:
        raw = self.text(name)
        if raw == "":
            return False
        if raw in ("1", "t", "T", "TRUE", "true", "True"):
            return True
        if raw in ("0", "f", "F", "FALSE", "false", "False"):
            return False
        raise MonitorError(
            f"Error decoding boolean for '{name}': strconv.ParseBool: parsing {_go_quote(raw)}: "
            "invalid syntax"
        )

    def number(self, name: str, *, unsigned: bool = False) -> int:
        raw = self.text(name)
        if raw == "":
            return 0
        digits = raw[1:] if raw[:1] in ("+", "-") and not unsigned else raw
        if not digits.isascii() or not digits.isdigit():
            kind, func = ("uint64", "ParseUint") if unsigned else ("int", "Atoi")
            raise MonitorError(
                f"Error decoding {kind} for '{name}': strconv.{func}: parsing "
                f"{_go_quote(raw)}: invalid syntax"
            )
        return int(raw)

    def subs(self) -> tuple[bool, bool]:
        """``subs=detail`` or a boolean ``subs`` (nats-server ``decodeSubs``)."""
        if self.text("subs").lower() == "detail":
            return False, True
        return self.flag("subs"), False


def _go_quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _json(status: int, body: Any) -> Answer:
    return status, JSON, json.dumps(body, indent=2).encode()


class MonitorServer:
    def __init__(
        self,
        server: Monitored,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
        cpu: CpuSampler | None = None,
        http_req_stats: dict[str, int] | None = None,
    ) -> None:
        self.server = server
        self.host = host
        self.port = port
        self._ssl = ssl_context  # https_port: the same endpoints over TLS
        self._srv: asyncio.Server | None = None
        # shared by the http and https monitors of a node, as nats-server's one set
        self.cpu = cpu or CpuSampler(server.counters.start_mono)
        self.http_req_stats = http_req_stats if http_req_stats is not None else {}
        self._endpoints: dict[str, Callable[[Query], Answer]] = {
            "/": self._index,
            "/varz": self._varz,
            "/jsz": self._jsz,
            "/connz": self._connz,
            "/routez": self._routez,
            "/subsz": self._subsz,
            "/subscriptionsz": self._subsz,
            "/accountz": self._accountz,
            "/healthz": self._healthz,
            "/jetraftz": self._jetraftz,
            "/metrics": self._metrics,
        }

    async def start(self) -> None:
        # the reader's limit bounds what one line may buffer before readuntil refuses it
        self._srv = await asyncio.start_server(
            self._handle,
            self.host,
            self.port,
            limit=REQUEST_HEAD_BYTES_MAX,
            ssl=self._ssl,
            # a handshake that stalls is bounded like a request head that does
            ssl_handshake_timeout=REQUEST_TIMEOUT_S if self._ssl is not None else None,
        )
        self.port = self._srv.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._srv is not None:
            self._srv.close()
            await self._srv.wait_closed()

    def _route(self, target: str) -> Answer:
        parts = urlsplit(target)
        path = parts.path.rstrip("/") or "/"
        endpoint = self._endpoints.get(path)
        if endpoint is None:
            return 404, TEXT, NOT_FOUND_TEXT.encode()
        self.http_req_stats[path] = self.http_req_stats.get(path, 0) + 1
        try:
            return endpoint(Query(parts.query))
        except (MonitorError, JszError) as exc:
            return 400, TEXT, str(exc).encode()

    def _index(self, _q: Query) -> Answer:
        links = "\n".join(
            f'  <a href=".{path}">{title} <code>{path}</code></a><br/>' for path, title in INDEX
        )
        title = "<h3>jetraft: nats-server 2.15.1 monitoring endpoints</h3>"
        page = f'<html lang="en">\n<body>\n  {title}\n{links}\n</body>\n</html>\n'
        return 200, HTML, page.encode()

    def _varz(self, _q: Query) -> Answer:
        return _json(200, varz(self.server, self.cpu, self.http_req_stats))

    def _jsz(self, q: Query) -> Answer:
        # decoded in HandleJsz's order, so the first malformed option is the one named
        flags = [q.flag(n) for n in ("accounts", "streams", "consumers", "direct-consumers")]
        config = q.flag("config")
        offset, limit = q.number("offset"), q.number("limit")
        leader_only, raft = q.flag("leader-only"), q.flag("raft")
        opts = JszOptions(
            accounts=flags[0],
            streams=flags[1],
            consumers=flags[2],  # flags[3], direct consumers: jetraft has none
            config=config,
            raft=raft,
            leader_only=leader_only,
            stream_leader_only=q.flag("stream-leader-only"),
            account=q.text("acc"),
            offset=offset,
            limit=limit,
        )
        server = self.server
        return _json(200, jsz(server.jetstream, server.js_setup, opts))

    def _connz(self, q: Query) -> Answer:
        sort = q.text("sort")
        auth = q.flag("auth")
        subs, detail = q.subs()
        offset, limit = q.number("offset"), q.number("limit")
        cid = q.number("cid", unsigned=True)
        state_text = q.text("state") or "open"
        state = CONN_STATES.get(state_text.lower())
        if state is None:
            raise MonitorError(f"Error decoding state for {state_text}")
        opts = ConnzOptions(
            sort=sort,
            auth=auth,
            subs=subs,
            subs_detail=detail,
            offset=offset,
            limit=limit,
            cid=cid,
            state=state,
            user=q.text("user"),
            account=q.text("acc"),
            mqtt_client=q.text("mqtt_client"),
        )
        return _json(200, connz(self.server, opts))

    def _routez(self, q: Query) -> Answer:
        subs, detail = q.subs()
        return _json(200, routez(self.server, RoutezOptions(subs=subs, subs_detail=detail)))

    def _subsz(self, q: Query) -> Answer:
        opts = SubszOptions(
            subs=q.flag("subs"),
            offset=q.number("offset"),
            limit=q.number("limit"),
            test=q.text("test"),
            account=q.text("acc"),
        )
        return _json(200, subsz(self.server, opts))

    def _accountz(self, q: Query) -> Answer:
        return _json(200, accountz(self.server, q.text("acc")))

    def _healthz(self, q: Query) -> Answer:
        # every flag is decoded first, as nats-server does: a bad value is its 400
        js_enabled = q.flag("js-enabled")  # deprecated by nats-server for js-enabled-only
        check = HealthCheck(
            js_enabled_only=q.flag("js-enabled-only") or js_enabled,
            js_server_only=q.flag("js-server-only"),
            js_meta_only=q.flag("js-meta-only"),
            account=q.text("account"),
            stream=q.text("stream"),
            consumer=q.text("consumer"),
        )
        details = q.flag("details")
        return _json(*healthz(health_problem(self.server, check), details))

    def _jetraftz(self, _q: Query) -> Answer:
        return _json(200, jetraftz(self.server.jetstream, self.server.js_setup))

    def _metrics(self, _q: Query) -> Answer:
        content_type, body = metrics_text(self.server, self.cpu, self.http_req_stats)
        return 200, content_type, body

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                line = await asyncio.wait_for(_read_head(reader), REQUEST_TIMEOUT_S)
                status, content_type, data = self._answer(line)
            except _BadRequest as bad:
                status, content_type, data = _json(bad.status, {"error": bad.error})
            head = (
                f"HTTP/1.0 {status} {_REASONS.get(status, 'Error')}\r\n"
                f"Content-Type: {content_type}\r\nAccess-Control-Allow-Origin: *\r\n"
                f"Content-Length: {len(data)}\r\n\r\n"
            )
            writer.write(head.encode() + data)
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    def _answer(self, line: bytes) -> Answer:
        parts = line.decode("latin-1").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            raise _BadRequest(400, "malformed request line")
        if parts[0] != "GET":
            return _json(405, {"error": "method not allowed"})
        return self._route(parts[1])


async def _read_head(reader: asyncio.StreamReader) -> bytes:
    """The request line, after reading (and bounding) the headers that follow it."""
    line = await _read_line(reader, REQUEST_LINE_BYTES_MAX)
    total = len(line)
    while True:
        header = await _read_line(reader, REQUEST_HEAD_BYTES_MAX)
        total += len(header)
        if total > REQUEST_HEAD_BYTES_MAX:
            raise _BadRequest(431, "request headers too large")
        if header.strip() == b"":
            return line


async def _read_line(reader: asyncio.StreamReader, limit: int) -> bytes:
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.LimitOverrunError as exc:
        raise _BadRequest(431, "request line or header too large") from exc
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            raise ConnectionError("closed before a request") from exc
        return exc.partial  # a peer that half-closes after its last line
    if len(line) > limit:
        raise _BadRequest(431, "request line or header too large")
    return line
