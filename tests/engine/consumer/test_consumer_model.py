"""Random publish / deliver / ack / nak / term / wpi / timeout sequences against the reference
model; replaying the same log gives the same digest; snapshots round-trip mid-run."""

from __future__ import annotations

import json
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.consumer.consumer import Consumer
from engine.consumer.consumers import ConsumerSet
from engine.consumer.entries import (
    Ack,
    AckEntry,
    AckKind,
    AckTimeoutEntry,
    ConsumerEntry,
    CreateConsumerEntry,
    DeliverEntry,
    decode_consumer_entry,
    encode_consumer_entry,
)
from engine.consumer.results import AckResult, DeliverResult, TimeoutResult
from tests.engine.consumer.fake_stream import FakeStream
from tests.engine.consumer.reference_model import ModelConsumer

SUBJECTS = ("a.1", "a.2", "b.1")
KINDS = {"ack": AckKind.ACK, "nak": AckKind.NAK, "wpi": AckKind.WPI, "term": AckKind.TERM}


@dataclass
class Run:
    """One consumer under test plus its model; the log that produced it, for replay."""

    stream: FakeStream
    consumers: ConsumerSet
    model: ModelConsumer
    now: int = 1_000
    index: int = 0
    # ("publish", subject) | ("remove", seq) | ("entry", index, bytes)
    log: list[tuple[object, ...]] | None = None

    def apply(self, entry: ConsumerEntry) -> object:
        raw = encode_consumer_entry(entry)
        self.index += 1
        assert self.log is not None
        self.log.append(("entry", self.index, raw))
        return self.consumers.apply(self.index, decode_consumer_entry(raw), self.stream)

    @property
    def consumer(self) -> Consumer:
        consumer = self.consumers.get("c")
        assert consumer is not None
        return consumer


CONFIGS = st.fixed_dictionaries(
    {
        "ack_policy": st.sampled_from(["explicit", "all", "none"]),
        "ack_wait": st.sampled_from([50, 100, 300]),
        "backoff": st.sampled_from([[], [20, 80, 200]]),
        "max_deliver": st.sampled_from([-1, 1, 2, 4]),
        "max_ack_pending": st.sampled_from([-1, 0, 3]),
        "filter_subject": st.sampled_from(["", "a.*", "b.1"]),
        "deliver_policy": st.sampled_from(["all", "new"]),
    }
)

OPS = st.one_of(
    st.tuples(st.just("publish"), st.sampled_from(SUBJECTS), st.integers(1, 3)),
    st.tuples(st.just("remove"), st.integers(0, 10)),
    st.tuples(st.just("tick"), st.integers(1, 150)),
    st.tuples(st.just("deliver_new"), st.integers(1, 4)),
    st.tuples(st.just("redeliver")),
    st.tuples(st.just("deliver_any"), st.lists(st.integers(1, 25), max_size=4)),
    st.tuples(
        st.just("acks"),
        st.lists(
            st.tuples(
                st.sampled_from(list(KINDS)),
                st.integers(0, 25),
                st.booleans(),
                st.integers(0, 200),
            ),
            min_size=1,
            max_size=4,
        ),
    ),
    st.tuples(st.just("timeout")),
    st.tuples(st.just("snapshot")),
)


def _normalize(cfg: dict[str, object]) -> dict[str, object]:
    cfg = dict(cfg)
    if cfg["ack_policy"] == "none":
        cfg["backoff"], cfg["max_ack_pending"] = [], 0
    backoff = cfg["backoff"]
    assert isinstance(backoff, list)
    max_deliver = cfg["max_deliver"]
    assert isinstance(max_deliver, int)
    if backoff and 0 < max_deliver < len(backoff):
        cfg["max_deliver"] = len(backoff)
    return cfg


def _start(cfg: dict[str, object], stream: FakeStream) -> ModelConsumer:
    acks = cfg["ack_policy"] != "none"
    backoff = tuple(cfg["backoff"])  # type: ignore[arg-type]
    start = stream.first_seq if cfg["deliver_policy"] == "all" else stream.last_seq + 1
    max_ack_pending = int(cfg["max_ack_pending"])  # type: ignore[call-overload]
    if acks and max_ack_pending == 0:
        max_ack_pending = 1000
    return ModelConsumer(
        ack_policy=str(cfg["ack_policy"]),
        ack_wait=(backoff[0] if backoff else int(cfg["ack_wait"])) if acks else 0,  # type: ignore[call-overload]
        backoff=backoff,
        max_deliver=int(cfg["max_deliver"]),  # type: ignore[call-overload]
        max_ack_pending=max_ack_pending,
        filters=(str(cfg["filter_subject"]),) if cfg["filter_subject"] else (),
        delivered=(0, start - 1),
        floor=(0, start - 1),
    )


def _check(run: Run) -> None:
    c, m = run.consumer, run.model
    assert tuple(c.delivered) == m.delivered
    assert tuple(c.ack_floor) == m.floor
    assert {s: tuple(p) for s, p in c.pending.items()} == m.pending
    assert c.redelivered == m.rdc
    assert c.next_redelivery_ns() == min((m.deadline(s) for s in m.pending), default=None)
    plan = c.redelivery_due(run.now)
    due = m.due(run.now)
    exhausted = [s for s in due if 0 < m.max_deliver <= m.deliveries(s)]
    assert list(plan.exhausted) == exhausted
    assert list(plan.redeliver) == [s for s in due if s not in exhausted]
    # invariants: floor <= delivered, every pending seq above the floor and at most delivered
    assert c.ack_floor.stream_seq <= c.delivered.stream_seq
    assert c.ack_floor.consumer_seq <= c.delivered.consumer_seq
    assert all(c.ack_floor.stream_seq < s <= c.delivered.stream_seq for s, _ in c.pending.items())
    room = c.ack_pending_room()
    assert room == m.room()
    expected_pending = sum(
        1 for s, (subj, _) in run.stream.msgs.items() if s > c.delivered.stream_seq and m.sees(subj)
    )
    assert c.num_pending(run.stream) == expected_pending


def _step(run: Run, op: tuple[object, ...]) -> None:
    kind = op[0]
    m = run.model
    assert run.log is not None
    if kind == "publish":
        for _ in range(int(op[2])):  # type: ignore[call-overload]
            run.stream.publish(str(op[1]), run.now)
            run.log.append(("publish", op[1]))
    elif kind == "remove":
        live = sorted(run.stream.msgs)
        if live:
            seq = live[int(op[1]) % len(live)]  # type: ignore[call-overload]
            run.stream.remove(seq)
            run.log.append(("remove", seq))
    elif kind == "tick":
        run.now += int(op[1])  # type: ignore[call-overload]
    elif kind in ("deliver_new", "redeliver", "deliver_any"):
        if kind == "deliver_new":
            seqs = tuple(run.consumer.next_new_seqs(run.stream, int(op[1])))  # type: ignore[call-overload]
        elif kind == "redeliver":
            seqs = run.consumer.redelivery_due(run.now).redeliver
        else:
            seqs = tuple(op[1])  # type: ignore[arg-type]
        if not seqs:
            return
        result = run.apply(DeliverEntry(run.now, "c", seqs))
        assert isinstance(result, DeliverResult)
        expected = m.deliver(seqs, run.now, run.stream)
        assert [tuple(d) for d in result.delivered] == expected
        if kind != "deliver_any":
            assert len(result.delivered) + len(result.gone) == len(seqs)
    elif kind == "acks":
        acks = []
        for ack_kind, pick, use_pending, delay in op[1]:  # type: ignore[attr-defined]
            pending = sorted(m.pending)
            if use_pending and pending:
                seq = pending[pick % len(pending)]
                cseq = m.pending[seq][0]
            else:
                seq, cseq = max(pick, 1), pick
            acks.append(
                Ack(
                    "c",
                    KINDS[ack_kind],
                    seq,
                    cseq,
                    delay if ack_kind == "nak" else 0,
                    "why" if ack_kind == "term" else "",
                )
            )
        result = run.apply(AckEntry(run.now, tuple(acks)))
        assert isinstance(result, AckResult)
        applied = [
            m.ack(a.kind.name.lower(), a.stream_seq, a.consumer_seq, a.delay_ns, run.now)
            for a in acks
        ]
        assert [a in result.applied for a in acks] == applied or len(set(acks)) != len(acks)
        assert len(result.applied) == sum(applied)
    elif kind == "timeout":
        result = run.apply(AckTimeoutEntry(run.now, "c"))
        assert isinstance(result, TimeoutResult)
        exhausted, gone = m.timeout(run.now, run.stream)
        assert [tuple(e) for e in result.exhausted] == exhausted
        assert list(result.gone) == gone
    elif kind == "snapshot":
        raw = run.consumers.to_json()
        restored = ConsumerSet.from_json(raw)
        assert restored.to_json() == raw
        assert restored.digest() == run.consumers.digest()
        json.loads(raw)
        run.consumers = restored  # carry on from the restored copy
    _check(run)


def _replay(log: list[tuple[object, ...]]) -> ConsumerSet:
    stream = FakeStream()
    consumers = ConsumerSet()
    for item in log:
        if item[0] == "publish":
            stream.publish(str(item[1]))
        elif item[0] == "remove":
            stream.remove(int(item[1]))  # type: ignore[call-overload]
        else:
            consumers.apply(int(item[1]), decode_consumer_entry(bytes(item[2])), stream)  # type: ignore[call-overload, arg-type]
    return consumers


@settings(max_examples=150, deadline=None)
@given(CONFIGS, st.lists(st.sampled_from(SUBJECTS), max_size=5), st.lists(OPS, max_size=40))
def test_consumer_matches_the_model(
    cfg: dict[str, object], before: list[str], ops: list[tuple[object, ...]]
) -> None:
    cfg = _normalize(cfg)
    stream = FakeStream()
    log: list[tuple[object, ...]] = []
    for subject in before:
        stream.publish(subject, 0)
        log.append(("publish", subject))
    run = Run(stream, ConsumerSet(), _start(cfg, stream), log=log)
    created = run.apply(CreateConsumerEntry(run.now, "c", json.dumps(cfg).encode()))
    assert getattr(created, "created", False), created
    _check(run)
    for op in ops:
        _step(run, op)
    replayed = _replay(log)
    assert replayed.digest() == run.consumers.digest()
    assert replayed.to_json() == run.consumers.to_json()
