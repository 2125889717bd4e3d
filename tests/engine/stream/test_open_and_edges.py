"""Opening a stream on an existing store, damaged records and meta, and rarely hit edges."""

from __future__ import annotations

import pytest

from engine.entries import InboundMsg, PublishEntry, UpdateConfigEntry
from engine.memstore import MemoryStore
from engine.store import StoredMsg
from engine.stream import Stream, StreamMetaError
from tests.engine.stream.harness import CREATED_NS, T0_NS, MakeHarness, hdr, make_config


def test_reopen_keeps_state_that_the_store_cannot_derive(make_harness: MakeHarness) -> None:
    h = make_harness(first_seq=10)
    h.ok("S.a", headers=hdr(("Nats-Msg-Id", "a")))
    h.ok("S.b")
    h.update(max_msgs=50)
    h.purge(seq=20)  # compact past the end: last_seq 19, nothing stored
    before = (h.stream.digest(), h.stream.state(), h.stream.config, h.stream.last_msg_id)
    stream = h.reopen()
    assert (stream.digest(), stream.state(), stream.config, stream.last_msg_id) == before
    assert stream.applied_index == h.index
    assert stream.created_ns == CREATED_NS
    assert h.ok("S.c") == 20


def test_open_adopts_messages_stored_without_meta() -> None:
    store = MemoryStore()
    store.append(StoredMsg(3, "S.a", b"", b"1", T0_NS))
    store.append(StoredMsg(4, "S.b", hdr(("Nats-Msg-Id", "m4")), b"2", T0_NS + 5))
    stream = Stream(make_config(), store, CREATED_NS)
    state = stream.state()
    assert (state.messages, state.first_seq, state.last_seq, state.last_ts_ns) == (
        2,
        3,
        4,
        T0_NS + 5,
    )
    assert stream.last_msg_id == "m4"
    (dup,) = stream.apply_publish(
        1, PublishEntry(T0_NS + 6, (InboundMsg("S.c", hdr(("Nats-Msg-Id", "m4")), b""),))
    )
    assert (dup.seq, dup.duplicate) == (4, True)


@pytest.mark.parametrize(
    "meta",
    [b"", b"\x01", b"\x09" + bytes(60), bytes([1]) + bytes(40) + b"\x00\x00\x00\x05ab"],
)
def test_bad_meta_is_a_typed_error(meta: bytes) -> None:
    store = MemoryStore()
    store.set_meta(meta)
    with pytest.raises(StreamMetaError):
        Stream(make_config(), store, CREATED_NS)


class _DamagedStore(MemoryStore):
    """A store whose record for some seqs failed its checksum: it is never served."""

    def __init__(self, damaged: set[int]) -> None:
        super().__init__()
        self.damaged = damaged

    def load(self, seq: int) -> StoredMsg | None:
        return None if seq in self.damaged else super().load(seq)


def test_damaged_records_are_skipped_by_queries() -> None:
    store = _DamagedStore({2, 3})
    stream = Stream(make_config(), store, CREATED_NS)
    msgs = tuple(InboundMsg("S.a", b"", bytes([i])) for i in range(4))
    stream.apply_publish(1, PublishEntry(T0_NS, msgs))
    assert stream.load(2) is None
    next_msg = stream.load_next(2, "S.a")
    assert next_msg is not None and next_msg.seq == 4
    last_msg = stream.load_last("S.*", 3)
    assert last_msg is not None and last_msg.seq == 1


def test_rollup_value_quoting_follows_go(make_harness: MakeHarness) -> None:
    h = make_harness(allow_rollup_hdrs=True)
    error = h.fail("S.a", headers=hdr(("Nats-Rollup", "Sub\x01\tÉ")))
    assert error.description == 'rollup value invalid: "sub\\x01\\té"'
    raw = b"NATS/1.0\r\nNats-Rollup: Al\xffl\r\n\r\n"  # invalid UTF-8 becomes U+FFFD
    assert h.fail("S.a", headers=raw).description == 'rollup value invalid: "al\ufffdl"'


def test_file_record_over_32_mib_is_refused_before_anything_else() -> None:
    stream = Stream(make_config(storage="file", sealed=True), MemoryStore(), CREATED_NS)
    big = InboundMsg("S.a", b"", bytes(32 * 1024 * 1024))
    (result,) = stream.apply_publish(1, PublishEntry(T0_NS, (big,)))
    assert result.error is not None
    assert (result.error.err_code, result.error.description) == (10077, "message too large")


def test_update_with_unparsable_config_is_refused() -> None:
    stream = Stream(make_config(), MemoryStore(), CREATED_NS)
    error = stream.apply_update(1, UpdateConfigEntry(T0_NS, b"{not json"))
    assert error is not None and error.err_code == 10052
    assert stream.config == make_config()
    assert stream.applied_index == 1


def test_compact_below_last_that_leaves_nothing(make_harness: MakeHarness) -> None:
    h = make_harness()
    for _ in range(5):
        h.ok("S.a")
    h.delete(5)
    assert h.purge(seq=5) == 4
    state = h.stream.state()
    assert (state.messages, state.first_seq, state.last_seq) == (0, 6, 5)


def test_view_first_seq_of_a_new_stream(make_harness: MakeHarness) -> None:
    h = make_harness()
    assert (h.stream.first_seq, h.stream.last_seq, h.stream.state().first_seq) == (1, 0, 0)
    assert h.stream.name == "S"
    assert h.stream.load_next(0) is None and h.stream.load_last(">") is None
    assert h.stream.seq_for_time(0) == 0 and h.stream.multi_last([">"], 0, 10) == []
