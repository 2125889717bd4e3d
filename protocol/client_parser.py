"""The client side of a NATS connection: bytes from a server in, events out.

Owns parsing of server→client operations (INFO, MSG, HMSG, +OK, -ERR, PING, PONG) for
jetraft's own clients: the benchmark load generator, and the base of server-to-server links.
Pull parser in the style of :mod:`protocol.parser`: :meth:`ServerParser.receive_data`, then
:meth:`ServerParser.next_event` until None.

Must never: do I/O, or accept a malformed stream silently — garbage raises
:class:`ServerProtocolError` (the peer is broken; the caller drops the connection).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from protocol.parser import Ping, Pong, ReceiveBuffer, parse_size

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
_TOKEN = rb"([^ \t\r\n]+)"
_MSG_RE = re.compile(rb"MSG " + _TOKEN + rb" " + _TOKEN + rb" (?:" + _TOKEN + rb" )?([0-9]+)\r\n")
_HMSG_RE = re.compile(
    rb"HMSG " + _TOKEN + rb" " + _TOKEN + rb" (?:" + _TOKEN + rb" )?([0-9]+) ([0-9]+)\r\n"
)


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

# Hot path: set the frozen dataclass's slots directly (see protocol.parser._make_pub).
_new_object = object.__new__
_set_msg_subject = Msg.__dict__["subject"].__set__
_set_msg_sid = Msg.__dict__["sid"].__set__
_set_msg_reply = Msg.__dict__["reply"].__set__
_set_msg_hdr = Msg.__dict__["hdr"].__set__
_set_msg_payload = Msg.__dict__["payload"].__set__


def _make_msg(subject: str, sid: str, reply: str | None, hdr: bytes | None, payload: bytes) -> Msg:
    msg: Msg = _new_object(Msg)
    _set_msg_subject(msg, subject)
    _set_msg_sid(msg, sid)
    _set_msg_reply(msg, reply)
    _set_msg_hdr(msg, hdr)
    _set_msg_payload(msg, payload)
    return msg


_OK = Ok()
_PING = Ping()
_PONG = Pong()


def _decode(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


class ServerParser(ReceiveBuffer):
    """Pull parser for the server→client protocol."""

    __slots__ = ("_pending", "max_control_line")

    def __init__(self, max_control_line: int = MAX_CONTROL_LINE_BYTES_DEFAULT) -> None:
        super().__init__()
        self.max_control_line = max_control_line
        # A MSG/HMSG control line whose payload is incomplete: subject, sid, reply, hdr, total.
        self._pending: tuple[str, str, str | None, int, int] | None = None

    def receive_data(self, data: bytes) -> None:
        if data:
            self._buffer(data)

    def next_event(self) -> ServerEvent | None:
        if self._pending is not None:
            return self._payload()
        while True:
            buf = self._buf
            pos = self._pos
            m = _MSG_RE.match(buf, pos)
            if m is not None:
                subj_b, sid_b, reply_b, size_b = m.groups()
                start = m.end()
                end = start + int(size_b)
                if len(buf) > end + 1 and buf[end] == 0x0D and buf[end + 1] == 0x0A:
                    self._pos = end + 2
                    return _make_msg(
                        _decode(subj_b),
                        _decode(sid_b),
                        None if reply_b is None else _decode(reply_b),
                        None,
                        buf[start:end],
                    )
                self._pos = start
                reply = None if reply_b is None else _decode(reply_b)
                self._pending = (_decode(subj_b), _decode(sid_b), reply, -1, int(size_b))
                return self._payload()
            nl = buf.find(b"\n", pos)
            if nl < 0:
                if self._chunks:
                    self._join()
                    continue
                if len(buf) - pos > self.max_control_line:
                    raise ServerProtocolError("control line too long")
                return None
            if nl - pos > self.max_control_line:
                raise ServerProtocolError("control line too long")
            m = _HMSG_RE.match(buf, pos)
            if m is not None:
                subj_b, sid_b, reply_b, hdr_b, total_b = m.groups()
                hdr_len, total = int(hdr_b), int(total_b)
                if hdr_len > total:
                    raise ServerProtocolError("HMSG header size larger than total size")
                self._pos = m.end()
                reply = None if reply_b is None else _decode(reply_b)
                self._pending = (_decode(subj_b), _decode(sid_b), reply, hdr_len, total)
                return self._payload()
            line = buf[pos:nl]
            self._pos = nl + 1
            if line.endswith(b"\r"):
                line = line[:-1]
            event = self._line(line)
            if event is not None:
                return event

    def _line(self, line: bytes) -> ServerEvent | None:
        head = line[:5].upper()
        if head.startswith(b"PING"):
            return _PING
        if head.startswith(b"PONG"):
            return _PONG
        if head.startswith(b"+OK"):
            return _OK
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
            return self._general_msg(line)
        raise ServerProtocolError(f"unknown operation {line[:16]!r}")

    def _general_msg(self, line: bytes) -> ServerEvent | None:
        """MSG/HMSG lines the fast regexes did not take (tabs, several spaces, lower case)."""
        is_hmsg = line[:1] in (b"H", b"h")
        args = line[4 if is_hmsg else 3 :].split()
        if is_hmsg:
            if len(args) not in (4, 5):
                raise ServerProtocolError("bad HMSG arguments")
            hdr_len = parse_size(args[-2])
        else:
            if len(args) not in (3, 4):
                raise ServerProtocolError("bad MSG arguments")
            hdr_len = -1
        total = parse_size(args[-1])
        if total < 0 or (is_hmsg and (hdr_len < 0 or hdr_len > total)):
            raise ServerProtocolError("bad message size")
        reply = _decode(args[2]) if len(args) == (5 if is_hmsg else 4) else None
        self._pending = (_decode(args[0]), _decode(args[1]), reply, hdr_len, total)
        return self._payload()

    def _payload(self) -> ServerEvent | None:
        pending = self._pending
        assert pending is not None
        subject, sid, reply, hdr_len, total = pending
        end = self._pos + total
        if len(self._buf) < end + 2:
            if len(self._buf) + self._chunks_len < end + 2:
                return None
            self._join()
            end = self._pos + total
        buf = self._buf
        start = self._pos
        if buf[end] != 0x0D or buf[end + 1] != 0x0A:
            raise ServerProtocolError("message payload not followed by CRLF")
        self._pending = None
        self._pos = end + 2
        if hdr_len >= 0:
            split = start + hdr_len
            return _make_msg(subject, sid, reply, buf[start:split], buf[split:end])
        return _make_msg(subject, sid, reply, None, buf[start:end])
