"""The view of the stream a consumer needs: which seqs are live and under which subject.

A consumer's apply reads the stream as it stands at the same log position (the stream's entries
and the consumers' share one log), so every replica sees the same answers. The package is
written against this Protocol only, never against ``engine/stream.py``; the step that wires
consumers into the stream host adapts the stream's index to it.

Must never: mutate anything.
"""

from __future__ import annotations

from typing import Protocol


class StreamMessages(Protocol):
    @property
    def first_seq(self) -> int:
        """Seq of the first live message; last_seq + 1 when the stream is empty."""
        ...

    @property
    def last_seq(self) -> int:
        """Highest seq ever assigned (0 for a new stream), kept across purges."""
        ...

    def subject_of(self, seq: int) -> str | None:
        """The subject of the live message at ``seq``; None when there is none."""
        ...

    def seq_for_time(self, ts_ns: int) -> int:
        """Seq of the first live message stored at or after ``ts_ns``; 0 when there is none."""
        ...

    def next_seq(self, start_seq: int, subject_filter: str = "") -> int | None:
        """The first live seq >= ``start_seq`` whose subject matches the filter ("": any)."""
        ...

    def count_from(self, start_seq: int, subject_filter: str = "") -> int:
        """How many live messages with seq >= ``start_seq`` match the filter ("": any)."""
        ...
