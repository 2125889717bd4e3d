"""The on-disk record format of the file store: encoding, checking and walking records in bytes.

Every record is self-delimiting and versioned, with two checksums::

    total_len u32 | version u8 | type u8 | reserved u16 | seq u64 | header_crc u32   (20 bytes)
    body ...                                                                        (type-specific)
    crc u32   (CRC-32, as zlib computes it, over every byte before it, header included)

The header has its own CRC so that a damaged body still yields a trustworthy length (the walk can
skip the record and go on) and a trustworthy seq (the damage is reported with its sequence). A
damaged header makes the length unknowable: the walk stops there.

Bodies (all little-endian):

* MSG: ts_ns i64 | subject_len u16 | hdr_len u32 | subject | hdr | data
* REMOVE: flags u8 (bit 0: erase) — removes ``seq``
* REMOVE_THROUGH: empty — removes every seq <= ``seq``
* META: the opaque engine blob (seq is 0); the last one in the log wins

Erasing a message in place zeroes every byte of its MSG record after the header (trailing CRC
included) and leaves the header alone, so the length stays readable whatever a crash interrupts.
An erased record fails its CRC by design; ``walk`` recognises it (an all-zero body cannot be a
message: subjects are never empty) and flags it ``erased`` rather than damaged.

Must never: touch files, read clocks, or use pickle. This module is pure functions over bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import Final, NamedTuple

from engine.checksum import crc32
from engine.disk import zeros_from
from engine.entry_codec import STR_ERRORS
from engine.store import StoredMsg

# A subject is stored as the log entry carries it: a client's bytes that are not UTF-8 reach
# the engine as lone surrogates (the parser decodes with surrogateescape), which must round-trip.
SUBJECT_ERRORS = STR_ERRORS

RECORD_VERSION = 1

_HEAD = struct.Struct("<IBBHQ")  # total_len, version, type, reserved, seq
_U32 = struct.Struct("<I")
_MSG_FIXED = struct.Struct("<qHI")  # ts_ns, subject_len, hdr_len
_REMOVE_FLAGS = struct.Struct("<B")
_MSG_HEAD = struct.Struct("<IBBHQIqHI")  # header, header_crc, then the MSG fixed fields

HEADER_BYTES = _HEAD.size + _U32.size  # 20
CRC_BYTES = _U32.size
RECORD_BYTES_MIN = HEADER_BYTES + CRC_BYTES
MSG_FIXED_BYTES = _MSG_FIXED.size
SUBJECT_BYTES_MAX = 0xFFFF
RECORD_BYTES_MAX = 0xFFFFFFFF

REMOVE_FLAG_ERASE = 0x01


class RecordType(IntEnum):
    MSG = 1
    REMOVE = 2
    REMOVE_THROUGH = 3
    META = 4


_KNOWN_TYPES = frozenset(int(t) for t in RecordType)
# Plain ints for the hot paths: an IntEnum attribute lookup costs more than the packing itself.
_TYPE_MSG = int(RecordType.MSG)
_MSG_AFTER_HEAD = struct.Struct("<IqHI")  # header_crc, then the MSG fixed fields
_MSG_OVERHEAD_BYTES = HEADER_BYTES + MSG_FIXED_BYTES + CRC_BYTES
_MSG_SUBJECT_AT = HEADER_BYTES + MSG_FIXED_BYTES  # where the subject starts in a MSG record
# crc32(b + crc32(b).to_bytes(4, "little")) is this constant for every b, and no other
# 4 bytes after b give it (CRC-32 of 4 appended bytes is a bijection): checking the CRC of a whole
# record against it is exactly checking its trailing CRC, without slicing the trailer off first.
_CRC_RESIDUE = 0x2144DF1C
# tuple.__new__ builds a StoredMsg without the Python-level NamedTuple __new__ (half the cost).
_new_tuple = tuple.__new__


def _head(total_len: int, rtype: RecordType, seq: int) -> bytes:
    head = _HEAD.pack(total_len, RECORD_VERSION, rtype, 0, seq)
    return head + _U32.pack(crc32(head))


def _append_msg_fields_py(
    buf: bytearray, seq: int, subject: str, hdr: bytes, data: bytes, ts_ns: int
) -> int:
    """Append the MSG record of a message (its ``StoredMsg`` fields) to ``buf``; returns the
    record length in bytes.

    Hot path (once per stored message): two CRCs (header, then record) and one join. The native
    build replaces it with the same encoder in C (``engine/_codec_c.c``, ``append_msg_fields``)."""
    subject_bytes = subject.encode("utf-8", SUBJECT_ERRORS)
    subject_len = len(subject_bytes)
    assert 0 < subject_len <= SUBJECT_BYTES_MAX, subject_len  # non-empty: see erase
    total_len = _MSG_OVERHEAD_BYTES + subject_len + len(hdr) + len(data)
    assert total_len <= RECORD_BYTES_MAX, total_len
    head = _HEAD.pack(total_len, RECORD_VERSION, _TYPE_MSG, 0, seq)
    fixed = _MSG_AFTER_HEAD.pack(crc32(head), ts_ns, subject_len, len(hdr))
    rec = b"".join((head, fixed, subject_bytes, hdr, data))
    buf += rec
    buf += _U32.pack(crc32(rec))
    return total_len


AppendMsgFields = Callable[[bytearray, int, str, bytes, bytes, int], int]


def _native_append_msg_fields() -> AppendMsgFields | None:
    """The C encoder when the native build holds it (never against edited source: the build is
    used only when every source, the C one included, is unchanged since it was compiled)."""
    try:
        from engine._codec_c import append_msg_fields as native
    except ImportError:
        return None
    return native


# Appends the MSG record of a message, given as its fields, to a buffer and returns the record's
# length in bytes: the same bytes whichever encoder runs (tests/engine/store/test_records.py
# holds them equal).
append_msg_fields: Final[AppendMsgFields] = _native_append_msg_fields() or _append_msg_fields_py


def append_msg(buf: bytearray, msg: StoredMsg) -> int:
    """``append_msg_fields`` of a ``StoredMsg``."""
    return append_msg_fields(buf, msg.seq, msg.subject, msg.hdr, msg.data, msg.ts_ns)


def _small_record(rtype: RecordType, seq: int, body: bytes) -> bytes:
    rec = _head(HEADER_BYTES + len(body) + CRC_BYTES, rtype, seq) + body
    return rec + _U32.pack(crc32(rec))


def encode_remove(seq: int, *, erase: bool) -> bytes:
    return _small_record(
        RecordType.REMOVE, seq, _REMOVE_FLAGS.pack(REMOVE_FLAG_ERASE if erase else 0)
    )


def encode_remove_through(seq: int) -> bytes:
    return _small_record(RecordType.REMOVE_THROUGH, seq, b"")


def encode_meta(meta: bytes) -> bytes:
    return _small_record(RecordType.META, 0, bytes(meta))


def erase_patch(total_len: int) -> bytes:
    """The bytes written at ``offset + HEADER_BYTES`` to erase the record of ``total_len`` bytes."""
    assert total_len >= RECORD_BYTES_MIN, total_len
    return bytes(total_len - HEADER_BYTES)


def is_erased(rec: bytes | memoryview, offset: int, total_len: int) -> bool:
    """Whether everything after the header of the record at ``offset`` is zero (see module doc)."""
    body_len = total_len - HEADER_BYTES
    start = offset + HEADER_BYTES
    with memoryview(rec) as view:
        return view[start : start + body_len] == bytes(body_len)


@dataclass(frozen=True, slots=True)
class RecordHeader:
    total_len: int
    rtype: int
    seq: int


def read_header(buf: bytes | memoryview, offset: int) -> RecordHeader | None:
    """The header at ``offset`` when its CRC, version and type check out, else None.
    The caller must have checked that HEADER_BYTES are available."""
    total_len, version, rtype, _reserved, seq = _HEAD.unpack_from(buf, offset)
    (head_crc,) = _U32.unpack_from(buf, offset + _HEAD.size)
    if crc32(buf[offset : offset + _HEAD.size]) != head_crc:
        return None
    if version != RECORD_VERSION or rtype not in _KNOWN_TYPES or total_len < RECORD_BYTES_MIN:
        return None
    return RecordHeader(total_len, rtype, seq)


def decode_msg(view: memoryview, offset: int, seq: int) -> StoredMsg | None:
    """The message of ``seq`` in the MSG record at ``offset``, or None when the record is not an
    intact MSG record of that seq (every read from disk goes through here)."""
    size = len(view)
    if size - offset < RECORD_BYTES_MIN + MSG_FIXED_BYTES:
        return None
    total_len, version, rtype, _r, found_seq, _hcrc, ts_ns, subject_len, hdr_len = (
        _MSG_HEAD.unpack_from(view, offset)
    )
    end = offset + total_len - CRC_BYTES
    sub_start = offset + HEADER_BYTES + MSG_FIXED_BYTES
    hdr_start = sub_start + subject_len
    data_start = hdr_start + hdr_len
    if (
        found_seq != seq
        or rtype != _TYPE_MSG
        or version != RECORD_VERSION
        or data_start > end
        or size < end + CRC_BYTES
        or crc32(view[offset : end + CRC_BYTES]) != _CRC_RESIDUE
    ):
        return None
    subject = str(view[sub_start:hdr_start], "utf-8", SUBJECT_ERRORS)
    msg: StoredMsg = _new_tuple(
        StoredMsg,
        (seq, subject, bytes(view[hdr_start:data_start]), bytes(view[data_start:end]), ts_ns),
    )
    return msg


def decode_msg_record(rec: bytes, seq: int) -> StoredMsg | None:
    """``decode_msg`` for bytes holding exactly one record (a read of its indexed length): the
    message of ``seq``, or None when ``rec`` is not an intact MSG record of that seq and length.
    The per-read path of the file store, hence specialised: bytes slices, one CRC pass."""
    size = len(rec)
    if size < RECORD_BYTES_MIN + MSG_FIXED_BYTES:
        return None
    total_len, version, rtype, _r, found_seq, _hcrc, ts_ns, subject_len, hdr_len = (
        _MSG_HEAD.unpack_from(rec)
    )
    hdr_start = _MSG_SUBJECT_AT + subject_len
    data_start = hdr_start + hdr_len
    end = size - CRC_BYTES
    if (
        total_len != size
        or found_seq != seq
        or rtype != _TYPE_MSG
        or version != RECORD_VERSION
        or data_start > end
        or crc32(rec) != _CRC_RESIDUE
    ):
        return None
    subject = rec[_MSG_SUBJECT_AT:hdr_start].decode("utf-8", SUBJECT_ERRORS)
    msg: StoredMsg = _new_tuple(
        StoredMsg, (seq, subject, rec[hdr_start:data_start], rec[data_start:end], ts_ns)
    )
    return msg


DecodeMsgAt = Callable[[bytes | bytearray, int, int, int, type[StoredMsg]], StoredMsg | None]


def _decode_msg_at_py(
    buf: bytes | bytearray, offset: int, length: int, seq: int, cls: type[StoredMsg]
) -> StoredMsg | None:
    assert cls is StoredMsg, cls
    if offset < 0 or offset + length > len(buf):
        return None
    return decode_msg_record(bytes(buf[offset : offset + length]), seq)


def _native_decode_msg_at() -> DecodeMsgAt | None:
    """The C decoder when the native build holds it (as ``_native_append_msg_fields``)."""
    try:
        from engine._codec_c import decode_msg_at as native
    except ImportError:
        return None
    return native


# ``decode_msg_record`` of buf[offset:offset+length], without copying the slice in the C form:
# the file store's read of a record it holds in memory or just read; the last argument is
# StoredMsg (the C form builds the tuple subclass itself). Both forms answer the same
# (tests/engine/store/test_records.py).
decode_msg_at: Final[DecodeMsgAt] = _native_decode_msg_at() or _decode_msg_at_py


def remove_is_erase(rec: bytes | memoryview, offset: int) -> bool:
    (flags,) = _REMOVE_FLAGS.unpack_from(rec, offset + HEADER_BYTES)
    return bool(flags & REMOVE_FLAG_ERASE)


def meta_body(rec: bytes | memoryview, offset: int, total_len: int) -> bytes:
    return bytes(rec[offset + HEADER_BYTES : offset + total_len - CRC_BYTES])


class WalkedRecord(NamedTuple):
    """One record found by ``walk``; ``crc_ok`` False means its body is damaged or, when
    ``erased``, was erased on purpose (the header is fine either way)."""

    offset: int
    total_len: int
    rtype: int
    seq: int
    crc_ok: bool
    erased: bool


@dataclass(frozen=True, slots=True)
class WalkStop:
    """Why ``walk`` stopped before the end of the bytes.

    ``torn`` is True when what follows ``offset`` looks like an interrupted write (too short for a
    header, a record running past the end, nothing but zero fill, or a damaged header with
    nothing but zeros after it); False when a header is damaged with more data after it (the
    length is unknowable, the rest cannot be parsed)."""

    offset: int
    torn: bool
    reason: str


def walk(buf: bytes) -> Iterator[WalkedRecord | WalkStop]:
    """Every record of a segment in order, then a ``WalkStop`` if the bytes do not end cleanly.

    Fast path: when the record CRC (which covers the header) matches, the header CRC is not
    checked separately; it only decides, for a record that fails, whether its length is usable."""
    size = len(buf)
    offset = 0
    unpack_head = _HEAD.unpack_from
    unpack_u32 = _U32.unpack_from
    with memoryview(buf) as view:
        while offset < size:
            remaining = size - offset
            if remaining < HEADER_BYTES:
                yield WalkStop(offset, True, f"{remaining} bytes, too short for a record header")
                return
            total_len, version, rtype, _reserved, seq = unpack_head(view, offset)
            if RECORD_BYTES_MIN <= total_len <= remaining and version == RECORD_VERSION:
                end = offset + total_len - CRC_BYTES
                if crc32(view[offset:end]) == unpack_u32(view, end)[0] and rtype in _KNOWN_TYPES:
                    yield WalkedRecord(offset, total_len, rtype, seq, True, False)
                    offset += total_len
                    continue
            head = read_header(view, offset)
            if head is None:
                if zeros_from(buf, offset):
                    yield WalkStop(offset, True, f"{remaining} bytes of zero fill")
                elif zeros_from(buf, offset + HEADER_BYTES):
                    # nothing but zeros after it: a header cut short by a crash, where the file
                    # went on with space reserved ahead of the appends (engine/disk.py)
                    yield WalkStop(offset, True, "record header cut short before zero fill")
                else:
                    yield WalkStop(offset, False, "damaged record header")
                return
            if head.total_len > remaining:
                yield WalkStop(
                    offset, True, f"record of {head.total_len} bytes cut at {remaining} bytes"
                )
                return
            erased = is_erased(view, offset, head.total_len)
            yield WalkedRecord(offset, head.total_len, head.rtype, head.seq, False, erased)
            offset += head.total_len


def append_sendable_msg(buf: bytearray, msg: StoredMsg) -> None:
    """``append_msg`` for a message about to leave this node (state transfer, mirror fetch):
    ``ValueError`` when its subject cannot be carried by the record format."""
    subject_len = len(msg.subject.encode("utf-8", SUBJECT_ERRORS))
    if not 0 < subject_len <= SUBJECT_BYTES_MAX:
        raise ValueError(f"seq {msg.seq}: subject of {subject_len} bytes cannot be sent")
    append_msg(buf, msg)


def decode_msg_records(buf: bytes) -> list[StoredMsg]:
    """The messages of a buffer of MSG records that arrived from another node, in order;
    ``ValueError`` on anything else (a damaged, cut or non-MSG record)."""
    msgs: list[StoredMsg] = []
    with memoryview(buf) as view:
        for item in walk(buf):
            if isinstance(item, WalkStop):
                raise ValueError(f"bad message record at {item.offset}: {item.reason}")
            if not item.crc_ok or item.rtype != RecordType.MSG:
                raise ValueError(f"bad message record at {item.offset}")
            try:
                msg = decode_msg(view, item.offset, item.seq)
            except UnicodeDecodeError:
                msg = None
            if msg is None:
                raise ValueError(f"undecodable message record at {item.offset}")
            msgs.append(msg)
    return msgs
