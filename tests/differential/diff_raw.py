"""A raw NATS protocol client for byte-exact differential checks.

Owns: an asyncio TCP connection that sends hand-written protocol bytes and splits what the
server sends back into frames (INFO, +OK, -ERR, PING, PONG, MSG, HMSG), plus the comparable
(masked) form of each frame. It deliberately does not reuse protocol/: the harness must not
share code, and therefore bugs, with the server under test.
Must never: answer or hide anything the server sent (server PINGs are recorded, not answered
silently), or interpret headers beyond masking Nats-Time-Stamp.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from dataclasses import dataclass
from typing import Any

from tests.differential.diff_mask import mask_header_block, mask_json, ordered, pretty

CRLF = b"\r\n"
READ_CHUNK_BYTES = 65536
DEFAULT_FRAME_TIMEOUT_S = 2.0
CONNECT_TIMEOUT_S = 5.0

DEFAULT_CONNECT: dict[str, Any] = {
    "verbose": False,
    "pedantic": False,
    "tls_required": False,
    "name": "differential",
    "lang": "python",
    "version": "0.0.0",
    "protocol": 1,
    "echo": True,
    "headers": True,
    "no_responders": True,
}


@dataclass(frozen=True)
class Frame:
    """One protocol unit received from the server."""

    op: str  # INFO, +OK, -ERR, PING, PONG, MSG, HMSG, or ? for an unparsable line
    line: bytes  # the control line without CRLF
    subject: str = ""
    sid: str = ""
    reply: str = ""
    header: bytes | None = None
    payload: bytes = b""

    @property
    def status(self) -> str:
        """'404 Message Not Found' for a status HMSG, '' for anything else."""
        if self.op != "HMSG" or self.header is None:
            return ""
        first = self.header.split(CRLF, 1)[0]
        return first[len(b"NATS/1.0 ") :].decode() if first.startswith(b"NATS/1.0 ") else ""

    def key(self, *, full_info: bool = True) -> Any:
        """The comparable form: sizes dropped (timestamps change them), timestamps masked."""
        if self.op == "INFO":
            if not full_info:
                return ("INFO",)
            return ("INFO", ordered(mask_json(json.loads(self.line[5:]))))
        if self.op == "MSG":
            return ("MSG", self.subject, self.sid, self.reply, self.payload)
        if self.op == "HMSG":
            header = mask_header_block(self.header or b"")
            return ("HMSG", self.subject, self.sid, self.reply, header, self.payload)
        return (self.op, self.line)

    def show(self) -> str:
        line = pretty(self.line) or f"{self.op} {self.subject} {self.sid} {self.reply}"
        if self.op == "MSG":
            return f"{line} | {pretty(self.payload)}"
        if self.op == "HMSG":
            return f"{line} | {pretty(self.header or b'')!r} | {pretty(self.payload)}"
        return line


class ProtocolClosed(Exception):
    """The server closed the connection (EOF or reset)."""


class RawConn:
    """A hand-driven NATS connection: send bytes, read frames."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._buf = b""
        self.closed = False

    @classmethod
    async def open(cls, port: int, host: str = "127.0.0.1") -> RawConn:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, limit=1 << 22), CONNECT_TIMEOUT_S
        )
        return cls(reader, writer)

    async def start_tls(self, ctx: ssl.SSLContext, server_hostname: str = "127.0.0.1") -> None:
        """Upgrade to TLS after the INFO, as a client does when the INFO says tls_required.
        Raises (ssl.SSLError, ConnectionError, TimeoutError) when the handshake fails."""
        await asyncio.wait_for(
            self._writer.start_tls(ctx, server_hostname=server_hostname), CONNECT_TIMEOUT_S
        )

    async def send(self, data: bytes) -> None:
        """Write data; a server that already closed the connection is not an error here."""
        if self.closed:
            return
        try:
            self._writer.write(data)
            await self._writer.drain()
        except (ConnectionError, OSError):
            self.closed = True

    async def _fill(self) -> None:
        try:
            chunk = await self._reader.read(READ_CHUNK_BYTES)
        except (ConnectionError, OSError):
            chunk = b""
        if not chunk:
            self.closed = True
            raise ProtocolClosed
        self._buf += chunk

    async def _next_frame(self) -> Frame:
        while (frame := self._parse_buffered()) is None:
            if self.closed:
                raise ProtocolClosed
            await self._fill()
        return frame

    def _parse_buffered(self) -> Frame | None:
        """One complete frame from the buffer (consumed), or None if more bytes are needed.

        Nothing is consumed until a frame is complete, so a read cancelled by a timeout never
        loses half a frame.
        """
        end = self._buf.find(CRLF)
        if end < 0:
            return None
        line = self._buf[:end]
        verb = line.split(b" ", 1)[0].split(b"\t", 1)[0].upper()
        if verb in (b"MSG", b"HMSG"):
            parts = line.decode().split()
            body_bytes = int(parts[-1])
            if len(self._buf) < end + 2 + body_bytes + 2:
                return None
            body = self._strip(self._buf[end + 2 : end + 2 + body_bytes + 2])
            self._buf = self._buf[end + 2 + body_bytes + 2 :]
            if verb == b"MSG":
                reply = parts[3] if len(parts) == 5 else ""
                return Frame("MSG", line, parts[1], parts[2], reply, None, body)
            hdr_len = int(parts[-2])
            reply = parts[3] if len(parts) == 6 else ""
            return Frame("HMSG", line, parts[1], parts[2], reply, body[:hdr_len], body[hdr_len:])
        self._buf = self._buf[end + 2 :]
        op = verb.decode("utf-8", "replace")
        return Frame(op if op in ("INFO", "+OK", "-ERR", "PING", "PONG") else "?", line)

    @staticmethod
    def _strip(body: bytes) -> bytes:
        if not body.endswith(CRLF):
            raise AssertionError(f"message body not terminated by CRLF: {body!r}")
        return body[:-2]

    async def read_frame(self, timeout_s: float = DEFAULT_FRAME_TIMEOUT_S) -> Frame | None:
        """The next frame, or None on timeout or when the server closed the connection."""
        try:
            return await asyncio.wait_for(self._next_frame(), timeout_s)
        except (TimeoutError, ProtocolClosed):
            return None

    async def read_until_pong(
        self, pongs: int = 1, timeout_s: float = DEFAULT_FRAME_TIMEOUT_S
    ) -> list[Frame]:
        """Frames up to and including the pongs-th PONG (or until EOF / timeout)."""
        frames: list[Frame] = []
        seen = 0
        while seen < pongs:
            frame = await self.read_frame(timeout_s)
            if frame is None:
                break
            frames.append(frame)
            if frame.op == "PONG":
                seen += 1
        return frames

    async def read_until_idle_or_close(self, timeout_s: float) -> list[Frame]:
        """Every frame until the server closes, or nothing arrives for timeout_s."""
        frames: list[Frame] = []
        while (frame := await self.read_frame(timeout_s)) is not None:
            frames.append(frame)
        return frames

    async def wait_closed(self, timeout_s: float) -> bool:
        """True if the server closes the connection within timeout_s (pending data dropped)."""
        if self.closed:
            return True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._drain_to_eof(), timeout_s)
        return self.closed

    async def _drain_to_eof(self) -> None:
        with contextlib.suppress(ProtocolClosed):
            while True:
                await self._fill()

    async def close(self) -> None:
        if not self._writer.is_closing():
            self._writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self._writer.wait_closed()
        self.closed = True


def connect_line(options: dict[str, Any]) -> bytes:
    return b"CONNECT " + json.dumps(options, separators=(",", ":")).encode() + CRLF


def pub(subject: str, payload: bytes = b"", reply: str = "") -> bytes:
    parts = ["PUB", subject] + ([reply] if reply else []) + [str(len(payload))]
    return " ".join(parts).encode() + CRLF + payload + CRLF


def hpub(subject: str, header: bytes, payload: bytes = b"", reply: str = "") -> bytes:
    sizes = [str(len(header)), str(len(header) + len(payload))]
    parts = ["HPUB", subject] + ([reply] if reply else []) + sizes
    return " ".join(parts).encode() + CRLF + header + payload + CRLF


def header_block(headers: dict[str, str] | list[tuple[str, str]]) -> bytes:
    """NATS/1.0 header block in the given order."""
    items = headers.items() if isinstance(headers, dict) else headers
    lines = "".join(f"{k}: {v}\r\n" for k, v in items)
    return f"NATS/1.0\r\n{lines}\r\n".encode()
