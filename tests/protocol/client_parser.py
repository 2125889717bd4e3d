"""The client side of a NATS connection, for tests: bytes a server sends in, events out.

A test oracle for the server's encoders (``protocol.session``: ``encode_msg``, ``encode_hmsg``,
``encode_err``, ``encode_info``): tests encode, parse back here, and compare. jetraft's server
never reads the server→client protocol, so this lives with the tests; the benchmark's client
(``bench/rawclient.py``) has its own parser, tuned for speed. This one is written to be plainly
right instead: one bytearray, one control line at a time.

Pull parser in the style of :mod:`protocol.parser`: :meth:`ServerParser.receive_data`, then
:meth:`ServerParser.next_event` until None.

Must never: accept a malformed stream silently — garbage raises :class:`ServerProtocolError`
and nothing else.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from protocol.parser import Ping, Pong, parse_size

__all__ = [
    "Err",
    "Info",
    "Msg",
    "Ok",
    "Ping",
    "Pong",
    "ServerEvent",
    "ServerParser",
    "ServerProtocolError",
]

MAX_CONTROL_LINE_BYTES_DEFAULT = 64 * 1024  # servers' INFO lines can be long (connect_urls)
CRLF = b"\r\n"


class ServerProtocolError(ValueError):
    """The server sent something that is not the NATS protocol."""


@dataclass(frozen=True, slots=True)
class Info:
    info: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Msg:
    subject: str
    sid: str
    reply: str | None
    hdr: bytes | None
    payload: bytes


@dataclass(frozen=True, slots=True)
class Ok:
    pass


@dataclass(frozen=True, slots=True)
class Err:
    text: str


ServerEvent = Info | Msg | Ok | Err | Ping | Pong


def _decode(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


@dataclass(frozen=True, slots=True)
class _PendingMsg:
    """A MSG/HMSG control line read, its payload not yet (``hdr_len`` -1: no header block)."""

    subject: str
    sid: str
    reply: str | None
    hdr_len: int
    total: int


class ServerParser:
    """Pull parser for the server→client protocol (INFO, MSG, HMSG, +OK, -ERR, PING, PONG)."""

    def __init__(self, max_control_line: int = MAX_CONTROL_LINE_BYTES_DEFAULT) -> None:
        self.max_control_line = max_control_line
        self._buf = bytearray()
        self._pending: _PendingMsg | None = None

    def receive_data(self, data: bytes) -> None:
        self._buf += data

    def next_event(self) -> ServerEvent | None:
        """The next complete operation, or None until more bytes arrive."""
        if self._pending is not None:
            return self._payload(self._pending)
        nl = self._buf.find(b"\n")
        if nl < 0:
            if len(self._buf) > self.max_control_line:
                raise ServerProtocolError("control line too long")
            return None
        if nl > self.max_control_line:
            raise ServerProtocolError("control line too long")
        line = bytes(self._buf[:nl]).removesuffix(b"\r")
        del self._buf[: nl + 1]
        return self._line(line)

    def _line(self, line: bytes) -> ServerEvent | None:
        head = line[:5].upper()
        if head.startswith(b"PING"):
            return Ping()
        if head.startswith(b"PONG"):
            return Pong()
        if head.startswith(b"+OK"):
            return Ok()
        if head.startswith(b"-ERR"):
            text = _decode(line[4:].strip(b" \t"))
            if len(text) >= 2 and text[0] == "'" and text[-1] == "'":
                text = text[1:-1]
            return Err(text)
        if head.startswith(b"INFO") and line[4:5] in (b" ", b"\t"):
            try:
                info = json.loads(line[5:].decode("utf-8", "replace"))
            except (ValueError, RecursionError) as exc:
                raise ServerProtocolError("INFO is not JSON") from exc
            if not isinstance(info, dict):
                raise ServerProtocolError("INFO is not a JSON object")
            return Info(info)
        if head.startswith((b"MSG", b"HMSG")):
            self._pending = self._msg_line(line)
            return self._payload(self._pending)
        raise ServerProtocolError(f"unknown operation {line[:16]!r}")

    @staticmethod
    def _msg_line(line: bytes) -> _PendingMsg:
        """``MSG <subject> <sid> [reply] <size>`` or ``HMSG ... [reply] <hdr size> <total>``,
        arguments split on spaces and tabs, the op in any case."""
        is_hmsg = line[:1] in (b"H", b"h")
        args = line[4 if is_hmsg else 3 :].split()
        if len(args) not in ((4, 5) if is_hmsg else (3, 4)):
            raise ServerProtocolError(f"bad {'HMSG' if is_hmsg else 'MSG'} arguments")
        hdr_len = parse_size(args[-2]) if is_hmsg else -1
        total = parse_size(args[-1])
        if total < 0 or (is_hmsg and not 0 <= hdr_len <= total):
            raise ServerProtocolError("bad message size")
        reply = _decode(args[2]) if len(args) == (5 if is_hmsg else 4) else None
        return _PendingMsg(_decode(args[0]), _decode(args[1]), reply, hdr_len, total)

    def _payload(self, pending: _PendingMsg) -> Msg | None:
        total = pending.total
        if len(self._buf) < total + len(CRLF):
            return None
        if self._buf[total : total + len(CRLF)] != CRLF:
            raise ServerProtocolError("message payload not followed by CRLF")
        body = bytes(self._buf[:total])
        del self._buf[: total + len(CRLF)]
        self._pending = None
        if pending.hdr_len < 0:
            return Msg(pending.subject, pending.sid, pending.reply, None, body)
        split = pending.hdr_len
        return Msg(pending.subject, pending.sid, pending.reply, body[:split], body[split:])
