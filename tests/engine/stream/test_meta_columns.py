"""The index's per-message columns (engine/meta_columns.py) against a dict: small chunks, so a
few dozen seqs cross many chunk boundaries, with gaps, removals that empty chunks (the newest
too) and appends after them."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.meta_columns import MetaColumns

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
            assert columns.subject(seq) == columns.live_subject(seq) == fields[0]
            assert columns.ts(seq) == fields[1]
        # emptied chunks go: at most one (the newest) holds no live seq
        live_chunks = {seq >> chunk_bits for seq in model}
        assert len(live_chunks) <= columns.chunk_count() <= len(live_chunks) + 1


def test_a_work_queue_reuses_its_newest_chunk() -> None:
    """Every message removed right after it is stored: no chunk is created per message."""
    columns = MetaColumns(4)
    for seq in range(1, 200):
        columns.put(seq, "q", seq, 1, seq)
        assert columns.pop(seq) == ("q", seq, 1, seq)
        assert columns.chunk_count() == 1
    assert columns.get(199) is None and 199 not in columns
