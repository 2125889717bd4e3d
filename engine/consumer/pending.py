"""The pending set: deliveries awaiting an ack, ordered by stream seq and by deadline.

nats-server keeps pending as a map stream seq -> (consumer seq of the first delivery, timestamp
of the last delivery). The same here, plus two sorted indexes so that the ack floor (the lowest
pending seq) and the next redelivery deadline are found without a scan, whatever the number of
pending messages (max_ack_pending may be unlimited).

Must never: decide anything (the consumer does); read clocks.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple, Protocol

from sortedcontainers import SortedList  # type: ignore[import-untyped]


class Pending(NamedTuple):
    """One unacknowledged delivery: the consumer seq of its first delivery (kept on redelivery,
    as nats-server does) and when it was last delivered (or NAKed / WPI'd, see timers.py)."""

    consumer_seq: int
    ts_ns: int


class _SortedInts(Protocol):
    """The part of ``sortedcontainers.SortedList`` used for seqs (the package ships no types)."""

    def add(self, value: int) -> None: ...
    def remove(self, value: int) -> None: ...
    def irange(self, minimum: int | None = None, maximum: int | None = None) -> Iterator[int]: ...
    def __getitem__(self, index: int) -> int: ...


class _SortedPairs(Protocol):
    """The same for (deadline, seq) pairs."""

    def add(self, value: tuple[int, int]) -> None: ...
    def remove(self, value: tuple[int, int]) -> None: ...
    def irange(
        self, minimum: tuple[int, int] | None = None, maximum: tuple[int, int] | None = None
    ) -> Iterator[tuple[int, int]]: ...
    def __getitem__(self, index: int) -> tuple[int, int]: ...


# Above every seq: (now, SEQ_ABOVE) bounds "deadline <= now" from above.
_SEQ_ABOVE = 1 << 64


class PendingSet:
    """Stream seq -> Pending, with the lowest seq and the earliest deadline at hand."""

    __slots__ = ("_by_deadline", "_deadline", "_records", "_seqs")

    def __init__(self) -> None:
        self._records: dict[int, Pending] = {}
        self._deadline: dict[int, int] = {}
        self._seqs: _SortedInts = SortedList()
        self._by_deadline: _SortedPairs = SortedList()

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, seq: object) -> bool:
        return seq in self._records

    def get(self, seq: int) -> Pending | None:
        return self._records.get(seq)

    def put(self, seq: int, record: Pending, deadline_ns: int) -> None:
        """Add a delivery, or update one (its timestamp and deadline)."""
        if seq in self._records:
            self._by_deadline.remove((self._deadline[seq], seq))
        else:
            self._seqs.add(seq)
        self._records[seq] = record
        self._deadline[seq] = deadline_ns
        self._by_deadline.add((deadline_ns, seq))

    def pop(self, seq: int) -> Pending | None:
        record = self._records.pop(seq, None)
        if record is not None:
            self._seqs.remove(seq)
            self._by_deadline.remove((self._deadline.pop(seq), seq))
        return record

    def first_seq(self) -> int | None:
        return self._seqs[0] if self._records else None

    def seqs(self, maximum: int | None = None) -> list[int]:
        """Pending stream seqs (at most ``maximum``), ascending, copied (callers remove)."""
        return list(self._seqs.irange(maximum=maximum))

    def items(self) -> Iterator[tuple[int, Pending]]:
        """(stream seq, record) ascending by seq."""
        for seq in self._seqs.irange():
            yield seq, self._records[seq]

    def deadline(self, seq: int) -> int:
        return self._deadline[seq]

    def next_deadline(self) -> int | None:
        if not self._records:
            return None
        return self._by_deadline[0][0]

    def next_deadline_after(self, now_ns: int) -> int | None:
        """The earliest deadline later than ``now_ns`` (the next time anything becomes due)."""
        for deadline, _seq in self._by_deadline.irange(minimum=(now_ns + 1, 0)):
            return deadline
        return None

    def due(self, now_ns: int) -> list[int]:
        """Pending seqs whose deadline is <= now_ns, by deadline then seq."""
        return [seq for _deadline, seq in self._by_deadline.irange(maximum=(now_ns, _SEQ_ABOVE))]
