"""The file store's read cache: live messages by seq, bounded in bytes, least recently used out.

The file store puts what it reads from disk (recent writes are served from its read tail,
engine/read_tail.py, instead). Every message once went through ``put`` on every replica, so the
cache is built for a heavy put path: plain dicts, one per *generation*. A put goes into the
newest generation; once that holds a ``1/READ_CACHE_GENERATIONS`` share of the budget a new one
begins. Over the budget, the oldest generation is dropped whole (its byte total is kept, so
nothing is walked or recounted: the dict's own deallocation frees its messages); a hit in an
older generation moves the message to the newest. The order is therefore least recently used
between generations, which is all a cache needs, at the cost of a plain dict insert per message
(an ``OrderedDict`` kept an exact order with a linked-list node per message, about 40% of the
cache's cost; evicting message by message recounted each one's cost, 7% of a replica's apply).
The cache then holds between 7/8 of its budget and all of it. With a budget of a few entries each
generation holds one message and the order is exact.

The byte accounting is exact: ``bytes`` never exceeds ``bytes_max`` after a call returns. A
message costs its subject, header and payload bytes plus ``READ_CACHE_ENTRY_OVERHEAD_BYTES``.

Must never: hold a message twice, or answer a seq with another seq's message.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from engine.store import StoredMsg, set_untracked

READ_CACHE_GENERATIONS: Final = 8
# What one cached message costs beyond its subject, header and payload: the StoredMsg tuple, the
# str/bytes/int object headers and the dict slot (measured about 250 bytes on CPython 3.11).
READ_CACHE_ENTRY_OVERHEAD_BYTES: Final = 256


def entry_cost(msg: StoredMsg) -> int:
    """What ``msg`` counts for against the budget."""
    return len(msg.subject) + len(msg.hdr) + len(msg.data) + READ_CACHE_ENTRY_OVERHEAD_BYTES


class ReadCache:
    __slots__ = ("_bytes", "_bytes_max", "_gen_bytes", "_generation_bytes_max", "_gens")

    def __init__(self, bytes_max: int) -> None:
        assert bytes_max >= 0, bytes_max
        self._bytes_max = bytes_max
        self._generation_bytes_max = bytes_max // READ_CACHE_GENERATIONS
        self._gens: list[dict[int, StoredMsg]] = [{}]  # oldest first; never empty
        self._gen_bytes: list[int] = [0]  # what each generation holds, in the same order
        self._bytes = 0

    @property
    def bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return sum(len(gen) for gen in self._gens)

    def seqs(self) -> list[int]:
        """Every cached seq, oldest generation first (for tests and monitoring)."""
        return [seq for gen in self._gens for seq in gen]

    def put(self, msg: StoredMsg) -> None:
        """Cache ``msg`` (its seq not cached yet) as the most recently used, then evict down to
        the budget. A message over the whole budget is not cached (with a budget of 0, none)."""
        cost = entry_cost(msg)
        if cost > self._bytes_max:
            return
        set_untracked(self._gens[-1], msg.seq, msg)
        self._add_newest(msg.seq, cost)

    def get(self, seq: int) -> StoredMsg | None:
        gens = self._gens
        msg = gens[-1].get(seq)
        if msg is not None or len(gens) == 1:
            return msg
        for position in range(len(gens) - 2, -1, -1):
            msg = gens[position].pop(seq, None)
            if msg is not None:  # used again: now among the most recently used
                set_untracked(gens[-1], seq, msg)
                cost = entry_cost(msg)
                self._gen_bytes[position] -= cost
                self._bytes -= cost  # counted again by _add_newest
                self._add_newest(seq, cost)
                return msg
        return None

    def drop(self, seq: int) -> None:
        gens = self._gens
        for position in range(len(gens) - 1, -1, -1):
            msg = gens[position].pop(seq, None)
            if msg is not None:
                cost = entry_cost(msg)
                self._bytes -= cost
                self._gen_bytes[position] -= cost
                return

    def drop_many(self, seqs: Iterable[int]) -> None:
        for seq in seqs:
            self.drop(seq)

    def drop_through(self, seq: int) -> None:
        """Drop every cached seq <= ``seq`` (a walk over the whole cache)."""
        self.drop_many([cached for gen in self._gens for cached in gen if cached <= seq])

    def clear(self) -> None:
        self._gens = [{}]
        self._gen_bytes = [0]
        self._bytes = 0

    def _add_newest(self, seq: int, cost: int) -> None:
        """Account for ``seq`` (costing ``cost``), just stored in the newest generation."""
        self._bytes += cost
        self._gen_bytes[-1] += cost
        if self._bytes > self._bytes_max:
            self._evict(seq)
        if self._gen_bytes[-1] >= self._generation_bytes_max:
            self._begin_generation()

    def _begin_generation(self) -> None:
        # Drops can leave older generations empty or sparse (a few messages of a work queue that
        # are never acknowledged): the empty ones go, and beyond twice READ_CACHE_GENERATIONS the
        # two oldest are merged, so a miss never walks more than that many dicts.
        kept = [position for position, gen in enumerate(self._gens) if gen]
        gens = [self._gens[position] for position in kept]
        gen_bytes = [self._gen_bytes[position] for position in kept]
        while len(gens) > 2 * READ_CACHE_GENERATIONS:
            merged, merged_bytes = gens.pop(0), gen_bytes.pop(0)
            gens[0].update(merged)
            gen_bytes[0] += merged_bytes
        gens.append({})
        gen_bytes.append(0)
        self._gens = gens
        self._gen_bytes = gen_bytes

    def _evict(self, fresh: int) -> None:
        """Evict down to the budget: whole generations, oldest first, while there is one older
        than the newest (which holds ``fresh``, the message just put, which fits the budget
        alone); then from the newest, in insertion order, never ``fresh``."""
        gens, gen_bytes, limit = self._gens, self._gen_bytes, self._bytes_max
        total = self._bytes
        while total > limit and len(gens) > 1:
            total -= gen_bytes.pop(0)
            del gens[0]  # its dict's deallocation frees the messages, in C
        if total > limit:
            newest = gens[0]  # the only one left
            for victim in list(newest):
                if total <= limit:
                    break
                if victim != fresh:
                    cost = entry_cost(newest.pop(victim))
                    total -= cost
                    gen_bytes[0] -= cost
        self._bytes = total
