"""All consumers of one stream, changed only by ``apply(index, entry, stream)``.

``state_n = apply(state_{n-1}, entry_n)``: the entries are consumer entries of the stream's log
(``entries.py``), ``stream`` is the stream as it stands at the same log position, and nothing
else is read: no clock, no randomness. Replicas that apply the same entries therefore hold the
same consumers and report the same ``digest()``; ``to_json`` / ``from_json`` carry that state in
a snapshot.

Must never: change state outside ``apply``, or let an entry from the log raise anything but an
``AssertionError`` on a broken internal invariant (bad input is refused or ignored, in the
result).
"""

from __future__ import annotations

from collections.abc import Iterator

from engine.consumer.config import (
    ConsumerConfigError,
    check_consumer_name,
    parse_config,
    update_refusal,
)
from engine.consumer.consumer import Consumer
from engine.consumer.digest import consumers_digest
from engine.consumer.entries import (
    Ack,
    AckEntry,
    AckKind,
    AckTimeoutEntry,
    ConsumerEntry,
    CreateAction,
    CreateConsumerEntry,
    DeleteConsumerEntry,
    DeliverEntry,
    ResetConsumerEntry,
)
from engine.consumer.messages import StreamMessages
from engine.consumer.results import (
    REFUSED_CONFIG,
    REFUSED_EXISTS,
    REFUSED_NOT_FOUND,
    REFUSED_UPDATE,
    AckResult,
    ApplyResult,
    CreateResult,
    DeleteResult,
    DeliverResult,
    Refusal,
    ResetResult,
    SeqRange,
    TimeoutResult,
    merge_ranges,
)
from engine.consumer.snapshot import parse_snapshot, snapshot_bytes
from engine.consumer.start import starting_position
from protocol.stream_config import subject_is_subset_match


class ConsumerSet:
    """The consumers of one stream."""

    def __init__(self) -> None:
        self._consumers: dict[str, Consumer] = {}
        self._applied_index = 0

    # ================================================================== queries

    @property
    def applied_index(self) -> int:
        """The log index of the last consumer entry applied."""
        return self._applied_index

    def get(self, name: str) -> Consumer | None:
        return self._consumers.get(name)

    def names(self) -> list[str]:
        return sorted(self._consumers)

    def __len__(self) -> int:
        return len(self._consumers)

    def __iter__(self) -> Iterator[Consumer]:
        """The consumers in name order."""
        return iter([self._consumers[name] for name in sorted(self._consumers)])

    def digest(self) -> bytes:
        return consumers_digest(self.to_json())

    def to_json(self) -> bytes:
        return snapshot_bytes(self._applied_index, list(self._consumers.values()))

    @classmethod
    def from_json(cls, raw: bytes) -> ConsumerSet:
        """The set a snapshot describes; raises ConsumerSnapshotError (a ValueError)."""
        applied, consumers = parse_snapshot(raw)
        out = cls()
        out._applied_index = applied
        out._consumers = {c.name: c for c in consumers}
        return out

    # ================================================================== apply

    def apply(self, index: int, entry: ConsumerEntry, stream: StreamMessages) -> ApplyResult:
        """Apply one committed consumer entry at log ``index``."""
        if not index > self._applied_index:
            raise AssertionError(f"apply index {index} not after {self._applied_index}")
        self._applied_index = index
        if isinstance(entry, CreateConsumerEntry):
            return self._create(entry, stream)
        if isinstance(entry, DeleteConsumerEntry):
            return self._delete(entry, stream)
        if isinstance(entry, DeliverEntry):
            return self._deliver(entry, stream)
        if isinstance(entry, AckEntry):
            return self._acks(entry)
        if isinstance(entry, AckTimeoutEntry):
            return self._timeout(entry, stream)
        if isinstance(entry, ResetConsumerEntry):
            consumer = self._consumers.get(entry.consumer)
            if consumer is None:
                return Refusal(REFUSED_NOT_FOUND, REFUSED_NOT_FOUND)
            return ResetResult(entry.consumer, consumer.apply_reset(entry.seq))
        raise TypeError(f"not a consumer entry: {type(entry).__name__}")

    def stream_purged(self, subject_filter: str, stream: StreamMessages) -> None:
        """After a purge of the stream (part of the purge's apply): move the consumers it
        concerns past what is gone, as nats-server's stream purge does."""
        first, last = stream.first_seq, stream.last_seq
        start = first
        if subject_filter:
            start = stream.next_seq(first, subject_filter) or 0
        for consumer in self:
            filters = consumer.config.filters
            concerned = not subject_filter or any(
                subject_is_subset_match(f, subject_filter) for f in filters
            )
            wider = False
            if not concerned and subject_filter:
                if not filters or any(subject_is_subset_match(subject_filter, f) for f in filters):
                    concerned, wider = True, True
            if concerned:
                consumer.apply_purge(first if wider else start, last, wider, stream)

    def _create(self, entry: CreateConsumerEntry, stream: StreamMessages) -> CreateResult | Refusal:
        try:
            check_consumer_name(entry.name)
            config = parse_config(entry.config_json)
        except ConsumerConfigError as exc:
            return Refusal(REFUSED_CONFIG, str(exc))
        for named in (config.name, config.durable_name):
            if named and named != entry.name:
                return Refusal(REFUSED_CONFIG, "consumer name does not match the config")
        existing = self._consumers.get(entry.name)
        if existing is None:
            if entry.action == CreateAction.UPDATE:
                return Refusal(REFUSED_NOT_FOUND, REFUSED_NOT_FOUND)
            start = starting_position(config, stream)
            self._consumers[entry.name] = Consumer.create(entry.name, config, entry.ts_ns, start)
            return CreateResult(entry.name, True, config)
        if existing.config == config:
            return CreateResult(entry.name, False, config)
        if entry.action == CreateAction.CREATE:
            return Refusal(REFUSED_EXISTS, REFUSED_EXISTS)
        refusal = update_refusal(existing.config, config)
        if refusal is not None:
            return Refusal(REFUSED_UPDATE, refusal)
        existing.apply_config(config)
        return CreateResult(entry.name, False, config)

    def _delete(self, entry: DeleteConsumerEntry, stream: StreamMessages) -> DeleteResult | Refusal:
        consumer = self._consumers.pop(entry.name, None)
        if consumer is None:
            return Refusal(REFUSED_NOT_FOUND, REFUSED_NOT_FOUND)
        # everything it may have held on to: above its floor, and what it kept past max_deliver
        ranges = [SeqRange(seq, seq) for seq in consumer.redelivered]
        if stream.last_seq > consumer.ack_floor.stream_seq:
            ranges.append(SeqRange(consumer.ack_floor.stream_seq + 1, stream.last_seq))
        return DeleteResult(entry.name, merge_ranges(ranges))

    def _deliver(self, entry: DeliverEntry, stream: StreamMessages) -> DeliverResult:
        consumer = self._consumers.get(entry.consumer)
        if consumer is None:
            return DeliverResult(entry.consumer, (), entry.stream_seqs, (), ())
        return consumer.apply_deliver(entry, stream)

    def _acks(self, entry: AckEntry) -> AckResult:
        applied: list[Ack] = []
        ignored: list[Ack] = []
        terminated: list[Ack] = []
        released: list[SeqRange] = []
        for ack in entry.acks:
            consumer = self._consumers.get(ack.consumer)
            outcome = consumer.apply_ack(ack, entry.ts_ns) if consumer is not None else None
            if outcome is None or not outcome.applied:
                ignored.append(ack)
                continue
            applied.append(ack)
            released += outcome.released
            if ack.kind == AckKind.TERM:
                terminated.append(ack)
        return AckResult(tuple(applied), tuple(ignored), tuple(terminated), merge_ranges(released))

    def _timeout(self, entry: AckTimeoutEntry, stream: StreamMessages) -> TimeoutResult:
        consumer = self._consumers.get(entry.consumer)
        if consumer is None:
            return TimeoutResult(entry.consumer, (), (), ())
        return consumer.apply_timeout(entry.ts_ns, stream)
