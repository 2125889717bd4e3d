"""The monitoring HTTP endpoint: /healthz, /varz, /jsz in the spirit of nats-server's.

A deliberately tiny HTTP/1.0 responder on asyncio: GET only, JSON bodies, one request per
connection. Monitoring must stay available while the node is busy, and must never change state.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cluster.server import Server

REQUEST_BYTES_MAX = 8192


class MonitorServer:
    def __init__(self, server: Server, host: str, port: int) -> None:
        self.server = server
        self.host = host
        self.port = port
        self._srv: asyncio.Server | None = None

    async def start(self) -> None:
        self._srv = await asyncio.start_server(self._handle, self.host, self.port)
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
            return 200, self.server.jetstream.jsz()
        if path == "/":
            return 200, {"endpoints": ["/healthz", "/varz", "/jsz"]}
        return 404, {"error": "not found"}

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 5)
            parts = line.decode("latin-1").split()
            if len(parts) < 2 or parts[0] != "GET":
                status, body = 405, {"error": "method not allowed"}
            else:
                status, body = self._route(parts[1])
            data = json.dumps(body, indent=2).encode()
            head = (
                f"HTTP/1.0 {status} {'OK' if status == 200 else 'Error'}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
            )
            writer.write(head.encode() + data)
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()
