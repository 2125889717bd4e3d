"""DurableJournal: format, recovery of torn/corrupt files, durability bookkeeping, and a model test.

Crashes are simulated by closing the journal and damaging or editing its files the way an
interrupted write would; a real process crash is simulated once with a child process that exits
without syncing or closing.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from pysyncobj.journal import Journal

from cluster.raft import journal as raft_journal
from cluster.raft.journal import (
    HEADER_BYTES,
    LOG_FILE_NAME,
    META_FILE_NAME,
    DurableJournal,
    JournalCorruptError,
    JournalEntry,
    JournalFailedError,
    JournalLockedError,
)
from engine import disk
from tests.disk_faults import FALLOCATE_NO_SPACE, FALLOCATE_UNSUPPORTED, refuse_fallocate

PROJECT_ROOT = Path(__file__).resolve().parents[2]
CHILD_TIMEOUT_S = 30.0
THREAD_JOIN_TIMEOUT_S = 10.0
RECORD_OVERHEAD = 8 + 16  # len + crc, idx + term
MODEL_MAX_EXAMPLES = 60
MODEL_STEPS = 30


def _entries(count: int, *, first_idx: int = 1, term: int = 1) -> list[JournalEntry]:
    return [(b"cmd-%d" % i, i, term) for i in range(first_idx, first_idx + count)]


def _fill(journal: DurableJournal, entries: list[JournalEntry]) -> None:
    for entry in entries:
        journal.add(*entry)


def _count_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Makes os.fsync record the fds it is called on (and still fsync them)."""
    fsynced: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        fsynced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    return fsynced


def _record_offsets(entries: list[JournalEntry]) -> list[int]:
    offsets, offset = [], HEADER_BYTES
    for cmd, _, _ in entries:
        offsets.append(offset)
        offset += RECORD_OVERHEAD + len(cmd)
    return offsets


@pytest.fixture
def jdir(tmp_path: Path) -> Path:
    return tmp_path / "journal"


@pytest.fixture
def opened(jdir: Path) -> Iterator[Callable[[], DurableJournal]]:
    """Opens journals on ``jdir``; whatever is still open at the end is closed."""
    journals: list[DurableJournal] = []

    def open_() -> DurableJournal:
        journal = DurableJournal(jdir)
        journals.append(journal)
        return journal

    yield open_
    for journal in journals:
        journal._destroy()


def _log_data(journal: DurableJournal) -> bytes:
    """The log file's bytes up to the journal's end, after checking that everything beyond it
    is space reserved ahead of appends (zeros)."""
    raw = (journal.path / LOG_FILE_NAME).read_bytes()
    assert len(raw) >= journal.size_bytes
    assert not raw[journal.size_bytes :].strip(b"\0")
    return raw[: journal.size_bytes]


def _reopen(journal: DurableJournal, opened: Callable[[], DurableJournal]) -> DurableJournal:
    journal._destroy()
    return opened()


# ---------------------------------------------------------------------- basics and format


def test_fresh_journal_has_pysyncobj_defaults(
    jdir: Path, opened: Callable[[], DurableJournal]
) -> None:
    journal = opened()
    # not a subclass (only the adapter imports pysyncobj), but every method pysyncobj calls
    interface = [n for n in vars(Journal) if n in ("__getitem__", "__len__") or n[:2] != "__"]
    assert len(interface) == 13 and all(callable(getattr(journal, n, None)) for n in interface)
    assert len(journal) == 0
    assert journal.getCurrentTerm() == 0
    assert journal.getVotedForNodeId() is None
    assert journal.getRaftCommitIndex() == 1
    assert not journal.dirty
    assert journal.synced_index == 0
    assert journal.size_bytes == HEADER_BYTES == (jdir / LOG_FILE_NAME).stat().st_size
    assert (jdir / LOG_FILE_NAME).read_bytes()[:8] == b"JRRAFTLG"
    with pytest.raises(IndexError):
        journal[0]


def test_round_trip_and_reopen(jdir: Path, opened: Callable[[], DurableJournal]) -> None:
    journal = opened()
    entries = [(b"\x00", 1, 0), (b"", 2, 1), (b"x" * 10_000, 3, 1), (b"last", 4, 5)]
    _fill(journal, entries)
    assert len(journal) == 4
    assert journal[0] == entries[0]
    assert journal[-1][1] == 4
    assert journal[1:3] == entries[1:3]
    assert journal[2:] == entries[2:]
    assert journal[10:12] == []
    _log_data(journal)
    assert journal.size_bytes == HEADER_BYTES + sum(RECORD_OVERHEAD + len(e[0]) for e in entries)
    journal._destroy()
    assert (jdir / LOG_FILE_NAME).stat().st_size == journal.size_bytes  # the reserve is cut
    journal = opened()
    assert journal[:] == entries
    assert all(type(e[0]) is bytes for e in journal[:])
    assert journal.recovery_notes() == []
    journal.add(b"more", 5, 5)
    journal = _reopen(journal, opened)
    assert journal[:] == [*entries, (b"more", 5, 5)]


def test_record_layout_is_the_documented_one(
    jdir: Path, opened: Callable[[], DurableJournal]
) -> None:
    journal = opened()
    journal.add(b"hello", 7, 3)
    raw = _log_data(journal)
    assert raw[:HEADER_BYTES] == struct.pack("<8sII", b"JRRAFTLG", 1, 0)
    plen, crc = struct.unpack_from("<II", raw, HEADER_BYTES)
    payload = raw[HEADER_BYTES + 8 :]
    assert plen == len(payload) == 16 + 5
    assert crc == zlib.crc32(payload)
    assert struct.unpack_from("<QQ", payload) == (7, 3)
    assert payload[16:] == b"hello"


def test_bytes_like_commands_are_stored_as_bytes(opened: Callable[[], DurableJournal]) -> None:
    journal = opened()
    journal.add(bytearray(b"ab"), 1, 1)
    journal.add(memoryview(b"cd"), 2, 1)
    assert journal[:] == [(b"ab", 1, 1), (b"cd", 2, 1)]
    assert all(type(e[0]) is bytes for e in journal[:])


def test_add_asserts_raft_log_invariants(opened: Callable[[], DurableJournal]) -> None:
    journal = opened()
    _fill(journal, _entries(3, term=2))
    size, gen = journal.size_bytes, journal.append_generation
    with pytest.raises(AssertionError, match="does not follow"):
        journal.add(b"gap", 5, 2)
    with pytest.raises(AssertionError, match="does not follow"):
        journal.add(b"repeat", 3, 2)
    with pytest.raises(AssertionError, match="below last term"):
        journal.add(b"older", 4, 1)
    with pytest.raises(AssertionError, match="u64"):
        journal.add(b"neg", -1, 2)
    assert (journal[:], journal.size_bytes, journal.append_generation) == (
        _entries(3, term=2),
        size,
        gen,
    )
    journal.add(b"ok", 4, 9)  # a higher term is fine
    assert journal[-1] == (b"ok", 4, 9)


def test_second_open_is_refused_until_closed(
    jdir: Path, opened: Callable[[], DurableJournal]
) -> None:
    journal = opened()
    with pytest.raises(JournalLockedError):
        DurableJournal(jdir)
    journal._destroy()
    journal._destroy()  # idempotent
    opened()


def test_closed_journal_refuses_writes(opened: Callable[[], DurableJournal]) -> None:
    journal = opened()
    journal._destroy()
    with pytest.raises(raft_journal.JournalError, match="closed"):
        journal.add(b"x", 1, 1)
    with pytest.raises(raft_journal.JournalError, match="closed"):
        journal.sync()


# ---------------------------------------------------------------------- recovery


@pytest.mark.parametrize("cut_into_last", [1, 7, 8, 20, RECORD_OVERHEAD + 2])
def test_torn_tail_is_cut_and_prefix_kept(
    jdir: Path,
    opened: Callable[[], DurableJournal],
    caplog: pytest.LogCaptureFixture,
    cut_into_last: int,
) -> None:
    entries = [(b"command-%d" % i, i, 1) for i in range(1, 6)]
    journal = opened()
    _fill(journal, entries)
    journal._destroy()
    last_offset = _record_offsets(entries)[-1]
    with open(jdir / LOG_FILE_NAME, "r+b") as f:
        f.truncate(last_offset + cut_into_last)
    with caplog.at_level(logging.WARNING, logger="cluster.raft.journal"):
        journal = opened()
    assert journal[:] == entries[:4]
    assert (jdir / LOG_FILE_NAME).stat().st_size == last_offset == journal.size_bytes
    assert any("cut" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    assert len(journal.recovery_notes()) == 1
    journal.add(b"again", 5, 2)
    journal = _reopen(journal, opened)
    assert journal[:] == [*entries[:4], (b"again", 5, 2)]
    assert journal.recovery_notes() == []


def test_zero_filled_tail_is_cut(jdir: Path, opened: Callable[[], DurableJournal]) -> None:
    journal = opened()
    _fill(journal, _entries(3))
    size = journal.size_bytes
    journal._destroy()
    with open(jdir / LOG_FILE_NAME, "ab") as f:
        f.write(b"\0" * 4096)  # a power loss can leave allocated but unwritten blocks
    journal = opened()
    assert journal[:] == _entries(3)
    assert (jdir / LOG_FILE_NAME).stat().st_size == size


# offsets inside record 3 (0-based 2): length field, crc field, idx, term, command bytes
@pytest.mark.parametrize("flip_at", [0, 5, 8, 16, 24, 27])
def test_bit_flip_stops_the_scan_at_that_record(
    jdir: Path, opened: Callable[[], DurableJournal], flip_at: int
) -> None:
    entries = [(b"command-%d" % i, i, 1) for i in range(1, 7)]
    journal = opened()
    _fill(journal, entries)
    journal._destroy()
    bad_offset = _record_offsets(entries)[2]
    path = jdir / LOG_FILE_NAME
    raw = bytearray(path.read_bytes())
    raw[bad_offset + flip_at] ^= 0x10
    path.write_bytes(bytes(raw))
    journal = opened()
    assert journal[:] == entries[:2]
    assert path.stat().st_size == bad_offset
    assert f"offset {bad_offset}" in journal.recovery_notes()[0]


def test_record_that_does_not_follow_is_cut(
    jdir: Path, opened: Callable[[], DurableJournal]
) -> None:
    # A valid record with a lower term after a higher one: the leftover of an unsynced
    # truncation mixed with a newer append. Build the file by hand from two journals.
    journal = opened()
    _fill(journal, [(b"a", 1, 1), (b"b", 2, 5)])
    journal._destroy()
    with open(jdir / LOG_FILE_NAME, "ab") as f:
        f.write(raft_journal._encode_record(b"stale", 3, 2))
    journal = opened()
    assert journal[:] == [(b"a", 1, 1), (b"b", 2, 5)]
    assert "does not follow" in journal.recovery_notes()[0]


def test_bad_header_or_meta_is_an_error_not_a_reset(
    jdir: Path, opened: Callable[[], DurableJournal]
) -> None:
    journal = opened()
    journal.add(b"a", 1, 1)
    journal.setCurrentTerm(3, "n1")
    journal._destroy()
    log_path, meta_path = jdir / LOG_FILE_NAME, jdir / META_FILE_NAME
    good_log, good_meta = log_path.read_bytes(), meta_path.read_bytes()

    log_path.write_bytes(b"XX" + good_log[2:])
    with pytest.raises(JournalCorruptError, match="magic"):
        DurableJournal(jdir)
    log_path.write_bytes(good_log[:8] + struct.pack("<I", 99) + good_log[12:])
    with pytest.raises(JournalCorruptError, match="version"):
        DurableJournal(jdir)
    log_path.write_bytes(good_log[:5])
    with pytest.raises(JournalCorruptError, match="header"):
        DurableJournal(jdir)
    log_path.write_bytes(good_log)

    for bad in [b"{not json", b"[]", json.dumps({"version": 1}).encode()]:
        meta_path.write_bytes(bad)
        with pytest.raises(JournalCorruptError):
            DurableJournal(jdir)
    meta = json.loads(good_meta)
    for key, value in [("version", 2), ("current_term", "3"), ("voted_for", 7)]:
        meta_path.write_text(json.dumps({**meta, key: value}))
        with pytest.raises(JournalCorruptError):
            DurableJournal(jdir)
    meta_path.write_bytes(good_meta)
    journal = opened()  # the failed opens released the lock and left the files usable
    assert (journal[:], journal.getCurrentTerm(), journal.getVotedForNodeId()) == (
        [(b"a", 1, 1)],
        3,
        "n1",
    )


# ---------------------------------------------------------------------- truncation, compaction


def test_delete_entries_from_truncates_the_file(
    jdir: Path, opened: Callable[[], DurableJournal]
) -> None:
    entries = _entries(6)
    journal = opened()
    _fill(journal, entries)
    journal.sync()
    journal.deleteEntriesFrom(10)  # beyond the end: nothing to do
    assert not journal.dirty
    journal.deleteEntriesFrom(3)
    assert journal.dirty
    assert journal[:] == entries[:3]
    assert journal.size_bytes == _record_offsets(entries)[3]
    assert (jdir / LOG_FILE_NAME).stat().st_size == journal.size_bytes
    assert journal.synced_index == 3
    journal.add(b"new-4", 4, 2)
    journal = _reopen(journal, opened)
    assert journal[:] == [*entries[:3], (b"new-4", 4, 2)]
    journal.clear()
    assert len(journal) == 0
    journal.add(b"snap-prev", 100, 7)  # after clear (snapshot install) any idx may start
    journal.add(b"snap-last", 101, 7)
    journal = _reopen(journal, opened)
    assert journal[:] == [(b"snap-prev", 100, 7), (b"snap-last", 101, 7)]


def test_delete_entries_to_compacts_durably(
    jdir: Path, opened: Callable[[], DurableJournal]
) -> None:
    entries = _entries(10)
    journal = opened()
    _fill(journal, entries)
    assert journal.dirty
    journal.deleteEntriesTo(0)
    assert len(journal) == 10
    journal.deleteEntriesTo(7)
    assert journal[:] == entries[7:]
    assert journal[0][1] == 8
    assert not journal.dirty  # the rewritten file was fsynced
    assert journal.synced_index == 10
    assert journal.size_bytes == (jdir / LOG_FILE_NAME).stat().st_size
    assert sorted(p.name for p in jdir.iterdir()) == ["LOCK", LOG_FILE_NAME]
    journal.add(b"cmd-11", 11, 1)
    journal = _reopen(journal, opened)
    assert journal[:] == [*entries[7:], (b"cmd-11", 11, 1)]
    journal.deleteEntriesTo(50)  # more than there is: everything goes
    assert len(journal) == 0
    journal = _reopen(journal, opened)
    assert len(journal) == 0


def test_leftover_tmp_files_are_ignored_and_removed(
    jdir: Path, opened: Callable[[], DurableJournal]
) -> None:
    journal = opened()
    _fill(journal, _entries(4))
    journal.setCurrentTerm(2, None)
    journal._destroy()
    # a compaction and a meta write that crashed before their rename
    (jdir / (LOG_FILE_NAME + ".tmp")).write_bytes(b"JRRAFTLG" + b"\xff" * 50)
    (jdir / (META_FILE_NAME + ".tmp")).write_text('{"current_term": 99')
    journal = opened()
    assert journal[:] == _entries(4)
    assert journal.getCurrentTerm() == 2
    assert not (jdir / (LOG_FILE_NAME + ".tmp")).exists()
    assert not (jdir / (META_FILE_NAME + ".tmp")).exists()
    assert len(journal.recovery_notes()) == 2


def test_failed_compaction_rename_changes_nothing(
    jdir: Path, opened: Callable[[], DurableJournal], monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = opened()
    _fill(journal, _entries(5))

    def failing_replace(src: object, dst: object) -> None:
        raise OSError(errno.ENOSPC, "no space")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError):
        journal.deleteEntriesTo(3)
    monkeypatch.undo()
    assert journal[:] == _entries(5)
    assert not (jdir / (LOG_FILE_NAME + ".tmp")).exists()
    journal.add(b"cmd-6", 6, 1)  # still usable
    journal = _reopen(journal, opened)
    assert journal[:] == _entries(6)


# ---------------------------------------------------------------------- term, vote, commit index


def test_term_and_vote_are_durable_before_return(
    jdir: Path, opened: Callable[[], DurableJournal], monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = opened()
    fsynced = _count_fsyncs(monkeypatch)
    journal.setCurrentTerm(4, "127.0.0.1:6222")
    assert len(fsynced) == 2  # the tmp file, then the directory after the rename
    meta = json.loads((jdir / META_FILE_NAME).read_text())
    assert meta == {
        "format": "jetraft-raft-meta",
        "version": 1,
        "current_term": 4,
        "voted_for": "127.0.0.1:6222",
        "commit_index": 1,
    }
    # The same values again need no write.
    journal.setCurrentTerm(4, "127.0.0.1:6222")
    assert len(fsynced) == 2
    journal.setCurrentTerm(5, None)
    journal = _reopen(journal, opened)  # no sync: setCurrentTerm alone made it durable
    assert (journal.getCurrentTerm(), journal.getVotedForNodeId()) == (5, None)


def test_term_and_vote_invariants(opened: Callable[[], DurableJournal]) -> None:
    journal = opened()
    journal.setCurrentTerm(3, None)
    journal.setCurrentTerm(3, "n1")  # voting in the current term
    with pytest.raises(AssertionError, match="second vote"):
        journal.setCurrentTerm(3, "n2")
    with pytest.raises(AssertionError, match="second vote"):
        journal.setCurrentTerm(3, None)
    with pytest.raises(AssertionError, match="going back"):
        journal.setCurrentTerm(2, None)
    with pytest.raises(TypeError):
        journal.setCurrentTerm(4, 5)  # type: ignore[arg-type]
    assert (journal.getCurrentTerm(), journal.getVotedForNodeId()) == (3, "n1")


def test_failed_term_write_is_not_reported(
    opened: Callable[[], DurableJournal], monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = opened()
    journal.setCurrentTerm(1, "n1")

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "io error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError):
        journal.setCurrentTerm(2, None)
    assert (journal.getCurrentTerm(), journal.getVotedForNodeId()) == (1, "n1")


def test_commit_index_is_persisted_lazily_and_clamped(
    jdir: Path, opened: Callable[[], DurableJournal]
) -> None:
    journal = opened()
    _fill(journal, _entries(10))
    journal.setRaftCommitIndex(4)
    assert journal.getRaftCommitIndex() == 4
    journal = _reopen(journal, opened)
    assert journal.getRaftCommitIndex() == 1  # never persisted

    journal.setRaftCommitIndex(6)
    journal.sync()
    journal = _reopen(journal, opened)
    assert journal.getRaftCommitIndex() == 6

    journal.setRaftCommitIndex(8)
    journal.onOneSecondTimer()
    journal = _reopen(journal, opened)
    assert journal.getRaftCommitIndex() == 8

    # Entries 11..15 are not synced: the stored commit index stops at the durable log.
    _fill(journal, _entries(5, first_idx=11))
    journal.setRaftCommitIndex(15)
    journal.onOneSecondTimer()
    assert json.loads((jdir / META_FILE_NAME).read_text())["commit_index"] == 10
    journal.sync(commit_index=False)
    assert json.loads((jdir / META_FILE_NAME).read_text())["commit_index"] == 10
    journal.onOneSecondTimer()
    assert json.loads((jdir / META_FILE_NAME).read_text())["commit_index"] == 15

    # A commit index beyond the log on open is clamped (and noted).
    journal.deleteEntriesTo(0)
    journal._destroy()
    meta = json.loads((jdir / META_FILE_NAME).read_text())
    (jdir / META_FILE_NAME).write_text(json.dumps({**meta, "commit_index": 40}))
    journal = opened()
    assert journal.getRaftCommitIndex() == 15
    assert "clamped" in journal.recovery_notes()[0]


# ---------------------------------------------------------------------- sync bookkeeping


def test_sync_generations_and_noop(
    opened: Callable[[], DurableJournal], monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = opened()
    fsynced = _count_fsyncs(monkeypatch)
    journal.add(b"a", 1, 1)
    gen_a = journal.append_generation
    journal.add(b"b", 2, 1)
    gen_b = journal.append_generation
    assert gen_b == gen_a + 1
    assert journal.dirty and journal.synced_generation < gen_a
    assert not fsynced  # appends never fsync
    journal.sync(commit_index=False)
    assert len(fsynced) == 1
    assert not journal.dirty
    assert journal.synced_generation == gen_b
    assert journal.synced_index == 2
    journal.sync()  # nothing pending and commit index unchanged: no I/O at all
    assert len(fsynced) == 1
    journal.deleteEntriesFrom(1)
    assert journal.dirty
    assert journal.synced_index == 1
    journal.sync(commit_index=False)
    assert len(fsynced) == 2 and not journal.dirty


def test_sync_does_not_block_appends_while_fsyncing(
    opened: Callable[[], DurableJournal], monkeypatch: pytest.MonkeyPatch
) -> None:
    """During the fsync of a sync() the owner adds and compacts; the sync covers only before."""
    journal = opened()
    _fill(journal, _entries(3))
    gen_before = journal.append_generation
    real_fsync = os.fsync
    done: list[str] = []

    def owner_work() -> None:
        journal.add(b"cmd-4", 4, 1)
        journal.add(b"cmd-5", 5, 1)
        done.append("added")

    def fsync_with_concurrent_owner(fd: int) -> None:
        if not done:
            owner = threading.Thread(target=owner_work)
            owner.start()
            owner.join(THREAD_JOIN_TIMEOUT_S)
            assert done == ["added"], "add blocked while sync() was fsyncing"
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync_with_concurrent_owner)
    journal.sync(commit_index=False)
    monkeypatch.undo()
    assert journal.synced_generation == gen_before
    assert journal.dirty
    assert journal.synced_index == 3
    journal.sync()
    assert journal.synced_index == 5


def test_compaction_during_a_workers_fsync(
    opened: Callable[[], DurableJournal], monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = opened()
    _fill(journal, _entries(6))
    real_fsync = os.fsync
    compacted: list[bool] = []

    def fsync_with_compaction(fd: int) -> None:
        if not compacted:
            compacted.append(True)
            owner = threading.Thread(target=journal.deleteEntriesTo, args=(4,))
            owner.start()
            owner.join(THREAD_JOIN_TIMEOUT_S)
            assert len(journal) == 2, "compaction blocked while sync() was fsyncing"
        real_fsync(fd)  # the worker's dup stays valid although the old fd was closed

    monkeypatch.setattr(os, "fsync", fsync_with_compaction)
    journal.sync(commit_index=False)
    monkeypatch.undo()
    assert not journal.dirty
    assert journal.synced_index == 6
    assert journal[:] == _entries(6)[4:]


def test_failed_fsync_poisons_the_journal(
    opened: Callable[[], DurableJournal], monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = opened()
    journal.add(b"a", 1, 1)

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "io error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError):
        journal.sync()
    monkeypatch.undo()
    assert journal.dirty
    with pytest.raises(JournalFailedError):
        journal.add(b"b", 2, 1)
    with pytest.raises(JournalFailedError):
        journal.sync()
    with pytest.raises(JournalFailedError):
        journal.deleteEntriesTo(1)
    with pytest.raises(JournalFailedError):
        journal.setCurrentTerm(1, None)
    journal = _reopen(journal, opened)
    assert journal[:] == [(b"a", 1, 1)]


def test_open_fsyncs_what_a_predecessor_left_unsynced(
    jdir: Path, opened: Callable[[], DurableJournal], monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = opened()
    _fill(journal, _entries(3))
    journal._destroy()  # like a crash: the records may be in the page cache only
    log_stat = (jdir / LOG_FILE_NAME).stat()
    log_fsyncs: list[int] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        if os.path.samestat(os.fstat(fd), log_stat):
            log_fsyncs.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    journal = opened()
    assert log_fsyncs, "recovered entries were reported durable without an fsync"
    assert journal.synced_index == 3 and not journal.dirty


def test_a_process_crash_keeps_unsynced_appends(jdir: Path) -> None:
    child = f"""
import os, sys
sys.path.insert(0, {str(PROJECT_ROOT)!r})
from pathlib import Path
from cluster.raft.journal import DurableJournal
journal = DurableJournal(Path({str(jdir)!r}))
for i in range(1, 4):
    journal.add(b"cmd-%d" % i, i, 1)
os._exit(0)  # no sync, no close
"""
    result = subprocess.run(
        [sys.executable, "-c", child], timeout=CHILD_TIMEOUT_S, capture_output=True, check=False
    )
    assert result.returncode == 0, result.stderr.decode()
    journal = DurableJournal(jdir)  # the dead process's lock is gone with it
    try:
        assert journal[:] == _entries(3)
        assert not journal.dirty and journal.synced_index == 3  # open fsyncs what it found
    finally:
        journal._destroy()


# ---------------------------------------------------------------------- model test


class JournalMachine(RuleBasedStateMachine):
    """Random operations against a plain list; reopening must give back exactly the model."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="raft-journal-"))
        self.journal = DurableJournal(self.dir)
        self.model: list[JournalEntry] = []
        self.synced_idx = 0
        self.term = 0
        self.vote: str | None = None
        self.commit = 1
        self.persisted_commit = 1

    def teardown(self) -> None:
        self.journal._destroy()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _last(self) -> tuple[int, int]:
        return (self.model[-1][1], self.model[-1][2]) if self.model else (0, 0)

    def _meta_written(self) -> None:
        self.persisted_commit = max(1, min(self.commit, self.synced_idx))

    @rule(cmd=st.binary(max_size=40), term_bump=st.integers(0, 2), start=st.integers(1, 30))
    def add(self, cmd: bytes, term_bump: int, start: int) -> None:
        idx, term = self._last()
        idx = idx + 1 if self.model else start
        self.journal.add(cmd, idx, term + term_bump)
        self.model.append((cmd, idx, term + term_bump))

    @rule(pos=st.integers(0, 12))
    def delete_from(self, pos: int) -> None:
        self.journal.deleteEntriesFrom(pos)
        del self.model[pos:]
        self.synced_idx = min(self.synced_idx, self._last()[0])

    @rule(pos=st.integers(0, 12))
    def delete_to(self, pos: int) -> None:
        self.journal.deleteEntriesTo(pos)
        if pos:
            del self.model[:pos]
            self.synced_idx = self._last()[0]

    @rule(idx=st.integers(1, 100), term=st.integers(0, 5))
    def install_snapshot(self, idx: int, term: int) -> None:
        self.journal.clear()
        self.journal.add(b"prev", idx, term)
        self.journal.add(b"last", idx + 1, term)
        self.model = [(b"prev", idx, term), (b"last", idx + 1, term)]
        self.synced_idx = 0

    @rule(with_commit=st.booleans())
    def sync(self, with_commit: bool) -> None:
        self.journal.sync(commit_index=with_commit)
        self.synced_idx = self._last()[0]
        assert not self.journal.dirty
        if with_commit:
            self._meta_written()

    @rule(bump=st.integers(0, 1), vote=st.sampled_from([None, "n1", "n2"]))
    def set_term(self, bump: int, vote: str | None) -> None:
        if bump == 0 and self.vote is not None:
            vote = self.vote
        self.term += bump
        self.vote = vote
        self.journal.setCurrentTerm(self.term, vote)
        self._meta_written()

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def set_commit_and_tick(self, data: st.DataObject) -> None:
        self.commit = data.draw(st.integers(1, self._last()[0]))
        self.journal.setRaftCommitIndex(self.commit)
        if data.draw(st.booleans()):
            self.journal.onOneSecondTimer()
            self._meta_written()

    @rule()
    def reopen(self) -> None:
        self.journal._destroy()
        self.journal = DurableJournal(self.dir)
        self.synced_idx = self._last()[0]
        self.commit = self.persisted_commit
        if self.model and self.commit > self._last()[0]:
            self.commit = self._last()[0]
        assert self.journal.recovery_notes() == [] or self.commit != self.persisted_commit
        assert self.journal.getCurrentTerm() == self.term
        assert self.journal.getVotedForNodeId() == self.vote
        assert self.journal.getRaftCommitIndex() == self.commit

    @invariant()
    def matches_model(self) -> None:
        journal = self.journal
        assert len(journal) == len(self.model)
        assert journal[:] == self.model
        if self.model:
            assert journal[-1] == self.model[-1]
            assert journal[1:3] == self.model[1:3]
        assert journal.synced_index == self.synced_idx
        _log_data(journal)
        assert journal.size_bytes == HEADER_BYTES + sum(
            RECORD_OVERHEAD + len(c) for c, _, _ in self.model
        )


JournalMachine.TestCase.settings = settings(
    max_examples=MODEL_MAX_EXAMPLES, stateful_step_count=MODEL_STEPS, deadline=None
)
test_journal_against_list_model = JournalMachine.TestCase


def test_lost_synced_entries_is_flagged_only_when_recovery_can_prove_it(
    jdir: Path, opened: Callable[[], DurableJournal]
) -> None:
    entries = [(b"command-%d" % i, i, 1) for i in range(1, 7)]
    path = jdir / LOG_FILE_NAME
    offsets = _record_offsets(entries)

    def rewrite(change: Callable[[bytearray], None]) -> DurableJournal:
        journal = opened()
        journal.clear()
        _fill(journal, entries)
        journal.sync()
        journal._destroy()
        raw = bytearray(path.read_bytes())
        change(raw)
        path.write_bytes(bytes(raw))
        return opened()

    def flip_in_third(raw: bytearray) -> None:
        raw[offsets[2] + 27] ^= 0x10  # a command byte: intact records follow

    def cut_in_last(raw: bytearray) -> None:
        del raw[offsets[-1] + 5 :]  # an interrupted append looks exactly like this

    journal = rewrite(flip_in_third)
    assert journal.lost_synced_entries and journal[:] == entries[:2]
    journal._destroy()
    journal = rewrite(cut_in_last)
    assert not journal.lost_synced_entries and journal[:] == entries[:5]
    journal._destroy()


# ---------------------------------------------------------------------- reserved space


def test_the_zeros_a_crash_leaves_after_the_log_are_dropped_without_a_note(
    tmp_path: Path, jdir: Path, opened: Callable[[], DurableJournal]
) -> None:
    journal = opened()
    entries = _entries(5)
    _fill(journal, entries)
    journal.sync()
    crashed = tmp_path / "crashed"
    shutil.copytree(jdir, crashed)  # the files as a process kill leaves them
    log_data = _log_data(journal)
    assert (crashed / LOG_FILE_NAME).stat().st_size > len(log_data)
    recovered = DurableJournal(crashed)
    try:
        assert recovered[:] == entries
        assert recovered.recovery_notes() == [] and not recovered.lost_synced_entries
        assert (crashed / LOG_FILE_NAME).read_bytes() == log_data
        recovered.add(b"next", 6, 1)  # appends go on where the log ended
    finally:
        recovered._destroy()
    again = DurableJournal(crashed)
    try:
        assert again[:] == [*entries, (b"next", 6, 1)]
    finally:
        again._destroy()


def test_a_torn_record_before_the_zeros_is_still_noted(
    tmp_path: Path, jdir: Path, opened: Callable[[], DurableJournal]
) -> None:
    journal = opened()
    _fill(journal, _entries(3))
    journal.sync()
    crashed = tmp_path / "crashed"
    shutil.copytree(jdir, crashed)
    end = journal.size_bytes
    with open(crashed / LOG_FILE_NAME, "r+b") as f:  # half a record, zeros after it
        f.seek(end)
        f.write(struct.pack("<II", 40, 0) + b"\x07" * 10)
    recovered = DurableJournal(crashed)
    try:
        assert recovered[:] == _entries(3)
        (note,) = recovered.recovery_notes()
        assert f"at offset {end}" in note
        assert (crashed / LOG_FILE_NAME).stat().st_size == end
    finally:
        recovered._destroy()


def test_a_sync_reports_the_log_it_covers_not_the_reserved_size(
    opened: Callable[[], DurableJournal],
) -> None:
    journal = opened()
    seen: list[tuple[str, int]] = []

    def observe(fd: int, size: int) -> None:
        seen.append((os.path.basename(os.readlink(f"/proc/self/fd/{fd}")), size))

    _fill(journal, _entries(3))
    disk.observe_fsync(observe)
    try:
        journal.sync(commit_index=False)
    finally:
        disk.stop_observing_fsync(observe)
    assert seen == [(LOG_FILE_NAME, journal.size_bytes)]
    assert (journal.path / LOG_FILE_NAME).stat().st_size > journal.size_bytes


def test_a_filesystem_that_cannot_reserve_gets_plain_appends(
    monkeypatch: pytest.MonkeyPatch, opened: Callable[[], DurableJournal]
) -> None:
    calls = refuse_fallocate(monkeypatch, FALLOCATE_UNSUPPORTED)
    journal = opened()
    _fill(journal, _entries(4))
    assert len(calls) == 1  # not asked again
    assert (journal.path / LOG_FILE_NAME).stat().st_size == journal.size_bytes
    assert _log_data(journal)


def test_a_disk_too_full_to_reserve_gives_the_space_back_and_appends_plainly(
    monkeypatch: pytest.MonkeyPatch, opened: Callable[[], DurableJournal]
) -> None:
    calls = refuse_fallocate(monkeypatch, FALLOCATE_NO_SPACE, allocate_first=True)
    journal = opened()
    _fill(journal, _entries(3))
    assert len(calls) == 1  # not asked again
    assert (journal.path / LOG_FILE_NAME).stat().st_size == journal.size_bytes
    journal.sync()
    assert _log_data(journal)
    assert journal[:] == _entries(3)
