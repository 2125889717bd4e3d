"""Every limit the stream state machine enforces, with its unit, named as nats-server names it.

Owns the numbers (and the one formula, ``msg_size_bytes``) that decide what a stream accepts and
how its ``bytes`` are counted, so that ``engine/stream.py`` never carries a bare literal and
STREAM.INFO ``state.bytes`` matches nats-server for both storage types.

Must never: hold state, read clocks, or depend on anything above ``engine/``.
"""

from __future__ import annotations

from typing import Final

NS_PER_S: Final = 1_000_000_000
NS_PER_MS: Final = 1_000_000

# A header block is length-prefixed with a uint16 in nats-server (stream.go: len(hdr) > MaxUint16).
HEADER_BYTES_MAX: Final = 65_535

# Duplicate window (stream.go StreamDefaultDuplicatesWindow and the 100ms floor).
DUPLICATE_WINDOW_DEFAULT_NS: Final = 120 * NS_PER_S
DUPLICATE_WINDOW_MIN_NS: Final = 100 * NS_PER_MS

# max_age must be 0 or at least this (stream.go checkStreamCfg "max age needs to be >= 100ms").
MAX_AGE_MIN_NS: Final = 100 * NS_PER_MS

# Per-message TTL (ADR-43): at least one second, in whole seconds.
MSG_TTL_MIN_S: Final = 1

# Byte accounting, memstore.go memStoreMsgSizeRaw: subject + header + payload + 8*2 (seq + ts).
MEMSTORE_MSG_OVERHEAD_BYTES: Final = 16
# filestore.go fileStoreMsgSizeRaw: record length (4) + seq (8) + ts (8) + subject length (2)
# + hash (8), plus a 4-byte header length when the message has a header.
FILESTORE_RECORD_OVERHEAD_BYTES: Final = 30
FILESTORE_HDR_LEN_BYTES: Final = 4
# filestore.go isFileStoreMsgTooLarge: a record over rlBadThresh (32 MiB) or with the header bit
# (1<<31) set cannot be written; nats-server answers 10077 "message too large".
FILESTORE_RECORD_BYTES_MAX: Final = 32 * 1024 * 1024
FILESTORE_RECORD_HBIT: Final = 1 << 31

# Direct Get multi_last: the most subjects one request may match (stream.go).
MULTI_LAST_SUBJECTS_MAX: Final = 1024

# Sequences are uint64 on the wire and in log entries.
SEQ_MAX: Final = (1 << 64) - 1


def msg_size_bytes(storage: str, subject_len: int, hdr_len: int, data_len: int) -> int:
    """nats-server's accounting size of one stored message: what ``state.bytes`` sums and what
    ``max_bytes`` is compared with. Memory and file streams count differently (probed on
    v2.15.1: subject "B.a", payload "hello" is 24 bytes in memory, 38 bytes on file)."""
    if storage == "memory":
        return subject_len + hdr_len + data_len + MEMSTORE_MSG_OVERHEAD_BYTES
    if hdr_len == 0:
        return FILESTORE_RECORD_OVERHEAD_BYTES + subject_len + data_len
    return (
        FILESTORE_RECORD_OVERHEAD_BYTES + subject_len + FILESTORE_HDR_LEN_BYTES + hdr_len + data_len
    )


def filestore_record_too_large(record_bytes: int) -> bool:
    """filestore.go ``isFileStoreMsgTooLarge``."""
    return bool(record_bytes & FILESTORE_RECORD_HBIT) or record_bytes > FILESTORE_RECORD_BYTES_MAX
