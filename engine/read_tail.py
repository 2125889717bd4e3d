"""The file store's read tail: the active segment's most recently written bytes, kept in memory.

A load of a recent message decodes its record from here, checksummed like a read from disk, and
makes no system call. What is kept is the flushed write buffers themselves (a flushed buffer
becomes a chunk, no copy), so keeping them costs nothing per message. The decoded-message cache
(engine/read_cache.py) used to take every stored message instead: a dict insert per message and,
once full, the deallocation of a generation of decoded messages, paid on every replica for every
message. That was about a fifth of an atomic batch's apply, and a sixth of an R3 cluster's CPU.

Chunks hold whole records (a flush writes whole records) and each starts where the previous one
ends. A flush joins the newest chunk when the two fit in ``READ_TAIL_MERGE_BYTES_MAX`` (and in
``1/READ_TAIL_CHUNKS_MIN`` of the budget), so small flushes (a message each) do not make a chunk
per message; past the budget the oldest chunks go, which gives up little at a time and never the
newest flush (unless that alone is over the budget).

Must never: hold bytes that differ from the segment file's at the same offsets (an erase in place
patches its chunk too), or outlive its segment's time as the active one (the store clears it).
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Final

READ_TAIL_MERGE_BYTES_MAX: Final = 64 * 1024
READ_TAIL_CHUNKS_MIN: Final = 8


class ReadTail:
    __slots__ = ("_bytes", "_bytes_max", "_chunks", "_merge_max", "_starts")

    def __init__(self, bytes_max: int) -> None:
        assert bytes_max >= 0, bytes_max
        self._bytes_max = bytes_max
        self._merge_max = min(READ_TAIL_MERGE_BYTES_MAX, bytes_max // READ_TAIL_CHUNKS_MIN)
        self._chunks: list[bytearray] = []
        self._starts: list[int] = []  # each chunk's offset in the segment, ascending
        self._bytes = 0

    @property
    def held_bytes(self) -> int:
        return self._bytes

    def clear(self) -> None:
        self._chunks = []
        self._starts = []
        self._bytes = 0

    def add(self, offset: int, flushed: bytearray) -> None:
        """Keep ``flushed``, the bytes just written at ``offset``, which is where the bytes held
        so far end. The tail owns ``flushed`` from now on: the caller never changes it again."""
        size = len(flushed)
        if size > self._bytes_max:
            self.clear()  # cannot be held; and what is held would no longer reach the end
            return
        chunks, starts = self._chunks, self._starts
        if chunks:
            last = chunks[-1]
            assert starts[-1] + len(last) == offset, (starts[-1], len(last), offset)
            if len(last) + size <= self._merge_max:
                last += flushed
            else:
                chunks.append(flushed)
                starts.append(offset)
        else:
            chunks.append(flushed)
            starts.append(offset)
        self._bytes += size
        while self._bytes > self._bytes_max:
            self._bytes -= len(chunks[0])
            del chunks[0]
            del starts[0]

    def locate(self, offset: int, length: int) -> tuple[bytearray, int] | None:
        """The chunk holding the ``length`` bytes at ``offset`` (one whole record) and where in
        it they start, or None when they are not held. The chunk is the tail's: outside this
        class, read it, never change it or keep a view of it."""
        starts = self._starts
        if not starts or offset < starts[0]:
            return None
        position = bisect_right(starts, offset) - 1
        chunk = self._chunks[position]
        at = offset - starts[position]
        if at + length > len(chunk):
            return None
        return chunk, at

    def patch(self, offset: int, data: bytes) -> None:
        """Overwrite the bytes at ``offset`` with ``data`` where held (an erase in place, which
        stays within one record, hence one chunk)."""
        held = self.locate(offset, len(data))
        if held is not None:
            chunk, at = held
            chunk[at : at + len(data)] = data
