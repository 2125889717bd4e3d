"""Random publish/delete/purge/expire/update sequences on both stores. After every apply:

* the indexes equal a brute-force recomputation from the store, and every query agrees with a
  scan of the stored messages;
* max_msgs / max_bytes / max_msgs_per_subject are never exceeded;
* first/last seq, num_deleted and timestamps are consistent, and last_seq never goes back;
* a reopened file-backed stream has the same digest, state and query answers;

and at the end the encoded log replayed into a fresh stream gives the same digest and answers.

Known gap, as in nats-server: a reopened stream rebuilds its dedupe window from the *stored*
messages, so the ids of messages removed within the window are forgotten. After a reopen the ops
below therefore stop sending Nats-Msg-Id, or the replayed stream would (rightly) disagree.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.limits import msg_size_bytes
from engine.store import StoredMsg
from engine.stream import Stream
from protocol.subjects import subject_matches
from tests.engine.stream.harness import Harness, S, hdr, make_config

SUBJECTS = ["S.a", "S.b", "S.c", "S.a.x", "S.b.y", "S.é"]
FILTERS = ["", ">", "S.a", "S.*", "S.>", "S.*.x", "S.b.>", "S.zz", "*.a"]

PUBLISH_MSG = st.tuples(
    st.sampled_from(SUBJECTS),
    st.integers(0, 40),  # payload bytes
    st.sampled_from(["none", "id", "rollup_sub", "rollup_all", "expect_last", "bad"]),
    st.integers(0, 5),  # msg id / expected-seq variety
)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("publish"), st.lists(PUBLISH_MSG, min_size=1, max_size=4)),
        st.tuples(st.just("delete"), st.integers(0, 30), st.booleans()),
        st.tuples(
            st.just("purge"),
            st.sampled_from(["", ">", "S.a", "S.*", "S.b.>"]),
            st.integers(0, 30),
            st.integers(0, 4),
        ),
        st.tuples(st.just("tick"), st.integers(1, 40)),
        st.tuples(st.just("expire"), st.integers(0, 40)),
        st.tuples(
            st.just("update"),
            st.sampled_from(["max_msgs", "max_bytes", "max_msgs_per_subject", "max_age"]),
            st.integers(-1, 12),
        ),
        st.tuples(st.just("reopen")),
    ),
    max_size=40,
)
CONFIGS = st.fixed_dictionaries(
    {
        "storage": st.sampled_from(["memory", "file"]),
        "discard": st.sampled_from(["old", "new"]),
        "max_msgs": st.sampled_from([-1, 3, 8]),
        "max_bytes": st.sampled_from([-1, 150, 400]),
        "max_msgs_per_subject": st.sampled_from([-1, 1, 2]),
        "allow_rollup_hdrs": st.booleans(),
        "max_age": st.sampled_from([0, 20 * S]),
        "duplicate_window": st.sampled_from([0, 5 * S, 30 * S]),
    }
)


@dataclass
class Tracker:
    """What the invariants need to remember between applies."""

    last_seq: int = 0
    # with discard new, an update may leave the stream above a lowered limit; it never grows past
    baseline_msgs: int = 0
    baseline_bytes: int = 0
    published: dict[int, tuple[str, bytes]] = field(default_factory=dict)
    reopened: bool = False


def _headers(kind: str, k: int, stream: Stream, tracker: Tracker) -> bytes:
    if kind == "id" and not tracker.reopened:
        return hdr(("Nats-Msg-Id", f"id{k}"))
    if kind == "rollup_sub":
        return hdr(("Nats-Rollup", "sub"))
    if kind == "rollup_all":
        return hdr(("Nats-Rollup", "all"))
    if kind == "expect_last":
        return hdr(("Nats-Expected-Last-Sequence", str(stream.last_seq + k % 2)))
    if kind == "bad":
        return hdr(("Nats-Expected-Stream", "nope"))
    return b""


def _brute_next(msgs: list[StoredMsg], start: int, f: str) -> int | None:
    return next((m.seq for m in msgs if m.seq >= start and _match(f, m.subject)), None)


def _brute_last(msgs: list[StoredMsg], f: str, ceiling: int) -> int | None:
    seqs = [m.seq for m in msgs if m.seq <= ceiling and _match(f, m.subject)]
    return seqs[-1] if seqs else None


def _match(f: str, subject: str) -> bool:
    return f in ("", ">") or subject_matches(f, subject)


def check_against_store(h: Harness, storage: str) -> None:
    """The index, state and every StreamView query of ``h``'s stream agree with a scan of the
    store it runs on (the harness's own handle: the stream does not hand its store out)."""
    stream = h.stream
    msgs = list(h.store.scan())
    seqs = [m.seq for m in msgs]
    state = stream.state()
    assert state.messages == len(msgs)
    assert state.bytes == sum(
        msg_size_bytes(storage, len(m.subject.encode()), len(m.hdr), len(m.data)) for m in msgs
    )
    assert stream.subjects_state(">") == dict(Counter(m.subject for m in msgs))
    assert state.num_subjects == len({m.subject for m in msgs})
    assert state.last_seq == stream.last_seq
    if msgs:
        assert (state.first_seq, state.first_ts_ns) == (seqs[0], msgs[0].ts_ns)
        assert seqs[-1] <= state.last_seq
        assert state.num_deleted == state.last_seq - state.first_seq + 1 - len(msgs)
        assert len(stream.deleted_seqs()) == state.num_deleted
        assert stream.first_seq == seqs[0]
    else:
        assert state.first_ts_ns == 0 and state.num_deleted == 0
        assert state.first_seq in (0, state.last_seq + 1) or state.first_seq > state.last_seq
        assert stream.first_seq == stream.last_seq + 1
    assert [m.ts_ns for m in msgs] == sorted(m.ts_ns for m in msgs)
    for f in FILTERS:
        for start in (0, 1, 3, 7, 12, state.last_seq + 1):
            expected = _brute_next(msgs, start, f)
            got = stream.load_next(start, f)
            assert (got.seq if got else None) == expected, (f, start)
            assert stream.num_pending(start, f) == sum(
                1 for m in msgs if m.seq >= start and _match(f, m.subject)
            )
        for ceiling in (0, 2, 5, 9, state.last_seq):
            expected = _brute_last(msgs, f, ceiling if ceiling > 0 else state.last_seq)
            got = stream.load_last(f, ceiling)
            assert (got.seq if got else None) == expected, (f, ceiling)
    for m in msgs[:3] + msgs[-2:]:
        assert stream.seq_for_time(m.ts_ns) == next(x.seq for x in msgs if x.ts_ns >= m.ts_ns)
    if msgs:
        assert stream.seq_for_time(msgs[-1].ts_ns + 1) == 0
    last_by_subject: dict[str, int] = {}
    for m in msgs:
        if any(subject_matches(f, m.subject) for f in ("S.*", "S.b.>")) and m.seq <= 8:
            last_by_subject[m.subject] = m.seq
    assert stream.multi_last(["S.*", "S.b.>"], 8, 0) == sorted(last_by_subject.values())
    capped = stream.multi_last(["S.*", "S.b.>"], 8, 1)
    assert capped == (None if len(last_by_subject) > 1 else sorted(last_by_subject.values()))
    for seq in range(0, state.last_seq + 2):
        loaded = stream.load(seq)
        assert (loaded.seq if loaded else None) == (seq if seq in set(seqs) else None)


def check_limits(stream: Stream, tracker: Tracker) -> None:
    cfg, state = stream.config, stream.state()
    if cfg.max_msgs_per_subject > 0:
        assert max(stream.subjects_state(">").values(), default=0) <= cfg.max_msgs_per_subject
    if cfg.max_msgs > 0:
        assert state.messages <= max(cfg.max_msgs, tracker.baseline_msgs)
    if cfg.max_bytes > 0:
        assert state.bytes <= max(cfg.max_bytes, tracker.baseline_bytes)
    assert state.last_seq >= tracker.last_seq
    tracker.last_seq = state.last_seq


def snapshot(stream: Stream) -> tuple[Any, ...]:
    answers = tuple(
        (
            stream.num_pending(1, f),
            (m.seq if (m := stream.load_next(0, f)) else None),
            (m.seq if (m := stream.load_last(f)) else None),
        )
        for f in FILTERS
    )
    return stream.digest(), stream.state(), stream.deleted_seqs(), answers


def run_ops(h: Harness, ops: list[tuple[Any, ...]], tracker: Tracker) -> None:
    storage = h.stream.config.storage
    for op in ops:
        kind = op[0]
        if kind == "publish":
            msgs = [(s, _headers(hk, k, h.stream, tracker), b"p" * n) for s, n, hk, k in op[1]]
            before = h.stream.last_seq
            results = h.publish_many(msgs)
            expected_seq = before
            for result, (subject, _, data) in zip(results, msgs, strict=True):
                if result.error is None and not result.duplicate:
                    expected_seq += 1
                    assert result.seq == expected_seq
                    tracker.published[result.seq] = (subject, data)
            assert h.stream.last_seq == expected_seq
        elif kind == "delete":
            h.delete(op[1], erase=op[2])
        elif kind == "purge":
            _, f, seq, keep = op
            h.purge(f, seq if keep == 0 else 0, keep)
        elif kind == "tick":
            h.tick(op[1] * S)
        elif kind == "expire":
            removed = h.expire(h.now_ns + op[1] * S)
            max_age = h.stream.config.max_age
            for seq in removed:
                assert tracker.published[seq][0]  # it was ours
            if max_age > 0 and h.stream.state().messages:
                assert h.stream.state().first_ts_ns > h.now_ns + op[1] * S - max_age
        elif kind == "update":
            _, name, value = op
            if name == "max_age":
                value = value * 10 * S if value > 0 else 0
            elif name == "max_bytes" and value > 0:
                value *= 40
            assert h.update(**{name: value}) is None
            state = h.stream.state()
            tracker.baseline_msgs, tracker.baseline_bytes = state.messages, state.bytes
        elif kind == "reopen":
            answers = snapshot(h.stream)
            h.reopen()  # the memory store object survives: the stream is rebuilt on it
            tracker.reopened = True
            assert snapshot(h.stream) == answers
            assert h.stream.applied_index == h.index
        check_against_store(h, storage)
        check_limits(h.stream, tracker)
        for m in h.store.scan():
            assert tracker.published[m.seq] == (m.subject, m.data)


def _run(store_kind: str, config: dict[str, Any], ops: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        h = Harness(store_kind, Path(tmp) / "store", make_config(**config))
        try:
            run_ops(h, ops, Tracker())
            fresh = h.replay_into_fresh()
            assert snapshot(fresh) == snapshot(h.stream)
        finally:
            h.close()


_SETTINGS = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@_SETTINGS
@given(CONFIGS, OPS)
def test_random_sequences_memory_store(config: dict[str, Any], ops: list[tuple[Any, ...]]) -> None:
    _run("memory", config, ops)


@_SETTINGS
@given(CONFIGS, OPS)
def test_random_sequences_file_store(config: dict[str, Any], ops: list[tuple[Any, ...]]) -> None:
    _run("file", config, ops)


def test_replay_gives_equal_digests_on_both_stores() -> None:
    """The same encoded log, applied on a memory store and on a file store, gives one digest."""
    ops: list[tuple[Any, ...]] = [
        ("publish", [("S.a", 3, "id", 1), ("S.b", 5, "none", 0), ("S.a", 0, "id", 1)]),
        ("tick", 3),
        ("publish", [("S.a.x", 7, "none", 0)]),
        ("delete", 2, True),
        ("purge", "S.a", 0, 1),
        ("update", "max_msgs", 2),
        ("publish", [("S.c", 1, "none", 0), ("S.c", 1, "none", 0)]),
    ]
    digests = []
    for kind in ("memory", "file"):
        with tempfile.TemporaryDirectory() as tmp:
            h = Harness(kind, Path(tmp) / "s", make_config(allow_rollup_hdrs=True))
            run_ops(h, ops, Tracker())
            digests.append(h.stream.digest())
            h.close()
    assert digests[0] == digests[1]


def test_digest_changes_with_state() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        h = Harness("memory", Path(tmp), make_config())
        seen = {h.stream.digest()}
        h.ok("S.a", b"1")
        seen.add(h.stream.digest())
        h.update(max_msgs=5)
        seen.add(h.stream.digest())
        h.delete(1)
        seen.add(h.stream.digest())
        h.purge()  # nothing to purge, but the applied index moves
        seen.add(h.stream.digest())
        assert len(seen) == 5
