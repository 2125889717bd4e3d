"""A dict-backed stream that implements ``engine.consumer.messages.StreamMessages``."""

from __future__ import annotations

from protocol.subjects import subject_matches


def _sees(subject_filter: str, subject: str) -> bool:
    return not subject_filter or subject_matches(subject_filter, subject)


class FakeStream:
    def __init__(self) -> None:
        self.msgs: dict[int, tuple[str, int]] = {}  # seq -> (subject, ts_ns)
        self._last_seq = 0

    @property
    def first_seq(self) -> int:
        return min(self.msgs) if self.msgs else self._last_seq + 1

    @property
    def last_seq(self) -> int:
        return self._last_seq

    def subject_of(self, seq: int) -> str | None:
        msg = self.msgs.get(seq)
        return msg[0] if msg else None

    def seq_for_time(self, ts_ns: int) -> int:
        return min((s for s, (_, ts) in self.msgs.items() if ts >= ts_ns), default=0)

    def next_seq(self, start_seq: int, subject_filter: str = "") -> int | None:
        return min(
            (
                s
                for s, (subj, _) in self.msgs.items()
                if s >= start_seq and _sees(subject_filter, subj)
            ),
            default=None,
        )

    def count_from(self, start_seq: int, subject_filter: str = "") -> int:
        return sum(
            1
            for s, (subj, _) in self.msgs.items()
            if s >= start_seq and _sees(subject_filter, subj)
        )

    def publish(self, subject: str, ts_ns: int = 0) -> int:
        self._last_seq += 1
        self.msgs[self._last_seq] = (subject, ts_ns)
        return self._last_seq

    def remove(self, seq: int) -> None:
        self.msgs.pop(seq, None)
