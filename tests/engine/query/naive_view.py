"""An obviously-correct StreamView: every query is a scan of a sorted list of StoredMsg.

It is the oracle for the Direct Get / MSG.GET tests here, and for the indexed ``engine.stream``
view later: any difference between the two on the same messages is a bug in the indexed one.
Semantics follow nats-server's store (memstore.go / filestore.go) where the Protocol leaves room:
the filter ``""`` (and ``">"``) matches every subject; timestamps are assumed non-decreasing in
sequence order, as the engine guarantees.

Must never: be clever. Linear scans only.
"""

from __future__ import annotations

from collections.abc import Iterable

from engine.store import StoredMsg
from protocol.subjects import subject_matches


def matches(subject_filter: str, subject: str) -> bool:
    return subject_filter in ("", ">") or subject_matches(subject_filter, subject)


class NaiveView:
    """A read-only snapshot of a stream's live messages."""

    def __init__(self, name: str, msgs: Iterable[StoredMsg], last_seq: int | None = None) -> None:
        self._name = name
        self.msgs = sorted(msgs, key=lambda m: m.seq)
        seqs = [m.seq for m in self.msgs]
        assert len(set(seqs)) == len(seqs), "duplicate sequences"
        highest = seqs[-1] if seqs else 0
        self._last_seq = highest if last_seq is None else last_seq
        assert self._last_seq >= highest

    @property
    def name(self) -> str:
        return self._name

    @property
    def first_seq(self) -> int:
        return self.msgs[0].seq if self.msgs else self._last_seq + 1

    @property
    def last_seq(self) -> int:
        return self._last_seq

    def load(self, seq: int) -> StoredMsg | None:
        for m in self.msgs:
            if m.seq == seq:
                return m
        return None

    def load_next(self, start_seq: int, subject_filter: str = "") -> StoredMsg | None:
        for m in self.msgs:
            if m.seq >= start_seq and matches(subject_filter, m.subject):
                return m
        return None

    def load_last(self, subject_filter: str, up_to_seq: int = 0) -> StoredMsg | None:
        for m in reversed(self.msgs):
            if (up_to_seq == 0 or m.seq <= up_to_seq) and matches(subject_filter, m.subject):
                return m
        return None

    def seq_for_time(self, ts_ns: int) -> int:
        for m in self.msgs:
            if m.ts_ns >= ts_ns:
                return m.seq
        return 0

    def num_pending(self, start_seq: int, subject_filter: str = "") -> int:
        return sum(
            1 for m in self.msgs if m.seq >= start_seq and matches(subject_filter, m.subject)
        )

    def multi_last(self, filters: list[str], up_to_seq: int, limit: int) -> list[int] | None:
        last: dict[str, int] = {}
        for m in self.msgs:
            if m.seq <= up_to_seq and any(matches(f, m.subject) for f in filters):
                last[m.subject] = m.seq
        if len(last) > limit:
            return None
        return sorted(last.values())
