"""The client-connection parser: every op, every error, split-anywhere and garbage properties.

Expected outcomes were probed on nats-server v2.15.1 over a raw socket (see docs/nats-differences.md
§6): a ProtocolViolation's err is the -ERR text it sends, None where it closes silently.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.parser import (
    ERR_MAX_CONTROL_LINE,
    ERR_MAX_PAYLOAD,
    ERR_UNKNOWN_OP,
    ClientParser,
    Connect,
    Event,
    Ping,
    Pong,
    ProtocolViolation,
    Pub,
    Sub,
    Unsub,
    parse_size,
)

UNKNOWN = ProtocolViolation(ERR_UNKNOWN_OP)
SILENT = ProtocolViolation(None)
CTL = ProtocolViolation(ERR_MAX_CONTROL_LINE)
A4094 = b"a" * 4094


def parse(data: bytes, **kw: Any) -> list[Event]:
    p = ClientParser(**kw)
    p.receive_data(data)
    return _drain(p)


def _drain(p: ClientParser) -> list[Event]:
    out: list[Event] = []
    while (ev := p.next_event()) is not None:
        out.append(ev)
    return out


def parse_split(chunks: list[bytes], **kw: Any) -> list[Event]:
    p = ClientParser(**kw)
    out: list[Event] = []
    for c in chunks:
        p.receive_data(c)
        out.extend(_drain(p))
    return out


HDR = b"NATS/1.0\r\nA: b\r\n\r\n"  # 18 bytes

CASES: list[tuple[str, bytes, list[Event]]] = [
    # --- PUB
    ("pub", b"PUB foo 3\r\nabc\r\n", [Pub("foo", None, None, b"abc")]),
    ("pub reply", b"PUB foo bar 0\r\n\r\n", [Pub("foo", "bar", None, b"")]),
    ("pub lower", b"pub foo 1\r\nx\r\n", [Pub("foo", None, None, b"x")]),
    ("pub mixed case", b"pUb foo 1\r\nx\r\n", [Pub("foo", None, None, b"x")]),
    ("pub tabs", b"PUB\tfoo\t\t1\r\nx\r\n", [Pub("foo", None, None, b"x")]),
    ("pub many spaces", b"PUB   foo   r   1   \r\nx\r\n", [Pub("foo", "r", None, b"x")]),
    ("pub bare nl line", b"PUB foo 2\nxy\r\n", [Pub("foo", None, None, b"xy")]),
    ("pub payload with crlf", b"PUB f 4\r\n\r\n\r\n\r\n", [Pub("f", None, None, b"\r\n\r\n")]),
    ("pub leading zero size", b"PUB f 003\r\nabc\r\n", [Pub("f", None, None, b"abc")]),
    ("pub wildcard subject", b"PUB foo.* 1\r\nx\r\n", [Pub("foo.*", None, None, b"x")]),
    ("pub binary subject", b"PUB \xff\xfe 1\r\nx\r\n", [Pub("\udcff\udcfe", None, None, b"x")]),
    ("pub cr inside subject", b"PUB a\rb 1\r\nx\r\n", [Pub("a\rb", None, None, b"x")]),
    ("pub no size", b"PUB foo\r\n", [SILENT]),
    ("pub empty args", b"PUB \r\n", [SILENT]),
    ("pub too many args", b"PUB a b c 1\r\nx\r\n", [SILENT]),
    ("pub size not a number", b"PUB foo abc\r\n", [SILENT]),
    ("pub negative size", b"PUB foo -1\r\n", [SILENT]),
    ("pub size 10 digits", b"PUB foo 1234567890\r\n", [SILENT]),
    ("pub cr then junk", b"PUB a 1\rX\nx\r\n", [SILENT]),  # the byte before \n is dropped
    ("pub no space", b"PUB\r\n", [UNKNOWN]),
    ("pubx", b"PUBX foo 1\r\n", [UNKNOWN]),
    ("pub max payload", b"PUB foo 1048577\r\n", [ProtocolViolation(ERR_MAX_PAYLOAD)]),
    ("pub payload too long", b"PUB foo 2\r\nxyz\r\n", [UNKNOWN]),
    ("pub payload too short", b"PUB foo 2\r\nx\r\nPING\r\n", [UNKNOWN]),
    ("pub payload bare nl", b"PUB foo 2\r\nxy\nPING\r\n", [UNKNOWN]),
    ("pub payload cr cr", b"PUB foo 2\r\nxy\r\rPING\r\n", [UNKNOWN]),
    # --- HPUB
    ("hpub", b"HPUB foo 18 19\r\n" + HDR + b"x\r\n", [Pub("foo", None, HDR, b"x")]),
    ("hpub reply", b"HPUB foo r 18 18\r\n" + HDR + b"\r\n", [Pub("foo", "r", HDR, b"")]),
    ("hpub lower", b"hpub foo 18 19\r\n" + HDR + b"x\r\n", [Pub("foo", None, HDR, b"x")]),
    ("hpub hdr 0", b"HPUB foo 0 1\r\nx\r\n", [Pub("foo", None, None, b"x")]),
    ("hpub garbage hdr", b"HPUB foo 3 3\r\nXYZ\r\n", [Pub("foo", None, b"XYZ", b"")]),
    ("hpub hdr > total", b"HPUB foo 5 3\r\nabc\r\n", [SILENT]),
    ("hpub 2 args", b"HPUB foo 5\r\nabc\r\n", [SILENT]),
    ("hpub 5 args", b"HPUB foo a b c d\r\n", [SILENT]),
    ("hpub max payload total", b"HPUB foo 10 1048577\r\n", [ProtocolViolation(ERR_MAX_PAYLOAD)]),
    # --- SUB / UNSUB
    ("sub", b"SUB foo 1\r\n", [Sub("foo", None, "1")]),
    ("sub queue", b"SUB foo q 1\r\n", [Sub("foo", "q", "1")]),
    ("sub spaces", b"SUB  foo\t 1 \r\n", [Sub("foo", None, "1")]),
    ("sub invalid subject passes", b"SUB foo..bar 1\r\n", [Sub("foo..bar", None, "1")]),
    ("sub missing sid", b"SUB foo\r\n", [SILENT]),
    ("sub too many", b"SUB foo q 1 x\r\n", [SILENT]),
    ("unsub", b"UNSUB 1\r\n", [Unsub("1", None)]),
    ("unsub max", b"UNSUB 1 5\r\n", [Unsub("1", 5)]),
    ("unsub max 0", b"UNSUB 1 0\r\n", [Unsub("1", None)]),
    ("unsub max junk", b"UNSUB 1 abc\r\n", [Unsub("1", None)]),
    ("unsub no args", b"UNSUB\r\n", [UNKNOWN]),
    ("unsub too many", b"UNSUB 1 2 3\r\n", [SILENT]),
    # --- PING / PONG / +OK
    ("ping", b"PING\r\n", [Ping()]),
    ("ping bare nl", b"PING\n", [Ping()]),
    ("ping lower", b"ping\r\n", [Ping()]),
    ("ping with junk", b"PING foo bar\r\n", [Ping()]),
    ("pingx", b"PINGX\r\n", [Ping()]),
    ("pong", b"PONG\r\n", [Pong()]),
    ("ok ignored", b"+OK\r\nPING\r\n", [Ping()]),
    ("okx ignored", b"+OKX\r\nPING\r\n", [Ping()]),
    ("ping long line", b"PING " + b"a" * 5000 + b"\r\n", [Ping()]),
    # --- CONNECT / INFO / -ERR
    ("connect", b'CONNECT {"verbose":false}\r\n', [Connect({"verbose": False})]),
    ("connect no space", b'CONNECT{"verbose":false}\r\n', [Connect({"verbose": False})]),
    ("connect lower", b"connect {}\r\n", [Connect({})]),
    ("connect null", b"CONNECT null\r\n", [Connect({})]),
    ("connect trailing ws", b"CONNECT {}   \r\n", [Connect({})]),
    ("connect empty", b"CONNECT\r\n", [SILENT]),
    ("connect bad json", b"CONNECT {bad\r\n", [SILENT]),
    ("connect array", b"CONNECT []\r\n", [SILENT]),
    ("connect trailing junk", b"CONNECT {} x\r\n", [SILENT]),
    ("connect NaN", b'CONNECT {"a":NaN}\r\n', [SILENT]),
    ("connect deep", b"CONNECT " + b"[" * 3000 + b"\r\n", [SILENT]),
    ("info ignored", b"INFO {}\r\nPING\r\n", [Ping()]),
    ("info bad", b"INFO x\r\n", [SILENT]),
    ("client -ERR", b"-ERR 'x'\r\n", [SILENT]),
    ("client -ERR no space", b"-ERR\r\n", [UNKNOWN]),
    # --- unknown ops
    ("unknown", b"FOO\r\n", [UNKNOWN]),
    ("empty line", b"\r\n", [UNKNOWN]),
    ("leading space", b" PING\r\n", [UNKNOWN]),
    ("msg from client", b"MSG foo 1 1\r\nx\r\n", [UNKNOWN]),
    ("hmsg from client", b"HMSG foo 1 1\r\nx\r\n", [UNKNOWN]),
    ("route op", b"RS+ foo\r\n", [UNKNOWN]),
    ("unknown partial", b"X", [UNKNOWN]),
    ("unknown partial after op letters", b"PIX", [UNKNOWN]),
    # --- control line limit: the argument (after the op and its spaces, before CR) counts
    ("arg 4096", b"PUB " + b"a" * 4094 + b" 0\r\n\r\n", [Pub("a" * 4094, None, None, b"")]),
    (
        "arg 4096 leading spaces",
        b"PUB \t " + b"a" * 4094 + b" 0\r\n\r\n",
        [Pub("a" * 4094, None, None, b"")],
    ),
    ("arg 4097", b"PUB " + b"a" * 4095 + b" 0\r\n\r\n", [ProtocolViolation(ERR_MAX_CONTROL_LINE)]),
    ("arg partial 4097", b"PUB " + b"a" * 4097, [ProtocolViolation(ERR_MAX_CONTROL_LINE)]),
    ("arg partial 4096", b"PUB " + b"a" * 4096, []),
    (
        "connect long",
        b"CONNECT {" + b" " * 5000 + b"}\r\n",
        [ProtocolViolation(ERR_MAX_CONTROL_LINE)],
    ),
    ("sub long", b"SUB foo " + b"q" * 4096 + b" 1\r\n", [ProtocolViolation(ERR_MAX_CONTROL_LINE)]),
    ("unknown long", b"FOO" + b"q" * 5000 + b"\r\n", [UNKNOWN]),
    # --- partial input waits
    ("partial payload", b"PUB foo 1\r\nx\r", []),
    ("partial op", b"PU", []),
    ("max payload before payload", b"PUB foo 1048577\r\n", [ProtocolViolation(ERR_MAX_PAYLOAD)]),
    ("max payload partial line", b"PUB foo 1048577", []),
    ("extra byte fails fast", b"PUB foo 1\r\nxx", [UNKNOWN]),
]


@pytest.mark.parametrize(("data", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_case_table(data: bytes, expected: list[Event]) -> None:
    assert parse(data) == expected


SHORT_CASES = [c for c in CASES if len(c[1]) <= 600]  # long ones: whole, and by Hypothesis


@pytest.mark.parametrize(
    ("data", "expected"), [c[1:] for c in SHORT_CASES], ids=[c[0] for c in SHORT_CASES]
)
def test_case_table_byte_by_byte(data: bytes, expected: list[Event]) -> None:
    assert parse_split([data[i : i + 1] for i in range(len(data))]) == expected


def test_parser_is_dead_after_a_violation() -> None:
    p = ClientParser()
    p.receive_data(b"FOO\r\nPING\r\n")
    assert p.next_event() == UNKNOWN
    assert p.dead
    p.receive_data(b"PING\r\n")
    assert p.next_event() is None


def test_hpub_when_headers_disabled_closes_silently() -> None:
    p = ClientParser()
    p.headers_enabled = False
    p.receive_data(b"HPUB foo 18 19\r\n" + HDR + b"x\r\n")
    assert _drain(p) == [SILENT]
    # HPUB with #hdr=0 is still an HPUB: also refused
    p = ClientParser()
    p.headers_enabled = False
    p.receive_data(b"HPUB foo 0 1\r\nx\r\n")
    assert _drain(p) == [SILENT]


def test_custom_limits() -> None:
    assert parse(b"PUB f 11\r\n", max_payload=10) == [ProtocolViolation(ERR_MAX_PAYLOAD)]
    assert parse(b"PUB f 10\r\n0123456789\r\n", max_payload=10) == [
        Pub("f", None, None, b"0123456789")
    ]
    assert parse(b"SUB abcdef 1\r\n", max_control_line=7) == [
        ProtocolViolation(ERR_MAX_CONTROL_LINE)
    ]
    assert parse(b"SUB abcd 1\r\n", max_control_line=6) == [Sub("abcd", None, "1")]


def test_big_payload_arriving_in_small_pieces() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB
    data = b"PUB big 1048576\r\n" + payload + b"\r\nPING\r\n"
    chunks = [data[i : i + 65536] for i in range(0, len(data), 65536)]
    assert parse_split(chunks) == [Pub("big", None, None, payload), Ping()]


def test_many_pipelined_pubs_in_one_chunk() -> None:
    msg = b"PUB foo.bar 80\r\n" + b"x" * 80 + b"\r\n"
    events = parse(msg * 1000)
    assert len(events) == 1000
    assert all(e == Pub("foo.bar", None, None, b"x" * 80) for e in events)


@pytest.mark.parametrize(
    ("raw", "size"),
    [
        (b"0", 0),
        (b"123", 123),
        (b"999999999", 999999999),
        (b"", -1),
        (b"1234567890", -1),
        (b"-1", -1),
        (b"1a", -1),
        (b"\xd9\xa1", -1),
    ],
)
def test_parse_size(raw: bytes, size: int) -> None:
    assert parse_size(raw) == size


# ---------------------------------------------------------------- Hypothesis

subject_tok = st.text(alphabet="abcXYZ09_-$*>", min_size=1, max_size=6)
subjects = st.lists(subject_tok, min_size=1, max_size=4).map(".".join)
sids = st.integers(0, 10**6).map(str)
sp = st.sampled_from([" ", "  ", "\t", " \t"])
eol = st.sampled_from(["\r\n", "\n"])


def _case(op: str, draw_upper: bool) -> str:
    return op if draw_upper else op.lower()


@st.composite
def ops(draw: st.DrawFn) -> tuple[bytes, Event | None]:
    """One valid client op and the event it must produce (None for ignored ops)."""
    kind = draw(st.sampled_from(["pub", "hpub", "sub", "unsub", "ping", "pong", "connect", "ok"]))
    upper = draw(st.booleans())
    s = draw(sp)
    end = draw(eol)
    if kind in ("pub", "hpub"):
        subject = draw(subjects)
        reply = draw(st.one_of(st.none(), subjects))
        payload = draw(st.binary(max_size=40))
        head = subject + (s + reply if reply else "")
        if kind == "pub":
            line = f"{_case('PUB', upper)}{s}{head}{s}{len(payload)}{end}"
            return line.encode() + payload + b"\r\n", Pub(subject, reply, None, payload)
        hdr = draw(st.sampled_from([b"", HDR, b"NATS/1.0 503\r\n\r\n", b"XYZ\r\n\r\n"]))
        total = len(hdr) + len(payload)
        line = f"{_case('HPUB', upper)}{s}{head}{s}{len(hdr)}{s}{total}{end}"
        return line.encode() + hdr + payload + b"\r\n", Pub(subject, reply, hdr or None, payload)
    if kind == "sub":
        subject = draw(subjects)
        queue = draw(st.one_of(st.none(), subject_tok))
        sid = draw(sids)
        mid = subject + (s + queue if queue else "")
        return f"{_case('SUB', upper)}{s}{mid}{s}{sid}{end}".encode(), Sub(subject, queue, sid)
    if kind == "unsub":
        sid = draw(sids)
        max_msgs = draw(st.one_of(st.none(), st.integers(1, 10**6)))
        tail = f"{s}{max_msgs}" if max_msgs is not None else ""
        return f"{_case('UNSUB', upper)}{s}{sid}{tail}{end}".encode(), Unsub(sid, max_msgs)
    if kind == "ping":
        return f"{_case('PING', upper)}{end}".encode(), Ping()
    if kind == "pong":
        return f"{_case('PONG', upper)}{end}".encode(), Pong()
    if kind == "ok":
        return f"{_case('+OK', upper)}{end}".encode(), None
    verbose = draw(st.booleans())
    name = draw(st.text(alphabet="abc xyz\u00e9", max_size=8))
    options = {"verbose": verbose, "name": name}
    return (
        f"{_case('CONNECT', upper)}{s}{json.dumps(options)}{end}".encode(),
        Connect(options),
    )


streams = st.lists(ops(), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(streams, st.lists(st.integers(0, 10**6), max_size=8))
def test_valid_stream_split_anywhere_gives_same_events(
    stream: list[tuple[bytes, Event | None]], cuts: list[int]
) -> None:
    data = b"".join(raw for raw, _ in stream)
    expected = [ev for _, ev in stream if ev is not None]
    assert parse(data) == expected
    points = sorted({c % (len(data) + 1) for c in cuts})
    chunks = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    assert parse_split(chunks) == expected


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.lists(st.integers(0, 300), max_size=6))
def test_garbage_only_ever_gives_events_or_a_final_violation(data: bytes, cuts: list[int]) -> None:
    for headers in (True, False):
        p = ClientParser()
        p.headers_enabled = headers
        p.receive_data(data)
        whole = _drain(p)
        for i, ev in enumerate(whole):
            assert isinstance(ev, (Connect, Pub, Sub, Unsub, Ping, Pong, ProtocolViolation))
            if isinstance(ev, ProtocolViolation):
                assert i == len(whole) - 1
                assert ev.err in (None, ERR_UNKNOWN_OP, ERR_MAX_PAYLOAD, ERR_MAX_CONTROL_LINE)
        points = sorted({c % (len(data) + 1) for c in cuts})
        chunks = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
        p = ClientParser()
        p.headers_enabled = headers
        out: list[Event] = []
        for c in chunks:
            p.receive_data(c)
            out.extend(_drain(p))
        # splitting never changes the outcome of a stream
        q = ClientParser()
        q.headers_enabled = headers
        q.receive_data(data)
        assert out == _drain(q)


op_prefixes = st.sampled_from(
    [b"PUB ", b"HPUB ", b"SUB ", b"UNSUB ", b"PING", b"CONNECT ", b"INFO ", b"+OK", b"-ERR "]
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(op_prefixes, st.binary(max_size=30)), max_size=6))
def test_near_miss_ops_never_raise(parts: list[tuple[bytes, bytes]]) -> None:
    data = b"".join(p + b for p, b in parts)
    events = parse(data)
    assert all(not isinstance(e, ProtocolViolation) for e in events[:-1])
