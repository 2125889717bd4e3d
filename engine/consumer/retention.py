"""Interest and work-queue retention: which stream seqs no consumer wants any more.

With ``interest`` retention a message stays while some consumer whose filter matches it still
needs it (nats-server stream.go noInterest / consumer.go needAck): not yet delivered, delivered
and not acked, or past max_deliver. A message no consumer matches is not wanted at all (nats-server
does not even store it). With ``workqueue`` retention a message stays until the consumer that
matches it (filters do not overlap there) has acked it; one no consumer matches stays.
``limits`` retention removes nothing here.

The answer is a function of the consumers' state and the stream at one log position, so the
stream can remove these seqs in the same apply on every replica: no separate delete proposal,
no race between an ack and a new consumer. Callers pass the ``released`` ranges of apply results
as candidates.

Must never: mutate consumers or the stream.
"""

from __future__ import annotations

from collections.abc import Iterable

from engine.consumer.consumer import Consumer
from engine.consumer.messages import StreamMessages
from engine.consumer.results import SeqRange


def removable_seqs(
    retention: str,
    consumers: Iterable[Consumer],
    stream: StreamMessages,
    candidates: Iterable[SeqRange],
) -> list[int]:
    """The live seqs among ``candidates`` that every interested consumer is done with,
    ascending (for ``retention`` "interest" or "workqueue"; "limits": none)."""
    if retention not in ("interest", "workqueue"):
        return []
    group = list(consumers)
    out: set[int] = set()
    for first, last in candidates:
        lo = max(first, stream.first_seq, 1)
        for seq in range(lo, min(last, stream.last_seq) + 1):
            subject = stream.subject_of(seq)
            if subject is not None and _done_with(retention, group, seq, subject):
                out.add(seq)
    return sorted(out)


def _done_with(retention: str, consumers: list[Consumer], seq: int, subject: str) -> bool:
    interested = [c for c in consumers if c.sees(subject)]
    if retention == "workqueue" and not interested:
        return False
    return not any(c.needs_ack(seq) for c in interested)
