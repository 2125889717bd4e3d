"""Go integer and string conversions whose corner cases reach clients through nats-server.

Owns the small Go behaviours that header handling and time arithmetic depend on: int64
wrap-around, util.go ``parseInt64`` (how nats-server reads ``Nats-Expected-Last-Sequence``,
a bare-seconds ``Nats-TTL`` ...) and ``strings.ToLower`` on text that may hold invalid UTF-8.
One copy here, so that the engine's publish checks, batch checks and TTL parsing cannot drift
apart. (Go's ``strconv.Quote`` lives with the JSON code in ``protocol.gojson``; Go durations and
times in ``protocol.timefmt``.)

Must never: raise on client input (every function here is total), or do I/O.
"""

from __future__ import annotations

from typing import Final

INT64_MIN: Final = -(1 << 63)
INT64_MAX: Final = (1 << 63) - 1
UINT64_MASK: Final = (1 << 64) - 1
_INT64_SIGN: Final = 1 << 63
_TWO_TO_64: Final = 1 << 64


def wrap_int64(value: int) -> int:
    """Go int64 arithmetic: a result that overflows wraps around."""
    value &= UINT64_MASK
    return value - _TWO_TO_64 if value & _INT64_SIGN else value


def parse_int64(text: str) -> int:
    """util.go ``parseInt64``: ASCII decimal digits only, -1 on anything else; overflow wraps."""
    if not text or not text.isascii() or not text.isdigit():
        return -1
    return wrap_int64(int(text))


def parse_int64_as_uint64(text: str) -> int:
    """``uint64(parseInt64(v))``, how expected-sequence headers are read: garbage becomes
    2**64-1, which never matches a real sequence."""
    return parse_int64(text) & UINT64_MASK


def go_lower(text: str) -> str:
    """Go ``strings.ToLower``: ASCII fast path; otherwise invalid UTF-8 bytes (surrogate-escaped
    here) become U+FFFD."""
    if text.isascii():
        return text.lower()
    return "".join("\ufffd" if "\udc80" <= ch <= "\udcff" else ch for ch in text).lower()
