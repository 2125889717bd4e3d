"""The stream index against brute force, at sizes that reach its slow paths: wildcard lookups
past the neighbour probe, subjects that outgrow a plain list, and trie pruning."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.index import SUBJECT_LIST_SMALL_MAX, WILDCARD_PROBE_MSGS, StreamIndex, SubjectTrie
from protocol.subjects import subject_matches

TOKENS = ["a", "b", "c", "dd"]
SUBJECT = st.lists(st.sampled_from(TOKENS), min_size=1, max_size=3).map(".".join)
FILTER = st.lists(st.sampled_from([*TOKENS, "*"]), min_size=1, max_size=3).flatmap(
    lambda toks: st.sampled_from([".".join(toks), ".".join([*toks, ">"])])
)


def _match(f: str, subject: str) -> bool:
    return f in ("", ">") or subject_matches(f, subject)


def _build(subjects: list[str], removed: set[int]) -> tuple[StreamIndex, dict[int, str]]:
    idx = StreamIndex()
    live: dict[int, str] = {}
    for i, subject in enumerate(subjects):
        seq = i * 2 + 1  # gaps between seqs, as after deletes
        idx.add(seq, subject, ts_ns=seq // 7, size_bytes=len(subject), digest=seq)
        live[seq] = subject
    for seq in sorted(removed):
        if seq in live:
            assert idx.remove(seq) is not None
            del live[seq]
        else:
            assert idx.remove(seq) is None
    return idx, live


@settings(max_examples=150, deadline=None)
@given(
    st.lists(SUBJECT, max_size=150),
    st.sets(st.integers(0, 300), max_size=120),
    st.lists(FILTER, min_size=1, max_size=4),
    st.lists(st.integers(0, 310), min_size=1, max_size=4),
)
def test_queries_equal_brute_force(
    subjects: list[str], removed: set[int], filters: list[str], points: list[int]
) -> None:
    idx, live = _build(subjects, removed)
    seqs = sorted(live)
    assert len(idx) == len(seqs)
    assert idx.first_seq == (seqs[0] if seqs else 0)
    assert idx.bytes_total == sum(len(s) for s in live.values())
    for f in [*filters, "", ">"]:
        matching = [s for s in seqs if _match(f, live[s])]
        for p in points:
            assert idx.next_seq(p, f) == next((s for s in matching if s >= p), None), (f, p)
            below = [s for s in matching if s <= p]
            assert idx.last_seq(f, p) == (below[-1] if below else None), (f, p)
            assert idx.count(p, f) == sum(1 for s in matching if s >= p)
        assert idx.last_seq(f) == (matching[-1] if matching else None)
        counts: dict[str, int] = {}
        for s in matching:
            counts[live[s]] = counts.get(live[s], 0) + 1
        assert idx.subjects_state(f) == counts
    for p in points:
        ts = p // 7
        assert idx.seq_for_time(ts) == next((s for s in seqs if s // 7 >= ts), None)
        last_per_subject: dict[str, int] = {}
        for s in seqs:
            if s <= p and any(_match(f, live[s]) for f in filters):
                last_per_subject[live[s]] = s
        expected = sorted(last_per_subject.values())
        assert idx.multi_last(filters, p, 0) == expected
        limit = max(1, len(expected) - 1)
        assert idx.multi_last(filters, p, limit) == (None if len(expected) > limit else expected)


def test_selective_wildcard_beyond_the_probe_window() -> None:
    idx = StreamIndex()
    noise = WILDCARD_PROBE_MSGS * 4
    for seq in range(1, noise + 1):
        idx.add(seq, f"noise.{seq % 5}", 0, 1, 0)
    idx.add(noise + 1, "rare.x", 0, 1, 0)
    for seq in range(noise + 2, 2 * noise):
        idx.add(seq, f"noise.{seq % 5}", 0, 1, 0)
    assert idx.next_seq(1, "rare.*") == noise + 1
    assert idx.last_seq("rare.>") == noise + 1
    assert idx.next_seq(noise + 2, "rare.*") is None
    assert idx.last_seq("rare.*", noise) is None
    assert idx.count(0, "rare.*") == 1


def test_a_subject_outgrows_its_plain_list() -> None:
    idx = StreamIndex()
    total = SUBJECT_LIST_SMALL_MAX * 3
    for seq in range(1, total + 1):
        idx.add(seq, "big" if seq % 3 else "small", 0, 1, 0)
    big = [s for s in range(1, total + 1) if s % 3]
    assert idx.subject_seqs("big") == big
    for seq in big[:10] + big[50:60]:
        assert idx.remove(seq) is not None
    remaining = big[10:50] + big[60:]
    assert idx.subject_seqs("big") == remaining
    assert idx.subject_first_seq("big") == remaining[0]
    assert idx.next_seq(big[55], "big") == big[60]
    assert idx.last_seq("big", big[55]) == big[49]
    assert idx.count(big[55], "big") == len(big[60:])
    for seq in remaining:
        idx.remove(seq)
    assert idx.subject_count("big") == 0
    assert idx.matching_subjects(">") == ["small"]


@settings(max_examples=150)
@given(st.sets(SUBJECT, max_size=25), st.data())
def test_trie_matches_like_subject_matches(subjects: set[str], data: st.DataObject) -> None:
    trie = SubjectTrie()
    for s in subjects:
        trie.insert(s)
    removed = data.draw(st.sets(st.sampled_from(sorted(subjects)))) if subjects else set()
    for s in removed:
        trie.remove(s)
    trie.remove("not.there.at.all")
    live = subjects - removed
    for f in data.draw(st.lists(FILTER, min_size=1, max_size=5)):
        assert sorted(trie.match(f)) == sorted(s for s in live if subject_matches(f, s)), f
    for s in removed:
        trie.insert(s)
    assert sorted(trie.match(">")) == sorted(subjects)
