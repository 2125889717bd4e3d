"""A leader reuses the entries it proposed only for the very bytes it proposed them as."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cluster.proposed_entries import ProposedEntries
from engine.entries import InboundMsg, PublishEntry, decode_entry, encode_entry


def _entry(n: int) -> PublishEntry:
    return PublishEntry(1_000 + n, (InboundMsg(f"s.{n}", b"", b"x" * n),))


def test_a_match_is_taken_once_and_drops_older_proposals() -> None:
    kept = ProposedEntries(8)
    entries = [_entry(n) for n in range(4)]
    for entry in entries:
        kept.add(encode_entry(entry), entry)
    assert kept.take(encode_entry(entries[2])) is entries[2]
    assert len(kept) == 1  # 0 and 1 were lost to a change of leader
    assert kept.take(encode_entry(entries[2])) is None
    assert kept.take(encode_entry(entries[0])) is None
    assert kept.take(encode_entry(entries[3])) is entries[3]
    assert len(kept) == 0


def test_other_bytes_find_nothing_and_keep_everything() -> None:
    kept = ProposedEntries(8)
    mine = _entry(1)
    kept.add(encode_entry(mine), mine)
    assert kept.take(encode_entry(_entry(2))) is None
    assert kept.take(b"") is None
    assert len(kept) == 1


def test_cleared_entries_are_not_reused() -> None:
    kept = ProposedEntries(8)
    mine = _entry(1)
    kept.add(encode_entry(mine), mine)
    kept.clear()
    assert len(kept) == 0 and kept.take(encode_entry(mine)) is None


def test_bounded() -> None:
    kept = ProposedEntries(3)
    entries = [_entry(n) for n in range(5)]
    for entry in entries:
        kept.add(encode_entry(entry), entry)
    assert len(kept) == 3
    assert kept.take(encode_entry(entries[1])) is None  # forgotten
    assert kept.take(encode_entry(entries[4])) is entries[4]


@given(st.lists(st.tuples(st.text(min_size=1, max_size=8), st.binary(max_size=8)), max_size=5))
def test_what_is_taken_equals_what_the_bytes_decode_to(msgs: list[tuple[str, bytes]]) -> None:
    entry = PublishEntry(7, tuple(InboundMsg(s, b"", d) for s, d in msgs))
    kept = ProposedEntries(4)
    raw = encode_entry(entry)
    kept.add(raw, entry)
    assert kept.take(bytes(raw)) == decode_entry(raw)
