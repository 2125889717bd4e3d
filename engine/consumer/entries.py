"""Consumer log entries and their versioned, checksummed binary encoding.

Consumer operations are entries of the stream's own Raft log, interleaved with its publishes. The
layout is the one ``engine/entries.py`` uses, with type bytes of their own, so one log holds both
and the type byte (``is_consumer_entry``) says which decoder to use:

    u8 format version | u8 entry type (64..79) | body | u32 crc32 (big-endian) of what precedes

Bodies are big-endian ``struct`` fields; strings and byte strings are u32-length-prefixed (UTF-8,
surrogates passed through). Acks are coalesced: an ``AckEntry`` holds every ack the leader
received while the previous proposal was in flight, written as runs of acks to the same consumer
so a consumer's name is written once per run. A new entry kind takes a new type byte; a changed
body takes a new format version, and decoders keep reading the old ones.

Must never: accept bytes it cannot fully account for (trailing bytes, a bad checksum, an unknown
version, type or ack kind, a count past the limits all raise ``ConsumerEntryDecodeError`` and
nothing else), or read clocks.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

from engine.consumer.limits import (
    ACKS_PER_ENTRY_MAX,
    CONFIG_JSON_BYTES_MAX,
    CONSUMER_NAME_BYTES_MAX,
    DELIVER_SEQS_MAX,
    NS_MAX,
    NS_MIN,
    SEQ_LIMIT,
    TERM_REASON_BYTES_MAX,
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

CONSUMER_ENTRY_FORMAT_VERSION: Final = 1

# Type bytes 64..79 are the consumers'; engine/entries.py's stream entries use 1..63.
TYPE_CONSUMER_FIRST: Final = 64
TYPE_CONSUMER_LAST: Final = 79
TYPE_CREATE: Final = 64
TYPE_DELETE: Final = 65
TYPE_DELIVER: Final = 66
TYPE_ACKS: Final = 67
TYPE_ACK_TIMEOUT: Final = 68
TYPE_RESET: Final = 69

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")
_U8 = struct.Struct(">B")
_ACK = struct.Struct(">BQQ")  # kind, stream seq, consumer seq


class ConsumerEntryDecodeError(EntryDecodeError):
    """The bytes are not a valid consumer entry (corrupt, truncated, or of an unknown format)."""


class CreateAction(IntEnum):
    """What a create entry may do (nats-server's create / update / create-or-update actions)."""

    CREATE_OR_UPDATE = 0
    CREATE = 1
    UPDATE = 2


class AckKind(IntEnum):
    """How a client answered a delivery: +ACK, -NAK, +WPI (work in progress), +TERM."""

    ACK = 1
    NAK = 2
    WPI = 3
    TERM = 4


@dataclass(frozen=True, slots=True)
class CreateConsumerEntry:
    """CONSUMER.CREATE / UPDATE: the consumer's name and its config as JSON. Applied at this log
    position, the starting sequence is chosen against the stream as every replica holds it."""

    ts_ns: int
    name: str
    config_json: bytes
    action: CreateAction = CreateAction.CREATE_OR_UPDATE


@dataclass(frozen=True, slots=True)
class DeleteConsumerEntry:
    """CONSUMER.DELETE."""

    ts_ns: int
    name: str


@dataclass(frozen=True, slots=True)
class DeliverEntry:
    """The leader's decision to deliver these stream seqs (in this order) to the consumer at
    ``ts_ns``. Apply assigns consumer seqs and delivery counts; a seq it may no longer deliver is
    refused, and the leader sends only what apply accepted."""

    ts_ns: int
    consumer: str
    stream_seqs: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Ack:
    """One client ack, as its reply subject ($JS.ACK...) and payload carried it. ``delay_ns`` is
    a NAK's delay (0: redeliver now), ``reason`` a TERM's reason; both are empty otherwise."""

    consumer: str
    kind: AckKind
    stream_seq: int
    consumer_seq: int = 0
    delay_ns: int = 0
    reason: str = ""


@dataclass(frozen=True, slots=True)
class AckEntry:
    """Every ack the leader received while its previous proposal was in flight, in arrival order."""

    ts_ns: int
    acks: tuple[Ack, ...]


@dataclass(frozen=True, slots=True)
class AckTimeoutEntry:
    """The leader's redelivery timer fired at ``ts_ns``: apply drops from pending what reached
    max_deliver and what left the stream. Which seqs those are is a function of the state and
    ``ts_ns`` alone, so the entry names none (like the stream's ExpireEntry)."""

    ts_ns: int
    consumer: str


@dataclass(frozen=True, slots=True)
class ResetConsumerEntry:
    """CONSUMER.RESET: deliver again from stream seq ``seq`` (0: the one after the ack floor at
    this log position), with nothing pending and the consumer sequence starting over."""

    ts_ns: int
    consumer: str
    seq: int = 0


ConsumerEntry = (
    CreateConsumerEntry
    | DeleteConsumerEntry
    | DeliverEntry
    | AckEntry
    | AckTimeoutEntry
    | ResetConsumerEntry
)


def is_consumer_entry(raw: bytes | bytearray | memoryview) -> bool:
    """Does this encoded log entry carry a consumer type byte (decode it here, not as a stream
    entry)? Says nothing about whether the rest is valid."""
    return len(raw) >= HEAD.size and TYPE_CONSUMER_FIRST <= raw[1] <= TYPE_CONSUMER_LAST


# ------------------------------------------------------------------------------------ encoding


def _check_i64(value: int, what: str) -> None:
    if not NS_MIN <= value <= NS_MAX:
        raise ValueError(f"{what} out of int64 range: {value}")


def _check_seq(value: int, what: str) -> None:
    if not 0 < value <= SEQ_LIMIT:
        raise ValueError(f"{what} out of range: {value}")


def _enc_name(value: str) -> bytes:
    raw = value.encode(STR_ENCODING, STR_ERRORS)
    if not 0 < len(raw) <= CONSUMER_NAME_BYTES_MAX:
        raise ValueError(f"consumer name length {len(raw)} out of range")
    return _U32.pack(len(raw)) + raw


def _enc_bytes(value: bytes, limit: int, what: str) -> bytes:
    if len(value) > limit:
        raise ValueError(f"{what} longer than {limit} bytes")
    return _U32.pack(len(value)) + value


def _enc_ack_tail(ack: Ack) -> bytes:
    if ack.kind == AckKind.NAK:
        if not 0 <= ack.delay_ns <= NS_MAX:
            raise ValueError(f"NAK delay out of range: {ack.delay_ns}")
        if ack.reason:
            raise ValueError("only a TERM carries a reason")
        return _I64.pack(ack.delay_ns)
    if ack.delay_ns:
        raise ValueError("only a NAK carries a delay")
    if ack.kind == AckKind.TERM:
        reason = ack.reason.encode(STR_ENCODING, STR_ERRORS)
        return _enc_bytes(reason, TERM_REASON_BYTES_MAX, "TERM reason")
    if ack.reason:
        raise ValueError("only a TERM carries a reason")
    return b""


def _enc_acks(entry: AckEntry) -> bytes:
    if len(entry.acks) > ACKS_PER_ENTRY_MAX:
        raise ValueError(f"more than {ACKS_PER_ENTRY_MAX} acks in one entry")
    runs: list[list[Ack]] = []
    for ack in entry.acks:
        if runs and runs[-1][0].consumer == ack.consumer:
            runs[-1].append(ack)
        else:
            runs.append([ack])
    parts = [_U32.pack(len(runs))]
    for run in runs:
        parts += (_enc_name(run[0].consumer), _U32.pack(len(run)))
        for ack in run:
            _check_seq(ack.stream_seq, "stream_seq")
            if not 0 <= ack.consumer_seq <= SEQ_LIMIT:
                raise ValueError(f"consumer_seq out of range: {ack.consumer_seq}")
            parts += (_ACK.pack(int(AckKind(ack.kind)), ack.stream_seq, ack.consumer_seq),)
            parts.append(_enc_ack_tail(ack))
    return b"".join(parts)


def _body(entry: ConsumerEntry) -> tuple[int, bytes]:
    _check_i64(entry.ts_ns, "ts_ns")
    ts = _I64.pack(entry.ts_ns)
    if isinstance(entry, CreateConsumerEntry):
        action = _U8.pack(int(CreateAction(entry.action)))
        config = _enc_bytes(entry.config_json, CONFIG_JSON_BYTES_MAX, "config")
        return TYPE_CREATE, ts + _enc_name(entry.name) + action + config
    if isinstance(entry, DeleteConsumerEntry):
        return TYPE_DELETE, ts + _enc_name(entry.name)
    if isinstance(entry, DeliverEntry):
        if len(entry.stream_seqs) > DELIVER_SEQS_MAX:
            raise ValueError(f"more than {DELIVER_SEQS_MAX} seqs in one deliver entry")
        for seq in entry.stream_seqs:
            _check_seq(seq, "stream_seq")
        seqs = struct.pack(f">{len(entry.stream_seqs)}Q", *entry.stream_seqs)
        head = ts + _enc_name(entry.consumer) + _U32.pack(len(entry.stream_seqs))
        return TYPE_DELIVER, head + seqs
    if isinstance(entry, AckEntry):
        return TYPE_ACKS, ts + _enc_acks(entry)
    if isinstance(entry, AckTimeoutEntry):
        return TYPE_ACK_TIMEOUT, ts + _enc_name(entry.consumer)
    if isinstance(entry, ResetConsumerEntry):
        if entry.seq:
            _check_seq(entry.seq, "reset seq")
        return TYPE_RESET, ts + _enc_name(entry.consumer) + _U64.pack(entry.seq)
    raise TypeError(f"not a consumer entry: {type(entry).__name__}")


def encode_consumer_entry(entry: ConsumerEntry) -> bytes:
    """The entry's log form. Raises ValueError for values out of range (a caller bug)."""
    entry_type, body = _body(entry)
    return frame(CONSUMER_ENTRY_FORMAT_VERSION, entry_type, body)


# ------------------------------------------------------------------------------------ decoding


class _Reader(Reader):
    """The entry reader with the consumer bodies' field kinds."""

    __slots__ = ()

    def sized(self, limit: int, what: str) -> bytes:
        (n,) = self.unpack(_U32)
        if n > limit:
            raise self.fail(f"{what} longer than {limit} bytes")
        return self.take(n)

    def sized_text(self, limit: int, what: str) -> str:
        (n,) = self.unpack(_U32)
        if n > limit:
            raise self.fail(f"{what} longer than {limit} bytes")
        return self.text(n, what)

    def name(self) -> str:
        name = self.sized_text(CONSUMER_NAME_BYTES_MAX, "consumer name")
        if not name:
            raise self.fail("empty consumer name")
        return name

    def seq(self) -> int:
        (seq,) = self.unpack(_U64)
        if seq == 0:
            raise self.fail("stream seq 0")
        return seq

    def count(self, limit: int, what: str) -> int:
        (n,) = self.unpack(_U32)
        if n > limit:
            raise self.fail(f"{n} {what} past the limit of {limit}")
        return n


def _dec_create(r: _Reader, ts_ns: int) -> CreateConsumerEntry:
    name = r.name()
    (action,) = r.unpack(_U8)
    try:
        create_action = CreateAction(action)
    except ValueError:
        raise ConsumerEntryDecodeError(f"unknown create action {action}") from None
    config = r.sized(CONFIG_JSON_BYTES_MAX, "config")
    return CreateConsumerEntry(ts_ns, name, config, create_action)


def _dec_delete(r: _Reader, ts_ns: int) -> DeleteConsumerEntry:
    return DeleteConsumerEntry(ts_ns, r.name())


def _dec_deliver(r: _Reader, ts_ns: int) -> DeliverEntry:
    name = r.name()
    count = r.count(DELIVER_SEQS_MAX, "seqs")
    return DeliverEntry(ts_ns, name, tuple(r.seq() for _ in range(count)))


def _dec_acks(r: _Reader, ts_ns: int) -> AckEntry:
    runs = r.count(ACKS_PER_ENTRY_MAX, "ack runs")
    acks: list[Ack] = []
    previous = ""
    for _ in range(runs):
        name = r.name()
        if name == previous:
            # the encoder writes one run per stretch of acks to a consumer: one encoding each
            raise ConsumerEntryDecodeError("two adjacent ack runs for one consumer")
        previous = name
        count = r.count(ACKS_PER_ENTRY_MAX - len(acks), "acks")
        if count == 0:
            raise ConsumerEntryDecodeError("empty ack run")
        for _ in range(count):
            acks.append(_dec_ack(r, name))
    return AckEntry(ts_ns, tuple(acks))


def _dec_ack(r: _Reader, name: str) -> Ack:
    kind_raw, stream_seq, consumer_seq = r.unpack(_ACK)
    try:
        kind = AckKind(kind_raw)
    except ValueError:
        raise ConsumerEntryDecodeError(f"unknown ack kind {kind_raw}") from None
    if stream_seq == 0:
        raise ConsumerEntryDecodeError("stream seq 0")
    delay_ns, reason = 0, ""
    if kind == AckKind.NAK:
        (delay_ns,) = r.unpack(_I64)
        if delay_ns < 0:
            raise ConsumerEntryDecodeError("negative NAK delay")
    elif kind == AckKind.TERM:
        reason = r.sized_text(TERM_REASON_BYTES_MAX, "TERM reason")
    return Ack(name, kind, stream_seq, consumer_seq, delay_ns, reason)


def _dec_timeout(r: _Reader, ts_ns: int) -> AckTimeoutEntry:
    return AckTimeoutEntry(ts_ns, r.name())


def _dec_reset(r: _Reader, ts_ns: int) -> ResetConsumerEntry:
    name = r.name()
    (seq,) = r.unpack(_U64)  # 0: the ack floor's next
    if seq > SEQ_LIMIT:
        raise ConsumerEntryDecodeError(f"reset seq {seq} past the limit")
    return ResetConsumerEntry(ts_ns, name, seq)


_DECODERS: dict[int, Callable[[_Reader, int], ConsumerEntry]] = {
    TYPE_CREATE: _dec_create,
    TYPE_DELETE: _dec_delete,
    TYPE_DELIVER: _dec_deliver,
    TYPE_ACKS: _dec_acks,
    TYPE_ACK_TIMEOUT: _dec_timeout,
    TYPE_RESET: _dec_reset,
}


def decode_consumer_entry(raw: bytes | bytearray | memoryview) -> ConsumerEntry:
    """Parse an encoded consumer entry. Malformed input raises ConsumerEntryDecodeError only."""
    entry_type, buf, end = unframe(raw, CONSUMER_ENTRY_FORMAT_VERSION, ConsumerEntryDecodeError)
    decoder = _DECODERS.get(entry_type)
    if decoder is None:
        raise ConsumerEntryDecodeError(f"unknown consumer entry type {entry_type}")
    reader = _Reader(buf, HEAD.size, end, ConsumerEntryDecodeError)
    (ts_ns,) = reader.unpack(_I64)
    entry = decoder(reader, ts_ns)
    reader.done()
    return entry
