"""The log entry codec: exact round trips, and garbage only ever raises EntryDecodeError."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.entries import (
    ENTRY_FORMAT_VERSION,
    TYPE_MIRROR,
    TYPE_PUBLISH,
    DeleteMsgEntry,
    Entry,
    EntryDecodeError,
    ExpireEntry,
    InboundMsg,
    MirroredMsg,
    MirrorEntry,
    PublishEntry,
    PurgeEntry,
    UpdateConfigEntry,
    decode_entry,
    encode_entry,
)

I64 = st.integers(-(1 << 63), (1 << 63) - 1)
U64 = st.integers(0, (1 << 64) - 1)
TEXT = st.text(max_size=20)  # any code points, surrogates included

MSGS = st.builds(InboundMsg, TEXT, st.binary(max_size=40), st.binary(max_size=40))
MIRRORED = st.builds(MirroredMsg, U64, TEXT, st.binary(max_size=40), st.binary(max_size=40), I64)
ENTRIES: st.SearchStrategy[Entry] = st.one_of(
    st.builds(PublishEntry, I64, st.lists(MSGS, max_size=5).map(tuple)),
    st.builds(DeleteMsgEntry, I64, U64, st.booleans()),
    st.builds(PurgeEntry, I64, TEXT, U64, U64),
    st.builds(ExpireEntry, I64),
    st.builds(UpdateConfigEntry, I64, st.binary(max_size=60)),
    st.builds(MirrorEntry, I64, st.lists(MIRRORED, max_size=5).map(tuple)),
)


def _with_crc(body: bytes) -> bytes:
    return body + struct.pack(">I", zlib.crc32(body))


@settings(max_examples=200)
@given(ENTRIES)
def test_round_trip_is_exact(entry: Entry) -> None:
    raw = encode_entry(entry)
    assert raw[0] == ENTRY_FORMAT_VERSION
    assert decode_entry(raw) == entry
    assert decode_entry(bytearray(raw)) == entry
    assert decode_entry(memoryview(raw)) == entry


def test_encoding_is_stable() -> None:
    """A fixed entry encodes to fixed bytes: the format is persisted and must not drift."""
    entry = PublishEntry(5, (InboundMsg("a.b", b"H", b"xy"),))
    assert encode_entry(entry).hex() == (
        "0101"  # version 1, type publish
        "0000000000000005"  # ts
        "00000001"  # one message
        "00000003"
        "00000001"
        "00000002"  # subject/hdr/data lengths
        "612e62"
        "48"
        "7879"  # "a.b" "H" "xy"
        "71564355"  # crc32
    )


@settings(max_examples=200)
@given(st.binary(max_size=80))
def test_random_bytes_only_raise_decode_error(raw: bytes) -> None:
    try:
        decode_entry(raw)
    except EntryDecodeError:
        pass


@settings(max_examples=200)
@given(st.integers(1, TYPE_MIRROR), st.binary(max_size=80))
def test_random_bodies_with_valid_crc_only_raise_decode_error(entry_type: int, body: bytes) -> None:
    """Past the checksum, the field parser itself must reject garbage cleanly."""
    try:
        decode_entry(_with_crc(bytes([ENTRY_FORMAT_VERSION, entry_type]) + body))
    except EntryDecodeError:
        pass


@settings(max_examples=100)
@given(ENTRIES, st.data())
def test_any_single_bit_flip_is_detected(entry: Entry, data: st.DataObject) -> None:
    raw = bytearray(encode_entry(entry))
    bit = data.draw(st.integers(0, len(raw) * 8 - 1))
    raw[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(EntryDecodeError):
        decode_entry(bytes(raw))


@settings(max_examples=100)
@given(ENTRIES, st.data())
def test_truncation_is_detected(entry: Entry, data: st.DataObject) -> None:
    raw = encode_entry(entry)
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(EntryDecodeError):
        decode_entry(raw[:cut])


def test_trailing_bytes_are_rejected_even_with_a_valid_crc() -> None:
    raw = encode_entry(ExpireEntry(7))
    with pytest.raises(EntryDecodeError, match="trailing"):
        decode_entry(_with_crc(raw[:-4] + b"\x00"))


def test_unknown_version_and_type_are_rejected() -> None:
    body = encode_entry(ExpireEntry(7))[2:-4]
    with pytest.raises(EntryDecodeError, match="version"):
        decode_entry(_with_crc(bytes([ENTRY_FORMAT_VERSION + 1, 4]) + body))
    with pytest.raises(EntryDecodeError, match="type"):
        decode_entry(_with_crc(bytes([ENTRY_FORMAT_VERSION, 99]) + body))


def test_bad_erase_flag_and_bad_utf8_are_rejected() -> None:
    delete = bytearray(encode_entry(DeleteMsgEntry(1, 2, True))[:-4])
    delete[-1] = 2
    with pytest.raises(EntryDecodeError, match="erase"):
        decode_entry(_with_crc(bytes(delete)))
    bad_subject = struct.pack(">BBqIIII", ENTRY_FORMAT_VERSION, TYPE_PUBLISH, 0, 1, 1, 0, 0)
    with pytest.raises(EntryDecodeError, match="string"):
        decode_entry(_with_crc(bad_subject + b"\xff"))


def test_huge_declared_count_fails_fast() -> None:
    raw = struct.pack(">BBqI", ENTRY_FORMAT_VERSION, TYPE_PUBLISH, 0, 0xFFFFFFFF)
    with pytest.raises(EntryDecodeError, match="truncated"):
        decode_entry(_with_crc(raw))


@pytest.mark.parametrize(
    "entry",
    [
        ExpireEntry(1 << 63),
        DeleteMsgEntry(0, -1, False),
        DeleteMsgEntry(0, 1 << 64, False),
        PurgeEntry(0, "", 0, -1),
        MirrorEntry(1 << 63, ()),
        MirrorEntry(0, (MirroredMsg(-1, "a", b"", b"", 0),)),
        MirrorEntry(0, (MirroredMsg(1 << 64, "a", b"", b"", 0),)),
        MirrorEntry(0, (MirroredMsg(1, "a", b"", b"", 1 << 63),)),
    ],
)
def test_out_of_range_numbers_are_a_caller_error(entry: Entry) -> None:
    with pytest.raises(ValueError):
        encode_entry(entry)


def test_mirror_encoding_is_stable() -> None:
    """The mirror entry's persisted form: entry ts, the upstream's last seq, the seq covered
    through and the count, then
    per message the upstream seq and time before the usual lengths and bytes."""
    entry = MirrorEntry(5, (MirroredMsg(9, "a.b", b"H", b"xy", 7),), 12, 10)
    raw = encode_entry(entry)
    assert raw[:-4].hex() == (
        "0107"  # version 1, type mirror
        "0000000000000005"  # entry ts
        "000000000000000c"  # upstream last seq
        "000000000000000a"  # covered through
        "00000001"  # one message
        "0000000000000009"  # upstream seq
        "0000000000000007"  # upstream ts
        "000000030000000100000002"  # subject/hdr/data lengths
        "612e62"
        "48"
        "7879"
    )
    assert raw[-4:] == struct.pack(">I", zlib.crc32(raw[:-4]))


def test_mirror_entry_garbage_is_rejected() -> None:
    good = encode_entry(MirrorEntry(1, (MirroredMsg(3, "s", b"", b"d", 2),)))[:-4]
    with pytest.raises(EntryDecodeError, match="trailing"):
        decode_entry(_with_crc(good + b"\x00"))
    with pytest.raises(EntryDecodeError, match="truncated"):
        decode_entry(_with_crc(good[:-1]))
    bad_subject = struct.pack(
        ">BBqQQIQqIII", ENTRY_FORMAT_VERSION, TYPE_MIRROR, 0, 0, 0, 1, 1, 0, 1, 0, 0
    )
    with pytest.raises(EntryDecodeError, match="string"):
        decode_entry(_with_crc(bad_subject + b"\xff"))
    huge = struct.pack(">BBqQQI", ENTRY_FORMAT_VERSION, TYPE_MIRROR, 0, 0, 0, 0xFFFFFFFF)
    with pytest.raises(EntryDecodeError, match="truncated"):
        decode_entry(_with_crc(huge))
