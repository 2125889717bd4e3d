"""NATS header blocks: ``NATS/1.0[ code[ description]]\\r\\n(Key: Value\\r\\n)*\\r\\n``.

Owns reading and writing header blocks the way nats-server does (client.go ``sliceHeader``,
``getHeaderKeyIndex``, ``setHeader``, ``removeHeaderIfPresent``, ``genHeader``): keys the server
interprets are matched case-sensitively on their first occurrence at the start of a line, leading
spaces of a value are skipped and trailing ones kept, and headers the server adds go after the
existing ones. Client header blocks are otherwise relayed verbatim, so lookups here never raise
on garbage; only :func:`parse_header_block` (a full parse, for status replies) is strict.

Must never: canonicalize, reorder or re-encode a client's headers when only reading or appending.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

HDR_LINE = b"NATS/1.0"
CRLF = b"\r\n"
HDR_LINE_CRLF = HDR_LINE + CRLF
EMPTY_HDR_BLOCK = HDR_LINE_CRLF + CRLF
STATUS_CODE_LEN = 3


class HeaderError(ValueError):
    """A header block that does not start with ``NATS/1.0``."""


@dataclass(frozen=True)
class HeaderBlock:
    status: str | None
    description: str | None
    items: list[tuple[str, str]]


def _key_index(hdr: bytes, bkey: bytes) -> int:
    """Index of ``key:`` at the start of a line (after CRLF), or -1 (``getHeaderKeyIndex``)."""
    key_len = len(bkey)
    hdr_len = len(hdr)
    offset = 0
    while True:
        index = hdr.find(bkey, offset)
        if index < 0:
            return -1
        # nats-server gives up on a first hit before position 2 (e.g. key "A" inside "NATS");
        # such a hit cannot start a line, so skipping it is the same for every real key.
        if index < 2 or hdr[index - 1] != 0x0A or hdr[index - 2] != 0x0D:
            offset = index + key_len
            continue
        if index + key_len >= hdr_len:
            return -1
        if hdr[index + key_len] != 0x3A:  # ':'
            offset = index + key_len
            continue
        return index


def _holds_py(buf: bytes, part: bytes) -> bool:
    return buf.find(part) != -1


def _native_holds() -> Callable[[bytes, bytes], bool] | None:
    try:
        from protocol._parser_c import holds as native
    except ImportError:
        return None
    return native


# ``holds(buf, part)`` is ``part in buf`` for bytes, for the header probes of every published and
# stored message: CPython's ``in`` first tries ``part`` as an integer and builds, then drops, a
# TypeError (about 110 ns); ``bytes.find`` parses its arguments into a tuple (about 70); the C
# form of the native build (protocol/_parser_c.c) is a memmem.
holds: Final[Callable[[bytes, bytes], bool]] = _native_holds() or _holds_py


def _occurrences_py(buf: bytes, part: bytes) -> int:
    return buf.count(part)


def _native_occurrences() -> Callable[[bytes, bytes], int] | None:
    try:
        from protocol._parser_c import occurrences as native
    except ImportError:
        return None
    return native


# ``occurrences(buf, part)`` is ``buf.count(part)``, in C in the native build (``bytes.count``
# parses its arguments into a tuple, like ``find``).
occurrences: Final[Callable[[bytes, bytes], int]] = _native_occurrences() or _occurrences_py


def get_header(hdr: bytes, key: str) -> str | None:
    """The value of the first ``key`` header, as nats-server's ``sliceHeader`` reads it."""
    if not hdr:
        return None
    try:
        bkey = key.encode()
    except UnicodeEncodeError:
        return None
    if not bkey:
        return None
    index = _key_index(hdr, bkey)
    if index < 0:
        return None
    index += len(bkey) + 1
    end = hdr.find(CRLF, index)  # leading spaces are never part of a CRLF: same end after them
    value = hdr[index:end] if end >= 0 else hdr[index:]
    return value.lstrip(b" ").decode("utf-8", "surrogateescape")


def parse_header_block(hdr: bytes) -> HeaderBlock:
    """Fully parse a header block (status line plus ``Key: Value`` lines, in order)."""
    if not hdr.startswith(HDR_LINE):
        raise HeaderError("header block does not start with NATS/1.0")
    text = hdr.decode("utf-8", "surrogateescape")
    lines = text.split("\r\n")
    first = lines[0][len(HDR_LINE) :]
    status: str | None = None
    description: str | None = None
    if first:
        if first[0] not in " \t":
            raise HeaderError("malformed NATS/1.0 status line")
        rest = first.lstrip(" \t")
        if rest:
            status = rest[:STATUS_CODE_LEN]
            desc = rest[STATUS_CODE_LEN:].strip()
            description = desc or None
    items: list[tuple[str, str]] = []
    for line in lines[1:]:
        if not line:
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        items.append((key.strip(), value.strip()))
    return HeaderBlock(status=status, description=description, items=items)


def _encode_items(items: Sequence[tuple[str, str]]) -> bytes:
    return b"".join([f"{k}: {v}\r\n".encode() for k, v in items])


def encode_header_block(
    items: Sequence[tuple[str, str]],
    status: str | None = None,
    description: str | None = None,
) -> bytes:
    """``NATS/1.0[ code[ desc]]\\r\\n(K: V\\r\\n)*\\r\\n``."""
    if status is None:
        head = HDR_LINE_CRLF
    elif description:
        head = f"NATS/1.0 {status} {description}\r\n".encode()
    else:
        head = f"NATS/1.0 {status}\r\n".encode()
    if not items:
        return head + CRLF
    return head + _encode_items(items) + CRLF


def append_headers(hdr: bytes, items: Sequence[tuple[str, str]]) -> bytes:
    """Add headers after the existing ones (``genHeader``): a block's final CRLF is cut off,
    the new lines and a fresh final CRLF added. An empty ``hdr`` starts a new block."""
    if len(hdr) > len(CRLF):
        return hdr[: -len(CRLF)] + _encode_items(items) + CRLF
    return HDR_LINE_CRLF + _encode_items(items) + CRLF


def remove_header(hdr: bytes, key: str) -> bytes:
    """Remove every ``key`` line (``removeHeaderIfPresent``). Returns ``b""`` when nothing but
    the bare ``NATS/1.0`` line would be left, as nats-server returns nil."""
    bkey = key.encode()
    if not bkey:
        return hdr
    while True:
        start = _key_index(hdr, bkey)
        if start < 1:
            return hdr
        end = hdr.find(CRLF, start)
        if end < 0:
            return hdr
        hdr = hdr[:start] + hdr[end + len(CRLF) :]
        if len(hdr) <= len(EMPTY_HDR_BLOCK):
            return b""


def remove_prefixed_headers(hdr: bytes, prefix: bytes) -> bytes:
    """Every header line whose key starts with ``prefix`` removed
    (``removeHeaderIfPrefixPresent``); ``b""`` when no header is left."""
    if not hdr or not holds(hdr, prefix):
        return hdr
    lines = hdr.split(CRLF)
    kept = [line for line in lines[1:] if not line.startswith(prefix)]
    if not any(kept):
        return b""
    return CRLF.join([lines[0], *kept])


def set_header(hdr: bytes, key: str, value: str) -> bytes:
    """Replace the first ``key``'s value (keeping one space after the colon), or append the
    header if absent (``setHeader``). An empty ``hdr`` gives a fresh block."""
    bkey = key.encode()
    bval = value.encode()
    if not hdr:
        return HDR_LINE_CRLF + bkey + b": " + bval + CRLF + CRLF
    start = _key_index(hdr, bkey)
    if start >= 0:
        val_start = start + len(bkey) + 1
        if val_start < len(hdr) and hdr[val_start] == 0x20:
            val_start += 1
        val_end = hdr.find(b"\r", val_start)
        if val_end < 0:
            return hdr  # malformed: nats-server leaves it alone
        return hdr[:val_start] + bval + hdr[val_end:]
    if hdr.endswith(CRLF):
        return hdr[: -len(CRLF)] + bkey + b": " + bval + CRLF + CRLF
    return hdr + bkey + b": " + bval + CRLF
