"""The framing every log entry shares, and the bounds-checked reader its decoders use.

    u8 format version | u8 entry type | body | u32 crc32 (big-endian) of everything before it

Stream entries (``engine/entries.py``) and consumer entries (``engine/consumer/entries.py``)
each own their type bytes and bodies; this module owns only the frame and the cursor.

Must never: return bytes it did not check (length, checksum, version), or raise anything but
``EntryDecodeError`` (or a subclass) for malformed input.
"""

from __future__ import annotations

import struct
from typing import Final

from mypy_extensions import mypyc_attr

from engine.checksum import crc32

HEAD: Final = struct.Struct(">BB")
CRC: Final = struct.Struct(">I")
STR_ENCODING: Final = "utf-8"
STR_ERRORS: Final = "surrogatepass"  # any str a parser produced round-trips


@mypyc_attr(allow_interpreted_subclasses=True)  # the consumer entries' error extends it
class EntryDecodeError(ValueError):
    """The bytes are not a valid encoded entry (corrupt, truncated, or from an unknown format)."""


def frame(version: int, entry_type: int, body: bytes) -> bytes:
    out = HEAD.pack(version, entry_type) + body
    return out + CRC.pack(crc32(out))


def unframe(
    raw: bytes | bytearray | memoryview, version: int, error: type[EntryDecodeError]
) -> tuple[int, bytes, int]:
    """(entry type, the whole buffer, where the body ends) of a checked frame."""
    buf = bytes(raw)
    if len(buf) < HEAD.size + CRC.size:
        raise error("entry too short")
    end = len(buf) - CRC.size
    (crc,) = CRC.unpack_from(buf, end)
    if crc32(memoryview(buf)[:end]) != crc:
        raise error("entry checksum mismatch")
    found, entry_type = HEAD.unpack_from(buf, 0)
    if found != version:
        raise error(f"unknown entry format version {found}")
    return entry_type, buf, end


# compiled with the engine; the consumer entries' reader extends it from interpreted code
@mypyc_attr(allow_interpreted_subclasses=True)
class Reader:
    """Bounds-checked cursor over an entry body; every short read raises ``error``."""

    __slots__ = ("_buf", "_end", "_error", "pos")

    def __init__(
        self, buf: bytes, start: int, end: int, error: type[EntryDecodeError] = EntryDecodeError
    ) -> None:
        self._buf = buf
        self.pos = start
        self._end = end
        self._error = error

    def fail(self, text: str) -> EntryDecodeError:
        return self._error(text)

    def unpack(self, fmt: struct.Struct) -> tuple[int, ...]:
        if self.pos + fmt.size > self._end:
            raise self._error("entry truncated")
        values = fmt.unpack_from(self._buf, self.pos)
        self.pos += fmt.size
        return values

    def remaining(self) -> tuple[bytes, int, int]:
        """(the buffer, the cursor, the end) for a decoder that walks many fields itself; it
        must bounds-check against the end and set ``pos`` after what it consumed."""
        return self._buf, self.pos, self._end

    def take(self, n: int) -> bytes:
        if self.pos + n > self._end:
            raise self._error("entry truncated")
        out = self._buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def text(self, n: int, what: str = "string") -> str:
        try:
            return self.take(n).decode(STR_ENCODING, STR_ERRORS)
        except UnicodeDecodeError as exc:
            raise self._error(f"bad {what}: {exc}") from None

    def done(self) -> None:
        if self.pos != self._end:
            raise self._error(f"{self._end - self.pos} trailing bytes")
