"""The consumers' state digest: equal on every replica that applied the same log.

It hashes the canonical snapshot (``snapshot.py``): every consumer's config, positions, pending
set and redelivery counts, and the applied index. Computing it costs one pass over the pending
sets, which max_ack_pending keeps small in practice; it is asked for when replicas compare
states, not on every apply. Like the stream's digest it detects accidental divergence and is not
meant to resist an adversary.

Must never: depend on anything but the state (no insertion history, no clock).
"""

from __future__ import annotations

import hashlib
from typing import Final

DIGEST_BYTES: Final = 32
# Keeps a consumer digest from ever equalling a stream digest of the same bytes.
_DOMAIN: Final = b"jetraft-consumers-v1\x00"


def consumers_digest(snapshot: bytes) -> bytes:
    return hashlib.blake2b(_DOMAIN + snapshot, digest_size=DIGEST_BYTES).digest()
