"""The message store interface shared by the memory store and the file store.

A store is a dumb, durable map from stream sequence to message. It knows nothing about subjects,
limits, dedupe or retention: those live above it, in ``engine/stream.py`` and ``engine/index.py``,
written once for both stores (as nats-server's store.go interface makes memstore and filestore
interchangeable). The same test-suite runs against every implementation.

Must never: read clocks, spawn threads, or decide which message to remove.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass
from functools import partial
from typing import Final, NamedTuple, Protocol, TypeVar

_K = TypeVar("_K")
_V = TypeVar("_V")


class StoredMsg(NamedTuple):
    """One stored message. A NamedTuple, not a frozen dataclass: it is built on every append and
    every read from disk, and a tuple is about three times cheaper to construct. It is immutable,
    which the file store's read cache relies on (it hands the same object to every reader)."""

    seq: int
    subject: str
    hdr: bytes  # the full header block ("NATS/1.0\r\n...\r\n\r\n") or b"" when there is none
    data: bytes
    ts_ns: int  # nanoseconds since the Unix epoch, taken from the log entry

    @property
    def size_bytes(self) -> int:
        """nats-server's accounting size for limits (fileStoreMsgSize-like)."""
        return len(self.subject) + len(self.hdr) + len(self.data) + 16


# A StoredMsg built as its tuple directly: NamedTuple's own constructor is an interpreted function
# even when the callers are compiled (protocol/native.py).
new_stored: Final[Callable[[tuple[int, str, bytes, bytes, int]], StoredMsg]] = partial(
    tuple.__new__, StoredMsg
)


class SetUntracked(Protocol):
    def __call__(self, mapping: MutableMapping[_K, _V], key: _K, value: _V, /) -> None: ...


def _set_untracked_py(mapping: MutableMapping[_K, _V], key: _K, value: _V) -> None:
    mapping[key] = value


def _native_set_untracked() -> SetUntracked | None:
    try:
        from engine._codec_c import set_untracked as native
    except ImportError:
        return None
    return native


# ``set_untracked(mapping, key, value)`` is ``mapping[key] = value``; in the native build a value
# that is a tuple of str/bytes/int items (a StoredMsg) is first taken off the
# cycle collector's lists (engine/_codec_c.c): what a store keeps for long is then not
# traversed by collections while it lives, which cost about a tenth of storing a message.
set_untracked: Final[SetUntracked] = _native_set_untracked() or _set_untracked_py


@dataclass(frozen=True, slots=True)
class CorruptRecord:
    """A record whose checksum failed: never served, reported in STREAM.INFO and monitoring."""

    seq: int | None  # None when the damage hides the sequence too
    location: str  # e.g. "seg-000001.blk@4096"
    reason: str


class MessageStore(Protocol):
    """Sequence-keyed storage. Sequences given to ``append`` strictly increase."""

    def append(self, msg: StoredMsg) -> None:
        """``append_fields`` of ``msg``'s fields."""
        ...

    def append_fields(self, seq: int, subject: str, hdr: bytes, data: bytes, ts_ns: int) -> None:
        """Store the message with these fields: every append comes through here (a store that
        keeps no ``StoredMsg``, the file store, then never has one built for it)."""
        ...

    def remove(self, seq: int, *, erase: bool = False) -> bool:
        """Remove one message; ``erase`` overwrites its bytes (MSG.DELETE no_erase=false).
        Returns False when the seq is not stored."""
        ...

    def remove_through(self, seq: int) -> None:
        """Remove every message with sequence <= seq (used by purges and compaction)."""
        ...

    def load(self, seq: int) -> StoredMsg | None:
        """The message, or None when absent, removed, or its record failed its checksum."""
        ...

    def scan(self) -> Iterator[StoredMsg]:
        """Every live message in sequence order (used to rebuild indexes on open)."""
        ...

    def set_meta(self, meta: bytes) -> None:
        """Durably record an opaque engine state blob (last_seq, config, applied index...)."""
        ...

    def get_meta(self) -> bytes | None: ...

    def flush(self) -> None:
        """Hand buffered appends/removes to the OS (no fsync). Runs on the event-loop thread."""
        ...

    def fsync(self) -> None:
        """fsync what the last ``flush`` handed to the OS. Safe to run in a worker thread while the
        owning thread keeps appending (group commit); acks wait for it."""
        ...

    def sync(self) -> None:
        """flush() then fsync()."""
        ...

    def corrupt_records(self) -> list[CorruptRecord]: ...

    def recovery_notes(self) -> list[str]:
        """What opening the store repaired (torn tails truncated, empty files removed...)."""
        ...

    def close(self) -> None: ...
