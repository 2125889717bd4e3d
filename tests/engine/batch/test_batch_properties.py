"""Hypothesis: any interleaving of batch messages (several batches at once, gaps, repeats, bad
commit values, EOB and plain commits, idle timeouts, abandons), plain publishes and commit-time
failures leaves the stream with whole batches only, each on contiguous seqs; and replaying the
log gives the same digest.

The stager and the stream are driven as the cluster layer drives them: a ``CommitReady`` becomes
one ``BatchCommitEntry`` applied through the (encoded) log.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.batch import (
    HDR_BATCH_ID,
    HDR_BATCH_SEQ,
    STAGED,
    BatchLimits,
    BatchResult,
    BatchStager,
    CommitReady,
    InflightCounter,
    Rejected,
)
from engine.entries import InboundMsg
from protocol.headers import get_header
from tests.engine.batch.batch_builders import bmsg, hdr
from tests.engine.stream.harness import Harness, make_config

SLOTS = 3
IDLE_TIMEOUT_NS = 100
MSGS_MAX = 3
STREAM_MSGS_MAX = 8
MSG_IDS = ["i0", "i1", "i2", "i3"]
KINDS = [*["next"] * 8, "commit", "commit", "eob", "gap", "repeat", "bad_commit"]

slot_op = st.tuples(
    st.just("batch"),
    st.integers(0, SLOTS - 1),
    st.sampled_from(KINDS),
    st.sampled_from([*[None] * 12, *MSG_IDS, "expect_other_stream"]),
    st.sampled_from(["S.a", "S.b"]),
)
plain_op = st.tuples(
    st.just("plain"), st.sampled_from(["S.a", "S.b"]), st.sampled_from([None, *MSG_IDS])
)
time_op = st.tuples(st.just("advance"), st.integers(1, IDLE_TIMEOUT_NS + IDLE_TIMEOUT_NS // 4))
abandon_op = st.tuples(st.just("abandon"), st.integers(0, SLOTS - 1))
# a run of messages of one batch, perhaps ending in a commit (more whole batches get committed)
burst_op = st.tuples(
    st.just("burst"),
    st.integers(0, SLOTS - 1),
    st.integers(0, MSGS_MAX),
    st.sampled_from(["commit", "eob", "none"]),
    st.sampled_from(["S.a", "S.b"]),
)
ops_strategy = st.lists(
    st.one_of(slot_op, slot_op, burst_op, burst_op, plain_op, time_op, abandon_op), max_size=60
)


@dataclass
class Slot:
    generation: int = 0
    next_seq: int = 1

    def batch_id(self, index: int) -> str:
        return f"s{index}g{self.generation}"

    def retire(self) -> None:
        self.generation += 1
        self.next_seq = 1


@dataclass
class Model:
    harness: Harness
    stager: BatchStager
    counter: InflightCounter
    now_ns: int
    slots: list[Slot] = field(default_factory=lambda: [Slot() for _ in range(SLOTS)])
    committed: dict[str, int] = field(default_factory=dict)  # batch id -> stored count

    def batch_message(self, index: int, kind: str, extra: str | None, subject: str) -> None:
        slot = self.slots[index]
        batch_id = slot.batch_id(index)
        seq = slot.next_seq
        if kind == "gap":
            seq += 1
        elif kind == "repeat":
            seq = max(1, seq - 1)
        commit = {"commit": "1", "eob": "eob", "bad_commit": "yes"}.get(kind)
        extras: list[tuple[str, str]] = []
        if extra == "expect_other_stream":
            extras.append(("Nats-Expected-Stream", "OTHER"))
        elif extra is not None:
            extras.append(("Nats-Msg-Id", extra))
        msg = bmsg(
            batch_id, seq, commit, *extras, subject=subject, data=f"{batch_id}:{seq}".encode()
        )
        outcome = self.stager.stage(msg, batch_id, self.harness.stream.config, self.now_ns)
        if outcome is STAGED:
            slot.next_seq = seq + 1
            return
        if isinstance(outcome, Rejected):
            if outcome.dropped or batch_id not in self.stager:
                slot.retire()
            return
        assert isinstance(outcome, CommitReady)
        slot.retire()
        self.now_ns += 1
        result = self.harness.apply(outcome.entry(self.now_ns))
        assert isinstance(result, BatchResult)
        if result.error is None:
            assert result.count == len(outcome.msgs)
            self.committed[batch_id] = result.count

    def plain(self, subject: str, msg_id: str | None) -> None:
        headers = hdr(("Nats-Msg-Id", msg_id)) if msg_id else b""
        self.now_ns += 1
        self.harness.publish(subject, b"plain", headers, ts_ns=self.now_ns)

    def advance(self, delta_ns: int) -> None:
        self.now_ns += delta_ns
        for batch_id in self.stager.expire(self.now_ns):
            index = int(batch_id[1 : batch_id.index("g")])
            assert self.slots[index].batch_id(index) == batch_id
            self.slots[index].retire()

    def abandon(self, index: int) -> None:
        slot = self.slots[index]
        if self.stager.abandon(slot.batch_id(index)):
            slot.retire()

    def check(self) -> None:
        """Whole batches only, each on contiguous seqs, exactly the committed ones."""
        by_batch: dict[str, list[tuple[int, int, bytes]]] = {}
        for stored in self.harness.store.scan():
            batch_id = get_header(stored.hdr, HDR_BATCH_ID) if stored.hdr else None
            if not batch_id:
                assert stored.data == b"plain"
                continue
            batch_seq = int(get_header(stored.hdr, HDR_BATCH_SEQ) or "0")
            by_batch.setdefault(batch_id, []).append((stored.seq, batch_seq, stored.data))
        assert set(by_batch) == set(self.committed)
        for batch_id, rows in by_batch.items():
            count = self.committed[batch_id]
            seqs = [seq for seq, _, _ in rows]
            assert seqs == list(range(seqs[0], seqs[0] + count)), (batch_id, rows)
            assert [b for _, b, _ in rows] == list(range(1, count + 1))
            assert [d for _, _, d in rows] == [
                f"{batch_id}:{b}".encode() for b in range(1, count + 1)
            ]
        open_batches = sum(1 for i, s in enumerate(self.slots) if s.batch_id(i) in self.stager)
        assert open_batches == len(self.stager) == self.counter.count


def new_model() -> Model:
    config = make_config(allow_atomic=True, max_msgs=STREAM_MSGS_MAX, discard="new")
    harness = Harness("memory", Path("/nonexistent-memory-store"), config)
    counter = InflightCounter()
    limits = BatchLimits(
        msgs_max=MSGS_MAX, idle_timeout_ns=IDLE_TIMEOUT_NS, inflight_per_stream_max=2
    )
    return Model(harness, BatchStager(limits, counter), counter, harness.now_ns)


@settings(max_examples=150, deadline=None)
@given(ops=ops_strategy)
def test_interleavings_never_leave_part_of_a_batch(ops: list[tuple[object, ...]]) -> None:
    model = new_model()
    for op in ops:
        name = op[0]
        if name == "batch":
            _, index, kind, extra, subject = op
            assert isinstance(index, int) and isinstance(kind, str) and isinstance(subject, str)
            assert extra is None or isinstance(extra, str)
            model.batch_message(index, kind, extra, subject)
        elif name == "burst":
            _, index, count, ending, subject = op
            assert isinstance(index, int) and isinstance(count, int)
            assert isinstance(ending, str) and isinstance(subject, str)
            for _ in range(count):
                model.batch_message(index, "next", None, subject)
            if ending != "none":
                model.batch_message(index, ending, None, subject)
        elif name == "plain":
            _, subject, msg_id = op
            assert isinstance(subject, str) and (msg_id is None or isinstance(msg_id, str))
            model.plain(subject, msg_id)
        elif name == "advance":
            assert isinstance(op[1], int)
            model.advance(op[1])
        else:
            assert isinstance(op[1], int)
            model.abandon(op[1])
        model.check()
    fresh = model.harness.replay_into_fresh()
    assert fresh.digest() == model.harness.stream.digest()
    model.stager.clear()
    assert model.counter.count == 0


@settings(max_examples=100, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 8), min_size=1, max_size=6),
    eob=st.lists(st.booleans(), min_size=6, max_size=6),
)
def test_committed_batches_are_contiguous_between_plain_publishes(
    sizes: list[int], eob: list[bool]
) -> None:
    """Batches and plain publishes alternating: each batch's seqs follow the plain message
    before it directly, and the PubAck's seq is its last."""
    config = make_config(allow_atomic=True)
    h = Harness("memory", Path("/nonexistent-memory-store"), config)
    stager = BatchStager(BatchLimits(), InflightCounter())
    for n, (size, use_eob) in enumerate(zip(sizes, eob, strict=False)):
        h.ok("S.p")
        before = h.stream.last_seq
        msgs: list[InboundMsg] = [bmsg(f"b{n}", i) for i in range(1, size + 1)]
        for msg in msgs[:-1]:
            assert stager.stage(msg, f"b{n}", config, 0) is STAGED
        if use_eob:
            assert stager.stage(msgs[-1], f"b{n}", config, 0) is STAGED
            last = bmsg(f"b{n}", size + 1, "eob")
        else:
            last = bmsg(f"b{n}", size, "1")
        ready = stager.stage(last, f"b{n}", config, 0)
        assert isinstance(ready, CommitReady)
        result = h.apply(ready.entry(h.tick()))
        assert result == BatchResult(before + size, size)
