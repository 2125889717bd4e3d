"""SeqList against a plain sorted list, with chunks small enough that a few dozen values span
many of them (appends, removals anywhere, merges of thinned chunks, every lookup)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.seqlist import SeqList

SMALL_CHUNK = 4

# an operation: ("append", gap above the maximum) or ("remove", value to remove)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 3)),
        st.tuples(st.just("remove"), st.integers(0, 120)),
    ),
    max_size=200,
)


def _lookups_agree(seqs: SeqList, model: list[int], points: list[int]) -> None:
    assert len(seqs) == len(model) and bool(seqs) == bool(model)
    assert list(seqs) == model
    assert seqs.first == (model[0] if model else 0)
    assert seqs.last == (model[-1] if model else 0)
    for p in points:
        assert (p in seqs) == (p in model)
        assert seqs.ceiling(p) == next((v for v in model if v >= p), None), p
        below = [v for v in model if v <= p]
        assert seqs.floor(p) == (below[-1] if below else None), p
        assert seqs.count_from(p) == sum(1 for v in model if v >= p), p
        for q in points:
            inside = [v for v in model if p <= v <= q]
            assert list(seqs.irange(p, q)) == inside, (p, q)
            assert list(seqs.irange(p, q, reverse=True)) == inside[::-1], (p, q)
        assert list(seqs.irange(minimum=p)) == [v for v in model if v >= p]
        assert list(seqs.irange(maximum=p, reverse=True)) == below[::-1]


@settings(max_examples=300, deadline=None)
@given(
    OPS,
    st.lists(st.integers(-1, 125), min_size=1, max_size=6),
    st.sampled_from([SMALL_CHUNK, 8, 16]),  # 8 and 16: thinned chunks merge (below 2 and 4)
)
def test_matches_a_sorted_list(
    ops: list[tuple[str, int]], points: list[int], chunk_len_max: int
) -> None:
    seqs = SeqList(chunk_len_max=chunk_len_max)
    model: list[int] = []
    for op, n in ops:
        if op == "append":
            value = (model[-1] if model else 0) + n
            seqs.append(value)
            model.append(value)
        elif n in model:
            seqs.remove(n)
            model.remove(n)
        else:
            with pytest.raises(ValueError):
                seqs.remove(n)
        seqs.check_invariants()
    _lookups_agree(seqs, model, points)


def test_append_must_go_above_the_maximum() -> None:
    seqs = SeqList([1, 5, 9], chunk_len_max=SMALL_CHUNK)
    for value in (9, 3):
        with pytest.raises(AssertionError):
            seqs.append(value)
    assert list(seqs) == [1, 5, 9]
    with pytest.raises(AssertionError):
        SeqList([2, 2])


def test_thinned_chunks_merge() -> None:
    """Removing seven of every eight values leaves 50 of 400: thinned chunks fold into their
    neighbours (about 50 / 8 chunks of 8), not one chunk per pair of survivors."""
    seqs = SeqList(range(1, 401), chunk_len_max=8)
    for value in range(1, 401):
        if value % 8:
            seqs.remove(value)
    seqs.check_invariants()
    assert list(seqs) == list(range(8, 401, 8))
    assert len(seqs.chunks()) <= 50 // 8 + 1


def test_clear() -> None:
    seqs = SeqList(range(1, 20), chunk_len_max=SMALL_CHUNK)
    seqs.clear()
    assert not seqs and list(seqs) == [] and seqs.first == 0 and seqs.ceiling(0) is None
    seqs.append(7)
    assert list(seqs) == [7]
