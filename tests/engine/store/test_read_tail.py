"""The read tail on its own: it serves exactly the bytes written, the newest ones, within budget."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from engine.read_tail import READ_TAIL_CHUNKS_MIN, READ_TAIL_MERGE_BYTES_MAX, ReadTail


def _record(tail: ReadTail, offset: int, length: int) -> bytes | None:
    held = tail.locate(offset, length)
    return None if held is None else bytes(held[0][held[1] : held[1] + length])


# a flush is a list of whole records (sizes); a patch overwrites part of one written record
_FLUSHES = st.lists(st.lists(st.integers(1, 300), min_size=1, max_size=6), max_size=40)


def _written(tail: ReadTail, flushes: list[list[int]]) -> tuple[bytearray, list[tuple[int, int]]]:
    """Feed ``flushes`` to ``tail``; the bytes written and each record's (offset, length)."""
    written = bytearray()
    spans: list[tuple[int, int]] = []
    for flush in flushes:
        buf = bytearray()
        for size in flush:
            spans.append((len(written) + len(buf), size))
            buf += bytes([len(spans) % 251]) * size
        start = len(written)
        written += buf
        tail.add(start, buf)
    return written, spans


@given(_FLUSHES, st.integers(0, 4000))
def test_it_serves_the_written_bytes_of_a_suffix_of_the_records_within_its_budget(
    flushes: list[list[int]], budget: int
) -> None:
    tail = ReadTail(budget)
    written, spans = _written(tail, flushes)
    assert tail.held_bytes <= budget
    held = [_record(tail, offset, size) for offset, size in spans]
    for (offset, size), got in zip(spans, held, strict=True):
        assert got is None or got == written[offset : offset + size]
    first_held = next((i for i, got in enumerate(held) if got is not None), len(held))
    assert all(got is not None for got in held[first_held:])  # a suffix, no holes
    assert sum(size for _offset, size in spans[first_held:]) == tail.held_bytes
    if flushes and sum(flushes[-1]) <= budget:
        assert first_held <= len(spans) - len(flushes[-1])  # the last flush is always held


@given(_FLUSHES, st.data())
def test_a_patch_changes_exactly_the_patched_bytes(
    flushes: list[list[int]], data: st.DataObject
) -> None:
    tail = ReadTail(2000)
    written, spans = _written(tail, flushes)
    if not spans:
        return
    offset, size = data.draw(st.sampled_from(spans))
    at = data.draw(st.integers(0, size - 1))
    patch = b"\x00" * data.draw(st.integers(1, size - at))
    tail.patch(offset + at, patch)
    written[offset + at : offset + at + len(patch)] = patch
    for start, length in spans:
        got = _record(tail, start, length)
        assert got is None or got == written[start : start + length]


def test_small_flushes_share_a_chunk_and_the_oldest_chunk_goes_first() -> None:
    budget = READ_TAIL_CHUNKS_MIN * READ_TAIL_MERGE_BYTES_MAX
    tail = ReadTail(budget)
    record = 1024
    offset = 0
    for _ in range(budget // record + 1):  # one record past the budget
        tail.add(offset, bytearray(record))
        offset += record
    # the records filled chunks of READ_TAIL_MERGE_BYTES_MAX; the oldest whole chunk went
    assert tail.held_bytes == budget + record - READ_TAIL_MERGE_BYTES_MAX
    assert _record(tail, READ_TAIL_MERGE_BYTES_MAX - record, record) is None
    assert _record(tail, READ_TAIL_MERGE_BYTES_MAX, record) == bytes(record)


def test_a_flush_over_the_whole_budget_empties_it() -> None:
    tail = ReadTail(100)
    tail.add(0, bytearray(b"a" * 60))
    tail.add(60, bytearray(b"b" * 101))
    assert tail.held_bytes == 0 and _record(tail, 0, 60) is None
    tail.add(161, bytearray(b"c" * 10))  # and it goes on from there
    assert _record(tail, 161, 10) == b"c" * 10
