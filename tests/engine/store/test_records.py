"""The record format: round trips, and damage that is always detected and never raises."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import records
from engine.records import RecordType, WalkedRecord, WalkStop
from engine.store import StoredMsg

MSG = StoredMsg(seq=7, subject="a.b", hdr=b"NATS/1.0\r\nK: v\r\n\r\n", data=b"hello", ts_ns=-5)


def sample_log() -> bytes:
    buf = bytearray()
    records.append_msg(buf, MSG)
    buf += records.encode_remove(7, erase=True)
    buf += records.encode_remove_through(9)
    buf += records.encode_meta(b"\x00meta\xff")
    return bytes(buf)


def test_walk_finds_every_record_with_its_type_and_seq() -> None:
    log = sample_log()
    found = list(records.walk(log))
    assert all(isinstance(r, WalkedRecord) and r.crc_ok for r in found)
    walked = [r for r in found if isinstance(r, WalkedRecord)]
    assert [(r.rtype, r.seq) for r in walked] == [
        (RecordType.MSG, 7),
        (RecordType.REMOVE, 7),
        (RecordType.REMOVE_THROUGH, 9),
        (RecordType.META, 0),
    ]
    assert sum(r.total_len for r in walked) == len(log)
    assert records.decode_msg(memoryview(log), 0, 7) == MSG
    assert records.decode_msg(memoryview(log), 0, 8) is None  # wrong seq is never served
    assert records.remove_is_erase(log, walked[1].offset)
    assert records.meta_body(log, walked[3].offset, walked[3].total_len) == b"\x00meta\xff"


def test_erased_message_is_recognised_and_not_decodable() -> None:
    log = bytearray(sample_log())
    msg_len = records.append_msg(bytearray(), MSG)
    patch = records.erase_patch(msg_len)
    log[records.HEADER_BYTES : records.HEADER_BYTES + len(patch)] = patch
    first = next(records.walk(bytes(log)))
    assert isinstance(first, WalkedRecord)
    assert (first.crc_ok, first.erased, first.seq) == (False, True, 7)
    assert records.decode_msg(memoryview(bytes(log)), 0, 7) is None
    assert MSG.data not in log


@given(position=st.integers(0, 10_000), flip=st.integers(1, 255))
def test_any_flipped_byte_is_detected(position: int, flip: int) -> None:
    log = bytearray(sample_log())
    position %= len(log)
    log[position] ^= flip
    found = list(records.walk(bytes(log)))
    damaged = [r for r in found if isinstance(r, WalkStop) or not r.crc_ok]
    assert len(damaged) == 1
    intact = [r for r in found if isinstance(r, WalkedRecord) and r.crc_ok]
    assert all(r.offset + r.total_len <= position or r.offset > position for r in intact)


@settings(max_examples=200)
@given(garbage=st.binary(max_size=300))
def test_garbage_never_raises(garbage: bytes) -> None:
    log = sample_log()
    for data in (garbage, log[:40] + garbage, garbage + log):
        items = list(records.walk(data))
        assert all(isinstance(i, WalkedRecord | WalkStop) for i in items)
        assert sum(isinstance(i, WalkStop) for i in items) <= 1
        for item in items:
            if isinstance(item, WalkedRecord) and item.rtype == RecordType.MSG:
                records.decode_msg(memoryview(data), item.offset, item.seq)


# The bytes the format had before append_msg was rewritten for speed (records written by earlier
# versions must still open): MSG, REMOVE with erase, REMOVE_THROUGH, META, as in sample_log().
GOLDEN_LOG_HEX = (
    "4000000001010000070000000000000019272b92fbffffffffffffff030012000000612e624e4154532f312e300d0a"
    "4b3a20760d0a0d0a68656c6c6ffad5ce69"
    "19000000010200000700000000000000a287eb1e018bc725b1"
    "18000000010300000900000000000000c1db87641cdf4421"
    "1e0000000104000000000000000000008dbc6201006d657461ff5ca9cc8c"
)


def test_encoding_is_byte_identical_to_the_versioned_format() -> None:
    assert sample_log().hex() == GOLDEN_LOG_HEX


def single_record(msg: StoredMsg) -> bytes:
    buf = bytearray()
    records.append_msg(buf, msg)
    return bytes(buf)


MSGS = st.builds(
    StoredMsg,
    seq=st.integers(1, 2**64 - 1),
    # any text, and a client's bytes that are not UTF-8 as the parser hands them on
    subject=st.one_of(
        st.text(min_size=1, max_size=20),
        st.binary(min_size=1, max_size=20).map(lambda b: b.decode("utf-8", "surrogateescape")),
    ),
    hdr=st.binary(max_size=40),
    data=st.binary(max_size=200),
    ts_ns=st.integers(-(2**63), 2**63 - 1),
)


@settings(max_examples=150)
@given(msg=MSGS)
def test_a_single_record_decodes_back_to_its_message(msg: StoredMsg) -> None:
    rec = single_record(msg)
    assert records.decode_msg_record(rec, msg.seq) == msg
    assert records.decode_msg(memoryview(rec), 0, msg.seq) == msg
    assert records.decode_msg_record(rec, msg.seq ^ 1) is None  # wrong seq is never served


@settings(max_examples=150)
@given(msg=MSGS, position=st.integers(0, 10_000), flip=st.integers(1, 255), cut=st.integers(1, 8))
def test_single_record_decode_rejects_any_flip_or_short_read(
    msg: StoredMsg, position: int, flip: int, cut: int
) -> None:
    rec = bytearray(single_record(msg))
    assert records.decode_msg_record(bytes(rec[:-cut]), msg.seq) is None
    assert records.decode_msg_record(bytes(rec) + b"\x00", msg.seq) is None
    rec[position % len(rec)] ^= flip
    assert records.decode_msg_record(bytes(rec), msg.seq) is None
    assert records.decode_msg(memoryview(bytes(rec)), 0, msg.seq) is None


def _native_encoder() -> records.AppendMsgFields:
    """The C encoder of the native build; the test skips where it is not built (plain Python
    runs, a machine without a compiler), since ``records.append_msg_fields`` is then the Python
    one."""
    native = records._native_append_msg_fields()
    if native is None:
        pytest.skip("the C record encoder is not built here")
    return native


@settings(max_examples=300)
@given(msg=MSGS, before=st.binary(max_size=30))
def test_the_c_encoder_writes_the_bytes_of_the_python_one(msg: StoredMsg, before: bytes) -> None:
    native = _native_encoder()
    expected, got = bytearray(before), bytearray(before)
    assert native(got, *msg) == records._append_msg_fields_py(expected, *msg)
    assert got == expected


def test_the_c_encoder_checksums_with_zlib_ng_as_the_python_one_does() -> None:
    """The C encoder finds zlib-ng's CRC-32 in the zlib_ng package it depends on (else it falls
    back to zlib's: the same values, two to three times slower on a record)."""
    _native_encoder()
    from engine import _codec_c

    assert _codec_c.crc_source() == "zlib-ng"


def test_the_c_encoder_refuses_what_the_python_one_refuses_and_writes_nothing() -> None:
    native = _native_encoder()
    for bad in (
        MSG._replace(subject=""),  # empty subjects cannot be stored (erased records rely on it)
        MSG._replace(subject="s" * (records.SUBJECT_BYTES_MAX + 1)),
    ):
        buf = bytearray(b"kept")
        with pytest.raises(AssertionError):
            records._append_msg_fields_py(bytearray(), *bad)
        with pytest.raises(AssertionError):
            native(buf, *bad)
        assert buf == b"kept"
    for wrong in ((bytes(5), *MSG), (bytearray(), *tuple(MSG)[:4]), (bytearray(), "not a msg")):
        with pytest.raises(TypeError):
            native(*wrong)  # type: ignore[arg-type]
    for mutable in (MSG._replace(data=bytearray(b"x")), MSG._replace(hdr=bytearray(b"x"))):
        buf = bytearray(b"kept")
        with pytest.raises(TypeError):  # as the compiled Python encoder: bytes only
            native(buf, *mutable)
        assert buf == b"kept"


def test_the_native_build_stores_with_the_c_encoder() -> None:
    """When the native build is in use, the store's hot path runs the C encoder (not only this
    test file): what the benchmarks measure."""
    native = _native_encoder()
    assert records.append_msg_fields is native


def _native_decoder() -> records.DecodeMsgAt:
    native = records._native_decode_msg_at()
    if native is None:
        pytest.skip("the C record decoder is not built here")
    return native


@settings(max_examples=300)
@given(
    msg=MSGS,
    before=st.binary(max_size=30),
    after=st.binary(max_size=30),
    position=st.integers(0, 10_000),
    flip=st.integers(0, 255),
    length_change=st.sampled_from([0, 0, 0, -1, -4, 1, 4]),
    seq_change=st.sampled_from([0, 0, 0, 1]),
    mutable=st.booleans(),
)
def test_the_c_decoder_answers_as_the_python_one(
    msg: StoredMsg,
    before: bytes,
    after: bytes,
    position: int,
    flip: int,
    length_change: int,
    seq_change: int,
    mutable: bool,
) -> None:
    """Whole and damaged records, wrong lengths and seqs, in bytes and in bytearrays."""
    native = _native_decoder()
    rec = bytearray(single_record(msg))
    rec[position % len(rec)] ^= flip
    whole = before + bytes(rec) + after
    buf: bytes | bytearray = bytearray(whole) if mutable else whole
    args = (buf, len(before), len(rec) + length_change, msg.seq ^ seq_change, StoredMsg)
    expected = records._decode_msg_at_py(*args)
    got = native(*args)
    assert got == expected
    if flip == 0 and length_change == 0 and seq_change == 0:
        assert got == msg and type(got) is StoredMsg
    elif expected is None:
        assert got is None


def test_the_c_decoder_refuses_a_range_outside_the_buffer() -> None:
    native = _native_decoder()
    rec = single_record(MSG)
    for offset, length in ((-1, len(rec)), (1, len(rec)), (0, len(rec) + 1), (len(rec) + 1, 0)):
        assert native(rec, offset, length, MSG.seq, StoredMsg) is None
        assert records._decode_msg_at_py(rec, offset, length, MSG.seq, StoredMsg) is None
    assert native(rec, 0, len(rec), MSG.seq, StoredMsg) == MSG


def test_the_native_build_reads_with_the_c_decoder() -> None:
    native = _native_decoder()
    assert records.decode_msg_at is native
