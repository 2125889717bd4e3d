"""Drives one ``engine.stream.Stream`` through encoded log entries, as the cluster layer would.

Every operation builds an entry, round-trips it through ``encode_entry``/``decode_entry`` (so the
codec is exercised on every apply) and records the encoded bytes, which lets tests replay the exact
log into a fresh stream.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.entries import (
    DeleteMsgEntry,
    Entry,
    ExpireEntry,
    InboundMsg,
    PublishEntry,
    PurgeEntry,
    UpdateConfigEntry,
    decode_entry,
    encode_entry,
)
from engine.filestore import FileStore
from engine.memstore import MemoryStore
from engine.store import MessageStore
from engine.stream import ApplyResult, PubResult, Stream
from protocol.errors import ApiError
from protocol.models import StreamConfig

STORE_KINDS = ("memory", "file")
CREATED_NS = 1_700_000_000_000_000_000
T0_NS = 1_700_000_000_000_000_000
S = 1_000_000_000


def hdr(*items: tuple[str, str]) -> bytes:
    """A NATS header block with the given (key, value) lines, in order."""
    lines = "".join(f"{k}: {v}\r\n" for k, v in items)
    return f"NATS/1.0\r\n{lines}\r\n".encode()


def make_config(**overrides: Any) -> StreamConfig:
    """A normalized config as the config layer would hand it over (window 2 min)."""
    base: dict[str, Any] = {
        "name": "S",
        "subjects": ["S.>"],
        "storage": "memory",
        "duplicate_window": 120 * S,
    }
    base.update(overrides)
    return StreamConfig(**base)


class Harness:
    """A stream on a store, an index counter, a clock, and the encoded log applied so far."""

    def __init__(self, store_kind: str, directory: Path, config: StreamConfig) -> None:
        self.store_kind = store_kind
        self.directory = directory
        self.initial_config = config
        self.store = self._open_store()
        self.stream = Stream(config, self.store, CREATED_NS)
        self.index = 0
        self.now_ns = T0_NS
        self.log: list[tuple[int, bytes]] = []

    def _open_store(self) -> MessageStore:
        if self.store_kind == "memory":
            return MemoryStore()
        return FileStore(self.directory)

    def apply(self, entry: Entry) -> ApplyResult:
        raw = encode_entry(entry)
        decoded = decode_entry(raw)
        assert decoded == entry
        self.index += 1
        self.log.append((self.index, raw))
        return self.stream.apply(self.index, decoded)

    def tick(self, delta_ns: int = 1) -> int:
        self.now_ns += delta_ns
        return self.now_ns

    # -------------------------------------------------------------- operations

    def publish_many(
        self, msgs: list[tuple[str, bytes, bytes]], ts_ns: int | None = None
    ) -> list[PubResult]:
        ts = self.tick() if ts_ns is None else ts_ns
        entry = PublishEntry(ts, tuple(InboundMsg(s, h, d) for s, h, d in msgs))
        result = self.apply(entry)
        assert isinstance(result, list)
        return [r for r in result if isinstance(r, PubResult)]

    def publish(
        self, subject: str, data: bytes = b"x", headers: bytes = b"", ts_ns: int | None = None
    ) -> PubResult:
        (result,) = self.publish_many([(subject, headers, data)], ts_ns)
        return result

    def ok(self, subject: str, data: bytes = b"x", headers: bytes = b"") -> int:
        """Publish that must succeed; its seq."""
        result = self.publish(subject, data, headers)
        assert result.error is None and not result.duplicate, result
        return result.seq

    def fail(self, subject: str, data: bytes = b"x", headers: bytes = b"") -> ApiError:
        """Publish that must fail; its error."""
        result = self.publish(subject, data, headers)
        assert result.error is not None, result
        assert result.seq == 0 and not result.duplicate
        return result.error

    def delete(self, seq: int, erase: bool = False) -> ApiError | None:
        result = self.apply(DeleteMsgEntry(self.tick(), seq, erase))
        assert result is None or isinstance(result, ApiError)
        return result

    def purge(self, subject_filter: str = "", seq: int = 0, keep: int = 0) -> int | ApiError:
        result = self.apply(PurgeEntry(self.tick(), subject_filter, seq, keep))
        assert isinstance(result, int | ApiError)
        return result

    def expire(self, ts_ns: int) -> list[int]:
        result = self.apply(ExpireEntry(ts_ns))
        assert isinstance(result, list)
        return [s for s in result if isinstance(s, int)]

    def update(self, **changes: Any) -> ApiError | None:
        config = self.stream.config.model_copy(update=changes)
        raw = StreamConfig.model_validate(config.model_dump()).model_dump_json().encode()
        result = self.apply(UpdateConfigEntry(self.tick(), raw))
        assert result is None or isinstance(result, ApiError)
        return result

    # -------------------------------------------------------------- lifecycle

    def reopen(self) -> Stream:
        """Rebuild the stream from its store: a file store is closed and reopened from disk, a
        memory store object is reused as is (it survives only inside the process)."""
        self.store.flush()
        if self.store_kind != "memory":
            self.store.close()
            self.store = self._open_store()
        self.stream = Stream(self.initial_config, self.store, CREATED_NS)
        return self.stream

    def replay_into_fresh(self) -> Stream:
        """Apply the recorded log, decoded from bytes, to a fresh stream on a memory store."""
        fresh = Stream(self.initial_config, MemoryStore(), CREATED_NS)
        for index, raw in self.log:
            fresh.apply(index, decode_entry(raw))
        return fresh

    def close(self) -> None:
        self.store.close()

    def live(self) -> list[int]:
        return [m.seq for m in self.store.scan()]


MakeHarness = Callable[..., Harness]


class StoreCrash(Exception):
    """The process died here (raised by a ``CrashingStoreMixin`` store instead of mutating)."""


class CrashingStoreMixin:
    """Put before a store class: the store "crashes" (raises ``StoreCrash``, doing nothing) at
    its mutation number ``mutations_left`` (counted from 0; None: never)."""

    mutations_left: int | None = None

    def _mutate(self) -> None:
        if self.mutations_left is not None:
            if self.mutations_left == 0:
                raise StoreCrash
            self.mutations_left -= 1

    def append_fields(self, seq: int, subject: str, hdr: bytes, data: bytes, ts_ns: int) -> None:
        self._mutate()
        super().append_fields(seq, subject, hdr, data, ts_ns)  # type: ignore[misc]

    def remove(self, seq: int, *, erase: bool = False) -> bool:
        self._mutate()
        return bool(super().remove(seq, erase=erase))  # type: ignore[misc]

    def remove_through(self, seq: int) -> None:
        self._mutate()
        super().remove_through(seq)  # type: ignore[misc]

    def set_meta(self, meta: bytes) -> None:
        self._mutate()
        super().set_meta(meta)  # type: ignore[misc]
