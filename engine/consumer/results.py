"""What applying a consumer entry returns: for the leader to answer clients and send messages,
for advisories, and for the stream's interest / work-queue removal.

Must never: hold references into the live state (every value here is immutable).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, NamedTuple

from engine.consumer.config import ConsumerConfig
from engine.consumer.entries import Ack

# Why a create or update was refused; the API layer maps these to nats-server's error codes
# (10148 consumer already exists, 10149 consumer does not exist, 10012 / 10013 otherwise).
REFUSED_EXISTS: Final = "consumer already exists"
REFUSED_NOT_FOUND: Final = "consumer does not exist"
REFUSED_CONFIG: Final = "invalid consumer config"
REFUSED_UPDATE: Final = "consumer update not allowed"

# The TERM reason nats-server gives when a pending message left the stream before it was acked.
GONE_REASON: Final = "Unacknowledged message was deleted"


class SeqPair(NamedTuple):
    """A (consumer seq, stream seq) position: ``delivered`` and ``ack_floor`` in ConsumerInfo."""

    consumer_seq: int
    stream_seq: int


class SeqRange(NamedTuple):
    """Stream seqs ``first..last`` inclusive."""

    first: int
    last: int


@dataclass(frozen=True, slots=True)
class Refusal:
    """A create, update or delete that changed nothing."""

    reason: str  # one of REFUSED_*
    description: str


@dataclass(frozen=True, slots=True)
class CreateResult:
    name: str
    created: bool  # False: an update, or a create with the identical config (a no-op)
    config: ConsumerConfig


@dataclass(frozen=True, slots=True)
class DeleteResult:
    name: str
    # stream seqs the consumer was still interested in (candidates for interest removal)
    released: tuple[SeqRange, ...]


class Delivery(NamedTuple):
    """One accepted delivery: what the ack reply subject carries."""

    stream_seq: int
    consumer_seq: int
    deliveries: int  # 1 for a first delivery


@dataclass(frozen=True, slots=True)
class DeliverResult:
    consumer: str
    delivered: tuple[Delivery, ...]
    # seqs apply would not deliver (acked meanwhile, past max_deliver or max_ack_pending, not a
    # message the consumer sees, not after its position): the leader does not send them
    refused: tuple[int, ...]
    # pending seqs whose message left the stream: dropped from pending (TERM with GONE_REASON)
    gone: tuple[int, ...]
    released: tuple[SeqRange, ...]


@dataclass(frozen=True, slots=True)
class AckResult:
    applied: tuple[Ack, ...]  # acks that changed state, in entry order
    ignored: tuple[Ack, ...]  # unknown consumer, not pending, past delivered, duplicates
    terminated: tuple[Ack, ...]  # applied TERMs (each is worth an advisory)
    released: tuple[SeqRange, ...]


class Exhausted(NamedTuple):
    """A message that reached max_deliver without an ack: no more deliveries (an advisory)."""

    stream_seq: int
    deliveries: int


@dataclass(frozen=True, slots=True)
class TimeoutResult:
    consumer: str
    exhausted: tuple[Exhausted, ...]
    gone: tuple[int, ...]
    released: tuple[SeqRange, ...]


@dataclass(frozen=True, slots=True)
class RedeliveryPlan:
    """What the leader's redelivery timer finds due at a time (``Consumer.redelivery_due``)."""

    redeliver: tuple[int, ...]  # due, may be delivered again: the leader's redelivery queue
    exhausted: tuple[int, ...]  # due at max_deliver: propose an AckTimeoutEntry


@dataclass(frozen=True, slots=True)
class ResetResult:
    """A consumer reset: it delivers again from ``seq``."""

    name: str
    seq: int


ApplyResult = (
    CreateResult
    | DeleteResult
    | DeliverResult
    | AckResult
    | TimeoutResult
    | ResetResult
    | Refusal
    | None
)


def merge_ranges(ranges: list[SeqRange]) -> tuple[SeqRange, ...]:
    """Sorted, with overlapping and adjacent ranges joined."""
    out: list[SeqRange] = []
    for first, last in sorted(ranges):
        if out and first <= out[-1].last + 1:
            if last > out[-1].last:
                out[-1] = SeqRange(out[-1].first, last)
        else:
            out.append(SeqRange(first, last))
    return tuple(out)
