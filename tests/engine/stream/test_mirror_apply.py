"""``Stream.apply_mirror``: a mirror stores its upstream's messages at their upstream seqs.

* fed the live messages of a randomly published/deleted/purged upstream, in chunks of random
  sizes with repeated and overlapping chunks, a mirror holds exactly the upstream's messages
  (same seqs, subjects, headers, payloads, timestamps): equal ``content_digest`` and the state
  nats-server's mirror would report;
* following an upstream that keeps changing, with batched fetches that overlap, stores every
  fetched message once and never leaves a gap below its last seq;
* the mirror's own limits keep exactly the messages an ordinary stream with those limits keeps
  when the same messages are published to it (discard new: skipped, not stored);
* the mirror's log replays (and a meta-committing file store reopens) to the same digest;
* no publish-time header check runs; Nats-TTL is enforced only with the mirror's allow_msg_ttl.

Stores: memory, and the file store with ``meta_commits=True`` (as cluster hosts open it).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.entries import ExpireEntry, MirroredMsg, MirrorEntry
from engine.filestore import FileStore
from engine.memstore import MemoryStore
from engine.store import MessageStore, StoredMsg
from engine.stream import Stream
from tests.engine.stream.harness import CREATED_NS, STORE_KINDS, T0_NS, Harness, S, hdr, make_config
from tests.engine.stream.test_stream_model import check_against_store

SUBJECTS = ["S.a", "S.b", "S.c", "S.a.x", "S.é"]
UPSTREAM = "S"

_SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class MetaCommitHarness(Harness):
    """The shared harness, with the file store opened as cluster hosts open it."""

    def _open_store(self) -> MessageStore:
        if self.store_kind == "memory":
            return MemoryStore()
        return FileStore(self.directory, meta_commits=True)

    def mirror(self, *msgs: MirroredMsg) -> list[int]:
        result = self.apply(MirrorEntry(self.tick(), msgs))
        assert isinstance(result, list)
        return [s for s in result if isinstance(s, int)]


def mirror_config(**overrides: Any) -> Any:
    base: dict[str, Any] = {
        "name": "M",
        "subjects": [],
        "mirror": {"name": UPSTREAM},
        "duplicate_window": 0,
    }
    base.update(overrides)
    return make_config(**base)


def mirrored(msg: StoredMsg) -> MirroredMsg:
    return MirroredMsg(msg.seq, msg.subject, msg.hdr, msg.data, msg.ts_ns)


def msg(seq: int, subject: str = "S.a", data: bytes = b"x", h: bytes = b"", ts: int = 0) -> Any:
    return MirroredMsg(seq, subject, h, data, ts or T0_NS + seq * S)


def stored(h: Harness) -> list[StoredMsg]:
    return list(h.store.scan())


@pytest.fixture(params=STORE_KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make(kind: str, tmp_path: Path) -> Iterator[Any]:
    """``make(**config_overrides)``: a fresh mirror stream on the parametrized store."""
    made: list[MetaCommitHarness] = []

    def _make(**overrides: Any) -> MetaCommitHarness:
        storage = "memory" if kind == "memory" else "file"
        config = mirror_config(**{"storage": storage, **overrides})
        h = MetaCommitHarness(kind, tmp_path / f"m{len(made)}", config)
        made.append(h)
        return h

    yield _make
    for h in made:
        h.close()


# =========================================================================== random upstreams

UPSTREAM_OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("publish"),
            st.lists(
                st.tuples(
                    st.sampled_from(SUBJECTS),
                    st.integers(0, 30),
                    st.sampled_from(["none", "id", "rollup"]),
                ),
                min_size=1,
                max_size=5,
            ),
        ),
        st.tuples(st.just("delete"), st.integers(1, 40)),
        st.tuples(
            st.just("purge"),
            st.sampled_from(["", "S.a", "S.*", "S.a.>"]),
            st.integers(0, 30),
            st.integers(0, 3),
        ),
        st.tuples(st.just("tick"), st.integers(1, 5)),
        st.tuples(st.just("fetch"), st.integers(0, 4), st.integers(1, 6)),
    ),
    max_size=30,
)
UPSTREAM_LIMITS = st.fixed_dictionaries(
    {
        "max_msgs": st.sampled_from([-1, 6]),
        "max_msgs_per_subject": st.sampled_from([-1, 2]),
    }
)
# Feeding plan: (advance, back, repeat): a chunk of `advance` new messages that also re-sends the
# `back` messages before them, proposed twice when `repeat`.
PLAN = st.lists(
    st.tuples(st.integers(1, 7), st.integers(0, 4), st.booleans()), min_size=1, max_size=8
)


def _upstream_headers(kind: str, k: int) -> bytes:
    if kind == "id":
        return hdr(("Nats-Msg-Id", f"id{k % 4}"))
    if kind == "rollup":
        return hdr(("Nats-Rollup", "sub"))
    return b""


def run_upstream_op(up: Harness, op: tuple[Any, ...]) -> None:
    kind = op[0]
    if kind == "publish":
        msgs = [(s, _upstream_headers(hk, n), b"p" * n) for s, n, hk in op[1]]
        up.publish_many(msgs)
    elif kind == "delete":
        up.delete(op[1])
    elif kind == "purge":
        _, f, seq, keep = op
        up.purge(f, seq if keep == 0 else 0, keep)
    elif kind == "tick":
        up.tick(op[1] * S)


def fetch(up: Stream, start: int, batch: int) -> list[MirroredMsg]:
    """A batched Direct Get from ``start``: up to ``batch`` live messages, ascending."""
    out: list[MirroredMsg] = []
    seq = max(start, 1)
    while len(out) < batch:
        found = up.load_next(seq)
        if found is None:
            break
        out.append(mirrored(found))
        seq = found.seq + 1
    return out


def feed(m: MetaCommitHarness, live: list[MirroredMsg], plan: list[tuple[int, int, bool]]) -> None:
    """Feed ``live`` in chunks following the plan (cycled), with repeats and overlaps; every
    message is stored exactly once, in the first chunk that carries it."""
    pos, step = 0, 0
    chunks: list[tuple[MirroredMsg, ...]] = []
    while pos < len(live):
        advance, back, repeat = plan[step % len(plan)]
        step += 1
        chunk = tuple(live[max(0, pos - back) : pos + advance])
        assert m.mirror(*chunk) == [x.seq for x in live[pos : pos + advance]]
        chunks.append(chunk)
        if repeat:
            assert m.mirror(*chunk) == []
        pos += advance
    if chunks:  # a stale re-proposal from before a leader change changes nothing
        before = m.stream.content_digest(), m.stream.state()
        assert m.mirror(*chunks[len(chunks) // 2]) == []
        assert (m.stream.content_digest(), m.stream.state()) == before


def assert_mirrors(mirror_h: Harness, up_h: Harness) -> None:
    """The mirror holds exactly the upstream's live messages and reports nats-server's state."""
    mirror, upstream = mirror_h.stream, up_h.stream
    assert [tuple(x) for x in stored(mirror_h)] == [tuple(x) for x in stored(up_h)]
    assert mirror.content_digest() == upstream.content_digest()
    m, u = mirror.state(), upstream.state()
    assert (m.messages, m.bytes, m.num_subjects) == (u.messages, u.bytes, u.num_subjects)
    assert mirror.subjects_state(">") == upstream.subjects_state(">")
    if u.messages == 0:
        assert (m.messages, m.last_seq, m.first_seq) == (0, 0, 0)
        return
    live_last = stored(up_h)[-1].seq
    assert (m.first_seq, m.first_ts_ns) == (u.first_seq, u.first_ts_ns)
    assert m.last_seq == live_last
    assert m.last_ts_ns == stored(up_h)[-1].ts_ns
    if live_last == u.last_seq:
        assert m.num_deleted == u.num_deleted
        assert mirror.deleted_seqs() == upstream.deleted_seqs()


def _mirror_case(
    store_kind: str,
    limits: dict[str, Any],
    ops: list[tuple[Any, ...]],
    plan: list[tuple[int, int, bool]],
) -> None:
    storage = "memory" if store_kind == "memory" else "file"
    with tempfile.TemporaryDirectory() as tmp:
        up_cfg = make_config(storage=storage, allow_rollup_hdrs=True, **limits)
        up = MetaCommitHarness(store_kind, Path(tmp) / "up", up_cfg)
        m = MetaCommitHarness(store_kind, Path(tmp) / "m", mirror_config(storage=storage))
        try:
            for op in ops:
                run_upstream_op(up, op)
            live = [mirrored(x) for x in stored(up)]
            feed(m, live, plan)
            assert_mirrors(m, up)
            check_against_store(m, storage)
            replayed = m.replay_into_fresh()
            assert replayed.digest() == m.stream.digest()
            assert replayed.content_digest() == up.stream.content_digest()
            assert replayed.state() == m.stream.state()
            digest = m.stream.digest()
            m.reopen()
            assert m.stream.digest() == digest
            assert m.stream.applied_index == m.index
        finally:
            up.close()
            m.close()


@_SETTINGS
@given(UPSTREAM_LIMITS, UPSTREAM_OPS, PLAN)
def test_mirror_of_random_upstream_memory(
    limits: dict[str, Any], ops: list[tuple[Any, ...]], plan: list[tuple[int, int, bool]]
) -> None:
    _mirror_case("memory", limits, ops, plan)


@settings(_SETTINGS, max_examples=30)
@given(UPSTREAM_LIMITS, UPSTREAM_OPS, PLAN)
def test_mirror_of_random_upstream_file(
    limits: dict[str, Any], ops: list[tuple[Any, ...]], plan: list[tuple[int, int, bool]]
) -> None:
    _mirror_case("file", limits, ops, plan)


@_SETTINGS
@given(UPSTREAM_LIMITS, UPSTREAM_OPS)
def test_following_a_changing_upstream(limits: dict[str, Any], ops: list[tuple[Any, ...]]) -> None:
    """Fetches interleaved with upstream changes, each from up to 4 seqs before the mirror's
    next: every fetched message past last_seq is stored once, the rest skipped; after a final
    catch-up nothing live upstream below the mirror's last seq is missing."""
    with tempfile.TemporaryDirectory() as tmp:
        up = MetaCommitHarness("memory", Path(tmp), make_config(allow_rollup_hdrs=True, **limits))
        m = MetaCommitHarness("memory", Path(tmp), mirror_config(storage="memory"))
        model: dict[int, tuple[Any, ...]] = {}
        last = 0

        def pull(back: int, batch: int) -> list[MirroredMsg]:
            nonlocal last
            got = fetch(up.stream, m.stream.last_seq + 1 - back, batch)
            fresh = [x for x in got if x.seq > last]
            assert m.mirror(*got) == [x.seq for x in fresh]
            for x in fresh:
                model[x.seq] = (x.seq, x.subject, x.hdr, x.data, x.ts_ns)
                last = x.seq
            assert m.stream.last_seq == last
            return got

        for op in ops:
            if op[0] == "fetch":
                pull(op[1], op[2])
            else:
                run_upstream_op(up, op)
        while len(pull(0, 3)) == 3:
            pass
        assert {x.seq: tuple(x) for x in stored(m)} == model
        mirror_seqs = {x.seq for x in stored(m)}
        up_live = stored(up)
        assert {x.seq for x in up_live} <= mirror_seqs
        # caught up: past the upstream's last live message (and past messages it stored and the
        # upstream removed afterwards: a purge after a fetch leaves the mirror ahead)
        assert m.stream.last_seq >= (up_live[-1].seq if up_live else 0)
        check_against_store(m, "memory")
        assert m.replay_into_fresh().digest() == m.stream.digest()


# =========================================================================== limits


MIRROR_LIMITS = st.fixed_dictionaries(
    {
        "discard": st.sampled_from(["old", "new"]),
        "max_msgs": st.sampled_from([-1, 2, 5]),
        "max_bytes": st.sampled_from([-1, 120, 300]),
        "max_msgs_per_subject": st.sampled_from([-1, 1, 2]),
        "discard_new_per_subject": st.booleans(),
        "max_msg_size": st.sampled_from([-1, 20]),
    }
)
LIMIT_MSGS = st.lists(
    st.tuples(st.sampled_from(SUBJECTS), st.integers(0, 40), st.integers(0, 2)), max_size=25
)


@_SETTINGS
@given(st.sampled_from(STORE_KINDS), MIRROR_LIMITS, LIMIT_MSGS, PLAN)
def test_mirror_limits_keep_what_a_publish_would(
    store_kind: str,
    limits: dict[str, Any],
    msgs: list[tuple[str, int, int]],
    plan: list[tuple[int, int, bool]],
) -> None:
    """The mirror's limits keep exactly the messages a stream with the same limits keeps when
    they are published to it; a message it cannot take (discard new, max_msg_size) is skipped
    with its seq counted as deleted, where the publish is refused."""
    if limits["discard_new_per_subject"] and (
        limits["discard"] != "new" or limits["max_msgs_per_subject"] <= 0
    ):
        limits["discard_new_per_subject"] = False
    storage = "memory" if store_kind == "memory" else "file"
    live: list[MirroredMsg] = []
    seq = 0
    for subject, size, gap in msgs:
        seq += 1 + gap
        live.append(msg(seq, subject, b"d" * size))
    with tempfile.TemporaryDirectory() as tmp:
        m = MetaCommitHarness(store_kind, Path(tmp) / "m", mirror_config(storage=storage, **limits))
        ref = MetaCommitHarness("memory", Path(tmp), make_config(storage=storage, **limits))
        try:
            pos, step = 0, 0
            while pos < len(live):
                advance, back, _ = plan[step % len(plan)]
                step += 1
                chunk = live[max(0, pos - back) : pos + advance]
                got = m.mirror(*chunk)
                new = live[pos : pos + advance]
                published = [ref.publish(x.subject, x.data) for x in new]
                assert got == [
                    x.seq for x, r in zip(new, published, strict=True) if r.error is None
                ]
                pos += advance
            mine = [(x.subject, x.data, x.ts_ns) for x in stored(m)]
            theirs = [(x.subject, x.data) for x in stored(ref)]
            assert [x[:2] for x in mine] == theirs
            expected_ts = {x.seq: x.ts_ns for x in live}
            assert all(expected_ts[x.seq] == x.ts_ns for x in stored(m))
            state = m.stream.state()
            assert state.last_seq == (live[-1].seq if live else 0)
            assert (state.messages, state.bytes) == (
                ref.stream.state().messages,
                ref.stream.state().bytes,
            )
            check_against_store(m, storage)
            assert m.replay_into_fresh().digest() == m.stream.digest()
        finally:
            m.close()
            ref.close()


def test_max_age_expires_by_upstream_time(make: Any) -> None:
    m = make(max_age=10 * S)
    m.mirror(msg(1, ts=T0_NS), msg(2, ts=T0_NS + 5 * S), msg(3, ts=T0_NS + 20 * S))
    assert m.apply(ExpireEntry(T0_NS + 12 * S)) == [1]
    assert m.apply(ExpireEntry(T0_NS + 16 * S)) == [2]
    assert [x.seq for x in stored(m)] == [3]
    assert m.stream.state().first_seq == 3


def test_discard_new_skips_and_counts_the_seq_as_deleted(make: Any) -> None:
    m = make(discard="new", max_msgs=2)
    assert m.mirror(msg(1), msg(2), msg(3), msg(5)) == [1, 2]
    state = m.stream.state()
    assert (state.messages, state.first_seq, state.last_seq, state.num_deleted) == (2, 1, 5, 3)
    m.delete(1)
    assert m.mirror(msg(6)) == [6]
    assert m.stream.deleted_seqs() == [3, 4, 5]


def test_oversized_first_message_of_an_empty_mirror(make: Any) -> None:
    m = make(max_msg_size=4)
    assert m.mirror(msg(7, data=b"too big")) == []
    state = m.stream.state()
    assert (state.messages, state.first_seq, state.last_seq, state.num_deleted) == (0, 8, 7, 0)
    assert m.mirror(msg(9, data=b"ok")) == [9]
    state = m.stream.state()
    assert (state.messages, state.first_seq, state.last_seq, state.num_deleted) == (1, 9, 9, 0)


# =========================================================================== sequences


def test_first_message_may_start_anywhere_and_gaps_count_as_deleted(make: Any) -> None:
    m = make()
    assert m.mirror(msg(5)) == [5]
    state = m.stream.state()
    assert (state.first_seq, state.last_seq, state.messages, state.num_deleted) == (5, 5, 1, 0)
    assert m.mirror(msg(3), msg(5), msg(9)) == [9]
    assert m.stream.deleted_seqs() == [6, 7, 8]
    assert m.stream.state().num_deleted == 3
    assert m.stream.load(7) is None and m.stream.load(9) is not None
    assert m.stream.first_seq == 5


def test_after_everything_expired_the_next_message_sets_first_seq(make: Any) -> None:
    m = make(max_age=1 * S)
    m.mirror(msg(1, ts=T0_NS), msg(2, ts=T0_NS))
    m.apply(ExpireEntry(T0_NS + 5 * S))
    assert (m.stream.state().first_seq, m.stream.last_seq) == (3, 2)
    assert m.mirror(msg(2), msg(10, ts=T0_NS + 6 * S)) == [10]
    state = m.stream.state()
    assert (state.first_seq, state.last_seq, state.num_deleted) == (10, 10, 0)


def test_timestamps_are_the_upstreams_and_last_ts_never_goes_back(make: Any) -> None:
    m = make()
    m.mirror(msg(1, ts=T0_NS + 9 * S), msg(2, ts=T0_NS + 9 * S))
    assert m.stream.load(1).ts_ns == T0_NS + 9 * S
    assert m.stream.state().last_ts_ns == T0_NS + 9 * S
    assert m.stream.seq_for_time(T0_NS + 9 * S) == 1


def test_an_upstream_clock_going_back_is_kept_but_last_ts_is_not(make: Any) -> None:
    m = make()
    m.mirror(msg(1, ts=T0_NS + 9 * S), msg(2, ts=T0_NS + 4 * S))
    assert m.stream.load(2).ts_ns == T0_NS + 4 * S
    assert m.stream.state().last_ts_ns == T0_NS + 9 * S
    assert m.replay_into_fresh().digest() == m.stream.digest()


def test_promoted_mirror_dedupes_against_mirrored_ids(make: Any) -> None:
    """Mirrored Nats-Msg-Ids enter the window (not checked while a mirror), so that a mirror
    promoted to a plain stream dedupes as it would after a reopen."""
    m = make(duplicate_window=60 * S)
    a, b = hdr(("Nats-Msg-Id", "a")), hdr(("Nats-Msg-Id", "b"))
    assert m.mirror(msg(1, h=a, ts=T0_NS), msg(2, h=b, ts=T0_NS + 100 * S)) == [1, 2]
    assert m.update(mirror=None, subjects=["S.>"]) is None
    dup = m.publish("S.x", headers=b)
    assert (dup.seq, dup.duplicate) == (2, True)
    assert m.publish("S.x", headers=a).seq == 3  # "a" left the window at the mirrored ts
    assert m.stream.state().last_ts_ns == T0_NS + 100 * S
    assert m.replay_into_fresh().digest() == m.stream.digest()


def test_sealed_mirror_takes_nothing(make: Any) -> None:
    m = make()
    m.mirror(msg(1))
    assert m.update(sealed=True) is None
    assert m.mirror(msg(2), msg(3)) == []
    assert m.stream.last_seq == 1 and m.stream.state().messages == 1


def test_interest_mirror_keeps_nothing_but_follows(make: Any) -> None:
    m = make(retention="interest")
    assert m.mirror(msg(1), msg(4)) == [1, 4]
    state = m.stream.state()
    assert (state.messages, state.last_seq, state.first_seq) == (0, 4, 5)


# =========================================================================== headers


def test_publish_header_checks_do_not_apply(make: Any) -> None:
    """Every header a publish would act on is stored as it is, byte for byte."""
    m = make(duplicate_window=60 * S)
    headers = [
        hdr(("Nats-Msg-Id", "dup")),
        hdr(("Nats-Msg-Id", "dup")),
        hdr(("Nats-Expected-Last-Sequence", "99")),
        hdr(("Nats-Expected-Stream", "OTHER")),
        hdr(("Nats-Expected-Last-Subject-Sequence", "42")),
        hdr(("Nats-Expected-Last-Msg-Id", "nope")),
        hdr(("Nats-Batch-Id", "b1"), ("Nats-Batch-Sequence", "1"), ("Nats-Batch-Commit", "1")),
        hdr(("Nats-Rollup", "all")),
        hdr(("Nats-Stream-Source", "X 1 > >")),
        hdr(("Nats-Marker-Reason", "MaxAge"), ("Nats-TTL", "1s"), ("Nats-Rollup", "sub")),
        hdr(("Nats-Request-Info", "{}")),
        hdr(("Nats-TTL", "1s")),
    ]
    msgs = [msg(i + 1, h=h) for i, h in enumerate(headers)]
    assert m.mirror(*msgs) == [x.seq for x in msgs]
    assert [(x.seq, x.hdr) for x in stored(m)] == [(x.seq, x.hdr) for x in msgs]
    assert m.stream.state().messages == len(msgs)


def test_ttl_is_not_enforced_without_allow_msg_ttl(make: Any) -> None:
    m = make()
    m.mirror(msg(1, h=hdr(("Nats-TTL", "1s")), ts=T0_NS))
    assert m.stream.next_expiry_ns() is None
    assert m.apply(ExpireEntry(T0_NS + 100 * S)) == []
    assert m.stream.state().messages == 1


def test_ttl_is_enforced_with_allow_msg_ttl(make: Any) -> None:
    m = make(allow_msg_ttl=True)
    m.mirror(
        msg(1, h=hdr(("Nats-TTL", "2s")), ts=T0_NS),
        msg(2, h=hdr(("Nats-TTL", "abc")), ts=T0_NS),  # invalid: stored, never expires
        msg(3, h=hdr(("Nats-TTL", "never")), ts=T0_NS),
        msg(4, ts=T0_NS),
    )
    assert m.stream.state().messages == 4
    assert m.stream.next_expiry_ns() == T0_NS + 2 * S
    assert m.apply(ExpireEntry(T0_NS + 1 * S)) == []
    assert m.apply(ExpireEntry(T0_NS + 2 * S)) == [1]
    assert m.apply(ExpireEntry(T0_NS + 1000 * S)) == []
    assert [x.seq for x in stored(m)] == [2, 3, 4]


def test_turning_allow_msg_ttl_on_tracks_mirrored_ttls(make: Any) -> None:
    m = make()
    m.mirror(msg(1, h=hdr(("Nats-TTL", "2s")), ts=T0_NS), msg(2, ts=T0_NS))
    assert m.update(allow_msg_ttl=True) is None
    assert m.apply(ExpireEntry(T0_NS + 3 * S)) == [1]
    assert m.replay_into_fresh().digest() == m.stream.digest()


def test_never_ttl_escapes_max_age_on_a_mirror(make: Any) -> None:
    m = make(max_age=1 * S)
    m.mirror(msg(1, h=hdr(("Nats-TTL", "never")), ts=T0_NS), msg(2, ts=T0_NS))
    assert m.apply(ExpireEntry(T0_NS + 5 * S)) == [2]


# =========================================================================== digests


def test_content_digest_ignores_config_index_and_bookkeeping(tmp_path: Path) -> None:
    a = Stream(mirror_config(storage="memory"), MemoryStore(), CREATED_NS)
    b = Stream(mirror_config(storage="memory", max_msgs=100), MemoryStore(), CREATED_NS)
    empty = a.content_digest()
    assert b.content_digest() == empty
    a.apply(1, MirrorEntry(1, (msg(1), msg(3))))
    b.apply(5, MirrorEntry(2, (msg(1),)))
    b.apply(6, MirrorEntry(3, (msg(3),)))
    assert a.content_digest() == b.content_digest() != empty
    assert a.digest() != b.digest()  # the state digest still tells them apart
    for other in (msg(3, data=b"y"), msg(3, subject="S.b"), msg(4), msg(3, ts=T0_NS + 1)):
        c = Stream(mirror_config(storage="memory"), MemoryStore(), CREATED_NS)
        c.apply(1, MirrorEntry(1, (msg(1), other)))
        assert c.content_digest() != a.content_digest(), other
    c = Stream(mirror_config(storage="memory"), MemoryStore(), CREATED_NS)
    c.apply(1, MirrorEntry(1, (msg(1), msg(3, h=hdr(("A", "b"))))))
    assert c.content_digest() != a.content_digest()


def test_content_digest_follows_removals(make: Any) -> None:
    m = make()
    m.mirror(msg(1), msg(2))
    both = m.stream.content_digest()
    m.delete(2)
    one = m.stream.content_digest()
    assert one != both
    n = make()
    n.mirror(msg(1))
    assert n.stream.content_digest() == one
