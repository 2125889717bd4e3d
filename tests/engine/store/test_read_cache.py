"""File store reads from memory (the read tail of recent writes and the read cache of what was read
from disk): what they serve, what drops entries, and that they never serve damage."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.filestore import READ_TAIL_SHARE, FileStore
from engine.read_cache import (
    READ_CACHE_ENTRY_OVERHEAD_BYTES,
    READ_CACHE_GENERATIONS,
    ReadCache,
    entry_cost,
)
from engine.store import StoredMsg
from tests.engine.store.filestore_test_records import (
    RECORD_100_BYTES_DATA,
    RECORD_BYTES,
    flip_byte,
    msg,
)

# msg(seq) is a 100-byte record with subject "t.x"; its cache entry costs subject + data + overhead
ENTRY_COST_BYTES = 3 + RECORD_100_BYTES_DATA + READ_CACHE_ENTRY_OVERHEAD_BYTES


def only_segment(directory: Path) -> Path:
    (segment,) = sorted(directory.glob("seg-*.blk"))
    return segment


class PreadCounter:
    """Counts os.pread calls (every read from disk the store makes goes through it)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        real = os.pread

        def counting(fd: int, length: int, offset: int) -> bytes:
            self.calls += 1
            return real(fd, length, offset)

        monkeypatch.setattr(os, "pread", counting)


@pytest.fixture
def preads(monkeypatch: pytest.MonkeyPatch) -> PreadCounter:
    return PreadCounter(monkeypatch)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[FileStore]:
    s = FileStore(tmp_path)
    yield s
    s.close()


def cache_share_budget(cache_bytes: int) -> int:
    """The ``read_cache_bytes_max`` whose read cache share is exactly ``cache_bytes``."""
    budget = cache_bytes * READ_TAIL_SHARE // (READ_TAIL_SHARE - 1)
    while budget - budget // READ_TAIL_SHARE < cache_bytes:
        budget += 1
    assert budget - budget // READ_TAIL_SHARE == cache_bytes, budget
    return budget


def reopened_with_cached(tmp_path: Path, seqs: range, read_cache_bytes_max: int) -> FileStore:
    """A store holding msg(s) for every s in ``seqs``, reopened (so its tail is empty) and each
    message read back once from disk, in order, which puts it in the read cache."""
    writer = FileStore(tmp_path)
    for seq in seqs:
        writer.append(msg(seq))
    writer.close()
    store = FileStore(tmp_path, read_cache_bytes_max=read_cache_bytes_max)
    assert [store.load(s) for s in seqs] == [msg(s) for s in seqs]
    return store


def test_appended_messages_are_served_from_the_tail_without_reading_the_disk(
    store: FileStore, preads: PreadCounter
) -> None:
    for seq in range(1, 6):
        store.append(msg(seq))
    assert store.load(2) == msg(2)  # not flushed yet: from the write buffer
    store.sync()
    assert [store.load(s) for s in range(1, 6)] == [msg(s) for s in range(1, 6)]
    assert preads.calls == 0
    assert store.read_tail_bytes() == 5 * RECORD_BYTES
    # appends do not fill the read cache, and what the tail serves is not copied into it
    assert store.cached_seqs() == [] and store.read_cache_bytes() == 0


def test_past_its_budget_the_tail_keeps_the_newest_writes_and_older_ones_come_from_disk(
    tmp_path: Path, preads: PreadCounter
) -> None:
    # a tail share of 2.5 records; every sync below flushes exactly one record
    budget = 10 * RECORD_BYTES
    assert budget // READ_TAIL_SHARE == 2 * RECORD_BYTES + RECORD_BYTES // 2
    store = FileStore(tmp_path, read_cache_bytes_max=budget)
    for seq in range(1, 7):
        store.append(msg(seq))
        store.sync()
        assert store.read_tail_bytes() <= budget // READ_TAIL_SHARE
    assert store.read_tail_bytes() == 2 * RECORD_BYTES
    assert [store.load(s) for s in (5, 6)] == [msg(5), msg(6)]
    assert preads.calls == 0 and store.cached_seqs() == []
    assert store.load(4) == msg(4)
    assert preads.calls == 1 and store.cached_seqs() == [4]  # a disk read is cached
    store.close()


def test_a_new_segment_starts_an_empty_tail(tmp_path: Path, preads: PreadCounter) -> None:
    store = FileStore(tmp_path, segment_bytes_max=3 * RECORD_BYTES)
    for seq in range(1, 5):  # seq 4 goes to the second segment
        store.append(msg(seq))
        store.sync()
    assert len(store.segment_names()) == 2
    assert store.read_tail_bytes() == RECORD_BYTES
    assert store.load(4) == msg(4) and preads.calls == 0
    assert store.load(3) == msg(3) and preads.calls == 1
    store.close()


@pytest.mark.parametrize("erase", [False, True])
def test_a_removed_message_in_the_tail_is_not_served_and_an_erase_patches_the_tail(
    tmp_path: Path, erase: bool
) -> None:
    store = FileStore(tmp_path)
    for seq in range(1, 4):
        store.append(msg(seq))
    store.sync()
    assert store.remove(2, erase=erase) is True
    assert store.load(2) is None
    store.sync()
    assert [store.load(s) for s in (1, 3)] == [msg(1), msg(3)]
    # the tail holds exactly the segment file's bytes, the erased record's zeros included
    on_disk = only_segment(tmp_path).read_bytes()
    for seq in (1, 2, 3):
        offset = (seq - 1) * RECORD_BYTES
        held = store._tail.locate(offset, RECORD_BYTES)
        assert held is not None
        chunk, at = held
        assert chunk[at : at + RECORD_BYTES] == on_disk[offset : offset + RECORD_BYTES]
    store.close()


def test_a_load_from_disk_is_cached_after_its_checksum_passed(
    tmp_path: Path, preads: PreadCounter
) -> None:
    writer = FileStore(tmp_path)
    for seq in range(1, 4):
        writer.append(msg(seq))
    writer.close()
    store = FileStore(tmp_path)  # recovery reads segments whole, not through load
    assert store.cached_seqs() == []
    before = preads.calls
    assert store.load(2) == msg(2)
    assert preads.calls == before + 1
    assert store.load(2) == msg(2)
    assert preads.calls == before + 1  # the second load was a hit
    assert store.cached_seqs() == [2]
    store.close()


@pytest.mark.parametrize("erase", [False, True])
def test_remove_and_erase_drop_the_entry(tmp_path: Path, erase: bool) -> None:
    store = reopened_with_cached(tmp_path, range(1, 4), 64 * ENTRY_COST_BYTES)
    assert store.cached_seqs() == [1, 2, 3]
    assert store.remove(2, erase=erase) is True
    assert store.load(2) is None
    assert store.cached_seqs() == [1, 3]
    assert store.read_cache_bytes() == 2 * ENTRY_COST_BYTES
    store.sync()
    assert store.load(2) is None
    store.close()


@pytest.mark.parametrize("cached_before", [2, 40])
def test_remove_through_drops_every_entry_at_or_below(tmp_path: Path, cached_before: int) -> None:
    """Both ways of finding the entries: probing the killed seqs (few killed, many cached) and
    filtering the cache (many killed, few cached)."""
    store = FileStore(tmp_path, segment_bytes_max=1000)  # ten records a segment
    for seq in range(1, 41):
        store.append(msg(seq))
    survivors = list(range(41 - cached_before, 41))
    # Keep only ``survivors`` cached: recreate the store and read them back.
    store.close()
    store = FileStore(tmp_path, segment_bytes_max=1000)
    for seq in survivors:
        assert store.load(seq) == msg(seq)
    store.remove_through(30)
    expected = [s for s in survivors if s > 30]
    assert store.cached_seqs() == expected
    assert store.read_cache_bytes() == len(expected) * ENTRY_COST_BYTES
    assert all(store.load(s) is None for s in range(1, 31))
    assert [m.seq for m in store.scan()] == list(range(31, 41))
    store.close()


def test_compaction_leaves_only_live_messages_cached_and_disk_reads_agree(
    tmp_path: Path,
) -> None:
    segment_bytes_max = 1000  # ten records a segment
    store = FileStore(
        tmp_path,
        segment_bytes_max=segment_bytes_max,
        read_cache_bytes_max=3 * ENTRY_COST_BYTES,  # most survivors must come from disk
    )
    for seq in range(1, 31):
        store.append(msg(seq))
    first = sorted(tmp_path.glob("seg-*.blk"))[0]
    size_before = first.stat().st_size
    for seq in range(1, 11):
        if seq != 5:
            store.remove(seq)
    store.sync()  # a commit point: space is reclaimed there
    assert first.stat().st_size < size_before  # compacted: only seq 5 and removals are left
    assert set(store.cached_seqs()) <= set(range(5, 31)) - set(range(6, 11))
    assert [store.load(s) for s in range(1, 31)] == [
        msg(s) if s == 5 or s > 10 else None for s in range(1, 31)
    ]
    assert store.read_cache_bytes() <= 3 * ENTRY_COST_BYTES
    store.close()
    reopened = FileStore(tmp_path, segment_bytes_max=segment_bytes_max)
    assert reopened.load(5) == msg(5)
    assert reopened.corrupt_records() == []
    reopened.close()


def test_a_damaged_record_never_cached_is_not_served(tmp_path: Path) -> None:
    writer = FileStore(tmp_path)
    for seq in range(1, 6):
        writer.append(msg(seq))
    writer.close()
    flip_byte(only_segment(tmp_path), 2 * RECORD_BYTES + 70)  # inside the data of seq 3
    store = FileStore(tmp_path)
    assert store.load(3) is None
    assert store.load(3) is None
    assert 3 not in store.cached_seqs()
    assert [(c.seq, c.reason) for c in store.corrupt_records()] == [(3, "checksum mismatch")]
    assert [store.load(s) for s in (1, 2, 4, 5)] == [msg(s) for s in (1, 2, 4, 5)]
    store.close()


def test_damage_after_opening_is_found_by_the_first_load(tmp_path: Path) -> None:
    writer = FileStore(tmp_path)
    for seq in range(1, 6):
        writer.append(msg(seq))
    writer.close()
    store = FileStore(tmp_path)  # recovered, so nothing is cached yet
    flip_byte(only_segment(tmp_path), 3 * RECORD_BYTES + 70)  # inside the data of seq 4
    assert store.load(4) is None
    assert 4 not in store.cached_seqs()
    assert [c.seq for c in store.corrupt_records()] == [4]
    store.close()


def test_a_message_this_store_wrote_is_served_as_written_until_scan_finds_the_damage(
    store: FileStore, tmp_path: Path
) -> None:
    for seq in range(1, 4):
        store.append(msg(seq))
    store.sync()
    flip_byte(only_segment(tmp_path), RECORD_BYTES + 70)  # inside the data of seq 2
    assert store.load(2) == msg(2)  # the tail's copy is what was written, not the damage
    assert [m.seq for m in store.scan()] == [1, 3]
    assert store.load(2) is None  # once found damaged, the message is gone for every reader
    assert 2 not in store.cached_seqs()


def test_the_cache_stays_within_its_budget_and_evicts_least_recently_used(
    tmp_path: Path,
) -> None:
    budget_bytes = 4 * ENTRY_COST_BYTES
    store = reopened_with_cached(tmp_path, range(1, 7), cache_share_budget(budget_bytes))
    assert store.read_cache_bytes() <= budget_bytes
    assert store.cached_seqs() == [3, 4, 5, 6]
    assert store.load(3) == msg(3)  # a hit makes 3 the most recently used
    assert store.load(1) == msg(1)  # a miss, read from disk, evicts the least recent: 4
    assert store.cached_seqs() == [5, 6, 3, 1]
    assert store.read_cache_bytes() == budget_bytes
    store.close()


def test_a_message_over_the_whole_budget_is_not_cached(tmp_path: Path) -> None:
    writer = FileStore(tmp_path)
    writer.append(msg(1))
    big = StoredMsg(2, "t.x", b"", bytes(3 * ENTRY_COST_BYTES), 2)
    writer.append(big)
    writer.close()
    store = FileStore(tmp_path, read_cache_bytes_max=cache_share_budget(2 * ENTRY_COST_BYTES))
    assert store.load(1) == msg(1)
    assert store.cached_seqs() == [1]
    assert store.load(2) == big
    assert store.cached_seqs() == [1]
    store.close()


def test_a_zero_budget_disables_the_cache(tmp_path: Path, preads: PreadCounter) -> None:
    store = FileStore(tmp_path, read_cache_bytes_max=0)
    store.append(msg(1))
    store.sync()
    assert store.load(1) == msg(1)
    assert store.load(1) == msg(1)
    assert preads.calls == 2
    assert store.cached_seqs() == [] and store.read_cache_bytes() == 0
    store.close()


def test_mutable_payloads_are_not_shared_with_the_caller(store: FileStore) -> None:
    data = bytearray(b"before")
    try:
        store.append(StoredMsg(1, "t.x", b"", data, 1))  # type: ignore[arg-type]  # careless
    except TypeError:  # compiled (protocol/native.py): refused outright, nothing stored
        assert store.load(1) is None
        return
    data[:] = b"after!"
    loaded = store.load(1)
    assert loaded is not None and loaded.data == b"before" and type(loaded.data) is bytes


def test_a_subject_that_is_not_utf8_is_stored_and_read_back(tmp_path: Path) -> None:
    """A client may publish to subject bytes that are not UTF-8 (``HPUB file.\\xff\\xfe``):
    the parser hands them on as lone surrogates, and the file store used to raise on them, which
    took the stream offline."""
    subject = b"file.\xff\xfe".decode("utf-8", "surrogateescape")
    store = FileStore(tmp_path / "s")
    store.append(StoredMsg(1, subject, b"", b"x", 1))
    store.sync()
    store.close()
    reopened = FileStore(tmp_path / "s")
    loaded = reopened.load(1)
    assert loaded is not None and loaded.subject == subject
    reopened.close()


# --- the cache on its own (engine/read_cache.py) ------------------------------------------------
CACHE_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 3 * ENTRY_COST_BYTES)),
        st.tuples(st.just("get"), st.integers(1, 60)),
        st.tuples(st.just("drop"), st.integers(1, 60)),
        st.tuples(st.just("drop_through"), st.integers(1, 60)),
        st.tuples(st.just("clear"), st.just(0)),
    ),
    max_size=120,
)


@given(st.integers(0, 12 * ENTRY_COST_BYTES), CACHE_OPS)
def test_the_cache_holds_only_what_was_put_within_its_budget(
    budget_bytes: int, ops: list[tuple[str, int]]
) -> None:
    cache = ReadCache(budget_bytes)
    live: dict[int, StoredMsg] = {}  # put and not dropped since (cached or evicted)
    next_seq = 1
    for op, arg in ops:
        before = set(cache.seqs())
        if op == "put":
            put = StoredMsg(next_seq, "t.x", b"", bytes(arg), next_seq)
            fits = cache.bytes + entry_cost(put) <= budget_bytes
            cache.put(put)
            live[next_seq] = put
            if fits:  # nothing is evicted while the budget holds everything
                assert set(cache.seqs()) == before | {next_seq}
            next_seq += 1
        elif op == "get":
            got = cache.get(arg)
            assert got is None or got is live[arg]
            assert (got is not None) == (arg in before)
            assert set(cache.seqs()) == before  # a hit moves it, never drops it
        elif op == "drop":
            cache.drop(arg)
            live.pop(arg, None)
            assert set(cache.seqs()) == before - {arg}
        elif op == "drop_through":
            cache.drop_through(arg)
            live = {s: m for s, m in live.items() if s > arg}
            assert set(cache.seqs()) == {s for s in before if s > arg}
        else:
            cache.clear()
            live.clear()
        seqs = cache.seqs()
        assert len(seqs) == len(set(seqs)) == len(cache)
        assert set(seqs) <= set(live)
        assert cache.bytes == sum(entry_cost(live[s]) for s in seqs) <= budget_bytes


def test_a_large_cache_keeps_what_is_read_again_and_evicts_the_oldest_generation_first() -> None:
    per_generation = 10
    capacity = READ_CACHE_GENERATIONS * per_generation
    cache = ReadCache(capacity * ENTRY_COST_BYTES)
    msgs = {seq: msg(seq) for seq in range(1, capacity + per_generation)}
    for seq in range(1, capacity + 1):
        cache.put(msgs[seq])
    assert sorted(cache.seqs()) == list(range(1, capacity + 1))  # full, nothing evicted yet
    assert cache.get(1) is msgs[1]  # read again: now among the most recently used
    for seq in range(capacity + 1, capacity + per_generation):
        cache.put(msgs[seq])
    cached = set(cache.seqs())
    assert 1 in cached and not cached & set(range(2, per_generation + 1))
    assert set(range(per_generation + 1, capacity + per_generation)) <= cached
    assert cache.bytes <= capacity * ENTRY_COST_BYTES


def test_a_message_that_fits_the_budget_is_cached_even_when_it_evicts_all_the_others() -> None:
    cache = ReadCache(2400)
    small = StoredMsg(1, "s", b"", b"", 0)
    large = StoredMsg(2, "s", b"", bytes(2400 - READ_CACHE_ENTRY_OVERHEAD_BYTES - 1), 0)
    cache.put(small)
    cache.put(large)
    assert cache.seqs() == [2] and cache.get(2) is large
    assert cache.bytes == entry_cost(large)


def test_sparse_old_generations_are_merged_so_a_miss_stays_cheap() -> None:
    """A work queue whose consumer lags, with one message in a hundred never acknowledged: the
    generations keep a message each; they are merged instead of piling up."""
    cache = ReadCache(READ_CACHE_GENERATIONS * 4 * ENTRY_COST_BYTES)
    for seq in range(1, 20_001):
        cache.put(msg(seq))
        if seq > 10 and (seq - 10) % 100:
            cache.drop(seq - 10)  # acknowledged and removed, ten messages behind
    assert len(cache._gens) <= 2 * READ_CACHE_GENERATIONS + 1
    assert cache.get(-1) is None
    assert cache.bytes == sum(entry_cost(msg(s)) for s in cache.seqs())
