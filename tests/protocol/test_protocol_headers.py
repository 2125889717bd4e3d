"""Header blocks: nats-server's lookup rules (sliceHeader), encode/parse round trips, edits."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.headers import (
    HDR_LINE,
    HeaderBlock,
    HeaderError,
    append_headers,
    encode_header_block,
    get_header,
    parse_header_block,
    remove_header,
    set_header,
)

BLOCK = b"NATS/1.0\r\nNats-Msg-Id: abc\r\nNats-TTL: 10 \r\nX:   lead\r\nNats-Msg-Id: second\r\n\r\n"


@pytest.mark.parametrize(
    ("hdr", "key", "value"),
    [
        (BLOCK, "Nats-Msg-Id", "abc"),  # first occurrence wins
        (BLOCK, "nats-msg-id", None),  # case-sensitive
        (BLOCK, "Nats-TTL", "10 "),  # trailing spaces kept
        (BLOCK, "X", "lead"),  # leading spaces skipped
        (BLOCK, "Missing", None),
        (b"", "X", None),
        (b"garbage", "X", None),
        (b"\xff\xfe\r\n", "X", None),
        (b"NATS/1.0\r\nX-Nats-Msg-Id: 1\r\nNats-Msg-Id: 2\r\n\r\n", "Nats-Msg-Id", "2"),
        (b"NATS/1.0\r\nNats-Msg-Id2: 1\r\nNats-Msg-Id: 2\r\n\r\n", "Nats-Msg-Id", "2"),
        (b"NATS/1.0\r\nA: x\r\n\r\n", "A", "x"),  # 'A' also occurs inside "NATS"
        (b"NATS/1.0\r\nK:\r\n\r\n", "K", ""),
        (b"NATS/1.0\r\nK: v", "K", "v"),  # no CRLF after the value: up to the end
        (b"NATS/1.0\r\nK", "K", None),
        (b"NATS/1.0\r\nV: a\rb\r\n\r\n", "V", "a\rb"),  # a lone CR is part of the value
    ],
)
def test_get_header(hdr: bytes, key: str, value: str | None) -> None:
    assert get_header(hdr, key) == value


def test_parse_status_lines() -> None:
    assert parse_header_block(b"NATS/1.0 404 Message Not Found\r\n\r\n") == HeaderBlock(
        "404", "Message Not Found", []
    )
    assert parse_header_block(b"NATS/1.0 503\r\nNats-Subject: x\r\n\r\n") == HeaderBlock(
        "503", None, [("Nats-Subject", "x")]
    )
    assert parse_header_block(b"NATS/1.0\r\nA: 1\r\nA: 2\r\n\r\n") == HeaderBlock(
        None, None, [("A", "1"), ("A", "2")]
    )
    assert parse_header_block(b"NATS/1.0 100 Idle Heartbeat\r\n\r\n").description == (
        "Idle Heartbeat"
    )


@pytest.mark.parametrize("bad", [b"", b"XYZ\r\n\r\n", b"HTTP/1.1 200\r\n\r\n", b"NATS/1.1\r\n"])
def test_parse_rejects_non_nats_blocks(bad: bytes) -> None:
    with pytest.raises(HeaderError):
        parse_header_block(bad)
    assert issubclass(HeaderError, ValueError)


def test_encode_header_block() -> None:
    assert encode_header_block([]) == b"NATS/1.0\r\n\r\n"
    assert encode_header_block([], "503") == b"NATS/1.0 503\r\n\r\n"
    assert encode_header_block([], "404", "Message Not Found") == (
        b"NATS/1.0 404 Message Not Found\r\n\r\n"
    )
    assert encode_header_block([("Nats-Subject", "a.b")], "503") == (
        b"NATS/1.0 503\r\nNats-Subject: a.b\r\n\r\n"
    )


def test_append_headers_goes_after_existing_ones() -> None:
    base = encode_header_block([("A", "1")])
    assert append_headers(base, [("Nats-Stream", "S"), ("Nats-Sequence", "3")]) == (
        b"NATS/1.0\r\nA: 1\r\nNats-Stream: S\r\nNats-Sequence: 3\r\n\r\n"
    )
    assert append_headers(b"", [("B", "2")]) == b"NATS/1.0\r\nB: 2\r\n\r\n"
    # a status block keeps its status line
    assert append_headers(b"NATS/1.0 404\r\n\r\n", [("C", "3")]) == (
        b"NATS/1.0 404\r\nC: 3\r\n\r\n"
    )


def test_remove_header_removes_every_occurrence() -> None:
    hdr = b"NATS/1.0\r\nA: 1\r\nB: 2\r\nA: 3\r\n\r\n"
    assert remove_header(hdr, "A") == b"NATS/1.0\r\nB: 2\r\n\r\n"
    assert remove_header(hdr, "Z") == hdr
    assert remove_header(hdr, "a") == hdr  # case-sensitive
    # nothing left but the NATS/1.0 line: empty, as nats-server returns nil
    assert remove_header(b"NATS/1.0\r\nA: 1\r\n\r\n", "A") == b""


def test_set_header() -> None:
    hdr = b"NATS/1.0\r\nA: 1\r\nB: 2\r\nA: 3\r\n\r\n"
    assert (
        set_header(hdr, "A", "long-value") == b"NATS/1.0\r\nA: long-value\r\nB: 2\r\nA: 3\r\n\r\n"
    )
    assert set_header(hdr, "C", "x") == b"NATS/1.0\r\nA: 1\r\nB: 2\r\nA: 3\r\nC: x\r\n\r\n"
    assert set_header(b"", "C", "x") == b"NATS/1.0\r\nC: x\r\n\r\n"
    assert set_header(b"NATS/1.0\r\nA:1\r\n\r\n", "A", "2") == b"NATS/1.0\r\nA:2\r\n\r\n"


keys = st.text(
    alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters=":"),
    min_size=1,
    max_size=12,
)
values = st.text(
    alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=0, max_size=20
).map(lambda v: v.strip())
items_st = st.lists(st.tuples(keys, values), max_size=6)
status_st = st.one_of(
    st.none(),
    st.tuples(
        st.sampled_from(["100", "404", "408", "503"]),
        st.one_of(st.none(), st.sampled_from(["No Messages", "EOB", "Message Not Found"])),
    ),
)


@settings(max_examples=200)
@given(items_st, status_st)
def test_header_block_round_trip(
    items: list[tuple[str, str]], status: tuple[str, str | None] | None
) -> None:
    code, desc = status if status is not None else (None, None)
    block = encode_header_block(items, code, desc)
    assert block.startswith(HDR_LINE) and block.endswith(b"\r\n\r\n")
    parsed = parse_header_block(block)
    assert parsed == HeaderBlock(code, desc, items)
    # get_header sees the first occurrence of each key, exactly as encoded
    for key, _ in items:
        first = next(v for k, v in items if k == key)
        found = get_header(block, key)
        # a key that is a suffix of an earlier key still resolves to its own line
        assert found == first


@settings(max_examples=200)
@given(items_st, items_st)
def test_append_then_parse(first: list[tuple[str, str]], extra: list[tuple[str, str]]) -> None:
    block = append_headers(encode_header_block(first), extra)
    assert parse_header_block(block).items == first + extra


@settings(max_examples=200)
@given(st.binary(max_size=200), keys)
def test_lookups_never_raise_on_garbage(hdr: bytes, key: str) -> None:
    value = get_header(hdr, key)
    assert value is None or isinstance(value, str)
    assert isinstance(remove_header(hdr, key), bytes)
    assert isinstance(set_header(hdr, key, "v"), bytes)
