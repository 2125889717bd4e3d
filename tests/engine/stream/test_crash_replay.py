"""A replica that loses power in the middle of an apply comes back at a committed index, and
re-applying the log from there reaches exactly the state of a replica that never crashed.

This is what a Raft replica does after a crash: open the stream from its store, then apply every
committed entry above ``applied_index``. The file store (``meta_commits=True``) must therefore
never keep part of an entry's effects (a message stored twice, a removal without its entry);
every file is cut back to what its last fsync covered, and the newest may keep a torn tail.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from engine import disk
from engine.entries import DeleteMsgEntry, Entry, InboundMsg, PublishEntry, PurgeEntry
from engine.filestore import FileStore
from engine.memstore import MemoryStore
from engine.stream import Stream
from tests.engine.stream.harness import (
    CREATED_NS,
    T0_NS,
    CrashingStoreMixin,
    S,
    StoreCrash,
    make_config,
)

SEGMENT_BYTES = 400  # a few messages a segment: entries straddle rotations and deletions


class DyingStore(CrashingStoreMixin, FileStore):
    """A file store whose process dies before its ``budget``-th write call."""

    def __init__(self, directory: Path, budget: int) -> None:
        super().__init__(directory, segment_bytes_max=SEGMENT_BYTES, meta_commits=True)
        self.mutations_left = budget


ENTRY = st.one_of(
    st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 60)), min_size=1, max_size=5).map(
        lambda msgs: ("publish", msgs)
    ),
    st.tuples(st.just("delete"), st.integers(1, 40), st.booleans()),
    st.tuples(st.just("purge"), st.sampled_from(["", "S.a"]), st.integers(0, 3)),
)


def build_entries(specs: list[Any]) -> list[Entry]:
    entries: list[Entry] = []
    for number, spec in enumerate(specs, start=1):
        ts = T0_NS + number * S
        if spec[0] == "publish":
            msgs = tuple(InboundMsg(f"S.{s}", b"", bytes([number]) * n) for s, n in spec[1])
            entries.append(PublishEntry(ts, msgs))
        elif spec[0] == "delete":
            entries.append(DeleteMsgEntry(ts, spec[1], spec[2]))
        else:
            entries.append(PurgeEntry(ts, spec[1], 0, spec[2]))
    return entries


def segment_sizes(directory: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in directory.glob("seg-*.blk")}


@settings(max_examples=60, deadline=None)
@given(
    specs=st.lists(ENTRY, min_size=1, max_size=25),
    config=st.fixed_dictionaries(
        {
            "max_msgs": st.sampled_from([-1, 6]),
            "max_msgs_per_subject": st.sampled_from([-1, 2]),
            "discard": st.sampled_from(["old", "new"]),
        }
    ),
    sync_every=st.integers(1, 6),
    budget=st.integers(0, 120),
    torn_bytes=st.integers(0, 300),
)
def test_crash_then_replay_equals_the_replica_that_never_crashed(
    specs: list[Any],
    config: dict[str, Any],
    sync_every: int,
    budget: int,
    torn_bytes: int,
) -> None:
    cfg = make_config(storage="file", **config)
    entries = build_entries(specs)
    reference = Stream(cfg, MemoryStore(), CREATED_NS)
    for index, entry in enumerate(entries, start=1):
        reference.apply(index, entry)

    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "msgs"
        synced: dict[str, int] = {}

        def observe(_fd: int, _size: int) -> None:
            synced.update(segment_sizes(directory))

        disk.observe_fsync(observe)
        store = DyingStore(directory, budget)
        acked = 0  # the highest index whose apply was followed by an fsync (a PubAck went out)
        try:
            stream = Stream(cfg, store, CREATED_NS)
            for index, entry in enumerate(entries, start=1):
                stream.apply(index, entry)
                if index % sync_every == 0:
                    store.sync()
                    acked = index
        except StoreCrash:
            pass
        finally:
            disk.stop_observing_fsync(observe)
        store.flush()  # what the process wrote reached the OS; only fsynced bytes survive
        store.close()
        files = sorted(directory.glob("seg-*.blk"))
        for path in files:
            keep = synced.get(path.name, 0)
            if path == files[-1]:
                keep = min(path.stat().st_size, keep + torn_bytes)
            os.truncate(path, keep)

        recovered_store = FileStore(directory, segment_bytes_max=SEGMENT_BYTES, meta_commits=True)
        try:
            replica = Stream(cfg, recovered_store, CREATED_NS)
            assert replica.applied_index >= acked, (replica.applied_index, acked)
            assert recovered_store.corrupt_records() == []
            for index, entry in enumerate(entries, start=1):
                if index > replica.applied_index:
                    replica.apply(index, entry)
            assert replica.digest() == reference.digest()
            assert replica.state() == reference.state()
        finally:
            recovered_store.close()
