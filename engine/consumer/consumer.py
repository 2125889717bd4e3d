"""One consumer's deterministic state machine: deliveries, acks, redelivery, its ack floor.

The replicated state is nats-server's ConsumerState: ``delivered`` and ``ack_floor`` (each a
consumer seq and a stream seq), ``pending`` (stream seq -> consumer seq of the first delivery and
time of the last one) and ``redelivered`` (stream seq -> how many times it was redelivered; it
also keeps the messages that reached max_deliver). Pull requests and the redelivery queue are the
leader's own business and are not here.

Rules, as nats-server applies them (consumer.go processAckMsg / processNak / processTerm /
checkPending / getNextMsg, memstore.go consumerMemStore.UpdateDelivered / UpdateAcks):

* a first delivery takes the next consumer seq and must come after the consumer's position;
  with ``max_ack_pending`` reached, no first delivery is accepted (redeliveries still are);
* a redelivery takes a new consumer seq too, but the pending record keeps the first one;
  ``deliveries`` = 1 + redelivered count; past ``max_deliver`` it is refused;
* ack ``none``: delivering is acknowledging, the ack floor follows ``delivered``;
* ack ``explicit``: +ACK and +TERM remove one message from pending; the ack floor moves when
  the lowest pending message is acked (to just below the next pending one), and to
  ``delivered`` when nothing is pending;
* ack ``all``: +ACK (and +TERM) of seq S acknowledges every pending message up to S; the floor
  becomes (its consumer seq, S);
* -NAK makes the message due for redelivery now, or after its delay; +WPI restarts its ack
  timer; a message is due ``ack_wait`` (or its backoff step) after its pending timestamp;
* an ack-timeout entry at time T drops the messages due at T that reached ``max_deliver`` (they
  stay in ``redelivered``, so an interest stream keeps them) and pending messages that left the
  stream.

Where nats-server's behaviour is unclear or racy, this module picks one rule and says so: a NAK
delay is measured from the NAK with the message's current wait (ack_wait or backoff step); an
ack-all also forgets the redelivery counts of every seq up to the acked one.

Must never: read clocks, use randomness, or change state outside the ``apply_*`` methods.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

from engine.consumer.config import ConsumerConfig
from engine.consumer.entries import Ack, AckKind, DeliverEntry
from engine.consumer.filters import count_matching, matches, matching_seqs
from engine.consumer.messages import StreamMessages
from engine.consumer.pending import Pending, PendingSet
from engine.consumer.results import (
    DeliverResult,
    Delivery,
    Exhausted,
    RedeliveryPlan,
    SeqPair,
    SeqRange,
    TimeoutResult,
    merge_ranges,
)
from engine.consumer.start import StartPosition
from engine.consumer.timers import deadline_ns, timestamp_due_at


@dataclass(frozen=True, slots=True)
class AckOutcome:
    """What one ack did: whether it changed anything, and which stream seqs it released."""

    applied: bool
    released: tuple[SeqRange, ...] = ()


_IGNORED = AckOutcome(False)


class Consumer:
    """One consumer of a stream. Build with ``Consumer.create`` or ``Consumer.restore``."""

    def __init__(self, name: str, config: ConsumerConfig, created_ns: int) -> None:
        self.name = name
        self._config = config
        self.created_ns = created_ns
        self.delivered = SeqPair(0, 0)
        self.ack_floor = SeqPair(0, 0)
        self.pending = PendingSet()
        self.redelivered: dict[int, int] = {}
        # deliver policy last_per_subject: the seqs to deliver first (ascending), the position in
        # that list, and the stream's last seq at creation, above which delivery then resumes
        self._skip: list[int] = []
        self._skip_pos = 0
        self.resume_seq = 0
        # when the last delivery and the last applied ack happened (ConsumerInfo last_active)
        self.delivered_active_ns = 0
        self.acked_active_ns = 0

    @classmethod
    def create(
        cls, name: str, config: ConsumerConfig, created_ns: int, start: StartPosition
    ) -> Consumer:
        consumer = cls(name, config, created_ns)
        consumer.delivered = consumer.ack_floor = SeqPair(0, start.start_seq - 1)
        consumer._skip = list(start.skip_seqs)
        consumer.resume_seq = start.resume_seq
        return consumer

    @classmethod
    def restore(
        cls,
        name: str,
        config: ConsumerConfig,
        created_ns: int,
        *,
        delivered: SeqPair,
        ack_floor: SeqPair,
        pending: list[tuple[int, Pending]],
        redelivered: dict[int, int],
        skip_seqs: list[int],
        resume_seq: int,
        active: tuple[int, ...] = (0, 0),
    ) -> Consumer:
        """A consumer from a snapshot (deadlines are derived, never stored)."""
        consumer = cls(name, config, created_ns)
        consumer.delivered, consumer.ack_floor = delivered, ack_floor
        consumer.redelivered = dict(redelivered)
        for seq, record in pending:
            consumer._put_pending(seq, record)
        consumer._skip = list(skip_seqs)
        consumer.resume_seq = resume_seq
        consumer.delivered_active_ns, consumer.acked_active_ns = active
        return consumer

    # ================================================================== queries

    @property
    def config(self) -> ConsumerConfig:
        return self._config

    @property
    def skip_seqs(self) -> list[int]:
        """The last_per_subject seqs still to deliver first (empty once done)."""
        return self._skip[self._skip_pos :]

    @property
    def num_redelivered(self) -> int:
        """ConsumerInfo num_redelivered (nats-server: the size of the redelivered map)."""
        return len(self.redelivered)

    @property
    def num_ack_pending(self) -> int:
        return len(self.pending)

    def deliveries(self, seq: int) -> int:
        """How many times ``seq`` was delivered, if it was (1 + its redelivered count)."""
        return 1 + self.redelivered.get(seq, 0)

    def next_stream_seq(self) -> int:
        """The stream seq from which first deliveries continue."""
        if self._skip_pos < len(self._skip):
            return self._skip[self._skip_pos]
        return self.delivered.stream_seq + 1

    def num_pending(self, stream: StreamMessages) -> int:
        """ConsumerInfo num_pending: messages the consumer sees that it has not delivered yet."""
        filters = self._config.filters
        skipped = self.skip_seqs
        if skipped:
            live = sum(1 for seq in skipped if stream.subject_of(seq) is not None)
            return live + count_matching(stream, filters, self.resume_seq + 1)
        return count_matching(stream, filters, self.delivered.stream_seq + 1)

    def ack_pending_room(self) -> int | None:
        """How many more first deliveries max_ack_pending allows now; None: no limit."""
        limit = self._config.max_ack_pending
        if not self._config.acks_needed or limit <= 0:
            return None
        return max(0, limit - len(self.pending))

    def may_deliver(self) -> bool:
        """May the leader propose first deliveries now (max_ack_pending not reached)?"""
        return self.ack_pending_room() != 0

    def next_new_seqs(self, stream: StreamMessages, limit: int) -> list[int]:
        """The next stream seqs (at most ``limit``, and at most what max_ack_pending allows) the
        leader would deliver for the first time, in order."""
        room = self.ack_pending_room()
        if room is not None:
            limit = min(limit, room)
        out: list[int] = []
        for seq in self.skip_seqs:
            if len(out) >= limit:
                return out
            if stream.subject_of(seq) is not None:
                out.append(seq)
        start = self.resume_seq + 1 if self.skip_seqs else self.delivered.stream_seq + 1
        for seq in matching_seqs(stream, self._config.filters, start):
            if len(out) >= limit:
                break
            out.append(seq)
        return out

    def next_redelivery_ns(self) -> int | None:
        """The earliest redelivery deadline (for the leader's timer); None when nothing pends."""
        return self.pending.next_deadline()

    def redelivery_due(self, now_ns: int) -> RedeliveryPlan:
        """The pending messages due at ``now_ns``: those that may be delivered again, and those
        that reached max_deliver (the leader proposes an AckTimeoutEntry for them)."""
        max_deliver = self._config.max_deliver
        redeliver: list[int] = []
        exhausted: list[int] = []
        for seq in self.pending.due(now_ns):
            if 0 < max_deliver <= self.deliveries(seq):
                exhausted.append(seq)
            else:
                redeliver.append(seq)
        return RedeliveryPlan(tuple(sorted(redeliver)), tuple(sorted(exhausted)))

    def needs_ack(self, seq: int) -> bool:
        """Does this consumer still want the message at ``seq`` kept (nats-server needAck; the
        caller checks the filter)? Messages past max_deliver are kept too."""
        if seq > self.ack_floor.stream_seq:
            if self._config.ack_policy != "explicit":
                return True
            if seq > self.delivered.stream_seq or seq in self.pending:
                return True
        return seq in self.redelivered

    def sees(self, subject: str) -> bool:
        return matches(self._config.filters, subject)

    # ================================================================== apply

    def apply_config(self, config: ConsumerConfig) -> None:
        """An accepted update: new timers for everything pending (ack wait or backoff changed)."""
        self._config = config
        for seq, record in list(self.pending.items()):
            self._put_pending(seq, record)

    def apply_deliver(self, entry: DeliverEntry, stream: StreamMessages) -> DeliverResult:
        delivered: list[Delivery] = []
        refused: list[int] = []
        gone: list[int] = []
        released: list[SeqRange] = []
        for seq in entry.stream_seqs:
            if seq in self.pending:
                if stream.subject_of(seq) is None:
                    gone.append(seq)
                    released += self._drop_pending(seq, keep_count=False)
                    continue
                delivery = self._redeliver(seq, entry.ts_ns)
            else:
                delivery = self._first_delivery(seq, entry.ts_ns, stream, released)
            if delivery is None:
                refused.append(seq)
            else:
                delivered.append(delivery)
        if delivered:
            self.delivered_active_ns = entry.ts_ns
        return DeliverResult(
            self.name, tuple(delivered), tuple(refused), tuple(gone), merge_ranges(released)
        )

    def _redeliver(self, seq: int, now_ns: int) -> Delivery | None:
        deliveries = self.deliveries(seq) + 1
        if 0 < self._config.max_deliver < deliveries:
            return None
        record = self.pending.get(seq)
        if record is None:
            raise AssertionError(f"seq {seq} not pending")
        self.redelivered[seq] = deliveries - 1
        consumer_seq = self.delivered.consumer_seq + 1
        self.delivered = SeqPair(consumer_seq, self.delivered.stream_seq)
        self._put_pending(seq, Pending(record.consumer_seq, now_ns))
        return Delivery(seq, consumer_seq, deliveries)

    def _first_delivery(
        self, seq: int, now_ns: int, stream: StreamMessages, released: list[SeqRange]
    ) -> Delivery | None:
        if seq <= self.delivered.stream_seq:
            return None
        skipping = self._skip_pos < len(self._skip)
        if skipping:
            at = bisect_left(self._skip, seq, self._skip_pos)
            in_list = at < len(self._skip) and self._skip[at] == seq
            if not in_list and seq <= self.resume_seq:
                return None
        subject = stream.subject_of(seq)
        if subject is None or not self.sees(subject):
            return None
        if self.ack_pending_room() == 0:
            return None
        consumer_seq = self.delivered.consumer_seq + 1
        stream_seq = seq
        if skipping:
            self._skip_pos = bisect_left(self._skip, seq + 1, self._skip_pos)
            if self._skip_pos >= len(self._skip):
                self._skip, self._skip_pos = [], 0
                stream_seq = max(seq, self.resume_seq)
        self.delivered = SeqPair(consumer_seq, stream_seq)
        if self._config.acks_needed:
            self._put_pending(seq, Pending(consumer_seq, now_ns))
        else:
            released += self._set_floor(self.delivered)
        return Delivery(seq, consumer_seq, 1)

    def apply_ack(self, ack: Ack, now_ns: int) -> AckOutcome:
        """One ack of an AckEntry (already routed to this consumer)."""
        outcome = self._apply_ack(ack, now_ns)
        if outcome.applied and ack.kind in (AckKind.ACK, AckKind.TERM):
            self.acked_active_ns = now_ns  # a NAK or WPI is no acknowledgement (nats-server)
        return outcome

    def _apply_ack(self, ack: Ack, now_ns: int) -> AckOutcome:
        policy = self._config.ack_policy
        seq = ack.stream_seq
        if policy == "none" or seq > self.delivered.stream_seq:
            return _IGNORED
        if ack.kind in (AckKind.ACK, AckKind.TERM):
            if policy == "all":
                return self._ack_all(seq, ack.consumer_seq)
            return self._ack_one(seq)
        record = self.pending.get(seq)
        if record is None:
            return _IGNORED
        redeliveries = self.redelivered.get(seq, 0)
        if ack.kind == AckKind.NAK:
            due = now_ns + max(ack.delay_ns, 0)
            ts_ns = timestamp_due_at(self._config, due, redeliveries)
        else:  # WPI
            ts_ns = now_ns
        self._put_pending(seq, Pending(record.consumer_seq, ts_ns))
        return AckOutcome(True)

    def _ack_one(self, seq: int) -> AckOutcome:
        had_count = self.redelivered.pop(seq, None) is not None
        if seq not in self.pending:
            return AckOutcome(had_count, (SeqRange(seq, seq),) if had_count else ())
        return AckOutcome(True, merge_ranges(self._drop_pending(seq, keep_count=False)))

    def _ack_all(self, seq: int, consumer_seq: int) -> AckOutcome:
        record = self.pending.get(seq)
        if consumer_seq == 0 and record is not None:
            consumer_seq = record.consumer_seq
        consumer_seq = min(consumer_seq, self.delivered.consumer_seq)
        floor = self.ack_floor
        if consumer_seq <= floor.consumer_seq or seq <= floor.stream_seq:
            return _IGNORED
        released: list[SeqRange] = []
        for pending_seq in self.pending.seqs(maximum=seq):
            self.pending.pop(pending_seq)
        for counted in [s for s in self.redelivered if s <= seq]:
            del self.redelivered[counted]
            released.append(SeqRange(counted, counted))
        released += self._set_floor(SeqPair(consumer_seq, seq))
        return AckOutcome(True, merge_ranges(released))

    def apply_timeout(self, now_ns: int, stream: StreamMessages) -> TimeoutResult:
        """The leader's redelivery timer at ``now_ns``: drop what reached max_deliver and what
        left the stream (below its first seq, or due and deleted)."""
        gone: list[int] = []
        exhausted: list[Exhausted] = []
        released: list[SeqRange] = []
        first = stream.first_seq
        for seq in self.pending.seqs(maximum=first - 1):
            gone.append(seq)
            released += self._drop_pending(seq, keep_count=False)
        max_deliver = self._config.max_deliver
        for seq in sorted(self.pending.due(now_ns)):
            if stream.subject_of(seq) is None:
                gone.append(seq)
                released += self._drop_pending(seq, keep_count=False)
            elif 0 < max_deliver <= self.deliveries(seq):
                exhausted.append(Exhausted(seq, self.deliveries(seq)))
                # as nats-server: out of pending, kept as redelivered, the ack floor stays
                self.pending.pop(seq)
                self.redelivered[seq] = self.redelivered.get(seq, 0)
        return TimeoutResult(self.name, tuple(exhausted), tuple(gone), merge_ranges(released))

    def apply_purge(
        self, start_seq: int, stream_last: int, wider: bool, stream: StreamMessages
    ) -> None:
        """The stream was purged up to ``start_seq`` (nats-server consumer.purge): the consumer
        moves past what is gone; pending messages below it count as acknowledged, as do (for
        ``wider``: the consumer sees more than was purged) pending messages that are gone."""
        if start_seq == 0 and not wider:
            start_seq = stream_last + 1
        if self.delivered.stream_seq + 1 < start_seq:
            self.delivered = SeqPair(self.delivered.consumer_seq, start_seq - 1)
            if self._skip:
                self._skip = [s for s in self.skip_seqs if s >= start_seq]
                self._skip_pos = 0
                self.resume_seq = max(self.resume_seq, start_seq - 1)
        if self.ack_floor.stream_seq < start_seq:
            floor_stream = start_seq - 1
            floor_consumer = self.ack_floor.consumer_seq
            for seq, record in list(self.pending.items()):
                gone = seq <= floor_stream or (wider and stream.subject_of(seq) is None)
                if gone:
                    floor_consumer = max(floor_consumer, record.consumer_seq)
                    self.pending.pop(seq)
                    self.redelivered.pop(seq, None)
            self.ack_floor = SeqPair(floor_consumer, max(floor_stream, self.ack_floor.stream_seq))
        if not self.pending:
            self.ack_floor = self.delivered

    def apply_reset(self, seq: int) -> int:
        """CONSUMER.RESET (nats-server's resetLocalStartingSeq): deliver again from stream seq
        ``seq`` (0: the one after the ack floor); nothing is pending or counted as redelivered
        any more, consumer sequences start over at 1, and no delivery or ack has happened yet.
        Returns the seq it starts from."""
        if seq == 0:
            seq = self.ack_floor.stream_seq + 1
        seq = max(seq, 1)
        self.pending = PendingSet()
        self.redelivered = {}
        self.delivered = self.ack_floor = SeqPair(0, seq - 1)
        self.delivered_active_ns = self.acked_active_ns = 0  # as nats-server: never, since
        # last_per_subject: what is left of its list (what a snapshot keeps, so that every
        # replica resets alike, restored or not) from the reset point on
        remaining = self.skip_seqs
        self._skip = remaining[bisect_left(remaining, seq) :]
        self._skip_pos = 0
        return seq

    # ================================================================== helpers

    def _put_pending(self, seq: int, record: Pending) -> None:
        redeliveries = self.redelivered.get(seq, 0)
        self.pending.put(seq, record, deadline_ns(self._config, record.ts_ns, redeliveries))

    def _drop_pending(self, seq: int, *, keep_count: bool) -> list[SeqRange]:
        """Take ``seq`` out of pending (acked, terminated, gone, or past max_deliver, which
        keeps its redelivered entry) and move the ack floor as an explicit ack does."""
        record = self.pending.pop(seq)
        if record is None:
            raise AssertionError(f"seq {seq} not pending")
        released: list[SeqRange] = []
        if keep_count:
            self.redelivered[seq] = self.redelivered.get(seq, 0)
        else:
            self.redelivered.pop(seq, None)
            released.append(SeqRange(seq, seq))
        first = self.pending.first_seq()
        if first is None:
            released += self._set_floor(self.delivered)
        elif record.consumer_seq == self.ack_floor.consumer_seq + 1:
            next_record = self.pending.get(first)
            if next_record is None:
                raise AssertionError(f"seq {first} listed but not pending")
            if first > seq:
                released += self._set_floor(SeqPair(next_record.consumer_seq - 1, first - 1))
            else:
                released += self._set_floor(SeqPair(record.consumer_seq, seq))
        return released

    def _set_floor(self, floor: SeqPair) -> list[SeqRange]:
        """Move the ack floor (never backwards); the stream seqs it passed."""
        old = self.ack_floor
        self.ack_floor = SeqPair(
            max(old.consumer_seq, floor.consumer_seq), max(old.stream_seq, floor.stream_seq)
        )
        if self.ack_floor.stream_seq > old.stream_seq:
            return [SeqRange(old.stream_seq + 1, self.ack_floor.stream_seq)]
        return []
