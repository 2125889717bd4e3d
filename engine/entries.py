"""Typed stream log entries and their stable, versioned binary encoding.

Owns what a stream's Raft log holds: every state change of a stream is one of these entries,
applied by ``engine/stream.py``. They are persisted and replicated, and Spark replays them, so the
encoding is explicit (no pickle) and versioned:

    u8 format version | u8 entry type | body | u32 crc32 (big-endian) of everything before it

Bodies are big-endian ``struct`` fields; strings and byte strings are u32-length-prefixed (strings
UTF-8, surrogates passed through so that any ``str`` a parser produced round-trips). A new entry
kind takes a new type byte (e.g. the coming batch-commit and expire-by-seq entries); a changed
body takes a new format version, and decoders keep reading the old one. ``MirrorEntry`` (type 7)
carries messages copied from a mirror's upstream with their upstream seqs and timestamps.
``SourceEntry`` (type 8) carries a batch fetched from one of the stream's ``sources``: the
messages with their upstream seqs, which the sourcing stream stores under seqs of its own.
Consumer operations share the log and the layout with type bytes 64..79 of their own
(``engine/consumer/entries.py``); ``encode_entry``/``decode_entry`` hand them over by type byte.

Must never: accept bytes it cannot fully account for (trailing bytes, bad CRC, unknown type or
version all raise ``EntryDecodeError`` and nothing else), or read clocks.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from engine.consumer.entries import (
    AckEntry,
    AckTimeoutEntry,
    ConsumerEntry,
    CreateConsumerEntry,
    DeleteConsumerEntry,
    DeliverEntry,
    ResetConsumerEntry,
    decode_consumer_entry,
    encode_consumer_entry,
    is_consumer_entry,
)
from engine.entry_codec import (
    HEAD,
    STR_ENCODING,
    STR_ERRORS,
    EntryDecodeError,
    Reader,
    frame,
    unframe,
)
from engine.limits import SEQ_MAX

ENTRY_FORMAT_VERSION: Final = 1

TYPE_PUBLISH: Final = 1
TYPE_DELETE_MSG: Final = 2
TYPE_PURGE: Final = 3
TYPE_EXPIRE: Final = 4
TYPE_UPDATE_CONFIG: Final = 5
TYPE_BATCH_COMMIT: Final = 6
TYPE_MIRROR: Final = 7
TYPE_SOURCE: Final = 8

_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_MSG_LENS = struct.Struct(">III")  # subject, hdr, data lengths
_DELETE = struct.Struct(">qQB")
_PURGE_NUMS = struct.Struct(">QQ")
_PUBLISH_HEAD = struct.Struct(">qI")
_MIRROR_HEAD = struct.Struct(">qQQI")  # ts_ns, upstream last seq, covered seq, message count
_BATCH_TAIL = struct.Struct(">BI")  # eob flag, message count (after ts_ns and the batch id)
_SOURCE_HEAD = struct.Struct(">QI")  # upstream last seq, message count (after ts and name)
_MIRRORED_HEAD = struct.Struct(">Qq")  # upstream seq, upstream ts (then subject/hdr/data lengths)

_I64_MIN: Final = -(1 << 63)
_I64_MAX: Final = (1 << 63) - 1


class InboundMsg:
    """One client publish as received: subject, full header block (or b""), payload.

    Immutable by contract (``Final``), and a plain class rather than a frozen dataclass: one is
    built per published message, and a compiled (protocol/native.py) class with its own
    ``__init__`` is built natively, while a dataclass's generated one stays interpreted."""

    __slots__ = ("data", "hdr", "subject")

    def __init__(self, subject: str, hdr: bytes, data: bytes) -> None:
        self.subject: Final = subject
        self.hdr: Final = hdr
        self.data: Final = data

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, InboundMsg):
            return NotImplemented
        return (self.subject, self.hdr, self.data) == (other.subject, other.hdr, other.data)

    def __hash__(self) -> int:
        return hash((self.subject, self.hdr, self.data))

    def __repr__(self) -> str:
        return f"InboundMsg(subject={self.subject!r}, hdr={self.hdr!r}, data={self.data!r})"


@dataclass(frozen=True, slots=True)
class PublishEntry:
    """Group commit: every client publish that arrived while the previous proposal was in flight."""

    ts_ns: int
    msgs: tuple[InboundMsg, ...]


@dataclass(frozen=True, slots=True)
class DeleteMsgEntry:
    """STREAM.MSG.DELETE; ``erase`` is ``not no_erase``."""

    ts_ns: int
    seq: int
    erase: bool


@dataclass(frozen=True, slots=True)
class PurgeEntry:
    """STREAM.PURGE (and nothing else: rollups are decided inside publish apply)."""

    ts_ns: int
    filter: str
    seq: int
    keep: int


@dataclass(frozen=True, slots=True)
class ExpireEntry:
    """Expiry proposed by the leader's timer: removes messages with ts <= ts_ns - max_age (unless
    their Nats-TTL is ``never``) and those whose TTL deadline is <= ts_ns, writing subject delete
    markers. The set is a function of the state and ts_ns alone, so it needs no seq list."""

    ts_ns: int


@dataclass(frozen=True, slots=True)
class UpdateConfigEntry:
    """STREAM.UPDATE: the full new StreamConfig as JSON (already validated and normalized)."""

    ts_ns: int
    config_json: bytes


@dataclass(frozen=True, slots=True)
class BatchCommitEntry:
    """An atomic batch commit (ADR-50): every staged message of one batch, applied all-or-nothing
    with contiguous sequences. ``eob``: the commit message itself was not stored, so the last
    message gets ``Nats-Batch-Commit: 1`` when stored."""

    ts_ns: int
    batch_id: str
    msgs: tuple[InboundMsg, ...]
    eob: bool


@dataclass(frozen=True, slots=True)
class MirroredMsg:
    """One message as the mirror's upstream stores it: its seq, subject, full header block (or
    b""), payload and timestamp, all kept as they are."""

    seq: int
    subject: str
    hdr: bytes
    data: bytes
    ts_ns: int


@dataclass(frozen=True, slots=True)
class MirrorEntry:
    """What a mirror's leader fetched from the upstream in one batch, in upstream seq order.
    ``ts_ns`` is the leader's proposal time (the stored messages keep their upstream times)."""

    ts_ns: int
    msgs: tuple[MirroredMsg, ...]
    # what the leader knew when it proposed: the upstream's last seq, and the upstream seq through
    # which the mirror holds every (matching) message after this entry; 0 = unknown. Every mirror
    # replica learns its lag from them (they are not stream state: no digest, not persisted)
    upstream_last_seq: int = 0
    covered_seq: int = 0


@dataclass(frozen=True, slots=True)
class SourceEntry:
    """What the stream's leader fetched from one source (``source``: its index name, as
    nats-server forms it) in one batch, in upstream seq order. Applying it stores each message
    above the source's position under the stream's next seq, at ``ts_ns``."""

    ts_ns: int
    source: str
    msgs: tuple[MirroredMsg, ...]
    upstream_last_seq: int = 0  # the source's last seq when fetched (its lag; not state)
    ident: str = ""  # the source stream's identity (engine/sources.py), named in each header


Entry = (
    PublishEntry
    | DeleteMsgEntry
    | PurgeEntry
    | ExpireEntry
    | UpdateConfigEntry
    | BatchCommitEntry
    | MirrorEntry
    | SourceEntry
)
ConsumerOp = ConsumerEntry
CONSUMER_OPS: Final = (
    CreateConsumerEntry,
    DeleteConsumerEntry,
    DeliverEntry,
    AckEntry,
    AckTimeoutEntry,
    ResetConsumerEntry,
)
# everything a stream's log holds: stream entries and its consumers' operations
LogEntry = Entry | ConsumerOp


# ------------------------------------------------------------------------------------ encoding


def _check_i64(value: int, what: str) -> None:
    if not _I64_MIN <= value <= _I64_MAX:
        raise ValueError(f"{what} out of int64 range: {value}")


def _check_u64(value: int, what: str) -> None:
    if not 0 <= value <= SEQ_MAX:
        raise ValueError(f"{what} out of uint64 range: {value}")


def _enc_str(value: str) -> bytes:
    raw = value.encode(STR_ENCODING, STR_ERRORS)
    return _U32.pack(len(raw)) + raw


def _enc_bytes(value: bytes) -> bytes:
    return _U32.pack(len(value)) + value


def _enc_upstream_msgs(parts: list[bytes], msgs: tuple[MirroredMsg, ...]) -> None:
    for msg in msgs:
        _check_u64(msg.seq, "seq")
        _check_i64(msg.ts_ns, "ts_ns")
        subject = msg.subject.encode(STR_ENCODING, STR_ERRORS)
        lens = _MSG_LENS.pack(len(subject), len(msg.hdr), len(msg.data))
        parts += (_MIRRORED_HEAD.pack(msg.seq, msg.ts_ns), lens, subject, msg.hdr, msg.data)


def _enc_inbound_msgs_py(msgs: tuple[InboundMsg, ...]) -> bytes:
    """The messages of a publish or batch entry, as ``_dec_inbound_msgs`` reads them back. The
    native build encodes them in C (``_enc_inbound_msgs``; tests/engine/test_entries_native.py
    holds the two equal)."""
    parts: list[bytes] = []
    append = parts.append
    for msg in msgs:
        subject = msg.subject.encode(STR_ENCODING, STR_ERRORS)
        append(_MSG_LENS.pack(len(subject), len(msg.hdr), len(msg.data)))
        append(subject)
        append(msg.hdr)
        append(msg.data)
    return b"".join(parts)


def _native_encode() -> Callable[[tuple[InboundMsg, ...]], bytes] | None:
    try:
        from engine._codec_c import encode_msgs
    except ImportError:  # no native build, or not one of the current sources
        return None
    return encode_msgs


_enc_inbound_msgs: Final = _native_encode() or _enc_inbound_msgs_py


def _body(entry: Entry) -> tuple[int, bytes]:
    if isinstance(entry, PublishEntry):
        _check_i64(entry.ts_ns, "ts_ns")
        return TYPE_PUBLISH, _PUBLISH_HEAD.pack(entry.ts_ns, len(entry.msgs)) + _enc_inbound_msgs(
            entry.msgs
        )
    if isinstance(entry, DeleteMsgEntry):
        _check_i64(entry.ts_ns, "ts_ns")
        _check_u64(entry.seq, "seq")
        return TYPE_DELETE_MSG, _DELETE.pack(entry.ts_ns, entry.seq, 1 if entry.erase else 0)
    if isinstance(entry, PurgeEntry):
        _check_i64(entry.ts_ns, "ts_ns")
        _check_u64(entry.seq, "seq")
        _check_u64(entry.keep, "keep")
        body = _I64.pack(entry.ts_ns) + _enc_str(entry.filter)
        return TYPE_PURGE, body + _PURGE_NUMS.pack(entry.seq, entry.keep)
    if isinstance(entry, ExpireEntry):
        _check_i64(entry.ts_ns, "ts_ns")
        return TYPE_EXPIRE, _I64.pack(entry.ts_ns)
    if isinstance(entry, UpdateConfigEntry):
        _check_i64(entry.ts_ns, "ts_ns")
        return TYPE_UPDATE_CONFIG, _I64.pack(entry.ts_ns) + _enc_bytes(entry.config_json)
    if isinstance(entry, BatchCommitEntry):
        _check_i64(entry.ts_ns, "ts_ns")
        head = _I64.pack(entry.ts_ns) + _enc_str(entry.batch_id)
        tail = _BATCH_TAIL.pack(1 if entry.eob else 0, len(entry.msgs))
        return TYPE_BATCH_COMMIT, b"".join((head, tail, _enc_inbound_msgs(entry.msgs)))
    if isinstance(entry, MirrorEntry):
        _check_i64(entry.ts_ns, "ts_ns")
        _check_u64(entry.upstream_last_seq, "upstream_last_seq")
        _check_u64(entry.covered_seq, "covered_seq")
        parts = [
            _MIRROR_HEAD.pack(
                entry.ts_ns, entry.upstream_last_seq, entry.covered_seq, len(entry.msgs)
            )
        ]
        _enc_upstream_msgs(parts, entry.msgs)
        return TYPE_MIRROR, b"".join(parts)
    if isinstance(entry, SourceEntry):
        _check_i64(entry.ts_ns, "ts_ns")
        _check_u64(entry.upstream_last_seq, "upstream_last_seq")
        parts = [_I64.pack(entry.ts_ns), _enc_str(entry.source), _enc_str(entry.ident)]
        parts.append(_SOURCE_HEAD.pack(entry.upstream_last_seq, len(entry.msgs)))
        _enc_upstream_msgs(parts, entry.msgs)
        return TYPE_SOURCE, b"".join(parts)
    raise TypeError(f"not a log entry: {type(entry).__name__}")


def encode_entry(entry: LogEntry) -> bytes:
    """The entry's wire/disk form. Raises ValueError for out-of-range numbers (a caller bug)."""
    if isinstance(entry, CONSUMER_OPS):
        return encode_consumer_entry(entry)
    entry_type, body = _body(entry)
    return frame(ENTRY_FORMAT_VERSION, entry_type, body)


# ------------------------------------------------------------------------------------ decoding


def _dec_inbound_msgs_py(r: Reader, count: int) -> list[InboundMsg]:
    """``count`` messages (subject, header and data lengths, then the three) from the reader's
    cursor on. Every node decodes every message of every entry: one bounds check per message and
    plain slicing here, rather than a Reader call per field (what the reader checks, checked
    alike). The native build runs the same walk in C (``_dec_inbound_msgs``)."""
    buf, pos, end = r.remaining()
    lens, lens_size = _MSG_LENS, _MSG_LENS.size
    msgs = []
    for _ in range(count):
        if pos + lens_size > end:
            raise r.fail("entry truncated")
        subject_len, hdr_len, data_len = lens.unpack_from(buf, pos)
        subject_at = pos + lens_size
        hdr_at = subject_at + subject_len
        data_at = hdr_at + hdr_len
        pos = data_at + data_len
        if pos > end:
            raise r.fail("entry truncated")
        try:
            subject = buf[subject_at:hdr_at].decode(STR_ENCODING, STR_ERRORS)
        except UnicodeDecodeError as exc:
            raise r.fail(f"bad string: {exc}") from None
        msgs.append(InboundMsg(subject, buf[hdr_at:data_at], buf[data_at:pos]))
    r.pos = pos
    return msgs


def _dec_inbound_msgs_c(r: Reader, count: int) -> list[InboundMsg]:
    """``_dec_inbound_msgs_py`` by the C walk of the native build (engine/_codec_c.c): the same
    messages, the same errors (tests/engine/test_entries_native.py holds them equal)."""
    assert _native_decode_msgs is not None
    buf, pos, end = r.remaining()
    try:
        msgs, r.pos = _native_decode_msgs(buf, pos, end, count, InboundMsg)
    except UnicodeDecodeError as exc:
        raise r.fail(f"bad string: {exc}") from None
    except ValueError as exc:
        raise r.fail(str(exc)) from None
    return msgs


def _native_decode() -> NativeDecodeMsgs | None:
    try:
        from engine._codec_c import decode_msgs
    except ImportError:  # no native build, or not one of the current sources
        return None
    return decode_msgs


NativeDecodeMsgs = Callable[
    [bytes, int, int, int, Callable[[str, bytes, bytes], InboundMsg]],
    tuple[list[InboundMsg], int],
]
_native_decode_msgs: Final = _native_decode()
_dec_inbound_msgs: Final = (
    _dec_inbound_msgs_py if _native_decode_msgs is None else _dec_inbound_msgs_c
)


def _dec_publish(r: Reader) -> PublishEntry:
    ts_ns, count = r.unpack(_PUBLISH_HEAD)
    return PublishEntry(ts_ns, tuple(_dec_inbound_msgs(r, count)))


def _dec_delete(r: Reader) -> DeleteMsgEntry:
    ts_ns, seq, erase = r.unpack(_DELETE)
    if erase > 1:
        raise EntryDecodeError(f"bad erase flag {erase}")
    return DeleteMsgEntry(ts_ns, seq, erase == 1)


def _dec_purge(r: Reader) -> PurgeEntry:
    (ts_ns,) = r.unpack(_I64)
    (filter_len,) = r.unpack(_U32)
    subject_filter = r.text(filter_len)
    seq, keep = r.unpack(_PURGE_NUMS)
    return PurgeEntry(ts_ns, subject_filter, seq, keep)


def _dec_expire(r: Reader) -> ExpireEntry:
    (ts_ns,) = r.unpack(_I64)
    return ExpireEntry(ts_ns)


def _dec_update(r: Reader) -> UpdateConfigEntry:
    (ts_ns,) = r.unpack(_I64)
    (json_len,) = r.unpack(_U32)
    return UpdateConfigEntry(ts_ns, r.take(json_len))


def _dec_batch_commit(r: Reader) -> BatchCommitEntry:
    (ts_ns,) = r.unpack(_I64)
    (id_len,) = r.unpack(_U32)
    batch_id = r.text(id_len)
    eob, count = r.unpack(_BATCH_TAIL)
    if eob > 1:
        raise EntryDecodeError(f"bad eob flag {eob}")
    return BatchCommitEntry(ts_ns, batch_id, tuple(_dec_inbound_msgs(r, count)), eob == 1)


def _dec_upstream_msgs(r: Reader, count: int) -> tuple[MirroredMsg, ...]:
    msgs = []
    for _ in range(count):
        seq, msg_ts_ns = r.unpack(_MIRRORED_HEAD)
        subject_len, hdr_len, data_len = r.unpack(_MSG_LENS)
        subject = r.text(subject_len)
        hdr = r.take(hdr_len)
        msgs.append(MirroredMsg(seq, subject, hdr, r.take(data_len), msg_ts_ns))
    return tuple(msgs)


def _dec_mirror(r: Reader) -> MirrorEntry:
    ts_ns, upstream_last_seq, covered_seq, count = r.unpack(_MIRROR_HEAD)
    return MirrorEntry(ts_ns, _dec_upstream_msgs(r, count), upstream_last_seq, covered_seq)


def _dec_source(r: Reader) -> SourceEntry:
    (ts_ns,) = r.unpack(_I64)
    (name_len,) = r.unpack(_U32)
    source = r.text(name_len)
    (ident_len,) = r.unpack(_U32)
    ident = r.text(ident_len)
    upstream_last_seq, count = r.unpack(_SOURCE_HEAD)
    return SourceEntry(ts_ns, source, _dec_upstream_msgs(r, count), upstream_last_seq, ident)


_DECODERS: dict[int, Callable[[Reader], Entry]] = {
    TYPE_PUBLISH: _dec_publish,
    TYPE_DELETE_MSG: _dec_delete,
    TYPE_PURGE: _dec_purge,
    TYPE_EXPIRE: _dec_expire,
    TYPE_UPDATE_CONFIG: _dec_update,
    TYPE_BATCH_COMMIT: _dec_batch_commit,
    TYPE_MIRROR: _dec_mirror,
    TYPE_SOURCE: _dec_source,
}


def decode_entry(raw: bytes | bytearray | memoryview) -> LogEntry:
    """Parse an encoded entry. Any malformed input raises ``EntryDecodeError`` (only; a
    consumer entry's ``ConsumerEntryDecodeError`` is one)."""
    if is_consumer_entry(raw):
        return decode_consumer_entry(raw)
    entry_type, buf, end = unframe(raw, ENTRY_FORMAT_VERSION, EntryDecodeError)
    decoder = _DECODERS.get(entry_type)
    if decoder is None:
        raise EntryDecodeError(f"unknown entry type {entry_type}")
    reader = Reader(buf, HEAD.size, end)
    entry = decoder(reader)
    reader.done()
    return entry
