"""A minimal raw-protocol NATS client for the load generator, on an asyncio Protocol.

Owns: one TCP connection, the INFO/CONNECT/PING handshake, SUB (in a queue group or not), PUB,
HPUB and the parsing of what the server sends back (MSG, HMSG, PING, PONG, +OK, -ERR, INFO).
Messages are handed to a per-sid callback straight from ``data_received`` so that a pipelined
phase can send its next request without a future or a task per message; writes made from a
callback are coalesced into one ``transport.write`` per read.

Why not nats-py: the benchmark must measure the server, not a client's per-message overhead, and
the same thin client is used against nats-server and jetraft so the ratio is fair.

Must never: retry, reconnect or buffer unboundedly on its own, or hide a protocol error (-ERR or
a lost connection fails every pending wait).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any, cast

MSG_OP = b"MSG"
HMSG_OP = b"HMSG"
CRLF = b"\r\n"
CRLF_LEN = 2
CONNECT_OPTIONS: dict[str, Any] = {
    "verbose": False,
    "pedantic": False,
    "headers": True,
    "no_responders": True,
    "protocol": 1,
    "lang": "python-bench",
    "version": "0.1.0",
    "name": "jetraft-bench",
}

# (subject, reply or None, header block or None, payload)
MsgCallback = Callable[[bytes, bytes | None, bytes | None, bytes], None]


class ProtocolFailure(RuntimeError):
    """The server sent -ERR, closed the connection, or sent something unparseable."""


class _NatsProtocol(asyncio.Protocol):
    """Parses the server's byte stream; keeps no state beyond one partially received frame."""

    def __init__(self, client: RawClient) -> None:
        self._client = client
        self._buf = bytearray()
        # When a MSG/HMSG control line has been read but its payload has not fully arrived.
        self._pending: tuple[bytes, int, bytes | None, int, int] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not subclasses of asyncio.Transport, but have its methods.
        self._client._transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._client._fail(ProtocolFailure(f"connection lost: {exc!r}"))

    def data_received(self, data: bytes) -> None:
        client = self._client
        client._in_callback = True
        try:
            self._parse(data)
        except ProtocolFailure as err:
            client._fail(err)
        finally:
            client._in_callback = False
            client._flush_out()

    def _parse(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        pos = 0
        size = len(buf)
        client = self._client
        while pos < size:
            pending = self._pending
            if pending is not None:
                subject, sid, reply, hdr_len, total = pending
                end = pos + total
                if end + CRLF_LEN > size:
                    break
                hdr = bytes(buf[pos : pos + hdr_len]) if hdr_len >= 0 else None
                payload = bytes(buf[pos + max(hdr_len, 0) : end])
                pos = end + CRLF_LEN
                self._pending = None
                client._deliver(sid, subject, reply, hdr, payload)
                continue
            eol = buf.find(CRLF, pos)
            if eol < 0:
                break
            line = bytes(buf[pos:eol])
            pos = eol + CRLF_LEN
            self._control(line)
        del buf[:pos]

    def _control(self, line: bytes) -> None:
        op, _, rest = line.partition(b" ")
        op = op.upper()
        if op == MSG_OP:
            args = rest.split()
            if len(args) == 3:
                self._pending = (args[0], int(args[1]), None, -1, int(args[2]))
            elif len(args) == 4:
                self._pending = (args[0], int(args[1]), args[2], -1, int(args[3]))
            else:
                raise ProtocolFailure(f"bad MSG line {line!r}")
        elif op == HMSG_OP:
            args = rest.split()
            if len(args) == 4:
                self._pending = (args[0], int(args[1]), None, int(args[2]), int(args[3]))
            elif len(args) == 5:
                self._pending = (args[0], int(args[1]), args[2], int(args[3]), int(args[4]))
            else:
                raise ProtocolFailure(f"bad HMSG line {line!r}")
        elif op == b"PING":
            self._client._write(b"PONG\r\n")
        elif op == b"PONG":
            self._client._pong()
        elif op == b"INFO":
            self._client._info(rest)
        elif op == b"+OK":
            return
        elif op == b"-ERR":
            raise ProtocolFailure(f"server error: {rest.decode(errors='replace')}")
        else:
            raise ProtocolFailure(f"unknown operation {line[:80]!r}")


class RawClient:
    """One connection. Create with :meth:`connect`; all methods run on the event loop thread."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._subs: dict[int, MsgCallback] = {}
        self._next_sid = 1
        self._pongs: list[asyncio.Future[None]] = []
        self._info_future: asyncio.Future[dict[str, Any]] | None = None
        self._failure: BaseException | None = None
        self._failure_waiters: list[asyncio.Future[Any]] = []
        self._in_callback = False
        self._out: list[bytes] = []
        self.server_info: dict[str, Any] = {}

    @classmethod
    async def connect(cls, host: str, port: int, timeout_s: float) -> RawClient:
        """Open the connection, wait for INFO, send CONNECT and check it with PING/PONG."""
        client = cls()
        loop = asyncio.get_running_loop()
        client._info_future = loop.create_future()
        await asyncio.wait_for(
            loop.create_connection(lambda: _NatsProtocol(client), host, port), timeout_s
        )
        client.server_info = await asyncio.wait_for(client._info_future, timeout_s)
        options = json.dumps(CONNECT_OPTIONS, separators=(",", ":")).encode()
        client._write(b"CONNECT " + options + b"\r\n")
        await client.flush(timeout_s)
        return client

    # ----------------------------------------------------------------- public operations

    def subscribe(self, subject: bytes, callback: MsgCallback, queue: bytes | None = None) -> int:
        sid = self._next_sid
        self._next_sid += 1
        self._subs[sid] = callback
        group = b"" if queue is None else queue + b" "
        self._write(b"SUB " + subject + b" " + group + str(sid).encode() + b"\r\n")
        return sid

    def publish(self, subject: bytes, payload: bytes, reply: bytes | None = None) -> None:
        size = str(len(payload)).encode()
        if reply is None:
            self._write(b"PUB " + subject + b" " + size + b"\r\n" + payload + b"\r\n")
        else:
            self._write(b"PUB " + subject + b" " + reply + b" " + size + b"\r\n" + payload + CRLF)

    def hpublish(self, subject: bytes, hdr: bytes, payload: bytes) -> None:
        """HPUB without a reply subject; ``hdr`` is a whole header block (ending CRLF CRLF)."""
        sizes = str(len(hdr)).encode() + b" " + str(len(hdr) + len(payload)).encode()
        self._write(b"HPUB " + subject + b" " + sizes + b"\r\n" + hdr + payload + CRLF)

    async def flush(self, timeout_s: float) -> None:
        """Round trip a PING: everything sent before it has been processed by the server."""
        self.check()
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pongs.append(future)
        self._write(b"PING\r\n")
        await self.wait(future, timeout_s)

    async def wait(self, future: asyncio.Future[Any], timeout_s: float) -> Any:
        """Await ``future`` but fail at once if the connection fails, and after ``timeout_s``."""
        self.watch(future)
        try:
            return await asyncio.wait_for(future, timeout_s)
        finally:
            self.unwatch(future)

    def watch(self, future: asyncio.Future[Any]) -> None:
        """Fail ``future`` with the connection's failure, now or when it happens."""
        self.check()
        self._failure_waiters.append(future)

    def unwatch(self, future: asyncio.Future[Any]) -> None:
        self._failure_waiters.remove(future)

    def check(self) -> None:
        """Raise the connection's failure, if it has one."""
        if self._failure is not None:
            raise self._failure

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    # ----------------------------------------------------------------- protocol callbacks

    def _write(self, data: bytes) -> None:
        if self._in_callback:
            self._out.append(data)
        elif self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    def _flush_out(self) -> None:
        if self._out:
            out = b"".join(self._out)
            self._out.clear()
            if self._transport is not None and not self._transport.is_closing():
                self._transport.write(out)

    def _deliver(
        self, sid: int, subject: bytes, reply: bytes | None, hdr: bytes | None, payload: bytes
    ) -> None:
        callback = self._subs.get(sid)
        if callback is not None:
            callback(subject, reply, hdr, payload)

    def _pong(self) -> None:
        if self._pongs:
            future = self._pongs.pop(0)
            if not future.done():
                future.set_result(None)

    def _info(self, body: bytes) -> None:
        future = self._info_future
        if future is not None and not future.done():
            try:
                future.set_result(json.loads(body))
            except ValueError as err:
                future.set_exception(ProtocolFailure(f"bad INFO: {err}"))

    def _fail(self, err: BaseException) -> None:
        if self._failure is None:
            self._failure = err
        for future in [*self._failure_waiters, *self._pongs]:
            if not future.done():
                future.set_exception(err)
        info = self._info_future
        if info is not None and not info.done():
            info.set_exception(err)
        if self._transport is not None:
            self._transport.close()
