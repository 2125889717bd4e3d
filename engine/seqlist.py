"""A sorted list of distinct sequence numbers that grows only at its top: the index's live sets.

Owns: ``SeqList``, the ascending, duplicate-free sequences of a stream (or of one subject) that
are live. Values are only ever added above the current maximum (a stream's sequences only grow);
any value can be removed. Lookups are by value (the first at or above, the last at or below, how
many at or above) and by range, never by position, so no positional index is kept.

Why not ``sortedcontainers.SortedList``: it was the index's structure, and its general ``add``
(or the shortcut the index took into its internals) cost 0.15-0.25 µs per published message
from compiled code, every attribute reached through the generic object protocol. This class is
compiled with the engine: its fields are native, and an append is one list append. Chunks keep
removal from anywhere O(CHUNK_LEN_MAX) as SortedList's sublists do.

Must never: hold a value twice, hold values out of order, or keep an empty chunk.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator
from typing import Final

# Values per chunk: small enough that removing from a chunk moves few pointers, large enough
# that a whole stream is few chunks (a million live messages: about a thousand).
CHUNK_LEN_MAX: Final = 1024
# A chunk shrunk below 1/this of the maximum by removals is merged into a neighbour with room
# (sparse live sets, such as a KV bucket's latest revisions, would otherwise leave a chunk per
# value).
CHUNK_MERGE_FRACTION: Final = 4


class SeqList:
    __slots__ = ("_chunk_max", "_chunks", "_firsts", "_len")

    def __init__(self, values: Iterable[int] = (), chunk_len_max: int = CHUNK_LEN_MAX) -> None:
        """``values`` ascending and distinct (checked). ``chunk_len_max`` is for tests, which
        reach many chunks with few values."""
        assert chunk_len_max >= 4, chunk_len_max
        self._chunk_max = chunk_len_max
        self._chunks: list[list[int]] = []
        self._firsts: list[int] = []  # _chunks[k][0], for finding a value's chunk by bisection
        self._len = 0
        for value in values:
            self.append(value)

    def append(self, value: int) -> None:
        """Adds ``value``, which must be above every value held (AssertionError otherwise)."""
        chunks = self._chunks
        if chunks:
            last = chunks[-1]
            if value <= last[-1]:
                raise AssertionError(f"SeqList append out of order: {value} after {last[-1]}")
            if len(last) < self._chunk_max:
                last.append(value)
                self._len += 1
                return
        chunks.append([value])
        self._firsts.append(value)
        self._len += 1

    def remove(self, value: int) -> None:
        """Removes ``value``; ValueError when it is not held."""
        k = bisect_right(self._firsts, value) - 1
        if k < 0:
            raise ValueError(f"{value} not in SeqList")
        chunk = self._chunks[k]
        i = bisect_left(chunk, value)
        if i == len(chunk) or chunk[i] != value:
            raise ValueError(f"{value} not in SeqList")
        del chunk[i]
        self._len -= 1
        if not chunk:
            del self._chunks[k]
            del self._firsts[k]
            return
        if i == 0:
            self._firsts[k] = chunk[0]
        if len(chunk) < self._chunk_max // CHUNK_MERGE_FRACTION:
            self._merge(k)

    def _merge(self, k: int) -> None:
        """Folds chunk ``k`` into the following chunk, or the preceding one, if it fits."""
        chunks = self._chunks
        chunk = chunks[k]
        if k + 1 < len(chunks) and len(chunk) + len(chunks[k + 1]) <= self._chunk_max:
            chunk.extend(chunks[k + 1])
            del chunks[k + 1]
            del self._firsts[k + 1]
        elif k > 0 and len(chunk) + len(chunks[k - 1]) <= self._chunk_max:
            chunks[k - 1].extend(chunk)
            del chunks[k]
            del self._firsts[k]

    def clear(self) -> None:
        self._chunks = []
        self._firsts = []
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __contains__(self, value: int) -> bool:
        k = bisect_right(self._firsts, value) - 1
        if k < 0:
            return False
        chunk = self._chunks[k]
        i = bisect_left(chunk, value)
        return i < len(chunk) and chunk[i] == value

    def __iter__(self) -> Iterator[int]:
        for chunk in self._chunks:
            yield from chunk

    @property
    def first(self) -> int:
        """The lowest value, 0 when empty."""
        return self._firsts[0] if self._firsts else 0

    @property
    def last(self) -> int:
        """The highest value, 0 when empty."""
        return self._chunks[-1][-1] if self._chunks else 0

    def ceiling(self, value: int) -> int | None:
        """The lowest value >= ``value``."""
        firsts = self._firsts
        k = bisect_right(firsts, value) - 1
        if k < 0:
            return firsts[0] if firsts else None
        chunk = self._chunks[k]
        i = bisect_left(chunk, value)
        if i < len(chunk):
            return chunk[i]
        return firsts[k + 1] if k + 1 < len(firsts) else None

    def floor(self, value: int) -> int | None:
        """The highest value <= ``value``."""
        k = bisect_right(self._firsts, value) - 1
        if k < 0:
            return None
        chunk = self._chunks[k]
        return chunk[bisect_right(chunk, value) - 1]  # chunk[0] <= value: found in this chunk

    def count_from(self, value: int) -> int:
        """How many values are >= ``value``, summing whole chunks from the nearer end."""
        firsts, chunks = self._firsts, self._chunks
        k = bisect_right(firsts, value) - 1
        if k < 0:
            return self._len
        above_in_chunk = len(chunks[k]) - bisect_left(chunks[k], value)
        if k >= len(chunks) // 2:
            after = 0
            for j in range(k + 1, len(chunks)):
                after += len(chunks[j])
            return above_in_chunk + after
        before = 0
        for j in range(k):
            before += len(chunks[j])
        return self._len - before - (len(chunks[k]) - above_in_chunk)

    def irange(
        self, minimum: int | None = None, maximum: int | None = None, reverse: bool = False
    ) -> Iterator[int]:
        """Values in [minimum, maximum] (None: unbounded), ascending or descending. Lazy: the
        list must not change while it is iterated."""
        chunks, firsts = self._chunks, self._firsts
        if not chunks:
            return
        lo_k = 0 if minimum is None else max(bisect_right(firsts, minimum) - 1, 0)
        hi_k = len(chunks) - 1 if maximum is None else bisect_right(firsts, maximum) - 1
        if hi_k < lo_k:
            return
        if not reverse:
            for k in range(lo_k, hi_k + 1):
                chunk = chunks[k]
                start = 0 if minimum is None or k != lo_k else bisect_left(chunk, minimum)
                stop = len(chunk) if maximum is None or k != hi_k else bisect_right(chunk, maximum)
                for i in range(start, stop):
                    yield chunk[i]
        else:
            for k in range(hi_k, lo_k - 1, -1):
                chunk = chunks[k]
                start = 0 if minimum is None or k != lo_k else bisect_left(chunk, minimum)
                stop = len(chunk) if maximum is None or k != hi_k else bisect_right(chunk, maximum)
                for i in range(stop - 1, start - 1, -1):
                    yield chunk[i]

    def check_invariants(self) -> None:
        """AssertionError unless the structure is sound (for tests)."""
        assert len(self._chunks) == len(self._firsts)
        assert self._len == sum(len(c) for c in self._chunks)
        previous: int | None = None
        for chunk, first in zip(self._chunks, self._firsts, strict=True):
            assert chunk and len(chunk) <= self._chunk_max and chunk[0] == first
            for value in chunk:
                assert previous is None or value > previous
                previous = value

    def chunks(self) -> list[list[int]]:
        """The chunks in order (read-only: for a caller's own bisection, as by timestamp)."""
        return self._chunks
