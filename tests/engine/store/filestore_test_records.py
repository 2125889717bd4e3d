"""Messages of a known on-disk size and on-disk damage, for the file store suites
(test_filestore_durability.py, test_read_cache.py). A plain module, not a conftest: its name is
unique across the test directories, which have no ``__init__.py``."""

from __future__ import annotations

from pathlib import Path

from engine.store import StoredMsg

RECORD_BYTES = 100  # every msg() without ``data`` is one record of this size
RECORD_100_BYTES_DATA = RECORD_BYTES - 38 - 3  # MSG record overhead is 38 bytes; subject "t.x" 3
_FLIP_MASK = 0x5A


def msg(seq: int, data: bytes | None = None) -> StoredMsg:
    """Message ``seq`` on subject ``t.x``; by default a 100-byte record whose data is ``seq``."""
    payload = data if data is not None else bytes([seq % 256]) * RECORD_100_BYTES_DATA
    return StoredMsg(seq=seq, subject="t.x", hdr=b"", data=payload, ts_ns=seq)


def flip_byte(path: Path, offset: int) -> None:
    """Damage one byte of a file in place (bits flipped, so it always differs)."""
    with path.open("r+b") as f:
        f.seek(offset)
        old = f.read(1)
        f.seek(offset)
        f.write(bytes([old[0] ^ _FLIP_MASK]))
