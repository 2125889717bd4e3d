"""The server side of a NATS client connection: bytes in, protocol events out.

Owns the wire grammar of client→server operations exactly as nats-server's parser.go and
client.go (``processPub``, ``processHeaderPub``, ``parseSub``, ``processUnsub``) accept it: ops are
case-insensitive, arguments are split on spaces and tabs, a control line ends at ``\\n`` (a bare
``\\n`` is accepted, and when a ``\\r`` occurs in an argument line the byte before ``\\n`` is
dropped, as the Go parser's ``drop`` does), a payload must be followed by exactly ``\\r\\n``.

A malformed stream ends in one final :class:`ProtocolViolation` whose ``err`` is the exact
``-ERR`` text nats-server sends, or ``None`` where nats-server closes the connection silently.
After it the parser is dead. Known deviations, for inputs no client sends: ``HMSG`` from a
client is an unknown operation; a line that ends right after an op's separator (``PUB \\n``) is
an empty argument line; nats-server's split-buffer quirks with stray ``\\r`` are not reproduced.

Must never: do I/O, look at subscriptions or options other than ``headers_enabled``, raise on
any input, or copy the whole receive buffer per event (it keeps an offset into it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

MAX_PAYLOAD_BYTES_DEFAULT = 1048576
MAX_CONTROL_LINE_BYTES_DEFAULT = 4096
SIZE_DIGITS_MAX = 9  # nats-server parseSize: at most 9 digits ("999M")

ERR_UNKNOWN_OP = "Unknown Protocol Operation"
ERR_MAX_PAYLOAD = "Maximum Payload Violation"
ERR_MAX_CONTROL_LINE = "maximum control line exceeded"

_SPACE = 0x20
_TAB = 0x09
_CR = 0x0D
_NL = 0x0A
_OP_HEAD_BYTES = 8  # longest op ("connect") plus its separator
_ODD_SPLIT_RE = re.compile(rb"[ \t]+")
_TOKEN = rb"([^ \t\r\n\x0b\x0c]+)"
# Fast path for the common shapes of PUB/HPUB control lines (CRLF-terminated, no stray CR/VT/FF);
# anything else falls through to the general path, which gives the same result for these.
_PUB_RE = re.compile(
    rb"PUB[ \t]+" + _TOKEN + rb"[ \t]+(?:" + _TOKEN + rb"[ \t]+)?([0-9]{1,9})[ \t]*\r\n", re.I
)
_HPUB_RE = re.compile(
    rb"HPUB[ \t]+"
    + _TOKEN
    + rb"[ \t]+(?:"
    + _TOKEN
    + rb"[ \t]+)?([0-9]{1,9})[ \t]+([0-9]{1,9})[ \t]*\r\n",
    re.I,
)
# The control lines clients actually send: upper case, single spaces, printable tokens. Every
# line these match, the patterns above match with the same groups (their tokens and spacing are
# a superset); they only save the case-insensitive, any-whitespace matching.
_STRICT_TOKEN = rb"([!-~\x80-\xff]+)"
_PUB_STRICT_RE = re.compile(
    rb"PUB " + _STRICT_TOKEN + rb" (?:" + _STRICT_TOKEN + rb" )?([0-9]{1,9})\r\n"
)
_HPUB_STRICT_RE = re.compile(
    rb"HPUB " + _STRICT_TOKEN + rb" (?:" + _STRICT_TOKEN + rb" )?([0-9]{1,9}) ([0-9]{1,9})\r\n"
)
_UPPER_P = 0x50
_UPPER_H = 0x48
# A PUB/HPUB the fast path answers: (subject, reply, hdr or None, payload, position after it).
ScannedPub = tuple[str, str | None, bytes | None, bytes, int]


def _scan_pub_py(
    buf: bytes, pos: int, with_headers: bool, max_payload: int, max_control_line: int
) -> ScannedPub | None:
    """The fast path: a PUB (HPUB with ``with_headers``) at ``pos`` that the strict pattern
    matches, within the limits, whose payload and CRLF are all in ``buf``; None for anything
    else (the general path then decides). The native build replaces it with the same scan in C
    (``protocol/_parser_c.c``); tests/protocol/test_parser_native.py holds the two equal."""
    m = (_HPUB_STRICT_RE if with_headers else _PUB_STRICT_RE).match(buf, pos)
    if m is None:
        return None
    return _complete_pub(m, buf, pos, with_headers, max_payload, max_control_line)


def _complete_pub(
    m: re.Match[bytes],
    buf: bytes,
    pos: int,
    with_headers: bool,
    max_payload: int,
    max_control_line: int,
) -> ScannedPub | None:
    """A PUB/HPUB control line matched at ``pos`` (by the strict or the general pattern, whose
    groups are the same) as the fast path answers it: within the limits and with its payload and
    CRLF all in ``buf``, else None."""
    groups = m.groups()
    hdr_len = int(groups[2]) if with_headers else 0
    total = int(groups[3] if with_headers else groups[2])
    start = m.end()
    end = start + total
    if not (
        hdr_len <= total <= max_payload
        and start - pos <= max_control_line
        and len(buf) > end + 1
        and buf[end] == _CR
        and buf[end + 1] == _NL
    ):
        return None
    reply_b = groups[1]
    split = start + hdr_len
    return (
        groups[0].decode("utf-8", "surrogateescape"),
        None if reply_b is None else reply_b.decode("utf-8", "surrogateescape"),
        buf[start:split] if hdr_len > 0 else None,
        buf[split:end],
        end + 2,
    )


ScanPub = Callable[[bytes, int, bool, int, int], ScannedPub | None]


def _native_scan_pub() -> ScanPub | None:
    """The C scan when the native build holds it (used only while every source, the C one
    included, is unchanged since it was compiled: see protocol/native.py)."""
    try:
        from protocol._parser_c import scan_pub
    except ImportError:
        return None
    return scan_pub


_scan_pub: Final[ScanPub] = _native_scan_pub() or _scan_pub_py
_SUB_SPLIT_RE = re.compile(rb"[ \t\r\n]+")


@dataclass(frozen=True, slots=True)
class Connect:
    options: dict[str, Any]


class Pub:
    """A PUB or HPUB. Immutable by contract (``Final``); a plain class rather than a frozen
    dataclass because one is built per published message (see protocol/native.py)."""

    __slots__ = ("hdr", "payload", "reply", "subject")

    def __init__(self, subject: str, reply: str | None, hdr: bytes | None, payload: bytes) -> None:
        self.subject: Final = subject
        self.reply: Final = reply
        self.hdr: Final = hdr
        self.payload: Final = payload

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Pub):
            return NotImplemented
        return (self.subject, self.reply, self.hdr, self.payload) == (
            other.subject,
            other.reply,
            other.hdr,
            other.payload,
        )

    def __hash__(self) -> int:
        return hash((self.subject, self.reply, self.hdr, self.payload))

    def __repr__(self) -> str:
        return (
            f"Pub(subject={self.subject!r}, reply={self.reply!r}, hdr={self.hdr!r}, "
            f"payload={self.payload!r})"
        )


@dataclass(frozen=True, slots=True)
class Sub:
    subject: str
    queue: str | None
    sid: str


@dataclass(frozen=True, slots=True)
class Unsub:
    """``max_msgs`` is None when the subscription must go now: no max given, or a max that
    nats-server's parseSize turns into <= 0 (``UNSUB 1 0``, ``UNSUB 1 abc``)."""

    sid: str
    max_msgs: int | None


@dataclass(frozen=True, slots=True)
class Ping:
    pass


@dataclass(frozen=True, slots=True)
class Pong:
    pass


@dataclass(frozen=True, slots=True)
class ProtocolViolation:
    """The final event: send ``-ERR '<err>'`` (when err is not None) and close."""

    err: str | None


Event = Connect | Pub | Sub | Unsub | Ping | Pong | ProtocolViolation

_PING = Ping()
_PONG = Pong()

# Op ids.
_OP_PUB = 1
_OP_HPUB = 2
_OP_SUB = 3
_OP_UNSUB = 4
_OP_PING = 5
_OP_PONG = 6
_OP_CONNECT = 7
_OP_INFO = 8
_OP_OK = 9
_OP_ERR = 10

# (lower-case name, op id, needs a space/tab right after the name)
_OPS: tuple[tuple[bytes, int, bool], ...] = (
    (b"pub", _OP_PUB, True),
    (b"hpub", _OP_HPUB, True),
    (b"sub", _OP_SUB, True),
    (b"unsub", _OP_UNSUB, True),
    (b"ping", _OP_PING, False),
    (b"pong", _OP_PONG, False),
    (b"connect", _OP_CONNECT, False),
    (b"info", _OP_INFO, False),
    (b"+ok", _OP_OK, False),
    (b"-err", _OP_ERR, True),
)
_SKIP_LINE_OPS = (_OP_PING, _OP_PONG, _OP_OK)


def parse_size(d: bytes) -> int:
    """nats-server ``parseSize``: 1-9 ASCII digits, else -1."""
    if 0 < len(d) <= SIZE_DIGITS_MAX and d.isdigit():
        return int(d)
    return -1


def _decode(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"invalid JSON constant {name}")


def parse_json_arg(arg: bytes) -> Any:
    """Parse a CONNECT/INFO argument as Go's encoding/json would accept it; raises ValueError."""
    try:
        return json.loads(arg.decode("utf-8", "replace"), parse_constant=_reject_constant)
    except RecursionError as exc:
        raise ValueError("JSON nested too deeply") from exc


def _split_pub_args(arg: bytes) -> list[bytes]:
    # bytes.split() also splits on \r \v \f, which nats-server keeps inside PUB args.
    if b"\r" in arg or b"\x0b" in arg or b"\x0c" in arg:
        return [a for a in _ODD_SPLIT_RE.split(arg) if a]
    return arg.split()


def _split_sub_args(arg: bytes) -> list[bytes]:
    # nats-server splitArg: space, tab, CR and LF.
    if b"\x0b" in arg or b"\x0c" in arg:
        return [a for a in _SUB_SPLIT_RE.split(arg) if a]
    return arg.split()


def _match_op(head: bytes) -> tuple[int, int] | None:
    """(op id, op name length) for a lower-cased line head; None if it is no op.
    ``head`` must hold the whole op name and the byte after it."""
    for name, op, needs_sep in _OPS:
        if head.startswith(name):
            if needs_sep:
                sep = head[len(name) : len(name) + 1]
                if sep != b" " and sep != b"\t":
                    return None
                return op, len(name) + 1
            return op, len(name)
    return None


def _could_be_op(head: bytes) -> bool:
    """Is this (lower-cased, incomplete) line start still a possible op prefix?"""
    for name, _op, needs_sep in _OPS:
        if len(head) <= len(name):
            if name.startswith(head):
                return True
        elif head.startswith(name):
            if not needs_sep:
                return True
            sep = head[len(name)]
            if sep == _SPACE or sep == _TAB:
                return True
    return False


class ReceiveBuffer:
    """Received bytes not yet parsed: ``_buf[_pos:]`` followed by ``_chunks``.

    The buffering half of :class:`ClientParser`. A read that arrives with nothing left over
    becomes the buffer as it is; later reads are only queued, and joined (one copy) when the
    parser must look past the end of ``_buf``.
    """

    __slots__ = ("_buf", "_chunks", "_chunks_len", "_pos")

    def __init__(self) -> None:
        self._buf = b""
        self._pos = 0
        self._chunks: list[bytes] = []
        self._chunks_len = 0

    def _buffer(self, data: bytes) -> None:
        if self._pos >= len(self._buf) and not self._chunks:
            self._buf = bytes(data)
            self._pos = 0
            return
        self._chunks.append(bytes(data))
        self._chunks_len += len(data)

    def _join(self) -> None:
        if self._chunks:
            rest = self._buf[self._pos :] if self._pos else self._buf
            self._chunks.insert(0, rest)
            self._buf = b"".join(self._chunks)
            self._pos = 0
            self._chunks.clear()
            self._chunks_len = 0


class ClientParser(ReceiveBuffer):
    """Pull parser for the client→server protocol (h11 style).

    Feed bytes with :meth:`receive_data`; call :meth:`next_event` until it returns None (more
    data needed). ``headers_enabled`` mirrors the CONNECT ``headers`` option: an HPUB while it
    is False is a silent close, as in nats-server.
    """

    __slots__ = (
        "_dead",
        "_pending",
        "_pos",
        "_skip_op",
        "headers_enabled",
        "max_control_line",
        "max_payload",
    )

    def __init__(
        self,
        max_payload: int = MAX_PAYLOAD_BYTES_DEFAULT,
        max_control_line: int = MAX_CONTROL_LINE_BYTES_DEFAULT,
    ) -> None:
        self.max_payload = max_payload
        self.max_control_line = max_control_line
        self.headers_enabled = True
        super().__init__()
        self._dead = False
        # A control line whose payload has not fully arrived: (subject, reply, hdr_len, total).
        # hdr_len is -1 for PUB.
        self._pending: tuple[str, str | None, int, int] | None = None
        # PING/PONG/+OK seen, waiting for its line end (the rest of the line is ignored).
        self._skip_op = 0

    @property
    def dead(self) -> bool:
        """True once a ProtocolViolation has been produced."""
        return self._dead

    def receive_data(self, data: bytes) -> None:
        if self._dead or not data:
            return
        self._buffer(data)

    def _violation(self, err: str | None) -> ProtocolViolation:
        self._dead = True
        self._buf = b""
        self._pos = 0
        self._chunks.clear()
        self._chunks_len = 0
        self._pending = None
        return ProtocolViolation(err)

    def next_event(self) -> Event | None:
        if self._dead:
            return None
        if self._pending is not None:
            return self._next_payload()
        while True:
            buf = self._buf
            pos = self._pos
            # Fast path: a well-formed PUB or HPUB whose payload is already here (the strict
            # form first: what clients send, scanned faster than the general pattern matches).
            first = buf[pos] if pos < len(buf) else 0
            if not self._skip_op and (
                first == _UPPER_P or (first == _UPPER_H and self.headers_enabled)
            ):
                with_headers = first == _UPPER_H
                max_payload, max_line = self.max_payload, self.max_control_line
                found = _scan_pub(buf, pos, with_headers, max_payload, max_line)
                if found is None:
                    m = (_HPUB_RE if with_headers else _PUB_RE).match(buf, pos)
                    if m is not None:
                        found = _complete_pub(m, buf, pos, with_headers, max_payload, max_line)
                        if found is None:
                            return self._matched_pub(m, buf, with_headers)
                if found is not None:
                    self._pos = found[4]
                    return Pub(found[0], found[1], found[2], found[3])
            nl = buf.find(b"\n", pos)
            if nl < 0:
                if not self._chunks:
                    return self._incomplete_line()
                self._join()
                continue
            if self._skip_op:
                op = self._skip_op
                self._skip_op = 0
                self._pos = nl + 1
                if op == _OP_PING:
                    return _PING
                if op == _OP_PONG:
                    return _PONG
                continue
            head = buf[pos : pos + _OP_HEAD_BYTES].lower()
            if head[0] == 0x68 and self.headers_enabled:  # 'h'
                m = _HPUB_RE.match(buf, pos)
                if m is not None:
                    return self._matched_pub(m, buf, True)
            matched = _match_op(head)
            if matched is None:
                return self._violation(ERR_UNKNOWN_OP)
            op, name_len = matched
            if op == _OP_PUB or op == _OP_HPUB:
                arg = self._arg(buf, pos + name_len, nl)
                if arg is None:
                    return self._violation(ERR_MAX_CONTROL_LINE)
                self._pos = nl + 1
                err = self._start_pub(arg, op == _OP_HPUB)
                if err is not None:
                    return err
                return self._next_payload()
            self._pos = nl + 1
            if op in _SKIP_LINE_OPS:
                if op == _OP_PING:
                    return _PING
                if op == _OP_PONG:
                    return _PONG
                continue
            arg = self._arg(buf, pos + name_len, nl)
            if arg is None:
                return self._violation(ERR_MAX_CONTROL_LINE)
            event = self._line_event(op, arg)
            if event is not None:
                return event

    def _matched_pub(self, m: re.Match[bytes], buf: bytes, with_headers: bool) -> Event | None:
        """A regex-matched PUB/HPUB control line: check limits, then the event, or None while
        its payload is incomplete."""
        start = m.end()
        if start - 2 - m.start(1) > self.max_control_line:
            return self._violation(ERR_MAX_CONTROL_LINE)
        if with_headers:
            hdr_len = int(m.group(3))
            total = int(m.group(4))
        else:
            hdr_len = -1
            total = int(m.group(3))
        if hdr_len > total:
            return self._violation(None)
        if total > self.max_payload:
            return self._violation(ERR_MAX_PAYLOAD)
        subject = m.group(1).decode("utf-8", "surrogateescape")
        reply_b = m.group(2)
        reply = None if reply_b is None else reply_b.decode("utf-8", "surrogateescape")
        self._pos = start
        self._pending = (subject, reply, hdr_len, total)
        return self._next_payload()

    def _arg(self, buf: bytes, start: int, nl: int) -> bytes | None:
        """The argument bytes of a control line (after the op's spaces), or None if over the
        control line limit."""
        while start < nl and (buf[start] == _SPACE or buf[start] == _TAB):
            start += 1
        arg = buf[start:nl]
        if arg and (arg[-1] == _CR or b"\r" in arg):
            arg = arg[:-1]
        if len(arg) > self.max_control_line:
            return None
        return arg

    def _line_event(self, op: int, arg: bytes) -> Event | None:
        if op == _OP_SUB:
            args = _split_sub_args(arg)
            if len(args) == 2:
                return Sub(_decode(args[0]), None, _decode(args[1]))
            if len(args) == 3:
                return Sub(_decode(args[0]), _decode(args[1]), _decode(args[2]))
            return self._violation(None)
        if op == _OP_UNSUB:
            args = _split_sub_args(arg)
            if len(args) == 1:
                return Unsub(_decode(args[0]), None)
            if len(args) == 2:
                max_msgs = parse_size(args[1])
                return Unsub(_decode(args[0]), max_msgs if max_msgs > 0 else None)
            return self._violation(None)
        if op == _OP_CONNECT:
            try:
                options = parse_json_arg(arg)
            except ValueError:
                return self._violation(None)
            if options is None:
                return Connect({})
            if not isinstance(options, dict):
                return self._violation(None)
            return Connect(options)
        if op == _OP_INFO:
            try:
                info = parse_json_arg(arg)
            except ValueError:
                return self._violation(None)
            if info is not None and not isinstance(info, dict):
                return self._violation(None)
            return None
        # -ERR from a client: nats-server logs it and closes the connection.
        return self._violation(None)

    def _start_pub(self, arg: bytes, with_headers: bool) -> ProtocolViolation | None:
        if with_headers:
            if not self.headers_enabled:
                return self._violation(None)
            args = _split_pub_args(arg)
            n = len(args)
            if n == 3:
                reply = None
            elif n == 4:
                reply = _decode(args[1])
            else:
                return self._violation(None)
            hdr_len = parse_size(args[-2])
            total = parse_size(args[-1])
            if hdr_len < 0 or total < 0 or hdr_len > total:
                return self._violation(None)
        else:
            args = _split_pub_args(arg)
            n = len(args)
            if n == 2:
                reply = None
            elif n == 3:
                reply = _decode(args[1])
            else:
                return self._violation(None)
            hdr_len = -1
            total = parse_size(args[-1])
            if total < 0:
                return self._violation(None)
        if total > self.max_payload:
            return self._violation(ERR_MAX_PAYLOAD)
        self._pending = (_decode(args[0]), reply, hdr_len, total)
        return None

    def _next_payload(self) -> Event | None:
        pending = self._pending
        assert pending is not None
        subject, reply, hdr_len, total = pending
        pos = self._pos
        end = pos + total
        if len(self._buf) < end + 2:
            if len(self._buf) + self._chunks_len < end + 2:
                if len(self._buf) + self._chunks_len > end:
                    self._join()
                    return self._check_trailer(self._pos + total)
                return None
            self._join()
            pos = self._pos
            end = pos + total
        buf = self._buf
        if buf[end] != _CR or buf[end + 1] != _NL:
            return self._violation(ERR_UNKNOWN_OP)
        self._pending = None
        self._pos = end + 2
        if hdr_len > 0:
            split = pos + hdr_len
            return Pub(subject, reply, buf[pos:split], buf[split:end])
        return Pub(subject, reply, None, buf[pos:end])

    def _check_trailer(self, end: int) -> Event | None:
        """Only the byte after the payload has arrived: it must be CR (nats-server fails fast)."""
        if self._buf[end] != _CR:
            return self._violation(ERR_UNKNOWN_OP)
        return None

    def _incomplete_line(self) -> Event | None:
        """No line end yet: fail now if nats-server would already have failed (not an op, or
        the argument so far is over the control line limit); skip ignored PING/PONG tails."""
        buf = self._buf
        pos = self._pos
        if pos >= len(buf):
            return None
        if self._skip_op:
            self._buf = b""
            self._pos = 0
            return None
        head = buf[pos : pos + _OP_HEAD_BYTES].lower()
        if not _could_be_op(head):
            return self._violation(ERR_UNKNOWN_OP)
        matched = _match_op(head)
        if matched is None:
            return None
        op, name_len = matched
        if op in _SKIP_LINE_OPS:
            self._skip_op = op
            self._buf = b""
            self._pos = 0
            return None
        start = pos + name_len
        while start < len(buf) and (buf[start] == _SPACE or buf[start] == _TAB):
            start += 1
        arg_len = len(buf) - start
        if arg_len > self.max_control_line:
            if buf.find(b"\r", start) >= 0:
                arg_len -= 1
            if arg_len > self.max_control_line:
                return self._violation(ERR_MAX_CONTROL_LINE)
        return None
