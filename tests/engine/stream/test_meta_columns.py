"""The index's per-message columns (engine/meta_columns.py) against a dict: small chunks, so a
few dozen seqs cross many chunk boundaries, with gaps, removals that empty chunks or leave them
sparse (the newest too) and appends after them."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.meta_columns import META_SPARSE_FRACTION, MetaColumns

# ("put", gap before the seq) or ("pop", which live seq, as an index into them) or ("miss", seq)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.sampled_from([0, 0, 0, 1, 3, 9, 40])),
        st.tuples(st.just("pop"), st.integers(0, 1_000)),
        st.tuples(st.just("miss"), st.integers(0, 400)),
        st.tuples(st.just("clear"), st.just(0)),
    ),
    max_size=150,
)


@settings(max_examples=300)
@given(st.integers(1, 3), st.integers(1, 20), OPS)
def test_columns_answer_as_a_dict(chunk_bits: int, first: int, ops: list[tuple[str, int]]) -> None:
    columns = MetaColumns(chunk_bits)
    model: dict[int, tuple[str, int, int, int]] = {}
    next_seq = first
    for op, arg in ops:
        if op == "put":
            next_seq += arg
            fields = (f"s.{next_seq % 3}", next_seq * 10, next_seq % 7, next_seq * 31)
            columns.put(next_seq, *fields)
            model[next_seq] = fields
            next_seq += 1
        elif op == "pop" and model:
            seq = sorted(model)[arg % len(model)]
            assert columns.pop(seq) == model.pop(seq)
            assert columns.pop(seq) is None
        elif op == "miss":
            assert columns.get(arg) == model.get(arg)
            assert (arg in columns) == (arg in model)
            if arg not in model:
                assert columns.pop(arg) is None
        elif op == "clear":
            columns.clear()
            model.clear()
        for seq, fields in model.items():
            assert columns.get(seq) == fields
            assert columns.live_subject(seq) == fields[0]
            assert columns.ts(seq) == fields[1]
        # emptied and sparse chunks go: besides the newest, only chunks holding live seqs
        live_chunks = {seq >> chunk_bits for seq in model}
        assert columns.chunk_count() <= len(live_chunks) + 1
        assert columns.sparse_count() <= len(model)
        for chunk in columns._chunks.values():
            if chunk is not columns._newest:
                assert 0 < chunk.live and chunk.live * META_SPARSE_FRACTION >= len(chunk.subjects)


def test_a_work_queue_reuses_its_newest_chunk() -> None:
    """Every message removed right after it is stored: no chunk is created per message."""
    columns = MetaColumns(4)
    for seq in range(1, 200):
        columns.put(seq, "q", seq, 1, seq)
        assert columns.pop(seq) == ("q", seq, 1, seq)
        assert columns.chunk_count() == 1
    assert columns.get(199) is None and 199 not in columns


def test_sparse_chunks_hand_their_few_live_seqs_to_a_dict() -> None:
    """A KV bucket: one write to a key that is never updated, then many revisions of a hot key of
    which only the last is kept. Without the hand-over every chunk would stay, whole, for the one
    cold key it holds."""
    columns = MetaColumns(6)  # 64 seqs a chunk
    seq, previous, cold = 0, 0, {}
    for key in range(200):
        seq += 1
        columns.put(seq, f"kv.cold{key}", seq, 1, seq)
        cold[seq] = f"kv.cold{key}"
        for _ in range(63):
            seq += 1
            columns.put(seq, "kv.hot", seq, 1, seq)
            if previous:
                assert columns.pop(previous) is not None
            previous = seq
    assert columns.chunk_count() <= 2
    assert columns.sparse_count() >= len(cold) - 2
    for cold_seq, subject in cold.items():
        assert columns.get(cold_seq) == (subject, cold_seq, 1, cold_seq)
    assert columns.live_subject(previous) == "kv.hot" and columns.ts(previous) == previous
    assert columns.pop(1) == ("kv.cold0", 1, 1, 1) and 1 not in columns
