"""A plain, dict-based model of one consumer: the rules of engine/consumer/consumer.py written
the simplest way (scans instead of indexes), for the property tests to compare against."""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.engine.consumer.fake_stream import FakeStream


@dataclass
class ModelConsumer:
    ack_policy: str
    ack_wait: int
    backoff: tuple[int, ...]
    max_deliver: int
    max_ack_pending: int
    filters: tuple[str, ...]
    delivered: tuple[int, int]
    floor: tuple[int, int]
    pending: dict[int, tuple[int, int]] = field(default_factory=dict)
    rdc: dict[int, int] = field(default_factory=dict)

    def sees(self, subject: str) -> bool:
        from protocol.subjects import subject_matches

        return not self.filters or any(subject_matches(f, subject) for f in self.filters)

    def wait(self, seq: int) -> int:
        if self.backoff:
            return self.backoff[min(self.rdc.get(seq, 0), len(self.backoff) - 1)]
        return self.ack_wait

    def deadline(self, seq: int) -> int:
        return self.pending[seq][1] + self.wait(seq)

    def deliveries(self, seq: int) -> int:
        return 1 + self.rdc.get(seq, 0)

    def room(self) -> int | None:
        if self.ack_policy == "none" or self.max_ack_pending <= 0:
            return None
        return max(0, self.max_ack_pending - len(self.pending))

    def set_floor(self, c: int, s: int) -> None:
        self.floor = (max(self.floor[0], c), max(self.floor[1], s))

    def drop(self, seq: int, keep_count: bool) -> None:
        cseq, _ = self.pending.pop(seq)
        if keep_count:
            self.rdc.setdefault(seq, 0)
        else:
            self.rdc.pop(seq, None)
        if not self.pending:
            self.set_floor(*self.delivered)
        elif cseq == self.floor[0] + 1:
            first = min(self.pending)
            if first > seq:
                self.set_floor(self.pending[first][0] - 1, first - 1)
            else:
                self.set_floor(cseq, seq)

    def deliver(self, seqs: tuple[int, ...], now: int, stream: FakeStream) -> list[tuple[int, ...]]:
        out: list[tuple[int, ...]] = []
        for seq in seqs:
            if seq in self.pending:
                if stream.subject_of(seq) is None:
                    self.drop(seq, keep_count=False)
                    continue
                dc = self.deliveries(seq) + 1
                if self.max_deliver > 0 and dc > self.max_deliver:
                    continue
                self.rdc[seq] = dc - 1
                self.delivered = (self.delivered[0] + 1, self.delivered[1])
                self.pending[seq] = (self.pending[seq][0], now)
                out.append((seq, self.delivered[0], dc))
                continue
            subject = stream.subject_of(seq)
            if seq <= self.delivered[1] or subject is None or not self.sees(subject):
                continue
            if self.room() == 0:
                continue
            self.delivered = (self.delivered[0] + 1, seq)
            if self.ack_policy == "none":
                self.set_floor(*self.delivered)
            else:
                self.pending[seq] = (self.delivered[0], now)
            out.append((seq, self.delivered[0], 1))
        return out

    def ack(self, kind: str, seq: int, cseq: int, delay: int, now: int) -> bool:
        if self.ack_policy == "none" or seq > self.delivered[1]:
            return False
        if kind in ("ack", "term"):
            if self.ack_policy == "all":
                if cseq == 0 and seq in self.pending:
                    cseq = self.pending[seq][0]
                cseq = min(cseq, self.delivered[0])
                if cseq <= self.floor[0] or seq <= self.floor[1]:
                    return False
                for s in [s for s in self.pending if s <= seq]:
                    del self.pending[s]
                for s in [s for s in self.rdc if s <= seq]:
                    del self.rdc[s]
                self.set_floor(cseq, seq)
                return True
            had = self.rdc.pop(seq, None) is not None
            if seq not in self.pending:
                return had
            self.drop(seq, keep_count=False)
            return True
        if seq not in self.pending:
            return False
        cs = self.pending[seq][0]
        ts = now + delay - self.wait(seq) if kind == "nak" else now
        self.pending[seq] = (cs, ts)
        return True

    def due(self, now: int) -> list[int]:
        return sorted(s for s in self.pending if self.deadline(s) <= now)

    def timeout(self, now: int, stream: FakeStream) -> tuple[list[tuple[int, int]], list[int]]:
        gone: list[int] = []
        exhausted: list[tuple[int, int]] = []
        for seq in sorted(s for s in self.pending if s < stream.first_seq):
            gone.append(seq)
            self.drop(seq, keep_count=False)
        for seq in self.due(now):
            if stream.subject_of(seq) is None:
                gone.append(seq)
                self.drop(seq, keep_count=False)
            elif 0 < self.max_deliver <= self.deliveries(seq):
                exhausted.append((seq, self.deliveries(seq)))
                # nats-server (probed by the differential suite): out of pending, its delivery
                # count kept, and the ack floor does not move past it
                self.pending.pop(seq)
                self.rdc.setdefault(seq, 0)
        return exhausted, gone
