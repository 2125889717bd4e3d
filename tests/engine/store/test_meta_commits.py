"""The file store with ``meta_commits=True``: a META record commits the entry before it, and a
crash (every file cut back to what its last fsync covered) recovers exactly a committed state."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from engine import disk
from engine.filestore import FileStore
from engine.store import StoredMsg
from tests.engine.store.filestore_test_records import msg

SEGMENT_BYTES = 300  # three 100-byte messages a segment: entries straddle rotations


def segment_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("seg-*.blk"))


def snapshot_sizes(directory: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in segment_files(directory)}


def crash_to(directory: Path, synced: dict[str, int], torn_last_bytes: int = 0) -> None:
    """What a power loss leaves: each segment as its last fsync left it; a segment never fsynced
    is empty; the newest one may keep ``torn_last_bytes`` more of what was written after."""
    files = segment_files(directory)
    for path in files:
        keep = synced.get(path.name, 0)
        if path == files[-1]:
            keep = min(path.stat().st_size, keep + torn_last_bytes)
        os.truncate(path, keep)


def test_a_half_applied_entry_across_a_rotation_is_rolled_back(tmp_path: Path) -> None:
    store = FileStore(tmp_path, segment_bytes_max=SEGMENT_BYTES, meta_commits=True)
    for seq in (1, 2):
        store.append(msg(seq))
    store.set_meta(b"applied=1")
    store.close()  # an open store's file also holds the space it reserved ahead
    committed = snapshot_sizes(tmp_path)
    store = FileStore(tmp_path, segment_bytes_max=SEGMENT_BYTES, meta_commits=True)
    for seq in range(3, 9):  # the next entry: two more segments, removals, no META yet
        store.append(msg(seq))
    store.remove(1)
    store.remove_through(2)
    store.flush()
    assert len(segment_files(tmp_path)) == 3
    store.close()  # the process dies: what was flushed is in the files, not synced
    reopened = FileStore(tmp_path, segment_bytes_max=SEGMENT_BYTES, meta_commits=True)
    assert [m.seq for m in reopened.scan()] == [1, 2]  # the removals are undone too
    assert reopened.get_meta() == b"applied=1"
    assert reopened.corrupt_records() == []
    assert any("after the last commit" in note for note in reopened.recovery_notes())
    assert snapshot_sizes(tmp_path) == committed  # later segments gone, the tail cut
    reopened.append(msg(3))  # appends go on after the commit point
    reopened.set_meta(b"applied=2")
    reopened.close()
    again = FileStore(tmp_path, segment_bytes_max=SEGMENT_BYTES, meta_commits=True)
    assert [m.seq for m in again.scan()] == [1, 2, 3] and again.get_meta() == b"applied=2"
    again.close()


def test_without_meta_commits_the_same_files_keep_the_uncommitted_prefix(tmp_path: Path) -> None:
    store = FileStore(tmp_path, segment_bytes_max=SEGMENT_BYTES)
    store.append(msg(1))
    store.set_meta(b"applied=1")
    store.append(msg(2))
    store.close()
    reopened = FileStore(tmp_path, segment_bytes_max=SEGMENT_BYTES)
    assert [m.seq for m in reopened.scan()] == [1, 2]
    reopened.close()


def test_a_store_that_never_committed_is_emptied(tmp_path: Path) -> None:
    store = FileStore(tmp_path, segment_bytes_max=SEGMENT_BYTES, meta_commits=True)
    for seq in range(1, 6):
        store.append(msg(seq))
    store.close()
    reopened = FileStore(tmp_path, segment_bytes_max=SEGMENT_BYTES, meta_commits=True)
    assert list(reopened.scan()) == [] and reopened.get_meta() is None
    assert segment_files(tmp_path) == []
    reopened.close()


def test_removals_free_space_only_at_a_commit_point(tmp_path: Path) -> None:
    """Deleting a segment whose messages an uncommitted entry removed would make the removals
    irreversible: recovery could no longer roll that entry back."""
    store = FileStore(tmp_path, segment_bytes_max=SEGMENT_BYTES, meta_commits=True)
    for seq in range(1, 8):
        store.append(msg(seq))
    store.set_meta(b"applied=1")
    first = segment_files(tmp_path)[0]
    store.remove_through(3)  # the whole first segment is dead now
    store.append(msg(8))
    store.flush()
    assert first.exists()
    store.set_meta(b"applied=2")
    assert not first.exists()
    store.close()


def test_fsync_goes_directory_first_then_segments_oldest_first(tmp_path: Path) -> None:
    store = FileStore(tmp_path, segment_bytes_max=SEGMENT_BYTES, meta_commits=True)
    for seq in range(1, 10):
        store.append(msg(seq))  # three full segments
    store.sync()
    store.append(msg(10))  # a new segment: the directory and seg 4 are dirty, in that order
    store.flush()
    store.remove(1, erase=True)  # zeroes bytes in seg 1 in place: dirty last
    synced: list[str] = []

    def observe(fd: int, _size: int) -> None:
        synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))

    disk.observe_fsync(observe)
    try:
        store.fsync()
    finally:
        disk.stop_observing_fsync(observe)
        store.close()
    assert synced == [tmp_path.name, "seg-00000001.blk", "seg-00000004.blk"]


def test_a_full_segment_is_synced_before_its_successor_is_written(tmp_path: Path) -> None:
    store = FileStore(tmp_path, segment_bytes_max=SEGMENT_BYTES, meta_commits=True)
    synced: list[str] = []

    def observe(fd: int, _size: int) -> None:
        synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))

    disk.observe_fsync(observe)
    try:
        for seq in range(1, 8):
            store.append(msg(seq))
    finally:
        disk.stop_observing_fsync(observe)
        store.close()
    # each rotation syncs what came before (the directory entry, then the full segment); no
    # fsync otherwise: the group commit decides when
    directory = tmp_path.name
    assert synced == [directory, "seg-00000001.blk", directory, "seg-00000002.blk"]


# One entry: what Stream.apply does to a store, then its META.
STEP = st.one_of(
    st.tuples(st.just("append"), st.integers(1, 3)),  # value: how many
    st.tuples(st.just("remove"), st.integers(0, 30)),
    st.tuples(st.just("erase"), st.integers(0, 30)),
    st.tuples(st.just("remove_through"), st.integers(0, 30)),
)
ENTRIES = st.lists(
    st.tuples(st.lists(STEP, min_size=1, max_size=4), st.sampled_from(["", "flush", "sync"])),
    min_size=1,
    max_size=12,
)

State = tuple[list[StoredMsg], bytes | None]


@settings(max_examples=100, deadline=None)
@given(
    entries=ENTRIES,
    crash_after_steps=st.integers(0, 60),
    torn_last_bytes=st.integers(0, 400),
    segment_bytes_max=st.sampled_from([SEGMENT_BYTES, 1 << 20]),
)
def test_a_crash_recovers_a_committed_state_no_older_than_the_last_fsync(
    entries: list[tuple[list[tuple[str, int]], str]],
    crash_after_steps: int,
    torn_last_bytes: int,
    segment_bytes_max: int,
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "s"
        store = FileStore(directory, segment_bytes_max=segment_bytes_max, meta_commits=True)
        synced: dict[str, int] = {}

        def observe(_fd: int, _size: int) -> None:
            synced.update(snapshot_sizes(directory))

        disk.observe_fsync(observe)
        model: dict[int, StoredMsg] = {}
        committed: list[State] = [([], None)]  # the state at every commit point, in order
        durable_floor = 0  # index in ``committed`` of the newest state an fsync covered
        last_seq = 0
        steps = 0
        erased: set[int] = set()  # an erase zeroes bytes in place at once: never rolled back
        try:
            for number, (ops, after) in enumerate(entries, start=1):
                for name, value in ops:
                    if steps == crash_after_steps:
                        break
                    steps += 1
                    if name == "append":
                        for _ in range(value):
                            last_seq += 1
                            model[last_seq] = msg(last_seq)
                            store.append(model[last_seq])
                    elif name in ("remove", "erase"):
                        store.remove(value, erase=name == "erase")
                        if name == "erase":
                            erased.add(value)
                        model.pop(value, None)
                    else:
                        store.remove_through(value)
                        last_seq = max(last_seq, value)
                        model = {s: m for s, m in model.items() if s > value}
                else:
                    meta = f"applied={number}".encode()
                    store.set_meta(meta)
                    committed.append(([model[s] for s in sorted(model)], meta))
                    if after == "flush":
                        store.flush()
                    elif after == "sync":
                        store.sync()
                    if synced and after == "sync":
                        durable_floor = len(committed) - 1
                    continue
                break
            store.flush()
        finally:
            disk.stop_observing_fsync(observe)
        store.close()  # its fsync is not observed: the crash below cuts back to ``synced``
        crash_to(directory, synced, torn_last_bytes)
        recovered = FileStore(directory, segment_bytes_max=segment_bytes_max, meta_commits=True)
        try:
            got: State = (list(recovered.scan()), recovered.get_meta())
            candidates = [
                ([m for m in msgs if m.seq not in erased], meta)
                for msgs, meta in committed[durable_floor:]
            ]
            assert ([m for m in got[0] if m.seq not in erased], got[1]) in candidates, (
                got[1],
                durable_floor,
            )
            assert recovered.corrupt_records() == []
            # the store goes on from there, and its next commit survives a reopen
            recovered.set_meta(b"after")
            recovered.close()
            again = FileStore(directory, segment_bytes_max=segment_bytes_max, meta_commits=True)
            assert (list(again.scan()), again.get_meta()) == (got[0], b"after")
            again.close()
        finally:
            recovered.close()
