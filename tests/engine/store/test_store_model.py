"""Random operation sequences against a dict model, on every store (reopens for the file store)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.filestore import READ_CACHE_BYTES_MAX_DEFAULT, FileStore
from engine.memstore import MemoryStore
from engine.read_cache import READ_CACHE_ENTRY_OVERHEAD_BYTES
from engine.store import MessageStore, StoredMsg

Op = tuple[str, int]

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 3)),  # value: seq gap
        st.tuples(st.just("append_big"), st.integers(1, 2)),
        st.tuples(st.just("append_run"), st.integers(5, 15)),  # value: how many
        st.tuples(st.just("remove_sparse"), st.integers(0, 60)),  # leaves one survivor in ten
        st.tuples(st.just("remove"), st.integers(0, 40)),
        st.tuples(st.just("erase"), st.integers(0, 40)),
        st.tuples(st.just("remove_through"), st.integers(0, 45)),
        st.tuples(st.just("set_meta"), st.integers(0, 1000)),
        st.tuples(st.just("flush"), st.just(0)),
        st.tuples(st.just("reopen"), st.just(0)),
        st.tuples(st.just("load"), st.integers(0, 60)),  # fills the read cache from disk
    ),
    max_size=60,
)
# Read cache budgets for the file store: none, about two small messages, a dozen, the default.
CACHE_BUDGETS_BYTES = [0, 700, 4096, READ_CACHE_BYTES_MAX_DEFAULT]


def sparse_victims(start_seq: int) -> list[int]:
    """Ten sequences from ``start_seq`` but one: KV-like removals that leave segments mostly dead
    with a survivor (what compaction is for)."""
    return [s for s in range(start_seq, start_seq + 10) if s != start_seq + 4]


def make_msg(seq: int, size_bytes: int) -> StoredMsg:
    return StoredMsg(
        seq=seq,
        subject=f"kv.key{seq % 5}",
        hdr=b"NATS/1.0\r\nX: y\r\n\r\n" if seq % 2 else b"",
        data=(seq.to_bytes(4, "little") * (size_bytes // 4 + 1))[:size_bytes],
        ts_ns=seq * 1000,
    )


def run_against_model(ops: list[Op], opener: Opener) -> None:
    store = opener.open()
    model: dict[int, StoredMsg] = {}
    meta: bytes | None = None
    last_seq = 0
    try:
        for name, value in ops:
            if name in ("append", "append_big"):
                last_seq += value
                m = make_msg(last_seq, 300 if name == "append_big" else 20)
                store.append(m)
                model[last_seq] = m
            elif name == "append_run":
                for _ in range(value):
                    last_seq += 1
                    model[last_seq] = make_msg(last_seq, 20)
                    store.append(model[last_seq])
            elif name == "remove_sparse":
                for seq in sparse_victims(value):
                    assert store.remove(seq, erase=seq % 3 == 0) == (seq in model)
                    model.pop(seq, None)
            elif name in ("remove", "erase"):
                assert store.remove(value, erase=name == "erase") == (value in model)
                model.pop(value, None)
            elif name == "remove_through":
                store.remove_through(value)
                model = {s: m for s, m in model.items() if s > value}
                last_seq = max(last_seq, value)  # the engine never appends at or below a purge
            elif name == "set_meta":
                meta = value.to_bytes(2, "little") * value
                store.set_meta(meta)
            elif name == "flush":
                store.flush()
            elif name == "load":
                assert store.load(value) == model.get(value)
            else:
                store = opener.reopen(store)
            assert store.load(last_seq) == model.get(last_seq)
            if isinstance(store, FileStore):
                check_read_cache(store, model, opener.read_cache_bytes_max)
        assert list(store.scan()) == [model[s] for s in sorted(model)]
        assert all(store.load(s) == model.get(s) for s in range(last_seq + 2))
        assert store.get_meta() == meta
        assert store.corrupt_records() == []
        store = opener.reopen(store)
        assert list(store.scan()) == [model[s] for s in sorted(model)]
        assert store.get_meta() == meta
        assert store.corrupt_records() == []
    finally:
        store.close()


def check_read_cache(store: FileStore, model: dict[int, StoredMsg], budget_bytes: int) -> None:
    """The cache holds only live messages, each exactly as appended, within its byte budget."""
    cached = store.cached_seqs()
    assert set(cached) <= set(model), sorted(set(cached) - set(model))
    costs = [
        len(m.subject) + len(m.hdr) + len(m.data) + READ_CACHE_ENTRY_OVERHEAD_BYTES
        for m in (model[s] for s in cached)
    ]
    assert store.read_cache_bytes() == sum(costs) <= budget_bytes


class Opener:
    def __init__(
        self,
        directory: Path | None,
        segment_bytes_max: int = 0,
        read_cache_bytes_max: int = READ_CACHE_BYTES_MAX_DEFAULT,
    ) -> None:
        self.directory = directory
        self.segment_bytes_max = segment_bytes_max
        self.read_cache_bytes_max = read_cache_bytes_max

    def open(self) -> MessageStore:
        if self.directory is None:
            return MemoryStore()
        return FileStore(
            self.directory,
            segment_bytes_max=self.segment_bytes_max,
            read_cache_bytes_max=self.read_cache_bytes_max,
        )

    def reopen(self, store: MessageStore) -> MessageStore:
        if self.directory is None:
            return store
        store.close()
        return self.open()


@settings(max_examples=100, deadline=None)
@given(ops=OPS)
def test_memory_store_matches_model(ops: list[Op]) -> None:
    run_against_model(ops, Opener(None))


@settings(max_examples=150, deadline=None)
@given(
    ops=OPS,
    segment_bytes_max=st.sampled_from([64, 300, 600, 1 << 20]),
    cache_bytes_max=st.sampled_from(CACHE_BUDGETS_BYTES),
)
def test_file_store_matches_model(
    ops: list[Op], segment_bytes_max: int, cache_bytes_max: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run_against_model(ops, Opener(Path(tmp) / "s", segment_bytes_max, cache_bytes_max))


CRASH_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 3)),
        st.tuples(st.just("append_big"), st.integers(1, 2)),
        st.tuples(st.just("append_run"), st.integers(5, 15)),
        st.tuples(st.just("remove_sparse"), st.integers(0, 60)),
        st.tuples(st.just("remove"), st.integers(0, 40)),
        st.tuples(st.just("remove_through"), st.integers(0, 45)),
        st.tuples(st.just("set_meta"), st.integers(0, 300)),
        st.tuples(st.just("flush"), st.just(0)),
        st.tuples(st.just("sync"), st.just(0)),
    ),
    max_size=50,
)

State = tuple[list[StoredMsg], bytes | None]


def primitive_steps(ops: list[Op]) -> list[Op]:
    """The ops as single store calls (a crash may fall between any two), appends with their seq."""
    steps: list[Op] = []
    last_seq = 0
    for name, value in ops:
        if name in ("append", "append_big"):
            last_seq += value
            steps.append(("append", last_seq))
        elif name == "append_run":
            steps += [("append", last_seq + i) for i in range(1, value + 1)]
            last_seq += value
        elif name == "remove_sparse":
            steps += [("remove", seq) for seq in sparse_victims(value)]
        elif name == "remove_through":
            steps.append((name, value))
            last_seq = max(last_seq, value)
        else:
            steps.append((name, value))
    return steps


@settings(max_examples=150, deadline=None)
@given(
    ops=CRASH_OPS,
    segment_bytes_max=st.sampled_from([64, 300, 600, 1 << 20]),
    cut_fraction=st.floats(0, 1),
)
def test_file_store_crash_recovers_a_prefix_at_least_as_new_as_the_last_fsync(
    ops: list[Op], segment_bytes_max: int, cut_fraction: float
) -> None:
    """Crash = the last segment loses any suffix written after the last fsync (erase excluded:
    it takes effect at once, by design). Recovery must give the state after some operation
    between that fsync and the end."""
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "s"
        synced_sizes: dict[str, int] = {}
        fsynced = False

        class RecordingStore(FileStore):
            def fsync(self) -> None:
                nonlocal fsynced
                fsynced = True
                synced_sizes.clear()
                synced_sizes.update({p.name: p.stat().st_size for p in directory.glob("seg-*")})
                super().fsync()

        store = RecordingStore(directory, segment_bytes_max=segment_bytes_max)
        model: dict[int, StoredMsg] = {}
        meta: bytes | None = None
        states: list[State] = [([], None)]
        synced_state_index = 0
        for name, value in primitive_steps(ops):
            fsynced = False
            if name == "append":
                model[value] = make_msg(value, 300 if value % 7 == 0 else 20)
                store.append(model[value])
            elif name == "remove":
                store.remove(value)
                model.pop(value, None)
            elif name == "remove_through":
                store.remove_through(value)
                model = {s: m for s, m in model.items() if s > value}
            elif name == "set_meta":
                meta = value.to_bytes(2, "little") * value
                store.set_meta(meta)
            elif name == "flush":
                store.flush()
            else:
                store.sync()
            states.append(([model[s] for s in sorted(model)], meta))
            if fsynced:  # an explicit sync makes this step durable; an fsync inside another
                # step (a segment rotation, before its record is written) only the previous one
                synced_state_index = len(states) - (1 if name == "sync" else 2)
        store.flush()
        segments = sorted(directory.glob("seg-*"))
        cut: tuple[Path, int] | None = None
        if segments:
            last = segments[-1]
            floor = synced_sizes.get(last.name, 0)
            cut = (last, floor + int((last.stat().st_size - floor) * cut_fraction))
        store.close()  # writes nothing more: the files are what the OS had when the process died
        if cut is not None:  # the crash: the tail the last fsync did not cover is lost
            os.truncate(*cut)
        recovered = FileStore(directory, segment_bytes_max=segment_bytes_max)
        try:
            got: State = (list(recovered.scan()), recovered.get_meta())
            assert got in states[synced_state_index:], (got, synced_state_index)
            assert recovered.corrupt_records() == []
        finally:
            recovered.close()
