"""The MessageStore contract, checked identically on the memory store and the file store."""

from __future__ import annotations

from engine.store import MessageStore, StoredMsg
from tests.engine.store.conftest import StoreHandle


def msg(
    seq: int, subject: str = "orders.new", data: bytes | None = None, hdr: bytes = b""
) -> StoredMsg:
    payload = f"payload-{seq}".encode() if data is None else data
    return StoredMsg(seq=seq, subject=subject, hdr=hdr, data=payload, ts_ns=1_700_000_000_000 + seq)


def live_seqs(store: MessageStore) -> list[int]:
    return [m.seq for m in store.scan()]


def test_append_then_load_returns_the_same_message(store: MessageStore) -> None:
    hdr = b"NATS/1.0\r\nNats-Msg-Id: abc\r\n\r\n"
    stored = [
        msg(1),
        msg(2, subject="ünïcode.subject", hdr=hdr),
        msg(3, data=b""),
        msg(4, data=bytes(range(256)) * 400),
    ]
    for m in stored:
        store.append(m)
    for m in stored:
        assert store.load(m.seq) == m
    store.flush()
    for m in stored:
        assert store.load(m.seq) == m


def test_load_of_absent_sequences_is_none(store: MessageStore) -> None:
    assert store.load(1) is None
    store.append(msg(5))
    store.append(msg(9))
    assert [store.load(s) for s in (0, 1, 4, 6, 8, 10)] == [None] * 6
    assert store.load(9) == msg(9)


def test_remove_reports_whether_it_removed(store: MessageStore) -> None:
    for seq in (1, 2, 3):
        store.append(msg(seq))
    assert store.remove(2) is True
    assert store.remove(2) is False
    assert store.remove(7) is False
    assert store.load(2) is None
    assert live_seqs(store) == [1, 3]


def test_erase_removes_like_remove(store: MessageStore) -> None:
    for seq in (1, 2, 3):
        store.append(msg(seq))
    store.flush()
    assert store.remove(2, erase=True) is True
    assert store.remove(3, erase=True) is True  # 3 may still sit in a buffer for some stores
    assert store.load(2) is None and store.load(3) is None
    assert live_seqs(store) == [1]
    assert store.corrupt_records() == []


def test_remove_through_removes_everything_at_or_below(store: MessageStore) -> None:
    for seq in range(1, 11):
        store.append(msg(seq))
    store.remove(7)
    store.remove_through(4)
    assert live_seqs(store) == [5, 6, 8, 9, 10]
    store.remove_through(4)  # idempotent
    store.remove_through(0)  # nothing at or below 0
    assert live_seqs(store) == [5, 6, 8, 9, 10]
    store.remove_through(100)
    assert live_seqs(store) == []
    store.append(msg(101))
    assert live_seqs(store) == [101]


def test_scan_yields_live_messages_in_sequence_order(store: MessageStore) -> None:
    for seq in range(1, 30, 2):
        store.append(msg(seq, subject=f"s.{seq % 3}"))
    for seq in (3, 11, 29):
        store.remove(seq)
    scanned = list(store.scan())
    assert [m.seq for m in scanned] == [s for s in range(1, 30, 2) if s not in (3, 11, 29)]
    assert all(m == msg(m.seq, subject=f"s.{m.seq % 3}") for m in scanned)


def test_meta_is_none_until_set_and_the_last_set_wins(store: MessageStore) -> None:
    assert store.get_meta() is None
    store.set_meta(b"first")
    store.append(msg(1))
    store.set_meta(b"second")
    assert store.get_meta() == b"second"
    store.set_meta(b"")
    assert store.get_meta() == b""


def test_sync_calls_are_safe_on_an_empty_store(store: MessageStore) -> None:
    store.flush()
    store.fsync()
    store.sync()
    assert list(store.scan()) == [] and store.corrupt_records() == []


def test_reopen_restores_messages_removals_and_meta(handle: StoreHandle) -> None:
    store = handle.store
    for seq in range(1, 41):
        store.append(msg(seq, data=bytes([seq]) * seq))
    store.remove(3)
    store.remove(20, erase=True)
    store.remove_through(10)
    store.set_meta(b"applied=41")
    before = list(store.scan())
    reopened = handle.reopen()
    assert list(reopened.scan()) == before
    assert reopened.get_meta() == b"applied=41"
    assert reopened.corrupt_records() == []
    assert (
        reopened.load(20) is None
        and reopened.load(10) is None
        and reopened.load(11) == msg(11, data=bytes([11]) * 11)
    )
    reopened.append(msg(41 + 1))
    assert handle.reopen().load(42) == msg(42)


def test_reopen_of_a_fully_removed_store_keeps_the_meta(handle: StoreHandle) -> None:
    store = handle.store
    store.set_meta(b"m1")
    for seq in range(1, 60):
        store.append(msg(seq))
    store.set_meta(b"m2")
    store.remove_through(59)
    reopened = handle.reopen()
    assert list(reopened.scan()) == []
    assert reopened.get_meta() == b"m2"
