"""A reader of snappy's framing format for tests: what a client (Go's s2 reader) does with a
reply sent with ``Content-Encoding: snappy``, checksums checked. nats-server sends compressed
chunks, jetraft uncompressed ones; both decode here."""

from __future__ import annotations

import struct

from protocol.event_options import crc32c


def _unmask(masked: int) -> int:
    crc = (masked - 0xA282EAD8) & 0xFFFFFFFF
    return ((crc >> 17) | (crc << 15)) & 0xFFFFFFFF


def snappy_decode(data: bytes) -> bytes:
    """Snappy's framing format (compressed and uncompressed chunks, checksums checked)."""
    out = bytearray()
    i = 0
    while i < len(data):
        kind, size = data[i], int.from_bytes(data[i + 1 : i + 4], "little")
        chunk = data[i + 4 : i + 4 + size]
        i += 4 + size
        if kind == 0xFF:
            assert chunk == b"sNaPpY"
        elif kind in (0x00, 0x01):
            (masked,) = struct.unpack("<I", chunk[:4])
            plain = _snappy_block(chunk[4:]) if kind == 0x00 else chunk[4:]
            assert _unmask(masked) == crc32c(plain), "checksum"
            out += plain
    return bytes(out)


def _snappy_block(data: bytes) -> bytes:
    size = shift = i = 0
    while True:
        byte = data[i]
        i += 1
        size |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            break
    out = bytearray()
    while i < len(data):
        tag = data[i]
        i += 1
        if tag & 3 == 0:  # a literal
            length = tag >> 2
            if length >= 60:
                width = length - 59
                length = int.from_bytes(data[i : i + width], "little")
                i += width
            out += data[i : i + length + 1]
            i += length + 1
            continue
        if tag & 3 == 1:
            length, offset = 4 + ((tag >> 2) & 7), ((tag >> 5) << 8) | data[i]
            i += 1
        else:
            width = 2 if tag & 3 == 2 else 4
            length, offset = 1 + (tag >> 2), int.from_bytes(data[i : i + width], "little")
            i += width
        for _ in range(length):
            out.append(out[-offset])
    assert len(out) == size
    return bytes(out)
