"""File store only: torn tails, bit flips, erase on disk, space reclamation, group commit."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from engine import records
from engine.filestore import SEGMENT_BYTES_MAX_DEFAULT, FileStore
from engine.store import StoredMsg
from tests.engine.store.filestore_test_records import flip_byte, msg


def record_len(m: StoredMsg) -> int:
    return records.append_msg(bytearray(), m)


def segment_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("seg-*.blk"))


def write_store(
    directory: Path, seqs: range, *, segment_bytes_max: int = SEGMENT_BYTES_MAX_DEFAULT
) -> None:
    store = FileStore(directory, segment_bytes_max=segment_bytes_max)
    for seq in seqs:
        store.append(msg(seq))
    store.close()


def test_records_are_100_bytes_as_the_layout_tests_assume() -> None:
    assert record_len(msg(1)) == 100


@pytest.mark.parametrize("final_kind", ["msg", "remove", "meta"])
def test_torn_final_record_is_truncated_at_every_cut(tmp_path: Path, final_kind: str) -> None:
    origin = tmp_path / "origin"
    store = FileStore(origin)
    for seq in range(1, 5):
        store.append(msg(seq))
    store.set_meta(b"meta-before")
    store.close()  # an open store's file also holds the space it reserved ahead
    (segment,) = segment_files(origin)
    good_bytes = segment.stat().st_size
    store = FileStore(origin)
    if final_kind == "msg":
        store.append(msg(5))
    elif final_kind == "remove":
        store.remove(2)
    else:
        store.set_meta(b"meta-after-the-torn-write")
    store.close()
    full_bytes = segment.stat().st_size
    assert full_bytes > good_bytes

    for cut in range(good_bytes, full_bytes):
        trial = tmp_path / f"cut-{cut}"
        shutil.copytree(origin, trial)
        os.truncate(trial / segment.name, cut)
        reopened = FileStore(trial)
        assert [m.seq for m in reopened.scan()] == [1, 2, 3, 4], cut
        assert reopened.get_meta() == b"meta-before"
        assert reopened.corrupt_records() == []
        assert (trial / segment.name).stat().st_size == good_bytes
        assert bool(reopened.recovery_notes()) == (cut > good_bytes)
        reopened.append(msg(6))
        reopened.close()
        again = FileStore(trial)
        assert [m.seq for m in again.scan()] == [1, 2, 3, 4, 6]
        assert again.recovery_notes() == []
        again.close()
        shutil.rmtree(trial)


def test_zero_fill_after_the_last_record_is_truncated(tmp_path: Path) -> None:
    write_store(tmp_path, range(1, 4))
    (segment,) = segment_files(tmp_path)
    size = segment.stat().st_size
    with segment.open("ab") as f:
        f.write(bytes(4096))
    store = FileStore(tmp_path)
    assert [m.seq for m in store.scan()] == [1, 2, 3]
    assert "zero fill" in store.recovery_notes()[0]
    assert segment.stat().st_size == size
    store.close()


def test_flipped_byte_in_a_middle_body_hides_only_that_message(tmp_path: Path) -> None:
    # No read cache: this store wrote the messages, so a cache would serve them as written (see
    # test_read_cache.py); here every load must go to the damaged disk.
    store = FileStore(tmp_path, read_cache_bytes_max=0)
    for seq in range(1, 6):
        store.append(msg(seq))
    store.sync()
    (segment,) = segment_files(tmp_path)
    flip_byte(segment, 2 * 100 + 70)  # inside the data of seq 3

    assert store.load(3) is None
    assert [m.seq for m in store.scan()] == [1, 2, 4, 5]
    assert all(store.load(s) == msg(s) for s in (1, 2, 4, 5))
    (corrupt,) = store.corrupt_records()
    assert corrupt.seq == 3 and corrupt.location == f"{segment.name}@200"
    store.close()

    reopened = FileStore(tmp_path)
    assert [m.seq for m in reopened.scan()] == [1, 2, 4, 5]
    assert reopened.load(3) is None
    assert [(c.seq, c.location) for c in reopened.corrupt_records()] == [(3, f"{segment.name}@200")]
    # Removing the damaged message (e.g. after repair from a peer) settles the report for good.
    assert reopened.remove(3) is True
    assert reopened.corrupt_records() == []
    reopened.close()
    final = FileStore(tmp_path)
    assert final.corrupt_records() == [] and [m.seq for m in final.scan()] == [1, 2, 4, 5]
    final.close()


def test_flipped_length_stops_that_segment_but_later_segments_are_read(tmp_path: Path) -> None:
    write_store(tmp_path, range(1, 10), segment_bytes_max=300)  # [1,2,3] [4,5,6] [7,8,9]
    _first, second, _third = segment_files(tmp_path)
    flip_byte(second, 100 + 1)  # length field of seq 5
    store = FileStore(tmp_path, segment_bytes_max=300)
    assert [m.seq for m in store.scan()] == [1, 2, 3, 4, 7, 8, 9]
    (corrupt,) = store.corrupt_records()
    assert corrupt.seq is None and corrupt.location == f"{second.name}@100"
    assert store.load(5) is None and store.load(6) is None and store.load(8) == msg(8)
    store.append(msg(10))
    store.close()
    again = FileStore(tmp_path, segment_bytes_max=300)
    assert [m.seq for m in again.scan()] == [1, 2, 3, 4, 7, 8, 9, 10]
    assert len(again.corrupt_records()) == 1
    again.close()


def test_damaged_header_in_the_last_segment_keeps_new_appends_readable(tmp_path: Path) -> None:
    write_store(tmp_path, range(1, 5))
    (segment,) = segment_files(tmp_path)
    flip_byte(segment, 100 + 9)  # seq field of seq 2: header CRC fails, seqs 2..4 unreadable
    store = FileStore(tmp_path)
    assert [m.seq for m in store.scan()] == [1]
    store.append(msg(5))
    store.close()
    again = FileStore(tmp_path)
    assert [m.seq for m in again.scan()] == [1, 5]
    assert [c.seq for c in again.corrupt_records()] == [None]
    assert (tmp_path / segment.name).stat().st_size == 400  # the evidence is kept
    again.close()


def test_erase_zeroes_the_payload_on_disk_and_is_not_corruption(tmp_path: Path) -> None:
    secret = b"credit-card-4111111111111111" * 2
    store = FileStore(tmp_path)
    store.append(msg(1))
    store.append(msg(2, data=secret))
    store.append(msg(3, data=secret))
    store.flush()  # 2 is on disk, 3 still buffered: both paths of the erase
    store.append(msg(4, data=secret))
    assert store.remove(2, erase=True) and store.remove(4, erase=True)
    store.close()
    on_disk = b"".join(p.read_bytes() for p in segment_files(tmp_path))
    assert on_disk.count(secret) == 1  # only seq 3, which was not erased
    reopened = FileStore(tmp_path)
    assert [m.seq for m in reopened.scan()] == [1, 3]
    assert reopened.corrupt_records() == [] and reopened.recovery_notes() == []
    reopened.close()


@pytest.mark.parametrize("removed", [True, False])
def test_torn_erase_is_only_corruption_when_no_removal_covers_it(
    tmp_path: Path, removed: bool
) -> None:
    store = FileStore(tmp_path)
    for seq in range(1, 4):
        store.append(msg(seq))
    if removed:
        store.remove(2)
    store.close()
    (segment,) = segment_files(tmp_path)
    with segment.open("r+b") as f:  # half of the erase of seq 2 reached the disk
        f.seek(100 + records.HEADER_BYTES)
        f.write(bytes(30))
    reopened = FileStore(tmp_path)
    assert [m.seq for m in reopened.scan()] == [1, 3]
    assert [c.seq for c in reopened.corrupt_records()] == ([] if removed else [2])
    reopened.close()


def test_dead_segments_are_deleted_and_the_meta_survives(tmp_path: Path) -> None:
    store = FileStore(tmp_path, segment_bytes_max=300)
    store.set_meta(b"config-v1")  # lands in the first segment
    for seq in range(1, 31):
        store.append(msg(seq))
    assert len(segment_files(tmp_path)) == 10  # [meta,1,2,3] [4,5,6] ... [28,29,30]
    store.remove_through(27)
    assert len(segment_files(tmp_path)) == 11  # + the removal's; reclaimed at a commit point only
    store.sync()
    names = store.segment_names()
    assert [p.name for p in segment_files(tmp_path)] == names
    assert len(names) <= 2 and store.get_meta() == b"config-v1"
    store.close()
    reopened = FileStore(tmp_path, segment_bytes_max=300)
    assert [m.seq for m in reopened.scan()] == [28, 29, 30]
    assert reopened.get_meta() == b"config-v1"
    reopened.close()


def test_a_segment_whose_removals_still_matter_is_kept(tmp_path: Path) -> None:
    """Segment D holds the removal of seq 1 from segment A. D may only go once A has gone,
    else seq 1 would come back on recovery."""
    store = FileStore(tmp_path, segment_bytes_max=200)  # two messages per segment
    for seq in range(1, 5):
        store.append(msg(seq))  # A=[1,2] B=[3,4]
    store.remove(1)  # rotation: the REMOVE goes to a new segment C
    for seq in range(5, 7):
        store.append(msg(seq))  # C=[rm1, 5, 6]
    store.remove(5)
    store.remove(6)  # C has no live message but refers to A, which still holds seq 2
    for seq in range(7, 10):
        store.append(msg(seq))  # C is no longer active
    store.sync()
    removal_segment = store.segment_names()[2]
    assert (tmp_path / removal_segment).exists()
    store.close()
    reopened = FileStore(tmp_path, segment_bytes_max=200)
    assert reopened.load(1) is None
    assert [m.seq for m in reopened.scan()] == [2, 3, 4, 7, 8, 9]
    reopened.remove(2)  # A goes, then C can go
    reopened.sync()
    assert not (tmp_path / removal_segment).exists()
    reopened.close()
    final = FileStore(tmp_path, segment_bytes_max=200)
    assert [m.seq for m in final.scan()] == [3, 4, 7, 8, 9]
    final.close()


def open_fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="counts fds through /proc")
def test_fsync_in_a_worker_thread_while_appending(tmp_path: Path) -> None:
    fds_before = open_fd_count()
    store = FileStore(tmp_path, segment_bytes_max=4096)  # rotations and deletions during fsyncs
    errors: list[BaseException] = []
    stop = threading.Event()

    def fsync_loop() -> None:
        try:
            while not stop.is_set():
                store.fsync()
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    worker = threading.Thread(target=fsync_loop)
    worker.start()
    try:
        for seq in range(1, 3001):
            store.append(msg(seq))
            if seq % 7 == 0:
                store.flush()
            if seq % 500 == 0:
                store.remove_through(seq - 100)  # frees whole segments while fsyncs run
    finally:
        stop.set()
        worker.join()
    assert errors == []
    store.sync()
    expected = [m.seq for m in store.scan()]
    assert expected == list(range(2901, 3001))
    store.close()
    assert open_fd_count() == fds_before  # closes deferred behind an fsync did happen
    reopened = FileStore(tmp_path, segment_bytes_max=4096)
    assert [m.seq for m in reopened.scan()] == expected
    reopened.close()


def test_append_throughput_is_printed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = FileStore(tmp_path)
    payload = bytes(128)
    count = 100_000
    started = time.perf_counter()
    for seq in range(1, count + 1):
        store.append(StoredMsg(seq=seq, subject="bench.subject", hdr=b"", data=payload, ts_ns=seq))
        if seq % 100 == 0:
            store.flush()
    store.sync()
    append_s = time.perf_counter() - started
    started = time.perf_counter()
    for seq in range(1, count + 1, 10):
        assert store.load(seq) is not None
    load_s = (time.perf_counter() - started) * 10
    store.close()
    started = time.perf_counter()
    reopened = FileStore(tmp_path)
    scanned = sum(1 for _ in reopened.scan())
    open_scan_s = time.perf_counter() - started
    reopened.close()
    assert scanned == count
    with capsys.disabled():
        print(
            f"\nfilestore: {count / append_s:,.0f} appends/s (128 B),"
            f" {count / load_s:,.0f} loads/s, reopen+scan {count / open_scan_s:,.0f} msgs/s"
        )


def test_mostly_dead_segment_is_compacted_keeping_what_still_matters(tmp_path: Path) -> None:
    store = FileStore(tmp_path, segment_bytes_max=1000)  # ten 100-byte messages per segment
    for seq in range(1, 16):
        store.append(msg(seq))  # seg1 = [1..10], seg2 = [11..15 ...
    store.remove(2)  # ... REMOVE(2) lands in seg2 and refers to seg1, which stays mostly live
    for seq in range(16, 22):
        store.append(msg(seq))  # seg2 = [11..15, rm2, 16..20], seg3 = [21 ...
    seg1, seg2, _seg3 = segment_files(tmp_path)
    assert seg2.stat().st_size == 1000 + 25
    store.set_meta(b"meta-in-seg3")
    for seq in (11, 12, 13, 14, 16, 17, 18, 19):
        store.remove(seq)  # seg2 keeps 15 and 20: under a quarter live, so it is rewritten
    assert seg2.stat().st_size == 1000 + 25  # ... at the next commit point
    store.set_meta(b"meta-in-seg3")
    assert seg2.stat().st_size == 2 * 100 + 25  # the live messages and the REMOVE(2) record
    expected = [1, *range(3, 11), 15, 20, 21]
    assert [m.seq for m in store.scan()] == expected
    assert store.load(15) == msg(15) and store.load(20) == msg(20) and store.load(12) is None
    store.close()
    reopened = FileStore(tmp_path, segment_bytes_max=1000)
    assert [m.seq for m in reopened.scan()] == expected  # seq 2 stayed removed
    assert reopened.get_meta() == b"meta-in-seg3"
    assert reopened.corrupt_records() == [] and reopened.recovery_notes() == []
    assert seg1.stat().st_size == 1000
    reopened.close()


def test_leftover_of_an_interrupted_compaction_is_removed(tmp_path: Path) -> None:
    write_store(tmp_path, range(1, 4))
    (tmp_path / "seg-00000001.blk.compact").write_bytes(b"half-written")
    store = FileStore(tmp_path)
    assert [m.seq for m in store.scan()] == [1, 2, 3]
    assert not (tmp_path / "seg-00000001.blk.compact").exists()
    assert "unfinished compaction" in store.recovery_notes()[0]
    store.close()
