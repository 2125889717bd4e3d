"""ServerParser (tests/protocol/client_parser.py, the client side): the server's encoders round
trip through it, split anywhere; garbage raises."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.headers import encode_header_block
from protocol.session import OK, PING, PONG, encode_err, encode_hmsg, encode_info, encode_msg
from tests.protocol.client_parser import (
    Err,
    Info,
    Msg,
    Ok,
    Ping,
    Pong,
    ServerEvent,
    ServerParser,
    ServerProtocolError,
)


def parse_chunks(chunks: list[bytes]) -> list[ServerEvent]:
    p = ServerParser()
    out: list[ServerEvent] = []
    for c in chunks:
        p.receive_data(c)
        while (ev := p.next_event()) is not None:
            out.append(ev)
    return out


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"PING\r\n", [Ping()]),
        (b"PONG\r\n", [Pong()]),
        (b"+OK\r\n", [Ok()]),
        (b"-ERR 'Invalid Subject'\r\n", [Err("Invalid Subject")]),
        (
            b"-ERR 'Permissions Violation for Publish to \"x\"'\r\n",
            [Err('Permissions Violation for Publish to "x"')],
        ),
        (b'INFO {"server_id":"X","proto":1} \r\n', [Info({"server_id": "X", "proto": 1})]),
        (b"MSG foo 1 3\r\nabc\r\n", [Msg("foo", "1", None, None, b"abc")]),
        (b"MSG foo 1 bar 0\r\n\r\n", [Msg("foo", "1", "bar", None, b"")]),
        (b"MSG\tfoo  1\t3\r\nabc\r\n", [Msg("foo", "1", None, None, b"abc")]),
        (b"msg foo 1 3\r\nabc\r\n", [Msg("foo", "1", None, None, b"abc")]),
        (b"MSG\tfoo 1 3\r\na\nb\r\n", [Msg("foo", "1", None, None, b"a\nb")]),
        (
            b"HMSG foo 1 12 14\r\nNATS/1.0\r\n\r\nhi\r\n",
            [Msg("foo", "1", None, b"NATS/1.0\r\n\r\n", b"hi")],
        ),
        (
            b"HMSG r 1 38 38\r\nNATS/1.0 503\r\nNats-Subject: nobody\r\n\r\n\r\n",
            [Msg("r", "1", None, b"NATS/1.0 503\r\nNats-Subject: nobody\r\n\r\n", b"")],
        ),
        (b"PING\nPONG\n", [Ping(), Pong()]),
    ],
)
def test_server_ops(data: bytes, expected: list[ServerEvent]) -> None:
    assert parse_chunks([data]) == expected
    assert parse_chunks([data[i : i + 1] for i in range(len(data))]) == expected
    for cut in range(len(data) + 1):
        assert parse_chunks([data[:cut], data[cut:]]) == expected, cut


@pytest.mark.parametrize(
    "bad",
    [
        b"FOO\r\n",
        b"INFO nope\r\n",
        b"INFO []\r\n",
        b"MSG foo 3\r\nabc\r\n",
        b"MSG foo 1 x\r\n",
        b"HMSG foo 1 5 3\r\nabc\r\n",
        b"MSG foo 1 2\r\nabc\r\n",
    ],
)
def test_garbage_raises_server_protocol_error(bad: bytes) -> None:
    with pytest.raises(ServerProtocolError):
        parse_chunks([bad])


def test_control_line_limit() -> None:
    p = ServerParser(max_control_line=16)
    p.receive_data(b"INFO " + b"x" * 20)
    with pytest.raises(ServerProtocolError):
        p.next_event()


def test_large_message_in_pieces() -> None:
    payload = bytes(range(256)) * 4096
    data = encode_msg("big", "1", None, payload) + PING
    chunks = [data[i : i + 65536] for i in range(0, len(data), 65536)]
    assert parse_chunks(chunks) == [Msg("big", "1", None, None, payload), Ping()]


subjects = st.lists(
    st.text(alphabet="abc_$*>-0", min_size=1, max_size=5), min_size=1, max_size=4
).map(".".join)
headers = st.lists(
    st.tuples(
        st.sampled_from(["Nats-Msg-Id", "A", "Nats-TTL"]), st.text(alphabet="xyz 01", max_size=6)
    ),
    max_size=3,
)


@st.composite
def server_ops(draw: st.DrawFn) -> tuple[bytes, ServerEvent]:
    kind = draw(st.sampled_from(["msg", "hmsg", "ok", "err", "ping", "pong", "info"]))
    if kind in ("msg", "hmsg"):
        subject = draw(subjects)
        sid = str(draw(st.integers(0, 10**9)))
        reply = draw(st.one_of(st.none(), subjects))
        payload = draw(st.binary(max_size=64))
        if kind == "msg":
            return encode_msg(subject, sid, reply, payload), Msg(subject, sid, reply, None, payload)
        hdr = encode_header_block(draw(headers), draw(st.sampled_from([None, "503", "404"])))
        return (
            encode_hmsg(subject, sid, reply, hdr, payload),
            Msg(subject, sid, reply, hdr, payload),
        )
    if kind == "ok":
        return OK, Ok()
    if kind == "err":
        text = draw(st.sampled_from(["Invalid Subject", "Unknown Protocol Operation"]))
        return encode_err(text), Err(text)
    if kind == "ping":
        return PING, Ping()
    if kind == "pong":
        return PONG, Pong()
    info = {"server_id": draw(st.text(alphabet="ABC", max_size=5)), "x": "<&>é"}
    return encode_info(info), Info(info)


@settings(max_examples=200, deadline=None)
@given(st.lists(server_ops(), min_size=1, max_size=10), st.lists(st.integers(0, 10**6), max_size=6))
def test_encode_parse_round_trip_split_anywhere(
    ops: list[tuple[bytes, ServerEvent]], cuts: list[int]
) -> None:
    data = b"".join(raw for raw, _ in ops)
    expected = [ev for _, ev in ops]
    points = sorted({c % (len(data) + 1) for c in cuts})
    chunks = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    assert parse_chunks([data]) == expected
    assert parse_chunks(chunks) == expected


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_raise_only_server_protocol_error(data: bytes) -> None:
    try:
        parse_chunks([data])
    except ServerProtocolError:
        pass
