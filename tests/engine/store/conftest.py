"""Fixtures for the store suite: the same tests run over every MessageStore implementation,
including the apply log's ``ObservedStore`` (over a file store), which must behave exactly as the
store it watches."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster.apply_log import ObservedStore
from engine.filestore import FileStore
from engine.memstore import MemoryStore
from engine.store import MessageStore

SMALL_SEGMENT_BYTES = 400  # a handful of records per segment: rotation and deletion happen often


class StoreHandle:
    """A store plus a way to close and reopen it (a no-op for the memory store)."""

    def __init__(self, kind: str, directory: Path) -> None:
        self.kind = kind
        self.directory = directory
        self.store: MessageStore = self._open()

    @property
    def durable(self) -> bool:
        return self.kind != "memory"

    def _open(self) -> MessageStore:
        if self.kind == "memory":
            return MemoryStore()
        if self.kind == "file-small":
            return FileStore(self.directory, segment_bytes_max=SMALL_SEGMENT_BYTES)
        if self.kind == "observed-file":
            return ObservedStore(FileStore(self.directory, segment_bytes_max=SMALL_SEGMENT_BYTES))
        return FileStore(self.directory)

    def reopen(self) -> MessageStore:
        if self.durable:
            self.store.close()
            self.store = self._open()
        return self.store


@pytest.fixture(params=["memory", "file", "file-small", "observed-file"])
def handle(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreHandle]:
    h = StoreHandle(request.param, tmp_path / "store")
    yield h
    h.store.close()


@pytest.fixture
def store(handle: StoreHandle) -> MessageStore:
    return handle.store
