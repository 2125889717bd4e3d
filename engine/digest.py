"""The stream state digest: one short value that two replicas compare to prove they agree.

Owns the definition of "same state": every live message (seq, subject, header, payload, ts), the
stream's sequence bookkeeping, the applied log index and the configuration. The message part is a
multiset hash (the sum of per-message BLAKE2b hashes modulo 2**128), so adding or removing a message
costs O(1) and a full purge resets it in O(1); the final digest hashes that sum with the scalar
state. It detects accidental divergence between replicas; it is not meant to resist an adversary.

Must never: depend on the store implementation, on insertion history (only on the resulting
state), or on the clock.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Final

DIGEST_FORMAT_VERSION: Final = 1
MSG_HASH_BYTES: Final = 16
MSG_SUM_MODULUS: Final = 1 << (8 * MSG_HASH_BYTES)
DIGEST_BYTES: Final = 32

_MSG_HEAD = struct.Struct(">QqIII")  # seq, ts, subject/hdr/data lengths
_STATE = struct.Struct(">BQQQqqQQ")
_blake2b = hashlib.blake2b


def message_hash(seq: int, subject: str, hdr: bytes, data: bytes, ts_ns: int) -> int:
    """One message's contribution to the multiset sum."""
    subject_raw = subject.encode("utf-8", "surrogatepass")
    head = _MSG_HEAD.pack(seq, ts_ns, len(subject_raw), len(hdr), len(data))
    h = _blake2b(b"".join((head, subject_raw, hdr, data)), digest_size=MSG_HASH_BYTES)
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
) -> bytes:
    """The digest two replicas at the same applied index must agree on."""
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
    return h.digest()
