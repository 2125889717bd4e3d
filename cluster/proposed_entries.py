"""The entries a stream leader proposed, kept decoded until it applies them.

Owns: ``ProposedEntries``, which lets a leader apply its own publishes without decoding the bytes
it encoded a moment before (decoding is about a tenth of a leader's work per message). Every
other replica decodes the bytes as usual.

Why this is the same apply: only publish and batch entries are kept, and encoding keeps every
field of those (the entry round-trip tests), so equal bytes decode to an equal entry. Whichever
proposal equal bytes came from, applying the kept object and applying the decoded bytes do the
same thing. A node's own entries are applied in the order it proposed them, so the ones before
a match were lost to a change of leader and are dropped.

Must never: hand back an entry for bytes that differ from the ones it was proposed as.
"""

from __future__ import annotations

import collections

from engine.entries import LogEntry


class ProposedEntries:
    __slots__ = ("_kept",)

    def __init__(self, kept_max: int) -> None:
        """Beyond ``kept_max`` unapplied, the oldest (lost to a change of leader) are forgotten."""
        self._kept: collections.deque[tuple[bytes, LogEntry]] = collections.deque(maxlen=kept_max)

    def add(self, raw: bytes, entry: LogEntry) -> None:
        """``entry`` was proposed encoded as ``raw``."""
        self._kept.append((raw, entry))

    def take(self, raw: bytes) -> LogEntry | None:
        """The kept entry proposed as exactly ``raw`` (dropping it and every older one), or None
        when none was."""
        kept = self._kept
        size = len(raw)
        for position, (proposed, entry) in enumerate(kept):
            if len(proposed) == size and proposed == raw:
                for _ in range(position + 1):
                    kept.popleft()
                return entry
        return None

    def clear(self) -> None:
        self._kept.clear()

    def __len__(self) -> int:
        return len(self._kept)
