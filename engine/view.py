"""The read-only view of one stream that Direct Get and MSG.GET are answered from.

``engine/stream.py``'s ``Stream`` implements it with its index (``engine/index.py``), so that
no query scans the stream: lookups by sequence, by subject (literal or wildcard), by time, and
counts of pending messages are all index operations. ``engine/direct_get.py`` and
``engine/msg_get.py`` are written only against this Protocol.

Must never: mutate state.
"""

from __future__ import annotations

from typing import Protocol

from engine.store import StoredMsg


class StreamView(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def created_ns(self) -> int:
        """When the stream was created (a source's identity is derived from it)."""
        ...

    @property
    def first_seq(self) -> int:
        """Sequence of the first live message; last_seq+1 when the stream is empty."""
        ...

    @property
    def last_seq(self) -> int:
        """Highest sequence ever assigned (0 for a new stream), kept across purges."""
        ...

    def load(self, seq: int) -> StoredMsg | None:
        """Exactly this sequence, or None when it is absent or deleted."""
        ...

    def load_next(self, start_seq: int, subject_filter: str = "") -> StoredMsg | None:
        """First live message with seq >= start_seq whose subject matches the filter
        ("" or ">" = everything; wildcards allowed)."""
        ...

    def load_last(self, subject_filter: str, up_to_seq: int = 0) -> StoredMsg | None:
        """Last live message matching the filter with seq <= up_to_seq (0 = no ceiling)."""
        ...

    def seq_for_time(self, ts_ns: int) -> int:
        """Sequence of the first live message with ts >= ts_ns; 0 when there is none."""
        ...

    def num_pending(self, start_seq: int, subject_filter: str = "") -> int:
        """Number of live messages with seq >= start_seq matching the filter."""
        ...

    def multi_last(self, filters: list[str], up_to_seq: int, limit: int) -> list[int] | None:
        """The last sequence <= up_to_seq of each distinct subject matching any filter, ascending.
        Returns None when more than ``limit`` subjects match (the caller answers 413)."""
        ...
