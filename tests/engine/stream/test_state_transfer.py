"""State transfer (engine/state_transfer.py): a lagging follower fetches only what it lacks.

Hypothesis drives a leader through random entries (publishes with and without Nats-TTL, msg ids,
rollups, deletes, purges with filter/keep/seq, expiries with subject delete markers, config
updates, atomic batch commits; the op strategies of test_stream_model, test_ttl_properties and
batch_builders), a follower applies a random prefix of the same log, the transfer runs through
encoded request and chunks, and then the follower equals the leader (digest, state, queries,
stored messages) and stays equal while both apply the same further entries; on the memory store
and on the file store (which must also reopen from disk to the same state).

After the transfer the further entries carry no Nats-Msg-Id: the follower's dedupe window is
rebuilt from the stored messages, as on a restart (the known gap test_stream_model describes).
"""

from __future__ import annotations

import tempfile
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from engine.entries import (
    BatchCommitEntry,
    DeleteMsgEntry,
    Entry,
    InboundMsg,
    PublishEntry,
    PurgeEntry,
    decode_entry,
)
from engine.memstore import MemoryStore
from engine.state_transfer import (
    KIND_MSGS,
    KIND_REMOVE,
    TRANSFER_CHUNK_BYTES_MAX,
    TRANSFER_CHUNK_BYTES_MIN,
    CatchupRequest,
    TransferApplier,
    TransferError,
    plan_transfer,
    resume_request,
)
from engine.store import StoredMsg
from engine.stream import Stream, StreamMetaError
from tests.engine.batch.batch_builders import bmsg
from tests.engine.stream.harness import (
    CREATED_NS,
    T0_NS,
    CrashingStoreMixin,
    Harness,
    S,
    StoreCrash,
    hdr,
    make_config,
)
from tests.engine.stream.test_stream_model import (
    PUBLISH_MSG,
    SUBJECTS,
    Tracker,
    _headers,
    check_against_store,
    snapshot,
)
from tests.engine.ttl.test_ttl_properties import PUB as TTL_PUB

# ====================================================================== random histories

BATCH = st.tuples(
    st.just("batch"), st.lists(st.sampled_from(SUBJECTS), min_size=1, max_size=3), st.booleans()
)
PUBLISH = st.tuples(st.just("publish"), st.lists(PUBLISH_MSG, min_size=1, max_size=4))
DELETE_LIVE = st.tuples(st.just("delete_live"), st.integers(0, 30), st.booleans())
FILL = st.tuples(st.just("fill"), st.integers(5, 30))  # many plain messages in one entry
# one_of picks a branch uniformly: what builds up the stream and punches holes in it is listed
# more than once, or most histories would end nearly empty.
OP = st.one_of(
    FILL,
    FILL,
    PUBLISH,
    PUBLISH,
    TTL_PUB,
    BATCH,
    DELETE_LIVE,
    DELETE_LIVE,
    DELETE_LIVE,
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
)
OPS = st.lists(OP, max_size=30)
HISTORIES = st.lists(OP, min_size=10, max_size=40)
CONFIGS = st.fixed_dictionaries(
    {
        "storage": st.sampled_from(["memory", "file"]),
        "discard": st.sampled_from(["old", "new"]),
        "max_msgs": st.sampled_from([-1, -1, -1, 8]),
        "max_msgs_per_subject": st.sampled_from([-1, -1, 1, 2]),
        "max_age": st.sampled_from([0, 0, 20 * S]),
        "allow_msg_ttl": st.booleans(),
        "subject_delete_marker_ttl": st.sampled_from([0, 2 * S]),
        "duplicate_window": st.sampled_from([0, 30 * S]),
    }
).map(
    lambda c: {
        **c,
        "allow_rollup_hdrs": True,
        "allow_atomic": True,
        "subject_delete_marker_ttl": c["subject_delete_marker_ttl"] if c["allow_msg_ttl"] else 0,
    }
)
CHUNK_SIZES = st.sampled_from([TRANSFER_CHUNK_BYTES_MIN, 300, TRANSFER_CHUNK_BYTES_MAX])


def drive(h: Harness, ops: list[tuple[Any, ...]], tracker: Tracker) -> None:
    """Apply the ops to the harness's stream through the encoded log."""
    for op in ops:
        kind = op[0]
        if kind == "publish":
            h.publish_many(
                [(s, _headers(hk, k, h.stream, tracker), b"p" * n) for s, n, hk, k in op[1]]
            )
        elif kind == "fill":
            h.publish_many([(SUBJECTS[i % len(SUBJECTS)], b"", b"f" * i) for i in range(op[1])])
        elif kind == "pub":  # test_ttl_properties: (subject, (Nats-TTL or None, seconds), steps)
            _, subject, (ttl, _), steps = op
            headers = hdr(("Nats-TTL", ttl)) if ttl is not None else b""
            h.publish(subject, b"t" * steps, headers)
        elif kind == "batch":
            _, subjects, eob = op
            batch_id = f"b{h.index}"
            last = len(subjects)
            msgs = [
                bmsg(batch_id, i, None if eob or i < last else "1", subject=s, data=b"b")
                for i, s in enumerate(subjects, start=1)
            ]
            h.apply(BatchCommitEntry(h.tick(), batch_id, tuple(msgs), eob))
        elif kind == "delete":
            h.delete(op[1], erase=op[2])
        elif kind == "delete_live":  # a message that exists: leaves a hole inside the range
            live = h.live()
            if live:
                h.delete(live[op[1] % len(live)], erase=op[2])
        elif kind == "purge":
            _, subject_filter, seq, keep = op
            h.purge(subject_filter, seq if keep == 0 else 0, keep)
        elif kind == "tick":
            h.tick(op[1] * S)
        elif kind == "expire":
            h.expire(h.now_ns + op[1] * S)
        elif kind == "update":
            _, name, value = op
            if name == "max_age":
                value = value * 10 * S if value > 0 else 0
            h.update(**{name: value})
        else:
            raise AssertionError(f"unknown op {op}")


def transfer(
    leader: Stream, follower_store: Any, req: CatchupRequest, chunk_bytes_max: int
) -> tuple[TransferApplier, list[bytes]]:
    """One whole transfer, the request and every chunk going through their encodings."""
    wire_req = CatchupRequest.decode(req.encode())
    assert wire_req == req
    chunks = list(plan_transfer(leader, wire_req, chunk_bytes_max))
    applier = TransferApplier(follower_store, req)
    done = [applier.feed(chunk) for chunk in chunks]
    assert done == [False] * (len(chunks) - 1) + [True]
    if not applier.skipped and leader.store.get_meta() is not None:
        # Compared with the leader reopened, not the live leader: an expiry blocked by a refused
        # marker is retry state kept in memory only, which a reopen (restart) starts without.
        reopened = Stream.open(leader.store)
        assert applier.stream.next_expiry_ns() == reopened.next_expiry_ns()
    return applier, chunks


def assert_same(follower: Stream, leader: Stream) -> None:
    assert snapshot(follower) == snapshot(leader)
    assert follower.applied_index == leader.applied_index
    assert (follower.config, follower.created_ns, follower.last_msg_id) == (
        leader.config,
        leader.created_ns,
        leader.last_msg_id,
    )
    assert list(follower.store.scan()) == list(leader.store.scan())


def _run(
    store_kind: str,
    config: dict[str, Any],
    ops: list[tuple[Any, ...]],
    later: list[tuple[Any, ...]],
    data: st.DataObject,
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        leader = Harness(store_kind, Path(tmp) / "leader", make_config(**config))
        follower = Harness(store_kind, Path(tmp) / "follower", make_config(**config))
        try:
            tracker = Tracker()
            drive(leader, ops, tracker)
            prefix = data.draw(st.integers(0, len(leader.log)), label="follower prefix")
            for index, raw in leader.log[:prefix]:
                follower.stream.apply(index, decode_entry(raw))
            req = CatchupRequest.of(follower.stream)
            applier, chunks = transfer(leader.stream, follower.store, req, data.draw(CHUNK_SIZES))
            kinds = {chunk[1] for chunk in chunks}
            event(f"removal chunks: {KIND_REMOVE in kinds}, message chunks: {KIND_MSGS in kinds}")
            assert not applier.skipped and resume_request(follower.store) is None
            follower.stream = applier.stream
            assert_same(follower.stream, leader.stream)
            check_against_store(follower, config["storage"])
            if store_kind == "file":
                assert_same(follower.reopen(), leader.stream)

            tracker.reopened = True  # no more msg ids: see the module docstring
            applied = len(leader.log)
            drive(leader, later, tracker)
            for index, raw in leader.log[applied:]:
                follower.stream.apply(index, decode_entry(raw))
            assert_same(follower.stream, leader.stream)
        finally:
            leader.close()
            follower.close()


_SETTINGS = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@_SETTINGS
@given(config=CONFIGS, ops=HISTORIES, later=OPS, data=st.data())
def test_follower_reaches_the_leader_and_stays_with_it_memory(
    config: dict[str, Any],
    ops: list[tuple[Any, ...]],
    later: list[tuple[Any, ...]],
    data: st.DataObject,
) -> None:
    _run("memory", config, ops, later, data)


@_SETTINGS
@given(config=CONFIGS, ops=HISTORIES, later=OPS, data=st.data())
def test_follower_reaches_the_leader_and_stays_with_it_file(
    config: dict[str, Any],
    ops: list[tuple[Any, ...]],
    later: list[tuple[Any, ...]],
    data: st.DataObject,
) -> None:
    _run("file", config, ops, later, data)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 1500),  # messages the follower saw published
    st.lists(st.integers(0, 1 << 16), max_size=40),  # its own deletions (indexes into the live)
    st.lists(st.integers(0, 1 << 16), max_size=40),  # deletions after it fell behind
    st.sampled_from(["", "S.a0", "S.a1"]),  # a subject purge after it fell behind, or none
    st.integers(0, 1800),  # a compaction below this seq after it fell behind (0: none)
    st.integers(0, 40),  # messages published after it fell behind
    st.sampled_from([TRANSFER_CHUNK_BYTES_MIN, 500, TRANSFER_CHUNK_BYTES_MAX]),
)
def test_holes_in_a_long_range_are_found_by_bucket_counts(
    published: int,
    own_deletes: list[int],
    later_deletes: list[int],
    subject_purge: str,
    compact_below: int,
    tail: int,
    chunk_bytes_max: int,
) -> None:
    """Streams spanning many buckets with holes the follower already has and holes it lacks:
    the follower ends equal; removal runs are sent when it lacks a removal at or above the
    leader's first seq, and never when it lacks none (the holes it has cost nothing then)."""
    entries: list[Entry] = [PublishEntry(T0_NS, _msgs(published, 2))]
    live = list(range(1, published + 1))

    def delete(picks: list[int]) -> None:
        for pick in picks:
            if live:
                seq = live.pop(pick % len(live))
                entries.append(DeleteMsgEntry(T0_NS + len(entries), seq, pick % 2 == 0))

    delete(own_deletes)
    follower = _stream(entries)
    follower_live = set(live)
    delete(later_deletes)
    if subject_purge:
        entries.append(PurgeEntry(T0_NS + len(entries), subject_purge, 0, 0))
    if compact_below > 1:
        entries.append(PurgeEntry(T0_NS + len(entries), "", compact_below, 0))
    if tail:
        entries.append(PublishEntry(T0_NS + len(entries), _msgs(tail, 3, "S.b")))
    leader = _stream(entries)
    lacking = {s for s in follower_live if s >= leader.first_seq and leader.load(s) is None}

    applier, chunks = transfer(leader, follower.store, CatchupRequest.of(follower), chunk_bytes_max)
    sent_removals = KIND_REMOVE in {chunk[1] for chunk in chunks}
    assert sent_removals or not lacking
    if not follower_live - {m.seq for m in leader.store.scan()}:
        assert not sent_removals
    assert_same(applier.stream, leader)


# ====================================================================== fixed scenarios


def _msgs(count: int, size: int = 8, subject: str = "S.a") -> tuple[InboundMsg, ...]:
    return tuple(
        InboundMsg(f"{subject}{i % 3}", b"", bytes([i % 251]) * size) for i in range(count)
    )


def _scenario() -> list[Entry]:
    """Publishes, deletes inside the range, a purge moving first_seq, a subject purge."""
    t = T0_NS
    return [
        PublishEntry(t, _msgs(20)),
        DeleteMsgEntry(t + 1, 3, True),
        PublishEntry(t + 2, _msgs(10)),
        DeleteMsgEntry(t + 3, 12, False),
        DeleteMsgEntry(t + 4, 13, False),
        PurgeEntry(t + 5, "", 6, 0),  # everything below 6
        PurgeEntry(t + 6, "S.a1", 0, 1),
        PublishEntry(t + 7, _msgs(15, 40)),
        DeleteMsgEntry(t + 8, 40, True),
    ]


def _stream(entries: list[Entry], store: Any = None) -> Stream:
    stream = Stream(make_config(), MemoryStore() if store is None else store, CREATED_NS)
    for index, entry in enumerate(entries, start=1):
        stream.apply(index, entry)
    return stream


def test_fresh_follower_gets_everything() -> None:
    leader = _stream(_scenario())
    store = MemoryStore()
    applier, _ = transfer(leader, store, CatchupRequest.fresh(), 200)
    assert applier.messages_appended == leader.state().messages
    assert_same(applier.stream, leader)


def test_leader_that_purged_everything() -> None:
    entries = [*_scenario(), PurgeEntry(T0_NS + 20, "", 100, 0)]  # compact past the end
    leader = _stream(entries)
    assert leader.state().messages == 0 and leader.last_seq == 99
    follower = _stream(entries[:3])
    applier, chunks = transfer(leader, follower.store, CatchupRequest.of(follower), 200)
    assert len(chunks) == 2 and applier.messages_appended == 0  # header and end only
    assert_same(applier.stream, leader)
    assert applier.stream.state().first_seq == 100


def test_follower_equal_to_the_leader_gets_header_and_end_only() -> None:
    leader = _stream(_scenario())
    follower = _stream(_scenario())
    applier, chunks = transfer(leader, follower.store, CatchupRequest.of(follower), 200)
    assert len(chunks) == 2 and not applier.skipped
    assert_same(applier.stream, leader)


def test_follower_ahead_of_the_leader_is_left_as_it_is() -> None:
    entries = _scenario()
    leader = _stream(entries[:4])
    follower = _stream(entries)
    before = snapshot(follower)
    meta = follower.store.get_meta()
    applier, chunks = transfer(leader, follower.store, CatchupRequest.of(follower), 200)
    assert len(chunks) == 2 and applier.skipped
    assert follower.store.get_meta() == meta
    assert snapshot(applier.stream) == before


def test_messages_larger_than_a_chunk_travel_alone() -> None:
    leader = _stream([PublishEntry(T0_NS, _msgs(3, 500))])
    applier, chunks = transfer(leader, MemoryStore(), CatchupRequest.fresh(), 100)
    assert len(chunks) == 5  # header, one chunk per message, end
    assert_same(applier.stream, leader)


class _CountingStore(MemoryStore):
    """A memory store that counts reads (the leader's, in the cost test)."""

    def __init__(self) -> None:
        super().__init__()
        self.loads = 0
        self.scans = 0

    def load(self, seq: int) -> StoredMsg | None:
        self.loads += 1
        return super().load(seq)

    def scan(self) -> Any:
        self.scans += 1
        return super().scan()


def test_transfer_cost_follows_what_is_missing_not_the_stream_size() -> None:
    """Measured: a leader holding 10,000 messages (1.04 MB of subjects and payloads), a follower
    lacking the last 10 and 3 deletions in its range. Its request is 1.3 KB (a live count per
    bucket of 64 seqs); the transfer is 4 chunks, 1.7 KB in all (header with the meta, one
    removal chunk of 3 runs, one message chunk with the 10 messages, end), and to build it the
    leader loads exactly those 10 messages from its store and never scans it: the other 9,990
    messages cost nothing. A fresh follower, lacking everything, gets more than the whole 1 MB.
    The bytes follow what is missing, not the size of the stream."""
    publishes: list[Entry] = [PublishEntry(T0_NS + i, _msgs(100, 100)) for i in range(99)]
    publishes.append(PublishEntry(T0_NS + 99, _msgs(90, 100)))
    tail: list[Entry] = [
        DeleteMsgEntry(T0_NS + 100, 5, True),
        DeleteMsgEntry(T0_NS + 101, 500, True),
        DeleteMsgEntry(T0_NS + 102, 5000, False),
        PublishEntry(T0_NS + 103, _msgs(10, 100)),
    ]
    store = _CountingStore()
    leader = _stream(publishes + tail, store)
    assert leader.last_seq == 10_000
    full_bytes = sum(len(m.subject) + len(m.hdr) + len(m.data) for m in store.scan())
    follower = _stream(publishes)
    store.loads = store.scans = 0

    req = CatchupRequest.of(follower)
    assert len(req.encode()) < 1_400
    chunks = list(plan_transfer(leader, CatchupRequest.decode(req.encode()), 64 * 1024))
    assert (store.loads, store.scans) == (10, 0)
    sent = sum(len(c) for c in chunks)
    assert len(chunks) == 4
    applier = TransferApplier(follower.store, req)
    assert [applier.feed(c) for c in chunks] == [False, False, False, True]
    assert sent < 2_000 and sent * 500 < full_bytes  # 1.7 KB of 1.04 MB
    assert applier.messages_appended == 10
    assert_same(applier.stream, leader)

    _, fresh_chunks = transfer(leader, MemoryStore(), CatchupRequest.fresh(), 64 * 1024)
    assert sum(len(c) for c in fresh_chunks) > full_bytes


def test_runs_of_holes_are_sent_as_ranges() -> None:
    """A purge that removed a long stretch of the follower's range costs one 16-byte run."""
    entries: list[Entry] = [PublishEntry(T0_NS, _msgs(5000, 1))]
    follower = _stream(entries)
    entries.append(PurgeEntry(T0_NS + 1, "S.a0", 0, 0))  # every third message
    entries.append(PurgeEntry(T0_NS + 2, "", 4000, 0))  # everything below 4000
    leader = _stream(entries)
    applier, chunks = transfer(leader, follower.store, CatchupRequest.of(follower), 1 << 20)
    assert len(chunks) == 3
    assert_same(applier.stream, leader)


# ====================================================================== damage and interruption


def _reseal(chunk: bytes, body_edit: Any) -> bytes:
    """The chunk with its bytes edited and a valid CRC again (a leader gone wrong, not noise)."""
    raw = body_edit(bytearray(chunk[:-4]))
    return bytes(raw) + zlib.crc32(raw).to_bytes(4, "big")


def test_every_tampered_chunk_is_refused_and_the_store_never_opens_half_done() -> None:
    entries = _scenario()
    leader = _stream(entries)
    follower_prefix = entries[:3]
    req = CatchupRequest.of(_stream(follower_prefix))
    chunks = list(plan_transfer(leader, req, 120))
    assert len(chunks) > 4
    for i, chunk in enumerate(chunks):
        for pos in sorted({0, 1, 5, 13, len(chunk) // 2, len(chunk) - 1}):
            follower = _stream(follower_prefix)
            store = follower.store
            applier = TransferApplier(store, req)
            for good in chunks[:i]:
                applier.feed(good)
            bad = bytearray(chunk)
            bad[pos] ^= 0x40
            with pytest.raises(TransferError):
                applier.feed(bytes(bad))
            with pytest.raises(TransferError):
                applier.feed(chunk)  # a failed applier takes nothing more
            resume = resume_request(store)
            if i == 0:
                assert resume is None  # nothing was touched: the stream still opens as it was
                assert snapshot(Stream.open(store)) == snapshot(follower)
                continue
            assert resume is not None
            with pytest.raises(StreamMetaError):
                Stream.open(store)
            applier2, _ = transfer(leader, store, resume, 120)
            assert_same(applier2.stream, leader)


@pytest.mark.parametrize(
    "case", ["missing", "duplicated", "reordered", "foreign", "no header", "after the end"]
)
def test_missing_duplicated_or_foreign_chunks_are_refused(case: str) -> None:
    entries = _scenario()
    leader = _stream(entries)
    req = CatchupRequest.of(_stream(entries[:3]))
    chunks = list(plan_transfer(leader, req, 120))
    foreign = list(plan_transfer(_stream(entries[:-1]), req, 120))  # another leader index
    fed = {
        "missing": [chunks[0], chunks[2]],
        "duplicated": [chunks[0], chunks[1], chunks[1]],
        "reordered": [chunks[0], chunks[2], chunks[1]],
        "foreign": [chunks[0], foreign[1]],
        "no header": chunks[1:2],
        "after the end": [*chunks, chunks[-1]],
    }[case]
    applier = TransferApplier(_stream(entries[:3]).store, req)
    with pytest.raises(TransferError):
        for chunk in fed:
            applier.feed(chunk)


def test_answer_to_another_request_is_refused() -> None:
    leader = _stream(_scenario())
    chunks = list(plan_transfer(leader, CatchupRequest.fresh(), 120))
    follower = _stream(_scenario()[:2])
    applier = TransferApplier(follower.store, CatchupRequest.of(follower))
    with pytest.raises(TransferError, match="another request"):
        applier.feed(chunks[0])
    assert resume_request(follower.store) is None


def test_forged_digest_is_detected_and_the_store_stays_marked() -> None:
    leader = _stream(_scenario())
    follower = _stream(_scenario()[:3])
    req = CatchupRequest.of(follower)
    chunks = list(plan_transfer(leader, req, 1 << 20))

    def flip_digest(raw: bytearray) -> bytearray:
        raw[-1] ^= 1
        return raw

    applier = TransferApplier(follower.store, req)
    for chunk in chunks[:-1]:
        applier.feed(chunk)
    with pytest.raises(TransferError, match="digest mismatch"):
        applier.feed(_reseal(chunks[-1], flip_digest))
    assert resume_request(follower.store) is not None
    with pytest.raises(StreamMetaError):
        Stream.open(follower.store)


def test_diverged_follower_fails_the_digest_check() -> None:
    entries = _scenario()
    leader = _stream(entries)
    follower = _stream([*entries[:2], PublishEntry(T0_NS + 2, _msgs(10, 9))])  # other payloads
    with pytest.raises(TransferError, match="digest mismatch"):
        transfer(leader, follower.store, CatchupRequest.of(follower), 1 << 20)


def test_forged_run_outside_the_followers_range_is_refused_before_removing() -> None:
    entries = _scenario()
    leader = _stream(entries)
    follower = _stream(entries[:3])
    req = CatchupRequest.of(follower)
    chunks = list(plan_transfer(leader, req, 1 << 20))
    assert len(chunks) == 4  # header, removals, messages, end
    before = list(follower.store.scan())

    def widen_last_run(raw: bytearray) -> bytearray:
        raw[-8:] = (req.last_seq + 1).to_bytes(8, "big")
        return raw

    applier = TransferApplier(follower.store, req)
    applier.feed(chunks[0])
    kept = list(follower.store.scan())
    with pytest.raises(TransferError, match="outside"):
        applier.feed(_reseal(chunks[1], widen_last_run))
    assert list(follower.store.scan()) == kept and len(kept) <= len(before)


def test_leader_applying_during_a_lazy_transfer_is_refused() -> None:
    entries = _scenario()
    leader = _stream(entries[:-1])
    chunks = plan_transfer(leader, CatchupRequest.fresh(), 120)
    next(chunks)
    leader.apply(len(entries), entries[-1])
    with pytest.raises(TransferError, match="moved"):
        next(chunks)


def test_store_with_an_interrupted_transfer_takes_only_its_resume_request() -> None:
    leader = _stream(_scenario())
    store = MemoryStore()
    chunks = list(plan_transfer(leader, CatchupRequest.fresh(), 120))
    applier = TransferApplier(store, CatchupRequest.fresh())
    applier.feed(chunks[0])
    applier.feed(chunks[1])
    resume = resume_request(store)
    assert resume is not None and resume != CatchupRequest.fresh()
    with pytest.raises(TransferError, match="interrupted"):
        TransferApplier(store, CatchupRequest.fresh())


class _CrashingStore(CrashingStoreMixin, MemoryStore):
    """A memory store that 'crashes' (raises, doing nothing) at its n-th mutation."""


def test_a_transfer_cut_at_any_store_operation_resumes_even_after_the_leader_moved() -> None:
    """The store keeps exactly the operations before the cut (a crash recovers a prefix of them,
    which the file store's own tests establish). Meanwhile the leader applies more entries,
    deleting messages the follower may have half received; the resumed transfer still ends equal.
    """
    entries = _scenario()
    moved: list[Entry] = [
        DeleteMsgEntry(T0_NS + 30, 35, True),
        DeleteMsgEntry(T0_NS + 31, 8, True),
        PublishEntry(T0_NS + 32, _msgs(4)),
    ]
    cut = 0
    while True:
        leader = _stream(entries)
        store = _CrashingStore()
        follower = _stream(entries[:3], store)
        req = CatchupRequest.of(follower)
        store.mutations_left = cut
        try:
            transfer(leader, store, req, 120)
        except StoreCrash:
            pass
        else:
            break  # the cut fell after the last operation: every cut point has been tried
        store.mutations_left = None
        for index, entry in enumerate(moved, start=len(entries) + 1):
            leader.apply(index, entry)
        resume = resume_request(store)
        applier, _ = transfer(leader, store, req if resume is None else resume, 120)
        assert_same(applier.stream, leader)
        cut += 1
    assert cut > 10


# ====================================================================== request codec


@settings(max_examples=100, deadline=None)
@given(
    st.integers(0, 1 << 64),
    st.integers(0, (1 << 64) - 1),
    st.integers(0, (1 << 64) - 1),
    st.integers(0, (1 << 64) - 1),
)
def test_request_round_trip(first: int, last: int, applied: int, partial: int) -> None:
    if first > last + 1 or first > (1 << 64) - 1:
        with pytest.raises(TransferError):
            CatchupRequest(first, last, applied, partial)
        return
    req = CatchupRequest(first, last, applied, partial)
    assert CatchupRequest.decode(req.encode()) == req


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=60))
def test_request_garbage_only_raises_transfer_error(raw: bytes) -> None:
    try:
        CatchupRequest.decode(raw)
    except TransferError:
        pass


def test_request_tampering_is_detected() -> None:
    raw = CatchupRequest(3, 9, 12).encode()
    for pos in range(len(raw)):
        bad = bytearray(raw)
        bad[pos] ^= 0x01
        with pytest.raises(TransferError):
            CatchupRequest.decode(bytes(bad))
    with pytest.raises(ValueError):
        next(plan_transfer(_stream([]), CatchupRequest.fresh(), TRANSFER_CHUNK_BYTES_MIN - 1))
