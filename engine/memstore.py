"""The in-memory ``MessageStore``: a dict from sequence to ``StoredMsg``.

Used for streams with ``storage: memory`` and as the reference implementation the file store is
tested against. Durability calls (flush/fsync/sync) are no-ops: memory streams survive nothing.

Must never: read clocks, spawn threads, or decide which message to remove (the engine decides).
"""

from __future__ import annotations

from collections.abc import Iterator

from mypy_extensions import mypyc_attr

from engine.store import CorruptRecord, StoredMsg, new_stored, set_untracked


# Compiled (protocol/native.py); tests extend it to count or damage what it returns.
@mypyc_attr(allow_interpreted_subclasses=True)
class MemoryStore:
    """Sequence-keyed dict. Appends arrive in strictly increasing seq order, so the dict's insertion
    order is seq order and ``scan`` needs no sort."""

    __slots__ = ("_last_appended_seq", "_low_seq", "_meta", "_msgs")

    def __init__(self) -> None:
        self._msgs: dict[int, StoredMsg] = {}
        self._meta: bytes | None = None
        # Every seq below _low_seq is known removed: remove_through only walks from here.
        self._low_seq = 1
        self._last_appended_seq = 0

    def append(self, msg: StoredMsg) -> None:
        self.append_fields(msg.seq, msg.subject, msg.hdr, msg.data, msg.ts_ns)

    def append_fields(self, seq: int, subject: str, hdr: bytes, data: bytes, ts_ns: int) -> None:
        assert seq > self._last_appended_seq, (seq, self._last_appended_seq)
        set_untracked(self._msgs, seq, new_stored((seq, subject, hdr, data, ts_ns)))
        self._last_appended_seq = seq

    def remove(self, seq: int, *, erase: bool = False) -> bool:
        # erase has nothing to overwrite: the dropped object is gone from the store either way.
        return self._msgs.pop(seq, None) is not None

    def remove_through(self, seq: int) -> None:
        upper_seq = min(seq, self._last_appended_seq)
        if upper_seq < self._low_seq:
            return
        msgs = self._msgs
        if upper_seq - self._low_seq + 1 <= len(msgs):
            for s in range(self._low_seq, upper_seq + 1):
                msgs.pop(s, None)
        else:  # sparse: cheaper to keep the survivors than to probe every seq in the range
            self._msgs = {s: m for s, m in msgs.items() if s > upper_seq}
        self._low_seq = upper_seq + 1

    def load(self, seq: int) -> StoredMsg | None:
        return self._msgs.get(seq)

    def scan(self) -> Iterator[StoredMsg]:
        yield from list(self._msgs.values())

    def set_meta(self, meta: bytes) -> None:
        self._meta = bytes(meta)

    def get_meta(self) -> bytes | None:
        return self._meta

    def flush(self) -> None:
        return None

    def fsync(self) -> None:
        return None

    def sync(self) -> None:
        return None

    def corrupt_records(self) -> list[CorruptRecord]:
        return []

    def recovery_notes(self) -> list[str]:
        return []  # nothing survives a restart, so nothing is repaired

    def close(self) -> None:
        return None
