"""Consumer entries: encode/decode round-trip, and refusal of every malformed byte string."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.consumer.entries import (
    Ack,
    AckEntry,
    AckKind,
    AckTimeoutEntry,
    ConsumerEntry,
    ConsumerEntryDecodeError,
    CreateAction,
    CreateConsumerEntry,
    DeleteConsumerEntry,
    DeliverEntry,
    ResetConsumerEntry,
    decode_consumer_entry,
    encode_consumer_entry,
    is_consumer_entry,
)
from engine.consumer.limits import ACKS_PER_ENTRY_MAX, DELIVER_SEQS_MAX, SEQ_LIMIT
from engine.entries import EntryDecodeError, ExpireEntry, decode_entry, encode_entry

TS = st.integers(-(1 << 63), (1 << 63) - 1)
SEQ = st.integers(1, (1 << 64) - 1)
NAME = st.text(
    st.characters(blacklist_characters=".*>/\\ \t\r\n\f\x00", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=20,
)


@st.composite
def acks(draw: st.DrawFn) -> Ack:
    kind = draw(st.sampled_from(list(AckKind)))
    delay = draw(st.integers(0, (1 << 63) - 1)) if kind == AckKind.NAK else 0
    reason = draw(st.text(max_size=30)) if kind == AckKind.TERM else ""
    cseq = draw(st.integers(0, (1 << 64) - 1))
    return Ack(draw(st.sampled_from(["a", "b", "c"])), kind, draw(SEQ), cseq, delay, reason)


ENTRIES: st.SearchStrategy[ConsumerEntry] = st.one_of(
    st.builds(
        CreateConsumerEntry, TS, NAME, st.binary(max_size=200), st.sampled_from(list(CreateAction))
    ),
    st.builds(DeleteConsumerEntry, TS, NAME),
    st.builds(DeliverEntry, TS, NAME, st.lists(SEQ, max_size=20).map(tuple)),
    st.builds(AckEntry, TS, st.lists(acks(), max_size=20).map(tuple)),
    st.builds(AckTimeoutEntry, TS, NAME),
    st.builds(ResetConsumerEntry, TS, NAME, st.integers(0, SEQ_LIMIT)),  # 0: the ack floor's next
)


@settings(max_examples=200)
@given(ENTRIES)
def test_round_trip(entry: ConsumerEntry) -> None:
    raw = encode_consumer_entry(entry)
    assert is_consumer_entry(raw)
    assert decode_consumer_entry(raw) == entry
    assert encode_consumer_entry(decode_consumer_entry(raw)) == raw


@settings(max_examples=100)
@given(ENTRIES, st.data())
def test_truncated_entries_are_refused(entry: ConsumerEntry, data: st.DataObject) -> None:
    raw = encode_consumer_entry(entry)
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(ConsumerEntryDecodeError):
        decode_consumer_entry(raw[:cut])


@settings(max_examples=100)
@given(ENTRIES, st.data())
def test_flipped_bits_are_refused(entry: ConsumerEntry, data: st.DataObject) -> None:
    raw = bytearray(encode_consumer_entry(entry))
    pos = data.draw(st.integers(0, len(raw) - 1))
    raw[pos] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(ConsumerEntryDecodeError):
        decode_consumer_entry(bytes(raw))


def _sealed(body: bytes) -> bytes:
    return body + struct.pack(">I", zlib.crc32(body))


@settings(max_examples=200)
@given(st.binary(max_size=200))
def test_garbage_raises_only_the_decode_error(raw: bytes) -> None:
    for candidate in (raw, _sealed(raw), _sealed(b"\x01" + raw)):
        try:
            entry = decode_consumer_entry(candidate)
        except ConsumerEntryDecodeError:
            continue
        assert decode_consumer_entry(encode_consumer_entry(entry)) == entry


def test_the_decode_error_is_a_value_error() -> None:
    assert issubclass(ConsumerEntryDecodeError, ValueError)


@pytest.mark.parametrize(
    "body",
    [
        b"\x02\x40" + bytes(8) + b"\x00\x00\x00\x01a\x00\x00\x00\x00\x00",  # unknown version
        b"\x01\x50" + bytes(8),  # unknown type inside the consumer range
        b"\x01\x42" + bytes(8) + b"\x00\x00\x00\x00" + bytes(4),  # empty consumer name
        b"\x01\x42" + bytes(8) + b"\x00\x00\x00\x01a\x00\x00\x00\x01" + bytes(8),  # seq 0
        b"\x01\x42" + bytes(8) + b"\x00\x00\x00\x01a" + struct.pack(">I", DELIVER_SEQS_MAX + 1),
        b"\x01\x43" + bytes(8) + struct.pack(">I", ACKS_PER_ENTRY_MAX + 1),
        b"\x01\x43" + bytes(8) + b"\x00\x00\x00\x01\x00\x00\x00\x01a\x00\x00\x00\x00",  # empty run
        b"\x01\x43"
        + bytes(8)
        + b"\x00\x00\x00\x01\x00\x00\x00\x01a\x00\x00\x00\x01\x09"
        + struct.pack(">QQ", 1, 1),  # unknown ack kind
        b"\x01\x43"
        + bytes(8)
        + b"\x00\x00\x00\x01\x00\x00\x00\x01a\x00\x00\x00\x01\x02"
        + struct.pack(">QQq", 1, 1, -5),  # negative NAK delay
        b"\x01\x40" + bytes(8) + b"\x00\x00\x00\x01a\x07\x00\x00\x00\x00",  # unknown action
        b"\x01\x41" + bytes(8) + b"\x00\x00\x00\x01a" + b"x",  # trailing byte
    ],
)
def test_malformed_bodies_are_refused(body: bytes) -> None:
    with pytest.raises(ConsumerEntryDecodeError):
        decode_consumer_entry(_sealed(body))


def test_two_adjacent_runs_for_one_consumer_are_refused() -> None:
    ack = b"\x01" + struct.pack(">QQ", 1, 1)
    run = b"\x00\x00\x00\x01a\x00\x00\x00\x01" + ack
    with pytest.raises(ConsumerEntryDecodeError):
        decode_consumer_entry(_sealed(b"\x01\x43" + bytes(8) + b"\x00\x00\x00\x02" + run + run))


def test_acks_to_one_consumer_are_written_once_per_run() -> None:
    many = AckEntry(1, tuple(Ack("orders", AckKind.ACK, seq, seq) for seq in range(1, 101)))
    raw = encode_consumer_entry(many)
    assert raw.count(b"orders") == 1
    assert len(raw) < 100 * 18 + 40


def test_stream_and_consumer_entries_share_one_log_codec() -> None:
    stream_raw = encode_entry(ExpireEntry(5))
    consumer_raw = encode_consumer_entry(AckTimeoutEntry(5, "c"))
    assert not is_consumer_entry(stream_raw)
    assert is_consumer_entry(consumer_raw)
    # the stream log's codec hands consumer entries over by type byte, both ways
    assert encode_entry(AckTimeoutEntry(5, "c")) == consumer_raw
    assert decode_entry(consumer_raw) == AckTimeoutEntry(5, "c")
    with pytest.raises(EntryDecodeError):
        decode_entry(consumer_raw[:-1] + bytes([consumer_raw[-1] ^ 1]))
    with pytest.raises(ConsumerEntryDecodeError):
        decode_consumer_entry(stream_raw)


@pytest.mark.parametrize(
    "entry",
    [
        DeliverEntry(1, "c", (0,)),
        DeliverEntry(1, "", (1,)),
        DeliverEntry(1, "c", tuple(range(1, DELIVER_SEQS_MAX + 2))),
        AckEntry(1, (Ack("c", AckKind.ACK, 1, 0, delay_ns=5),)),
        AckEntry(1, (Ack("c", AckKind.NAK, 1, 0, reason="x"),)),
        AckEntry(1, (Ack("c", AckKind.NAK, 1, 0, delay_ns=-1),)),
        AckTimeoutEntry(1 << 63, "c"),
        ResetConsumerEntry(1, "c", SEQ_LIMIT + 1),
        ResetConsumerEntry(1, "c", -1),
    ],
)
def test_out_of_range_values_are_caller_bugs(entry: ConsumerEntry) -> None:
    with pytest.raises(ValueError):
        encode_consumer_entry(entry)
