"""The ``BatchCommitEntry`` codec: exact round trips, a pinned byte layout, and corrupt bytes only
ever raising ``EntryDecodeError``."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.entries import (
    ENTRY_FORMAT_VERSION,
    TYPE_BATCH_COMMIT,
    BatchCommitEntry,
    EntryDecodeError,
    InboundMsg,
    decode_entry,
    encode_entry,
)

I64 = st.integers(-(1 << 63), (1 << 63) - 1)
TEXT = st.text(max_size=70)  # any code points, surrogates included
MSGS = st.builds(InboundMsg, st.text(max_size=20), st.binary(max_size=60), st.binary(max_size=60))
BATCHES = st.builds(
    BatchCommitEntry, I64, TEXT, st.lists(MSGS, max_size=8).map(tuple), st.booleans()
)


def _with_crc(body: bytes) -> bytes:
    return body + struct.pack(">I", zlib.crc32(body))


@settings(max_examples=200)
@given(BATCHES)
def test_round_trip_is_exact(entry: BatchCommitEntry) -> None:
    raw = encode_entry(entry)
    assert raw[:2] == bytes([ENTRY_FORMAT_VERSION, TYPE_BATCH_COMMIT])
    assert decode_entry(raw) == entry
    assert decode_entry(memoryview(raw)) == entry


def test_encoding_is_stable() -> None:
    """A fixed entry encodes to fixed bytes: the format is persisted and must not drift."""
    entry = BatchCommitEntry(5, "b1", (InboundMsg("a", b"H", b"xy"),), True)
    body = bytes.fromhex(
        "0106"  # version 1, type batch commit
        "0000000000000005"  # ts
        "00000002"
        "6231"  # batch id "b1"
        "01"  # eob
        "00000001"  # one message
        "00000001"
        "00000001"
        "00000002"  # subject, header, data lengths
        "61"
        "48"
        "7879"  # "a", "H", "xy"
    )
    assert encode_entry(entry) == body + struct.pack(">I", zlib.crc32(body))


@settings(max_examples=200)
@given(BATCHES, st.data())
def test_truncation_and_bit_flips_are_decode_errors(
    entry: BatchCommitEntry, data: st.DataObject
) -> None:
    raw = encode_entry(entry)
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(EntryDecodeError):
        decode_entry(raw[:cut])
    pos = data.draw(st.integers(0, len(raw) - 1))
    bit = data.draw(st.integers(0, 7))
    flipped = bytearray(raw)
    flipped[pos] ^= 1 << bit
    with pytest.raises(EntryDecodeError):
        decode_entry(bytes(flipped))


def test_bad_eob_flag_and_trailing_bytes_are_rejected() -> None:
    good = encode_entry(BatchCommitEntry(1, "b", (), False))[:-4]
    eob_at = len(good) - 5  # the flag byte, before the u32 count
    bad_flag = bytearray(good)
    bad_flag[eob_at] = 2
    with pytest.raises(EntryDecodeError, match="eob"):
        decode_entry(_with_crc(bytes(bad_flag)))
    with pytest.raises(EntryDecodeError, match="trailing"):
        decode_entry(_with_crc(good + b"\x00"))
    with pytest.raises(EntryDecodeError, match="truncated"):
        decode_entry(_with_crc(good[:-1] + b"\x05"))  # five messages promised, none there


def test_ts_out_of_range_is_a_caller_error() -> None:
    with pytest.raises(ValueError):
        encode_entry(BatchCommitEntry(1 << 63, "b", (), False))
