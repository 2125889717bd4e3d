"""The monitoring HTTP endpoint: /healthz, /varz, /jsz in the spirit of nats-server's.

A deliberately tiny HTTP/1.0 responder on asyncio: GET only, JSON bodies, one request per
connection. Monitoring must stay available while the node is busy, and must never change state.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import ssl

REQUEST_LINE_BYTES_MAX = 8192  # a longer request line gets 431, as from Go's net/http
REQUEST_HEAD_BYTES_MAX = 64 * 1024  # request line and headers together
REQUEST_TIMEOUT_S = 5.0  # a client that does not finish its request head by then is dropped
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}
_REASONS[431] = "Request Header Fields Too Large"
_REASONS[503] = "Service Unavailable"


class _BadRequest(Exception):
    def __init__(self, status: int, error: str) -> None:
        super().__init__(error)
        self.status = status
        self.error = error


class Monitored(Protocol):
    """What the endpoints read from the node (``cluster/server.py``'s ``Server``)."""

    def healthy(self) -> tuple[bool, str]: ...

    def varz(self) -> dict[str, Any]: ...

    def jsz(self) -> dict[str, Any]: ...


class MonitorServer:
    def __init__(
        self, server: Monitored, host: str, port: int, *, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self.server = server
        self.host = host
        self.port = port
        self._ssl = ssl_context  # https_port: the same endpoints over TLS
        self._srv: asyncio.Server | None = None

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

    def _route(self, path: str) -> tuple[int, Any]:
        path = path.split("?", 1)[0].rstrip("/") or "/"
        if path == "/healthz":
            ok, why = self.server.healthy()
            return (200, {"status": "ok"}) if ok else (503, {"status": "unavailable", "error": why})
        if path == "/varz":
            return 200, self.server.varz()
        if path == "/jsz":
            return 200, self.server.jsz()
        if path == "/":
            return 200, {"endpoints": ["/healthz", "/varz", "/jsz"]}
        return 404, {"error": "not found"}

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                line = await asyncio.wait_for(_read_head(reader), REQUEST_TIMEOUT_S)
                status, body = self._answer(line)
            except _BadRequest as bad:
                status, body = bad.status, {"error": bad.error}
            data = json.dumps(body, indent=2).encode()
            head = (
                f"HTTP/1.0 {status} {_REASONS.get(status, 'Error')}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
            )
            writer.write(head.encode() + data)
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    def _answer(self, line: bytes) -> tuple[int, Any]:
        parts = line.decode("latin-1").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            raise _BadRequest(400, "malformed request line")
        if parts[0] != "GET":
            return 405, {"error": "method not allowed"}
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
