"""Subject filters of a consumer, and the counts and lookups that depend on them.

A consumer with no filter sees every message of its stream; one with ``filter_subject`` or
``filter_subjects`` sees the messages whose subject matches any of them (nats-server
isFilteredMatch). The lookups use the stream's subject index through the ``StreamMessages``
view (next matching seq, count from a seq), so their cost follows the matching messages, not the
seq range.

Must never: mutate the stream view.
"""

from __future__ import annotations

from collections.abc import Iterator

from engine.consumer.messages import StreamMessages
from protocol.subjects import subject_matches


def matches(filters: tuple[str, ...], subject: str) -> bool:
    """Is a message on ``subject`` one the consumer with these filters sees?"""
    return not filters or any(subject_matches(f, subject) for f in filters)


def matching_seqs(
    stream: StreamMessages, filters: tuple[str, ...], start_seq: int, end_seq: int | None = None
) -> Iterator[int]:
    """Live seqs in [start_seq, end_seq] (end default: last_seq) the filters match, ascending.
    Each step is one index lookup per filter: the cost follows the matches, not the seq range."""
    last = stream.last_seq if end_seq is None else min(end_seq, stream.last_seq)
    heads = {f: stream.next_seq(max(start_seq, 1), f) for f in (filters or ("",))}
    while True:
        live = [seq for seq in heads.values() if seq is not None and seq <= last]
        if not live:
            return
        seq = min(live)
        yield seq
        for f, head in heads.items():
            if head == seq:
                heads[f] = stream.next_seq(seq + 1, f)


def count_matching(stream: StreamMessages, filters: tuple[str, ...], start_seq: int) -> int:
    """Number of live messages with seq >= start_seq that the filters match."""
    if len(filters) <= 1:
        return stream.count_from(max(start_seq, 1), filters[0] if filters else "")
    # filters may overlap (the API refuses that, the engine does not rely on it): walk them
    return sum(1 for _ in matching_seqs(stream, filters, start_seq))


def last_matching(stream: StreamMessages, filters: tuple[str, ...]) -> int:
    """Seq of the last live message the filters match; 0 when there is none."""
    for seq in range(stream.last_seq, max(stream.first_seq, 1) - 1, -1):
        subject = stream.subject_of(seq)
        if subject is not None and matches(filters, subject):
            return seq
    return 0


def last_per_subject(stream: StreamMessages, filters: tuple[str, ...]) -> list[int]:
    """The seq of the last live message of every subject the filters match, ascending
    (nats-server MultiLastSeqs)."""
    last: dict[str, int] = {}
    for seq in matching_seqs(stream, filters, 1):
        subject = stream.subject_of(seq)
        if subject is not None:
            last[subject] = seq
    return sorted(last.values())
