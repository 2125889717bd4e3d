"""NATS over WebSocket: nats-server's ``websocket { ... }`` block.

Owns: the websocket listener's settings (read and checked as nats-server reads them), the HTTP
upgrade (origin rules included), and carrying the NATS protocol inside binary frames to and from
an ordinary ``ClientConnection``, which sees a transport like any other.
Must never: accept a setting it does not act on (the websocket-only authorization, cookies and
headers are refused by name in cluster/config_schema.py), or read a message larger than its
bound. The framing, masking, fragments, ping/pong, close handshake and permessage-deflate are
the ``websockets`` library's sans-I/O protocol; this module only drives it.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

from websockets.datastructures import Headers
from websockets.exceptions import InvalidURI
from websockets.extensions.permessage_deflate import ServerPerMessageDeflateFactory
from websockets.frames import CloseCode, Frame, Opcode
from websockets.http11 import Request
from websockets.protocol import State
from websockets.server import ServerProtocol

from cluster.config_file import ConfigError, ConfMap
from cluster.security_config import (
    TLSConfig,
    block_error,
    find_key,
    seconds,
    server_ssl_context,
    tls_from,
)

if TYPE_CHECKING:
    from cluster.client_conn import ClientConnection

log = logging.getLogger("jetraft.websocket")

WS_DEFAULT_HOST = "0.0.0.0"  # nats-server's, whatever the client port's host
# nats-server's default for handshake_timeout: the upgrade (and TLS before it) must end this soon
WS_HANDSHAKE_TIMEOUT_S = 2.0
# the largest websocket message read: a client may send many PUBs in one, so twice the largest
# payload plus room for the protocol lines, and never less than this
WS_MESSAGE_BYTES_MIN = 8 * 1024 * 1024
WS_PROTOCOL_ROOM_BYTES = 64 * 1024
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}

# a closed connection's reason (client_conn CLOSED_*) -> the close status, as nats-server maps it
_CLOSE_STATUS = {
    "Client Closed": CloseCode.NORMAL_CLOSURE,
    "Authentication Timeout": CloseCode.POLICY_VIOLATION,
    "Authentication Failure": CloseCode.POLICY_VIOLATION,
    "Slow Consumer (Pending Bytes)": CloseCode.POLICY_VIOLATION,
    "Slow Consumer (Write Deadline)": CloseCode.POLICY_VIOLATION,
    "Protocol Violation": CloseCode.PROTOCOL_ERROR,
    "Stale Connection": CloseCode.GOING_AWAY,
}


@dataclass(frozen=True)
class WebSocketOptions:
    host: str
    port: int  # -1: any free port
    tls: TLSConfig | None  # None only with no_tls
    compression: bool = False
    handshake_timeout_s: float = WS_HANDSHAKE_TIMEOUT_S
    same_origin: bool = False
    allowed_origins: tuple[tuple[str, str, int], ...] = ()  # (scheme, host, port)
    origin_urls: tuple[str, ...] = ()  # allowed_origins as written (/varz shows them)
    handshake_timeout_set: bool = False  # /varz shows only a configured one

    @property
    def scheme(self) -> str:
        return "wss" if self.tls is not None else "ws"


def _origin(text: str) -> tuple[str, str, int]:
    """(scheme, host, port) of an http(s) origin URL, the port defaulted by the scheme."""
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    try:
        port = parts.port or _DEFAULT_PORTS.get(scheme, 0)
    except ValueError as exc:
        raise ValueError(f"unable to parse allowed origin: {exc}") from None
    if scheme not in ("http", "https"):
        raise ValueError(
            f"unable to parse allowed origin {text!r}: allowed origins must be absolute URLs "
            "with http or https scheme"
        )
    if not parts.hostname:
        raise ValueError(f"unable to parse allowed origin {text!r}: host is required")
    return scheme, parts.hostname.lower(), port


def websocket_from(block: Any, default_host: str) -> WebSocketOptions | None:
    """The ``websocket`` block; None when it sets no port (nats-server ignores it then)."""
    if not isinstance(block, ConfMap):
        raise ConfigError("config: 'websocket' must be a block { ... }")

    host, port = default_host, 0
    if (found := find_key(block, "listen")) is not None:
        key, value = found
        text = str(value)
        h, sep, p = text.rpartition(":")
        if not sep or not p.lstrip("-").isdigit():
            raise block_error(block, key, f"websocket listen {text!r} is not host:port")
        host, port = h.strip("[]") or default_host, int(p)
    for names, what in ((("port",), "port"), (("host", "net"), "host")):
        if (found := find_key(block, *names)) is None:
            continue
        key, value = found
        if what == "port":
            if type(value) is not int:
                raise block_error(block, key, "websocket port must be an integer")
            port = value
        else:
            host = str(value)
    if port == 0:
        return None
    no_tls = find_key(block, "no_tls")
    tls_block = find_key(block, "tls")
    tls = tls_from(tls_block[1], block) if tls_block is not None else None
    if tls is None and not (no_tls is not None and no_tls[1] is True):
        raise block_error(block, "port", "websocket requires TLS configuration")
    compression = find_key(block, "compression", "compress")
    same_origin = find_key(block, "same_origin")
    for found in (compression, same_origin, no_tls):
        if found is not None and not isinstance(found[1], bool):
            raise block_error(block, found[0], f"websocket {found[0]} must be true or false")
    origins: list[tuple[str, str, int]] = []
    urls: list[str] = []
    allowed = find_key(
        block, "allowed_origins", "allowed_origin", "allow_origins", "allow_origin", "origins"
    ) or find_key(block, "origin")
    if allowed is not None:
        values = allowed[1] if isinstance(allowed[1], list) else [allowed[1]]
        for value in values:
            try:
                origins.append(_origin(str(value)))
            except ValueError as exc:
                raise block_error(block, allowed[0], str(exc)) from None
            urls.append(str(value))
    timeout_s = WS_HANDSHAKE_TIMEOUT_S
    timeout_found = find_key(block, "handshake_timeout")
    if (found := timeout_found) is not None:
        timeout_s = seconds(found[1], "handshake_timeout")
        if timeout_s <= 0:
            raise block_error(block, found[0], "websocket handshake_timeout must be positive")
    return WebSocketOptions(
        host=host,
        port=port,
        tls=tls,
        compression=bool(compression and compression[1]),
        handshake_timeout_s=timeout_s,
        same_origin=bool(same_origin and same_origin[1]),
        allowed_origins=tuple(origins),
        origin_urls=tuple(urls),
        handshake_timeout_set=timeout_found is not None,
    )


def websocket_varz(opts: WebSocketOptions | None, port: int) -> dict[str, Any]:
    """/varz ``websocket``: nats-server's object, empty when websocket is off, and only the
    settings that are set (its fields are omitempty)."""
    if opts is None:
        return {}
    out: dict[str, Any] = {"host": opts.host, "port": port}
    if opts.handshake_timeout_set:
        out["handshake_timeout"] = round(opts.handshake_timeout_s * 1e9)
    if opts.tls is None:
        out["no_tls"] = True
    if opts.same_origin:
        out["same_origin"] = True
    if opts.origin_urls:
        out["allowed_origins"] = list(opts.origin_urls)
    if opts.compression:
        out["compression"] = True
    return out


def origin_refusal(opts: WebSocketOptions, headers: Headers) -> str:
    """Why an upgrade's Origin is not allowed ("" when it is). A request without an Origin is
    not from a browser and passes, as in nats-server."""
    origin = headers.get("Origin")
    if not origin or not (opts.same_origin or opts.allowed_origins):
        return ""
    try:
        scheme, host, port = _origin(origin)
    except ValueError:
        return f"origin {origin!r} not allowed"
    if opts.same_origin:
        own_scheme = "https" if opts.tls is not None else "http"
        request_host = urlsplit(f"//{headers.get('Host', '')}")
        try:
            own = (request_host.hostname or "", request_host.port or _DEFAULT_PORTS[own_scheme])
        except ValueError:
            own = ("", 0)
        if (scheme, host, port) != (own_scheme, *own):
            return "not same origin"
    if opts.allowed_origins and (scheme, host, port) not in opts.allowed_origins:
        return "not in the allowed list"
    return ""


class _WsTransport:
    """What a ClientConnection writes to: each write is one binary message."""

    def __init__(self, session: WebSocketSession) -> None:
        self._session = session

    def write(self, data: bytes | bytearray | memoryview) -> None:
        session = self._session
        if session.ws.state is State.OPEN:
            session.ws.send_binary(bytes(data))
            session.flush()

    def close(self) -> None:
        self._session.close_with(CloseCode.GOING_AWAY, "")

    def abort(self) -> None:
        self._session.raw_abort()

    def is_closing(self) -> bool:
        return self._session.closing

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._session.raw_info(name, default)

    def get_write_buffer_size(self) -> int:
        return self._session.raw_buffered()

    def pause_reading(self) -> None:
        self._session.pause_reading()

    def resume_reading(self) -> None:
        self._session.resume_reading()


class WebSocketSession(asyncio.Protocol):
    """One accepted websocket connection: the HTTP upgrade, then NATS inside binary frames,
    handed to the ClientConnection ``make_conn`` returns once the upgrade succeeded."""

    def __init__(
        self,
        opts: WebSocketOptions,
        make_conn: Callable[[], ClientConnection],
        max_message_bytes: int,
    ) -> None:
        self.opts = opts
        self._make_conn = make_conn
        extensions = [ServerPerMessageDeflateFactory()] if opts.compression else None
        self.ws = ServerProtocol(extensions=extensions, max_size=max_message_bytes)
        self.raw: asyncio.Transport | None = None
        self.conn: ClientConnection | None = None
        self.closing = False
        self._timer: asyncio.TimerHandle | None = None

    # --- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.raw = cast(asyncio.Transport, transport)
        self._timer = asyncio.get_running_loop().call_later(
            self.opts.handshake_timeout_s, self._handshake_expired
        )

    def data_received(self, data: bytes) -> None:
        self.ws.receive_data(data)
        self._drain_events()

    def eof_received(self) -> bool | None:
        self.ws.receive_eof()
        self._drain_events()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        if self._timer is not None:
            self._timer.cancel()
        if self.conn is not None:
            self.conn.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.conn is not None:
            self.conn.pause_writing()

    def resume_writing(self) -> None:
        if self.conn is not None:
            self.conn.resume_writing()

    # --- driving the sans-I/O protocol ----------------------------------------------------
    def _drain_events(self) -> None:
        for event in self.ws.events_received():
            if isinstance(event, Request):
                self._upgrade(event)
            elif isinstance(event, Frame) and self.conn is not None:
                if event.opcode in (Opcode.BINARY, Opcode.TEXT, Opcode.CONT) and event.data:
                    self.conn.data_received(bytes(event.data))
        self.flush()
        if self.ws.close_expected() or self.ws.state is State.CLOSED:
            self._close_raw()

    def _upgrade(self, request: Request) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        refusal = origin_refusal(self.opts, request.headers)
        if refusal:
            log.debug("websocket upgrade refused: %s", refusal)
            response = self.ws.reject(403, f"Forbidden: {refusal}\n")
        else:
            try:
                response = self.ws.accept(request)
            except InvalidURI:  # pragma: no cover - the parser already refused it
                response = self.ws.reject(400, "Bad Request\n")
        self.ws.send_response(response)
        self.flush()
        if response.status_code != 101:
            self._close_raw()
            return
        conn = self._make_conn()
        self.conn = conn
        conn.connection_made(cast(asyncio.BaseTransport, _WsTransport(self)))

    def _handshake_expired(self) -> None:
        self._timer = None
        if self.conn is None:
            log.debug("websocket upgrade not done within %.1fs", self.opts.handshake_timeout_s)
            self.raw_abort()

    def flush(self) -> None:
        raw = self.raw
        if raw is None or raw.is_closing():
            return
        chunks = self.ws.data_to_send()
        if chunks:
            raw.writelines(chunks)

    def close_with(self, code: CloseCode, reason: str) -> None:
        if self.closing:
            return
        self.closing = True
        if self.ws.state is State.OPEN:
            conn = self.conn
            why = conn.stats.reason if conn is not None else ""
            self.ws.send_close(_CLOSE_STATUS.get(why, code), reason or why)
            self.flush()
        self._close_raw()

    def _close_raw(self) -> None:
        self.closing = True
        if self.raw is not None and not self.raw.is_closing():
            self.raw.close()

    def raw_abort(self) -> None:
        self.closing = True
        if self.raw is not None:
            self.raw.abort()

    def raw_info(self, name: str, default: Any = None) -> Any:
        return default if self.raw is None else self.raw.get_extra_info(name, default)

    def raw_buffered(self) -> int:
        return 0 if self.raw is None else self.raw.get_write_buffer_size()

    def pause_reading(self) -> None:
        if self.raw is not None and not self.raw.is_closing():
            self.raw.pause_reading()

    def resume_reading(self) -> None:
        if self.raw is not None and not self.raw.is_closing():
            self.raw.resume_reading()


def websocket_ssl_context(opts: WebSocketOptions) -> ssl.SSLContext | None:
    return None if opts.tls is None else server_ssl_context(opts.tls)
