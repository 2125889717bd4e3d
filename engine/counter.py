"""Counter streams (``allow_msg_counter``, ADR-49): a message carries ``Nats-Incr: <integer>``
and no payload; the stream stores ``{"val":"<running total>"}`` for its subject and the PubAck
carries the total as ``val``. Totals are arbitrary-precision integers (nats-server uses big.Int).

Pure functions over header bytes and the subject's previous stored payload, shared by single
publishes and atomic batches (whose running totals include the batch's earlier messages).

Must never: do I/O or read clocks.
"""

from __future__ import annotations

import json
import re
from typing import Final

from protocol import errors
from protocol.errors import ApiError
from protocol.headers import get_header, holds

HDR_INCR: Final = "Nats-Incr"
HDR_INCR_BYTES: Final = HDR_INCR.encode()
# headers a counter increment cannot be combined with (stream.go: they would make an increment
# conditional or destructive)
INCOMPATIBLE_HEADERS: Final = (
    "Nats-Rollup",
    "Nats-Expected-Stream",
    "Nats-Expected-Last-Msg-Id",
    "Nats-Expected-Last-Subject-Sequence-Subject",
    "Nats-Expected-Last-Sequence",
    "Nats-Expected-Last-Subject-Sequence",
)
_BIG_INT = re.compile(r"[+-]?[0-9]+")  # big.Int SetString(s, 10)


def incr_of(hdr: bytes) -> int | ApiError | None:
    """The message's increment: None without (or with an empty) ``Nats-Incr``, 10171 when the
    value is not a base-10 integer."""
    if not hdr or not holds(hdr, HDR_INCR_BYTES):
        return None
    text = get_header(hdr, HDR_INCR)
    if not text:
        return None
    if not _BIG_INT.fullmatch(text):
        return ApiError(errors.MESSAGE_INCR_INVALID)
    return int(text)


def check_increment(hdr: bytes, data: bytes, allow_counter: bool) -> int | ApiError | None:
    """The checks nats-server runs on an increment before anything else in the header: present
    but disabled, carrying a payload, or combined with a header it cannot be combined with."""
    incr = incr_of(hdr)
    if incr is None or isinstance(incr, ApiError):
        return incr
    if not allow_counter:
        return ApiError(errors.MESSAGE_INCR_DISABLED)
    if data:
        return ApiError(errors.MESSAGE_INCR_PAYLOAD)
    if any(get_header(hdr, key) for key in INCOMPATIBLE_HEADERS):
        return ApiError(errors.MESSAGE_INCR_INVALID)
    return incr


def total_of(payload: bytes) -> int | ApiError:
    """The running total a stored counter message holds; 10172 when it is not a counter value
    (JSON object whose ``val`` is a string). A ``val`` that is not an integer counts as 0, as
    big.Int's failed SetString leaves it."""
    try:
        value = json.loads(payload)
    except ValueError:
        return ApiError(errors.MESSAGE_COUNTER_BROKEN)
    if value is None:  # Go's Unmarshal of null into a struct leaves it empty
        return 0
    if not isinstance(value, dict):
        return ApiError(errors.MESSAGE_COUNTER_BROKEN)
    text = value.get("val")
    if text is None:
        return 0
    if not isinstance(text, str):
        return ApiError(errors.MESSAGE_COUNTER_BROKEN)
    return int(text) if _BIG_INT.fullmatch(text) else 0


def counter_payload(total: int) -> bytes:
    return b'{"val":"%d"}' % total
