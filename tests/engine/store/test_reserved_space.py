"""Space reserved ahead of appends (engine/disk.py ``reserve``) in the file store: the zeros it
leaves are never data, an fsync reports the data it covers, and a crash's zeros recover quietly."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from engine import disk, records
from engine.filestore import SEGMENT_BYTES_MIN, FileStore
from tests.disk_faults import FALLOCATE_NO_SPACE, FALLOCATE_UNSUPPORTED, refuse_fallocate
from tests.engine.store.filestore_test_records import msg


def segment_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("seg-*.blk"))


def data_end(path: Path) -> int:
    """Where a segment's records end (what follows, if anything, must be zeros)."""
    raw = path.read_bytes()
    end = 0
    for item in records.walk(raw):
        if isinstance(item, records.WalkStop):
            assert raw[item.offset :] == bytes(len(raw) - item.offset), item
            break
        end = item.offset + item.total_len
    return end


def test_reserve_steps_double_within_their_bounds_and_stop_at_the_limit(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        first = disk.reserve(fd, 0, 100, 1 << 40)
        assert first == 100 + disk.RESERVE_STEP_BYTES_MIN
        assert os.fstat(fd).st_size == first
        assert disk.reserve(fd, first, first, 1 << 40) == first  # covered: nothing to do
        second = disk.reserve(fd, first, first + 1, 1 << 40)
        assert second == first + 1 + first  # the step is the reservation so far
        big = disk.reserve(fd, second, 10 * disk.RESERVE_STEP_BYTES_MAX, 1 << 40)
        assert big == 10 * disk.RESERVE_STEP_BYTES_MAX + second
        bigger = disk.reserve(fd, big, big + 1, 1 << 40)
        assert bigger == big + 1 + disk.RESERVE_STEP_BYTES_MAX  # steps stop growing there
        big = bigger
        capped = disk.reserve(fd, big, big + 10, big + 20)
        assert capped == big + 20  # not beyond the limit ...
        assert disk.reserve(fd, capped, capped + 50, capped) == capped + 50  # ... unless needed
        assert os.fstat(fd).st_size == capped + 50
        assert os.pread(fd, capped + 50, 0) == bytes(capped + 50)
    finally:
        os.close(fd)


def test_an_open_store_reserves_ahead_and_a_close_cuts_the_zeros_off(tmp_path: Path) -> None:
    store = FileStore(tmp_path, meta_commits=True)
    for seq in range(1, 6):
        store.append(msg(seq))
    store.set_meta(b"applied=5")
    store.sync()
    (segment,) = segment_files(tmp_path)
    written = data_end(segment)
    assert segment.stat().st_size >= written + disk.RESERVE_STEP_BYTES_MIN
    store.close()
    assert segment.stat().st_size == written
    reopened = FileStore(tmp_path, meta_commits=True)
    assert [m.seq for m in reopened.scan()] == [1, 2, 3, 4, 5]
    assert reopened.recovery_notes() == []
    reopened.close()


def test_the_zeros_a_crash_leaves_are_dropped_without_a_note(tmp_path: Path) -> None:
    live = tmp_path / "live"
    store = FileStore(live, meta_commits=True)
    for seq in range(1, 4):
        store.append(msg(seq))
    store.set_meta(b"applied=3")
    store.sync()
    crashed = tmp_path / "crashed"
    shutil.copytree(live, crashed)  # the files as a process kill leaves them
    store.close()
    (segment,) = segment_files(crashed)
    written = data_end(segment)
    assert segment.stat().st_size > written
    reopened = FileStore(crashed, meta_commits=True)
    assert [m.seq for m in reopened.scan()] == [1, 2, 3]
    assert reopened.get_meta() == b"applied=3"
    assert reopened.recovery_notes() == [] and reopened.corrupt_records() == []
    assert segment.stat().st_size == written
    reopened.append(msg(4))  # appends go on where the data ended
    reopened.set_meta(b"applied=4")
    reopened.close()
    again = FileStore(crashed, meta_commits=True)
    assert [m.seq for m in again.scan()] == [1, 2, 3, 4]
    again.close()


def test_an_uncommitted_tail_before_the_zeros_is_still_rolled_back(tmp_path: Path) -> None:
    live = tmp_path / "live"
    store = FileStore(live, meta_commits=True)
    store.append(msg(1))
    store.set_meta(b"applied=1")
    store.sync()
    store.append(msg(2))  # flushed, never committed
    store.flush()
    crashed = tmp_path / "crashed"
    shutil.copytree(live, crashed)
    store.close()
    reopened = FileStore(crashed, meta_commits=True)
    assert [m.seq for m in reopened.scan()] == [1]
    notes = reopened.recovery_notes()
    assert len(notes) == 1 and "after the last commit rolled back" in notes[0]
    reopened.close()


def test_a_rotated_segment_keeps_no_zeros(tmp_path: Path) -> None:
    live = tmp_path / "live"
    store = FileStore(live, segment_bytes_max=SEGMENT_BYTES_MIN, meta_commits=True)
    seq = 0
    while len(segment_files(live)) < 3:
        seq += 1
        store.append(msg(seq))
        store.set_meta(f"applied={seq}".encode())
        store.sync()
    crashed = tmp_path / "crashed"
    shutil.copytree(live, crashed)
    store.close()
    *rotated, _active = segment_files(crashed)
    for segment in rotated:
        assert segment.stat().st_size == data_end(segment) >= SEGMENT_BYTES_MIN
    reopened = FileStore(crashed, segment_bytes_max=SEGMENT_BYTES_MIN, meta_commits=True)
    assert [m.seq for m in reopened.scan()] == list(range(1, seq + 1))
    assert reopened.recovery_notes() == [] and reopened.corrupt_records() == []
    reopened.close()


def test_an_fsync_reports_the_data_it_covers_not_the_reserved_size(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    seen: dict[int, int] = {}

    def observe(fd: int, size: int) -> None:
        if os.path.basename(os.readlink(f"/proc/self/fd/{fd}")).startswith("seg-"):
            seen[os.fstat(fd).st_ino] = size

    disk.observe_fsync(observe)
    try:
        for seq in range(1, 4):
            store.append(msg(seq))
        store.sync()
    finally:
        disk.stop_observing_fsync(observe)
    (segment,) = segment_files(tmp_path)
    assert seen == {segment.stat().st_ino: data_end(segment)}
    assert segment.stat().st_size > data_end(segment)
    store.close()


def test_a_filesystem_that_cannot_reserve_gets_plain_appends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = refuse_fallocate(monkeypatch, FALLOCATE_UNSUPPORTED)
    store = FileStore(tmp_path)
    for seq in range(1, 4):
        store.append(msg(seq))
        store.sync()
    (segment,) = segment_files(tmp_path)
    assert segment.stat().st_size == data_end(segment)
    assert len(calls) == 1  # not asked again for that segment
    store.close()
    reopened = FileStore(tmp_path)
    assert [m.seq for m in reopened.scan()] == [1, 2, 3]
    reopened.close()


def test_a_disk_too_full_to_reserve_gives_the_space_back_and_appends_plainly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = refuse_fallocate(monkeypatch, FALLOCATE_NO_SPACE, allocate_first=True)
    store = FileStore(tmp_path)
    for seq in range(1, 4):
        store.append(msg(seq))
        store.sync()
    (segment,) = segment_files(tmp_path)
    assert segment.stat().st_size == data_end(segment)  # what the failed call took is cut off
    assert len(calls) == 1  # not asked again for that segment
    store.close()
    reopened = FileStore(tmp_path)
    assert [m.seq for m in reopened.scan()] == [1, 2, 3]
    assert reopened.recovery_notes() == []
    reopened.close()


def test_reserving_uses_fallocate_itself_not_an_emulation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """glibc's posix_fallocate writes a byte per block where the filesystem cannot reserve;
    fallocate(2) says so instead. Reserving must not go through posix_fallocate at all."""

    def emulation(fd: int, offset: int, length: int) -> None:
        raise AssertionError("posix_fallocate called")

    monkeypatch.setattr(os, "posix_fallocate", emulation)
    assert disk._LIBC_FALLOCATE is not None
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        assert disk.reserve(fd, 0, 100, 1 << 20) == 100 + disk.RESERVE_STEP_BYTES_MIN
        assert os.fstat(fd).st_size == 100 + disk.RESERVE_STEP_BYTES_MIN
        with pytest.raises(OSError) as caught:
            disk._fallocate(fd, -1, 10)
        assert caught.value.errno == errno.EINVAL
    finally:
        os.close(fd)


def _crash_with_a_torn_append(tmp_path: Path, cut: int, meta_commits: bool) -> Path:
    """A store killed while it wrote message 2: the first ``cut`` bytes of its record landed
    (a write cut at a page boundary), the reserved zeros follow them."""
    live = tmp_path / "live"
    store = FileStore(live, meta_commits=meta_commits)
    store.append(msg(1))
    store.set_meta(b"applied=1")
    store.sync()
    crashed = tmp_path / "crashed"
    shutil.copytree(live, crashed)
    store.close()
    (segment,) = segment_files(crashed)
    end = data_end(segment)
    record = bytearray()
    records.append_msg(record, msg(2))
    with open(segment, "r+b") as f:
        f.seek(end)
        f.write(bytes(record[:cut]))
    assert segment.stat().st_size > end + cut
    return crashed


# Cut inside the header, right after it, inside the body. Without meta commits a header whose
# body is all zeros reads as an erased message (an erase zeroes the body in place before its
# REMOVE record is written), and the store then counts that seq as used: no harm, as a
# reopened engine store (meta commits) rolls back everything after its last commit.
@pytest.mark.parametrize(
    ("cut", "meta_commits"),
    [(10, True), (10, False), (records.HEADER_BYTES, True), (30, True), (30, False), (99, False)],
)
def test_an_append_torn_into_reserved_space_is_a_torn_tail_not_damage(
    tmp_path: Path, cut: int, meta_commits: bool
) -> None:
    crashed = _crash_with_a_torn_append(tmp_path, cut, meta_commits)
    reopened = FileStore(crashed, meta_commits=meta_commits)
    try:
        assert [m.seq for m in reopened.scan()] == [1]
        assert reopened.corrupt_records() == []
        (segment,) = segment_files(crashed)
        assert segment.stat().st_size == data_end(segment)  # cut back to message 1
        reopened.append(msg(2))
    finally:
        reopened.close()


def test_a_rotation_fsyncs_the_full_segment_even_if_a_worker_took_it(tmp_path: Path) -> None:
    """Everything flushed, the fsync handed to a worker that is still running (it took the dirty
    set): the rotation must fsync the full segment itself before its successor is written, or
    the successor's records could reach the disk before the full segment's tail."""
    store = FileStore(tmp_path, segment_bytes_max=SEGMENT_BYTES_MIN)
    seq = 0
    while True:  # fill the first segment up to its maximum, flushed, without rotating
        seq += 1
        store.append(msg(seq))
        store.flush()
        (segment,) = segment_files(tmp_path)
        if data_end(segment) >= SEGMENT_BYTES_MIN:
            break
    store._dirty_fds.clear()  # as a worker's fsync() does when it starts
    (full,) = segment_files(tmp_path)
    fsynced: list[int] = []

    def observe(fd: int, size: int) -> None:
        fsynced.append(os.fstat(fd).st_ino)

    disk.observe_fsync(observe)
    try:
        store.append(msg(seq + 1))  # rotates
    finally:
        disk.stop_observing_fsync(observe)
    assert len(segment_files(tmp_path)) == 2
    assert full.stat().st_ino in fsynced
    store.close()


def test_zeros_at_the_end_of_a_sealed_segment_are_damage_not_a_torn_tail(tmp_path: Path) -> None:
    """A rotated segment was cut back and fsynced before its successor existed: a header with
    only zeros after it there is damage (a torn tail only ends the last segment)."""
    store = FileStore(tmp_path, segment_bytes_max=SEGMENT_BYTES_MIN, meta_commits=True)
    seq = 0
    while True:
        seq += 1
        store.append(msg(seq))
        if len(segment_files(tmp_path)) == 2:
            break  # that message went to the second segment: never committed
        store.set_meta(f"applied={seq}".encode())
        store.sync()
    store.close()
    sealed, successor = segment_files(tmp_path)
    uncommitted = bytearray()
    records.append_msg(uncommitted, msg(seq + 1))
    successor.write_bytes(bytes(uncommitted))  # a successor holding no commit at all
    raw = sealed.read_bytes()
    *_, last = (item for item in records.walk(raw) if isinstance(item, records.WalkedRecord))
    with open(sealed, "r+b") as f:
        f.seek(last.offset + 10)  # its header half gone, zeros to the end of the file
        f.write(bytes(len(raw) - last.offset - 10))
    reopened = FileStore(tmp_path, segment_bytes_max=SEGMENT_BYTES_MIN, meta_commits=True)
    try:
        (damage,) = reopened.corrupt_records()
        assert damage.seq is None and damage.location.startswith(sealed.name)
    finally:
        reopened.close()
