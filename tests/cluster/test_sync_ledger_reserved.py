"""The fsync ledger for files with space reserved ahead of their appends: a file's size no longer
shows a truncation or a new file on a reused inode, so the writers say so (``disk.resized``), and
the harness's simulated power loss keeps exactly what was fsynced."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster import sync_ledger
from cluster.raft.journal import DurableJournal
from engine import disk
from engine.filestore import FileStore
from jepsen_like.db import truncate_to_ledger
from tests.engine.store.filestore_test_records import msg


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "ledger"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    monkeypatch.setattr(sync_ledger, "_ledger_fd", fd)
    monkeypatch.setattr(sync_ledger, "_recorded", {})
    disk.observe_fsync(sync_ledger._note)
    disk.observe_resize(sync_ledger._reset)
    try:
        yield path
    finally:
        disk.stop_observing_resize(sync_ledger._reset)
        disk.stop_observing_fsync(sync_ledger._note)
        os.close(fd)


def _killed(journal: DurableJournal) -> None:
    """Close a journal's fds as a killed process would: nothing cut, nothing synced."""
    journal._closed = True
    os.close(journal._fd)
    os.close(journal._lock_fd)


def test_a_raft_log_truncated_then_appended_keeps_only_the_synced_entries(
    tmp_path: Path, ledger: Path
) -> None:
    store = tmp_path / "store"
    journal = DurableJournal(store / "journal")
    for idx in range(1, 11):
        journal.add(b"old-%03d" % idx + bytes(100), idx, 1)
    journal.sync(commit_index=False)
    journal.deleteEntriesFrom(5)  # a new leader replaces entries 6-10
    journal.add(b"new-6", 6, 2)
    journal.sync(commit_index=False)
    journal.add(b"new-7, never synced", 7, 2)
    _killed(journal)
    truncate_to_ledger(store, ledger)
    recovered = DurableJournal(store / "journal")
    try:
        assert [(idx, term) for _cmd, idx, term in recovered[:]] == [
            (1, 1),
            (2, 1),
            (3, 1),
            (4, 1),
            (5, 1),
            (6, 2),
        ]
    finally:
        recovered._destroy()


def test_a_new_segment_on_a_reused_inode_keeps_only_what_was_synced(
    tmp_path: Path, ledger: Path
) -> None:
    old = FileStore(tmp_path / "old", meta_commits=True)
    for seq in range(1, 200):
        old.append(msg(seq))
    old.set_meta(b"applied=199")
    old.close()
    (old_segment,) = (tmp_path / "old").glob("seg-*")
    old_inode = old_segment.stat().st_ino
    store = tmp_path / "new"
    new = FileStore(store, meta_commits=True)
    os.unlink(old_segment)  # its inode is free for the next file (ext4 reuses it at once)
    new.append(msg(1))
    new.set_meta(b"applied=1")
    new.sync()
    new.append(msg(2))
    new.set_meta(b"applied=2")
    new.flush()  # never fsynced
    (segment,) = store.glob("seg-*")
    if segment.stat().st_ino != old_inode:
        new.close()
        pytest.skip("this filesystem did not reuse the deleted segment's inode")
    truncate_to_ledger(store, ledger)  # the node is killed: the store stays open
    again = FileStore(store, meta_commits=True)
    try:
        assert again.get_meta() == b"applied=1"
        assert [m.seq for m in again.scan()] == [1]
    finally:
        again.close()
        new.close()
