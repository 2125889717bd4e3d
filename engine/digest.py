"""The stream state digest: one short value that two replicas compare to prove they agree.

Owns the definition of "same state": every live message (seq, subject, ts, accounting size and a
fingerprint of header and payload), the stream's sequence bookkeeping, the applied log index and
the configuration. The message part is a multiset hash (the sum of per-message BLAKE2b hashes
modulo 2**128), so adding or removing a message costs O(1) and a full purge resets it in O(1); the
final digest hashes that sum with the scalar state. ``messages_digest`` hashes the same sum with
the message count and bytes only: two streams holding the same messages at the same seqs (a
mirror and its upstream, whatever their logs, configs and bookkeeping) agree on it, provided
their storage types match (the accounting size is part of each message's hash). It detects
accidental divergence between replicas; it is not meant to resist an adversary.

Cost split, because publish is the hot path: what a message needs on arrival is only its content
fingerprint (``content_fingerprint``: CRC-32 of header and payload with the header length, one C
call), kept in the index. The BLAKE2b of (seq, ts, size, fingerprint, subject) is derived from the
index alone, so ``engine/stream.py`` folds it into the sum lazily, when a digest is asked for
(O(messages since the last digest)), and recomputes it on removal only for messages already
folded. The value is a function of the live messages only, whenever it is folded.

Must never: depend on the store implementation, on insertion history or on when digests were
taken (only on the resulting state), or on the clock.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from engine.checksum import crc32

DIGEST_FORMAT_VERSION: Final = 2
MSG_HASH_BYTES: Final = 16
MSG_SUM_MODULUS: Final = 1 << (8 * MSG_HASH_BYTES)
DIGEST_BYTES: Final = 32

# The fingerprint: CRC-32 in the low 32 bits, the header length above them (so that bytes moved
# between header and payload still change it).
FINGERPRINT_HDR_LEN_SHIFT: Final = 32

_MSG_HEAD = struct.Struct(">QqQQ")  # seq, ts, size, fingerprint
_STATE = struct.Struct(">BQQQqqQQ")
_CONTENT = struct.Struct(">BBQQ")  # version, domain tag, messages, bytes
# Keeps a content digest from ever equalling a state digest of the same sum.
_CONTENT_DOMAIN: Final = 0x43
_blake2b = hashlib.blake2b


def _content_fingerprint_py(hdr: bytes, data: bytes) -> int:
    if not hdr:
        return crc32(data)
    return crc32(data, crc32(hdr)) | (len(hdr) << FINGERPRINT_HDR_LEN_SHIFT)


def _native_content_fingerprint() -> Callable[[bytes, bytes], int] | None:
    try:
        from engine._codec_c import content_fingerprint as native
    except ImportError:
        return None
    return native


# What a message's header and payload contribute (once per stored message on every replica):
# the C form of the native build (engine/_codec_c.c) computes the same value in one call.
content_fingerprint: Final[Callable[[bytes, bytes], int]] = (
    _native_content_fingerprint() or _content_fingerprint_py
)


def message_hash(seq: int, subject: str, ts_ns: int, size_bytes: int, fingerprint: int) -> int:
    """One message's contribution to the multiset sum."""
    head = _MSG_HEAD.pack(seq, ts_ns, size_bytes, fingerprint)
    h = _blake2b(head + subject.encode("utf-8", "surrogatepass"), digest_size=MSG_HASH_BYTES)
    return int.from_bytes(h.digest(), "big")


@dataclass(slots=True)
class MessageSum:
    """Running multiset hash of the live messages."""

    value: int = 0

    def add(self, msg_hash: int) -> None:
        self.value = (self.value + msg_hash) % MSG_SUM_MODULUS

    def remove(self, msg_hash: int) -> None:
        self.value = (self.value - msg_hash) % MSG_SUM_MODULUS

    def reset(self) -> None:
        self.value = 0


def config_hash(config_json: bytes) -> bytes:
    """Hash of the canonical config encoding (recomputed only when the config changes)."""
    return hashlib.blake2b(config_json, digest_size=DIGEST_BYTES).digest()


def state_digest(
    *,
    msg_sum: int,
    applied_index: int,
    first_seq: int,
    last_seq: int,
    first_ts_ns: int,
    last_ts_ns: int,
    messages: int,
    bytes_total: int,
    last_msg_id: str,
    config_digest: bytes,
    consumers_digest: bytes = b"",
    sources_digest: bytes = b"",
) -> bytes:
    """The digest two replicas at the same applied index must agree on (a stream that never had
    consumers hashes no consumer state, one without source positions none either, so their
    digest is what it was before consumers and sources existed)."""
    h = hashlib.blake2b(digest_size=DIGEST_BYTES)
    h.update(
        _STATE.pack(
            DIGEST_FORMAT_VERSION,
            applied_index,
            first_seq,
            last_seq,
            first_ts_ns,
            last_ts_ns,
            messages,
            bytes_total,
        )
    )
    h.update(msg_sum.to_bytes(MSG_HASH_BYTES, "big"))
    msg_id = last_msg_id.encode("utf-8", "surrogatepass")
    h.update(len(msg_id).to_bytes(4, "big"))
    h.update(msg_id)
    h.update(config_digest)
    h.update(consumers_digest)
    h.update(sources_digest)
    return h.digest()


def messages_digest(*, msg_sum: int, messages: int, bytes_total: int) -> bytes:
    """The digest of the live messages alone (no seq bookkeeping, applied index or config)."""
    h = hashlib.blake2b(digest_size=DIGEST_BYTES)
    h.update(_CONTENT.pack(DIGEST_FORMAT_VERSION, _CONTENT_DOMAIN, messages, bytes_total))
    h.update(msg_sum.to_bytes(MSG_HASH_BYTES, "big"))
    return h.digest()
