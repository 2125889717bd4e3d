"""The durable ``MessageStore``: append-only segment files of checksummed records.

What it owns: the segment files ``seg-NNNNNNNN.blk`` in one directory (record format in
``engine/records.py``), an in-memory map from sequence to (segment, offset, length), a bounded
read cache of recent messages (the only payloads it keeps in memory), and recovery, checksum
verification and space reclamation.

Durability. ``append``/``remove``/``set_meta`` go to a user-space buffer; ``flush`` hands it to the
OS with one ``os.pwrite``; ``fsync`` fsyncs every file written since the last fsync (segments and,
after a segment was created, the directory). ``fsync`` may run in a worker thread while the owning
thread keeps appending and flushing (group commit). This module imports ``threading`` for one
``Lock`` and nothing else: the lock guards the set of fds awaiting fsync, and a segment fd is never
closed while a worker fsyncs it (its close is deferred to the end of that fsync). An ``fsync``
error propagates and is not retried (after a failed fsync Linux may drop the dirty pages: the
caller must treat the store as lost, as PostgreSQL does). Every fsync goes through
``engine/disk.py``, the node's one fsync, so the fsync ledger sees these files too. The active
segment reserves space ahead of its appends (``disk.reserve``: an fsync then need not commit a new
file size each time), cut off again when the segment is rotated or the store closed; after a
crash, recovery drops the trailing zeros without a note (with ``meta_commits``).

Removal and erase. Removal is a REMOVE or REMOVE_THROUGH record; ``erase=True`` also zeroes the
message record in place after its header (``records.erase_patch``). An erased record fails its CRC
by design and is recognised as erased, not reported; the header is untouched so the scan goes on.
A MSG record whose checksum fails but that a later removal record covers (an erase torn by a
crash) is removed, not reported. An erase takes effect at once, before its REMOVE record is durable:
the one exception to "a crash recovers a prefix of the operations" below.

Commits. With ``meta_commits=True`` (what the engine uses: ``Stream.apply`` ends every entry with
``set_meta``) a META record is a commit point: recovery keeps exactly the records up to the last
intact META and rolls back everything after it (truncating its segment, removing later ones; a
store with no intact META at all is emptied), so a crash never leaves half of an entry's effects
behind and the engine's applied index always describes what the store holds (a Raft replica then
re-applies the lost suffix from its log). What is rolled back was never acknowledged: acks follow
an fsync, which follows the entry's META. For that to hold, nothing irreversible may depend on
uncommitted records: segments are only deleted or compacted at commit points (``set_meta`` and
``sync``), and ``fsync`` syncs the directory first, then segments oldest first, so an interrupted
fsync leaves a prefix of the records. Without ``meta_commits`` recovery keeps any prefix.

Space. A segment is deleted when it is not the active one, all its messages are removed, and every
older segment that its removal records refer to is already deleted (else deleting it would bring
those messages back on recovery). Before an unlink the store is synced (so a crash recovers a
prefix of the operations, never a deletion without the removals behind it) and after it the
directory is fsynced (so deletions land in order). The engine meta blob is a META record (the last
one wins); before the segment holding the latest one is deleted, the blob is re-appended to the
active segment. A segment that is at least half of ``segment_bytes_max`` with under a quarter of its
bytes live is compacted: rewritten (write, fsync, rename, fsync directory) with only its live
messages, the removal records that still refer to existing older segments, and the latest meta if
it lives there; a rewritten segment is small, so rarely rewritten again. Opening
costs one scan of the segments that still exist. Deletion and compaction run on the owning thread
inside set_meta and sync (each syncs once: rare, once per segment).

Reads from memory. ``read_cache_bytes_max`` (per store, hence per stream; 0: every load reads
the disk) is shared by two things a ``load`` tries before the disk:

* the read tail (engine/read_tail.py, a ``READ_TAIL_SHARE`` of the budget): the active segment's
  most recently flushed bytes, kept as they were written, plus the unflushed buffer. A recent
  message is decoded from them, its record checksummed as a disk read's is, without a system call.
  Keeping them costs nothing per append: the flushed buffer itself is kept. Rotating the segment
  clears the tail; an erase in place patches it as it patches the file;
* the read cache of decoded ``StoredMsg`` objects (least recently used out, by generations:
  engine/read_cache.py), for what was read from disk: a ``load`` from disk puts what it decoded,
  after the record's CRC passed, so nothing unverified is ever cached. It is bounded by the rest
  of the budget (payload, header and subject bytes plus a fixed per-entry overhead) and holds only
  live messages: every path that kills a record (remove, erase, remove_through, a checksum failure
  found by ``scan``) drops its entry first. Compaction and segment deletion need no invalidation
  of their own: compaction rewrites only live records, byte for byte, and a segment is deleted
  only when none of its messages is live. Cached messages are kept off the cycle collector's lists
  (``set_untracked``).

Appends do not fill the read cache: on every replica, for every message, that was about a fifth
of an atomic batch's apply, for reads that mostly never come. Damage that happens on disk after a
message was cached (or while it is in the tail) is found by ``scan`` and recovery, not by
``load``.

Recovery. Segments are scanned in order. An interrupted write at the tail of the last segment
(short header, record cut short, zero fill, or a final record with a bad checksum) is truncated
away and described in ``recovery_notes()``. A damaged MSG record elsewhere is skipped and listed in
``corrupt_records()`` with its seq (the header has its own CRC); a damaged header stops the scan of
that segment (its length is unknowable), is listed with seq None, and later segments are still read.

Must never: read clocks, decide which messages to remove, serve a record whose checksum failed, or
crash on damaged bytes.
"""

from __future__ import annotations

import os
import re
import threading
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mypy_extensions import mypyc_attr

from engine import disk, records
from engine.read_cache import ReadCache
from engine.read_tail import ReadTail
from engine.records import RecordType, WalkedRecord, WalkStop
from engine.store import CorruptRecord, StoredMsg

SEGMENT_BYTES_MAX_DEFAULT = 64 * 1024 * 1024
SEGMENT_BYTES_MIN = 64 * 1024
SEGMENT_BYTES_ALIGN = 4096
# a stream limited by max_bytes gets segments of a quarter of it (as nats-server sizes its blocks
# from the limits): space comes back a segment at a time, so disk use stays within about
# max_bytes plus two segments (the active one and one partly expired), not max_bytes + 64 MiB
SEGMENTS_PER_MAX_BYTES = 4


def segment_bytes_for(max_bytes: int) -> int:
    """The segment size for a stream whose ``max_bytes`` limit is given (<= 0: no limit)."""
    if max_bytes <= 0:
        return SEGMENT_BYTES_MAX_DEFAULT
    size = -(-max_bytes // SEGMENTS_PER_MAX_BYTES)
    size = -(-size // SEGMENT_BYTES_ALIGN) * SEGMENT_BYTES_ALIGN
    return max(SEGMENT_BYTES_MIN, min(size, SEGMENT_BYTES_MAX_DEFAULT))


SEGMENT_NAME_FORMAT = "seg-{:08d}.blk"
_SEGMENT_NAME_RE = re.compile(r"^seg-(\d{8,})\.blk$")
_OPEN_FLAGS = os.O_RDWR | getattr(os, "O_CLOEXEC", 0)
_FILE_MODE = 0o644
COMPACT_SUFFIX = ".compact"  # a compaction's new file before its rename; leftovers are deleted
COMPACT_SEGMENT_FRACTION_MIN = 2  # only segments at least half of segment_bytes_max are rewritten
COMPACT_LIVE_FRACTION_MAX = 0.25  # ... and only when under a quarter of their bytes are live
READ_CACHE_BYTES_MAX_DEFAULT = 64 * 1024 * 1024
READ_TAIL_SHARE = 4  # the read tail gets a quarter of read_cache_bytes_max, the read cache the rest
_DIR_FSYNC_RANK = -1  # segment ids start at 1


@dataclass(eq=False, slots=True)
class _Segment:
    """One segment file and the index of the MSG records in it (parallel arrays in seq order)."""

    seg_id: int
    name: str
    fd: int
    size_bytes: int  # logical size: flushed bytes plus what sits in the store's buffer
    flushed_bytes: int
    seqs: array[int] = field(default_factory=lambda: array("Q"))
    offsets: array[int] = field(default_factory=lambda: array("Q"))
    lens: array[int] = field(default_factory=lambda: array("I"))  # 0 = removed or corrupt
    live: int = 0
    live_bytes: int = 0
    low_idx: int = 0  # every index below it is removed
    refs: set[int] = field(default_factory=set)  # older segments its removal records refer to
    damaged: bool = False  # a damaged header stopped its scan: never rewritten by compaction
    # The file's end including space reserved ahead of appends (engine/disk.py ``reserve``);
    # -1 when the filesystem cannot reserve.
    reserved: int = 0

    def location(self, offset: int) -> str:
        return f"{self.name}@{offset}"


# Compiled (protocol/native.py), yet the crash tests subclass it to fail chosen writes.
@mypyc_attr(allow_interpreted_subclasses=True)
class FileStore:
    """A ``MessageStore`` in a directory of segment files; opening a directory recovers it."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        segment_bytes_max: int = SEGMENT_BYTES_MAX_DEFAULT,
        read_cache_bytes_max: int = READ_CACHE_BYTES_MAX_DEFAULT,
        meta_commits: bool = False,
    ) -> None:
        assert segment_bytes_max >= records.RECORD_BYTES_MIN, segment_bytes_max
        assert read_cache_bytes_max >= 0, read_cache_bytes_max
        self._dir = Path(directory)
        self._segment_bytes_max = segment_bytes_max
        self._meta_commits = meta_commits
        # see "Reads from memory" in the module docstring
        tail_bytes_max = read_cache_bytes_max // READ_TAIL_SHARE
        self._tail = ReadTail(tail_bytes_max)
        self._cache = ReadCache(read_cache_bytes_max - tail_bytes_max)  # seq -> live message
        self._segments: dict[int, _Segment] = {}  # ascending seg_id
        self._msg_segs: list[_Segment] = []  # segments holding MSG records, in seq order
        self._msg_seg_first: list[int] = []  # first MSG seq of each, for bisect
        self._active: _Segment | None = None
        self._buf = bytearray()  # bytes of the active segment not yet flushed
        self._next_seg_id = 1
        self._last_seq = 0
        self._meta: bytes | None = None
        self._meta_seg_id: int | None = None
        self._corrupt: dict[int, tuple[CorruptRecord, int]] = {}  # seq -> (record, seg_id)
        self._corrupt_unknown: list[tuple[CorruptRecord, int]] = []  # seq unknown
        self._notes: list[str] = []
        self._reclaim_due = False
        self._compact_due: set[int] = set()
        self._reclaiming = False
        self._closed = False
        # Shared with worker threads running fsync(); everything else is owner-thread only.
        self._lock = threading.Lock()
        # fd -> fsync rank: the directory first, then segments oldest first, so that whatever
        # a crash interrupts, what reached the disk is a prefix of the records (see recovery).
        self._dirty_fds: dict[int, int] = {}
        self._data_bytes: dict[int, int] = {}  # segment fd -> bytes of data written to it
        self._fsyncing_fds: dict[int, int] = {}  # fd -> number of fsync() calls using it
        self._close_deferred_fds: set[int] = set()

        self._dir.mkdir(parents=True, exist_ok=True)
        self._dir_fd = os.open(self._dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        self._recover()

    # ----------------------------------------------------------------- MessageStore

    def append(self, msg: StoredMsg) -> None:
        self.append_fields(msg.seq, msg.subject, msg.hdr, msg.data, msg.ts_ns)

    def append_fields(self, seq: int, subject: str, hdr: bytes, data: bytes, ts_ns: int) -> None:
        assert seq > self._last_seq, (seq, self._last_seq)
        seg = self._active
        if seg is None or seg.size_bytes >= self._segment_bytes_max:
            seg = self._writable_segment()
        offset = seg.size_bytes
        total_len = records.append_msg_fields(self._buf, seq, subject, hdr, data, ts_ns)
        seg.size_bytes = offset + total_len
        self._index_msg(seg, seq, offset, total_len)
        self._last_seq = seq

    def remove(self, seq: int, *, erase: bool = False) -> bool:
        found = self._locate(seq)
        if found is None:
            corrupt = self._corrupt.pop(seq, None)
            if corrupt is None:
                return False
            # Record the removal so that recovery stops reporting the damaged record.
            target = self._segments.get(corrupt[1])
            self._log(records.encode_remove(seq, erase=False), () if target is None else (target,))
            return True
        seg, idx = found
        offset, total_len = seg.offsets[idx], seg.lens[idx]
        self._mark_dead(seg, idx)
        if erase:
            self._erase_in_place(seg, offset, total_len)
        self._log(records.encode_remove(seq, erase=erase), (seg,))
        return True

    def remove_through(self, seq: int) -> None:
        targets = self._kill_through(seq)
        self._log(records.encode_remove_through(seq), targets)

    def load(self, seq: int) -> StoredMsg | None:
        msg = self._cache.get(seq)
        if msg is not None:
            return msg
        found = self._locate(seq)
        if found is None:
            return None
        seg, idx = found
        offset, total_len = seg.offsets[idx], seg.lens[idx]
        from_disk = False
        if offset >= seg.flushed_bytes:
            buf: bytes | bytearray = self._buf
            at = offset - seg.flushed_bytes
        else:
            held = self._tail.locate(offset, total_len) if seg is self._active else None
            if held is None:
                buf, at = os.pread(seg.fd, total_len, offset), 0
                from_disk = True
            else:
                buf, at = held
        # a short read fails the length check
        msg = records.decode_msg_at(buf, at, total_len, seq, StoredMsg)
        if msg is None:
            self._found_corrupt(seg, idx, "checksum mismatch on read")
        elif from_disk:
            self._cache.put(msg)
        return msg

    def scan(self) -> Iterator[StoredMsg]:
        for seg in list(self._msg_segs):
            if seg.live == 0:
                continue
            view = memoryview(self._segment_bytes(seg))
            lens, offsets, seqs = seg.lens, seg.offsets, seg.seqs
            for idx in range(seg.low_idx, len(seqs)):
                if not lens[idx]:
                    continue
                msg = records.decode_msg(view, offsets[idx], seqs[idx])
                if msg is None:
                    self._found_corrupt(seg, idx, "checksum mismatch on scan")
                else:
                    yield msg

    def set_meta(self, meta: bytes) -> None:
        self._write_meta(bytes(meta))
        self._reclaim()

    def get_meta(self) -> bytes | None:
        return self._meta

    def flush(self) -> None:
        if not self._buf:
            return
        seg = self._active
        assert seg is not None
        end = seg.flushed_bytes + len(self._buf)
        if end > seg.reserved >= 0:
            seg.reserved = disk.reserve(seg.fd, seg.reserved, end, self._segment_bytes_max)
        _pwrite_all(seg.fd, self._buf, seg.flushed_bytes)
        self._tail.add(seg.flushed_bytes, self._buf)
        seg.flushed_bytes = end
        assert seg.flushed_bytes == seg.size_bytes, (seg.flushed_bytes, seg.size_bytes)
        self._buf = bytearray()  # the tail owns the written one now
        self._mark_dirty(seg)

    def _mark_dirty(self, seg: _Segment) -> None:
        with self._lock:
            self._dirty_fds[seg.fd] = seg.seg_id
            self._data_bytes[seg.fd] = seg.flushed_bytes

    def fsync(self) -> None:
        with self._lock:
            fds = sorted(self._dirty_fds, key=self._dirty_fds.__getitem__)
            self._dirty_fds.clear()
            data_bytes = [self._data_bytes.get(fd) for fd in fds]
            for fd in fds:
                self._fsyncing_fds[fd] = self._fsyncing_fds.get(fd, 0) + 1
        try:
            for fd, size in zip(fds, data_bytes, strict=True):
                disk.fsync(fd, size)
        finally:
            with self._lock:
                for fd in fds:
                    users = self._fsyncing_fds.pop(fd) - 1
                    if users:
                        self._fsyncing_fds[fd] = users
                    elif fd in self._close_deferred_fds:
                        self._close_deferred_fds.discard(fd)
                        os.close(fd)

    def sync(self) -> None:
        self.flush()
        self.fsync()
        if self._reclaim_due and not self._reclaiming:
            self._reclaim()

    def corrupt_records(self) -> list[CorruptRecord]:
        found = [rec for rec, _ in self._corrupt_unknown] + [
            rec for rec, _ in self._corrupt.values()
        ]
        return sorted(found, key=lambda rec: (rec.seq or 0, rec.location))

    def close(self) -> None:
        if self._closed:
            return
        self.flush()  # no reclaiming: a close must not rewrite files (crash tests rely on it)
        if self._active is not None:
            self._release_reserved(self._active)
        self.fsync()
        self._closed = True
        self._cache.clear()
        self._tail.clear()
        for seg in self._segments.values():
            self._close_fd(seg.fd)
        self._segments.clear()
        self._msg_segs.clear()
        self._msg_seg_first.clear()
        self._active = None
        self._close_fd(self._dir_fd)

    # ----------------------------------------------------------------- extras

    def recovery_notes(self) -> list[str]:
        """What recovery repaired on open (torn tails truncated, empty files removed...)."""
        return list(self._notes)

    def segment_names(self) -> list[str]:
        """The segment files that currently exist, oldest first."""
        return [seg.name for seg in self._segments.values()]

    def read_cache_bytes(self) -> int:
        """The bytes the read cache accounts for now (never above its share of
        ``read_cache_bytes_max``)."""
        return self._cache.bytes

    def read_tail_bytes(self) -> int:
        """The bytes the read tail holds now (never above its share of ``read_cache_bytes_max``)."""
        return self._tail.held_bytes

    def cached_seqs(self) -> list[int]:
        """The seqs the read cache holds, least recently used first as far as it keeps an order
        (engine/read_cache.py; for tests and monitoring)."""
        return self._cache.seqs()

    # ----------------------------------------------------------------- read cache

    def _cache_drop_through(self, seq: int, spans: list[tuple[_Segment, int, int]]) -> None:
        """Drops every cached seq <= ``seq``. ``spans`` (segment, first index, end index) hold
        every seq that may be cached; the cheaper of probing them and filtering the whole cache
        is chosen, so a purge costs O(min(messages purged, messages cached))."""
        cache = self._cache
        cached = len(cache)
        if not cached:
            return
        if sum(hi - lo for _seg, lo, hi in spans) < cached:
            cache.drop_many([s for seg, lo, hi in spans for s in seg.seqs[lo:hi]])
        else:
            cache.drop_through(seq)

    # ----------------------------------------------------------------- index

    def _index_msg(self, seg: _Segment, seq: int, offset: int, total_len: int) -> None:
        if not seg.seqs:
            self._msg_segs.append(seg)
            self._msg_seg_first.append(seq)
        seg.seqs.append(seq)
        seg.offsets.append(offset)
        seg.lens.append(total_len)
        seg.live += 1
        seg.live_bytes += total_len

    def _locate(self, seq: int) -> tuple[_Segment, int] | None:
        """The segment and index of the live MSG record of ``seq``."""
        pos = bisect_right(self._msg_seg_first, seq) - 1
        if pos < 0:
            return None
        seg = self._msg_segs[pos]
        seqs = seg.seqs
        idx = seq - seqs[0]  # exact when the segment's seqs are contiguous, the common case
        if not (idx < len(seqs) and seqs[idx] == seq):
            idx = bisect_left(seqs, seq)
            if not (idx < len(seqs) and seqs[idx] == seq):
                return None
        return (seg, idx) if seg.lens[idx] else None

    def _mark_dead(self, seg: _Segment, idx: int) -> None:
        self._cache.drop(seg.seqs[idx])
        seg.live_bytes -= seg.lens[idx]
        seg.lens[idx] = 0
        seg.live -= 1
        lens = seg.lens
        low = seg.low_idx
        while low < len(lens) and not lens[low]:
            low += 1
        seg.low_idx = low
        self._note_shrunk(seg)

    def _note_shrunk(self, seg: _Segment) -> None:
        """Schedules the deletion or compaction a removal in ``seg`` may have made worthwhile."""
        if seg is self._active:
            return
        if seg.live == 0:
            self._reclaim_due = True
        elif self._wants_compaction(seg):
            self._compact_due.add(seg.seg_id)
            self._reclaim_due = True

    def _wants_compaction(self, seg: _Segment) -> bool:
        return (
            not seg.damaged
            and seg.size_bytes * COMPACT_SEGMENT_FRACTION_MIN >= self._segment_bytes_max
            and seg.live_bytes < seg.size_bytes * COMPACT_LIVE_FRACTION_MAX
        )

    def _kill_through(self, seq: int) -> list[_Segment]:
        """Marks every MSG record with seq <= ``seq`` removed; returns the segments holding any."""
        touched: list[_Segment] = []
        spans: list[tuple[_Segment, int, int]] = []
        for seg in self._msg_segs:
            if seg.seqs[0] > seq:
                break
            touched.append(seg)
            lo, hi = seg.low_idx, bisect_right(seg.seqs, seq)
            if hi <= lo:
                continue
            spans.append((seg, lo, hi))
            seg.live -= (hi - lo) - seg.lens[lo:hi].count(0)
            seg.live_bytes -= sum(seg.lens[lo:hi])
            seg.lens[lo:hi] = array("I", bytes(4 * (hi - lo)))
            seg.low_idx = hi
            while seg.low_idx < len(seg.lens) and not seg.lens[seg.low_idx]:
                seg.low_idx += 1
            self._note_shrunk(seg)
        for dead_seq in [s for s in self._corrupt if s <= seq]:
            del self._corrupt[dead_seq]
        self._cache_drop_through(seq, spans)
        return touched

    def _found_corrupt(self, seg: _Segment, idx: int, reason: str) -> None:
        seq = seg.seqs[idx]
        record = CorruptRecord(seq=seq, location=seg.location(seg.offsets[idx]), reason=reason)
        self._corrupt[seq] = (record, seg.seg_id)
        self._mark_dead(seg, idx)

    # ----------------------------------------------------------------- writing

    def _log(self, rec: bytes, targets: tuple[_Segment, ...] | list[_Segment]) -> _Segment:
        """Appends a non-MSG record; ``targets`` are the segments its removal refers to."""
        seg = self._writable_segment()
        self._buf += rec
        seg.size_bytes += len(rec)
        for target in targets:
            if target is not seg:
                seg.refs.add(target.seg_id)
        return seg

    def _write_meta(self, meta: bytes) -> None:
        self._meta = meta
        self._meta_seg_id = self._log(records.encode_meta(meta), ()).seg_id

    def _writable_segment(self) -> _Segment:
        """The active segment, rotated first if full. Rotating before a write rather than after
        one keeps the segment just written active, hence never deleted by the reclaim that
        follows (re-appending the meta blob could otherwise fill and free segments forever)."""
        seg = self._active
        if seg is not None and seg.size_bytes >= self._segment_bytes_max:
            # Synced before anything reaches its successor: whatever order the OS writes pages
            # back in, a crash then leaves a prefix of the records (rare: once per segment).
            self.flush()
            self._release_reserved(seg)
            # fsynced here even when a worker's fsync already took it (everything flushed
            # before): that one may still be running, and the successor must not overtake it
            self._mark_dirty(seg)
            self.fsync()
            self._active = None
            self._tail.clear()
            if seg.live == 0:
                self._reclaim_due = True
            seg = None
        return seg or self._new_segment()

    def _new_segment(self) -> _Segment:
        assert self._active is None and not self._buf
        seg_id = self._next_seg_id
        self._next_seg_id += 1
        name = SEGMENT_NAME_FORMAT.format(seg_id)
        fd = os.open(self._dir / name, _OPEN_FLAGS | os.O_CREAT | os.O_EXCL, _FILE_MODE)
        disk.resized(fd, 0)
        seg = _Segment(seg_id=seg_id, name=name, fd=fd, size_bytes=0, flushed_bytes=0)
        self._segments[seg_id] = seg
        self._active = seg
        with self._lock:  # the new directory entry must be durable with the data put in it
            self._dirty_fds[self._dir_fd] = _DIR_FSYNC_RANK
        return seg

    def _release_reserved(self, seg: _Segment) -> None:
        """Cuts the reserved zeros off a segment that takes no more appends (rotated or closed);
        the fsync that follows makes the cut durable."""
        if seg.reserved > seg.flushed_bytes:
            os.ftruncate(seg.fd, seg.flushed_bytes)
            seg.reserved = seg.flushed_bytes
            self._mark_dirty(seg)

    def _erase_in_place(self, seg: _Segment, offset: int, total_len: int) -> None:
        patch = records.erase_patch(total_len)
        offset += records.HEADER_BYTES
        if offset >= seg.flushed_bytes:
            start = offset - seg.flushed_bytes
            self._buf[start : start + len(patch)] = patch
            return
        os.pwrite(seg.fd, patch, offset)
        if seg is self._active:
            self._tail.patch(offset, patch)
        self._mark_dirty(seg)

    # ----------------------------------------------------------------- reclaiming space

    def _reclaim(self) -> None:
        """Deletes every segment that may go (see the module docstring), oldest first."""
        if self._reclaiming:
            return  # the outer pass loops again: _reclaim_due is set
        self._reclaiming = True
        try:
            self._reclaim_pass()
        finally:
            self._reclaiming = False

    def _reclaim_pass(self) -> None:
        while self._reclaim_due:
            self._reclaim_due = False
            for seg in list(self._segments.values()):
                if seg is self._active or seg.live > 0 or seg.seg_id not in self._segments:
                    continue
                if any(ref in self._segments for ref in seg.refs):
                    continue
                self._delete_segment(seg)
            due, self._compact_due = sorted(self._compact_due), set()
            for seg_id in due:
                candidate = self._segments.get(seg_id)
                if candidate is not None and candidate is not self._active and candidate.live > 0:
                    if self._wants_compaction(candidate):
                        self._compact(candidate)

    def _delete_segment(self, seg: _Segment) -> None:
        if self._meta_seg_id == seg.seg_id and self._meta is not None:
            self._write_meta(self._meta)  # a new copy, in the active segment
        # Everything written so far (the removals that killed this segment, the meta copy) must be
        # durable before the unlink: a crash then recovers a prefix of the operations.
        self.sync()
        del self._segments[seg.seg_id]
        if seg.seqs:
            pos = self._msg_segs.index(seg)
            del self._msg_segs[pos]
            del self._msg_seg_first[pos]
        self._corrupt = {s: c for s, c in self._corrupt.items() if c[1] != seg.seg_id}
        self._corrupt_unknown = [c for c in self._corrupt_unknown if c[1] != seg.seg_id]
        self._close_fd(seg.fd)
        os.unlink(self._dir / seg.name)
        disk.fsync(self._dir_fd)  # gone for good before any segment referring to it may go

    def _compact(self, seg: _Segment) -> None:
        """Rewrites ``seg`` with only what still matters: live messages, removals of messages in
        other segments that still exist, and the latest meta blob if it lives here. The new file
        replaces the old one atomically (write, fsync, rename, fsync directory)."""
        self.sync()  # the removals that justify dropping records must be durable first
        assert seg.flushed_bytes == seg.size_bytes, (seg.flushed_bytes, seg.size_bytes)
        data = _pread_all(seg.fd, seg.flushed_bytes)
        live_at = {seg.offsets[i]: i for i in range(seg.low_idx, len(seg.seqs)) if seg.lens[i]}
        out = bytearray()
        seqs, offsets, lens = array("Q"), array("Q"), array("I")
        refs: set[int] = set()
        meta_rec: bytes | None = None
        for item in records.walk(data):
            if isinstance(item, WalkStop):
                seg.damaged = True  # not expected for a sealed segment: leave it alone
                return
            rec = data[item.offset : item.offset + item.total_len]
            targets: list[_Segment] = []
            if item.rtype == RecordType.MSG:
                if item.offset not in live_at:
                    continue
                seqs.append(item.seq)
                offsets.append(len(out))
                lens.append(item.total_len)
            elif item.rtype == RecordType.REMOVE:
                holder = self._holder_of(item.seq)
                if holder is None or holder is seg:
                    continue
                targets = [holder]
            elif item.rtype == RecordType.REMOVE_THROUGH:
                targets = [t for t in self._msg_segs if t.seqs[0] <= item.seq and t is not seg]
                if not targets:
                    continue
            else:
                if item.crc_ok and self._meta_seg_id == seg.seg_id:
                    meta_rec = rec  # only the last one matters
                continue
            refs.update(t.seg_id for t in targets)
            out += rec
        if meta_rec is not None:
            out += meta_rec
        self._replace_segment_file(seg, out)
        assert len(seqs) == seg.live, (len(seqs), seg.live)
        if seg.seqs and not seqs:
            pos = self._msg_segs.index(seg)
            del self._msg_segs[pos]
            del self._msg_seg_first[pos]
        elif seg.seqs:
            self._msg_seg_first[self._msg_segs.index(seg)] = seqs[0]
        seg.seqs, seg.offsets, seg.lens, seg.low_idx, seg.refs = seqs, offsets, lens, 0, refs
        self._corrupt = {s: c for s, c in self._corrupt.items() if c[1] != seg.seg_id}
        # Removal records elsewhere that pointed into this segment pointed at dropped records.
        for other in self._segments.values():
            other.refs.discard(seg.seg_id)
        self._reclaim_due = True

    def _holder_of(self, seq: int) -> _Segment | None:
        """The segment whose MSG records include ``seq``, live or removed."""
        pos = bisect_right(self._msg_seg_first, seq) - 1
        if pos < 0:
            return None
        seg = self._msg_segs[pos]
        idx = bisect_left(seg.seqs, seq)
        return seg if idx < len(seg.seqs) and seg.seqs[idx] == seq else None

    def _replace_segment_file(self, seg: _Segment, content: bytearray) -> None:
        path = self._dir / seg.name
        tmp_path = self._dir / (seg.name + COMPACT_SUFFIX)
        fd = os.open(tmp_path, _OPEN_FLAGS | os.O_CREAT | os.O_TRUNC, _FILE_MODE)
        try:
            _pwrite_all(fd, content, 0)
            disk.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp_path, path)
        disk.fsync(self._dir_fd)
        new_fd = os.open(path, _OPEN_FLAGS)
        old_fd, seg.fd = seg.fd, new_fd
        self._close_fd(old_fd)
        seg.size_bytes = seg.flushed_bytes = seg.reserved = len(content)

    def _close_fd(self, fd: int) -> None:
        with self._lock:
            self._dirty_fds.pop(fd, None)
            self._data_bytes.pop(fd, None)
            if self._fsyncing_fds.get(fd):
                self._close_deferred_fds.add(fd)
                return
        os.close(fd)

    def _segment_bytes(self, seg: _Segment) -> bytes:
        data = _pread_all(seg.fd, seg.flushed_bytes)
        if seg is self._active and self._buf:
            data += bytes(self._buf)
        return data

    # ----------------------------------------------------------------- recovery

    def _recover(self) -> None:
        found: list[tuple[int, str]] = []
        for entry in os.listdir(self._dir):
            match = _SEGMENT_NAME_RE.match(entry)
            if match:
                found.append((int(match.group(1)), entry))
            elif entry.endswith(COMPACT_SUFFIX):
                os.unlink(self._dir / entry)
                self._notes.append(f"{entry}: unfinished compaction removed")
        found.sort()
        if found:
            self._next_seg_id = found[-1][0] + 1
        non_empty: list[tuple[int, str]] = []
        for seg_id, name in found:
            if os.path.getsize(self._dir / name) == 0:
                os.unlink(self._dir / name)
                self._notes.append(f"{name}: empty segment removed")
            else:
                non_empty.append((seg_id, name))
        if self._meta_commits:
            non_empty = self._roll_back_to_last_meta(non_empty)
        pending: dict[int, tuple[CorruptRecord, int]] = {}
        for pos, (seg_id, name) in enumerate(non_empty):
            self._recover_segment(seg_id, name, pending, is_last=pos == len(non_empty) - 1)
        self._corrupt.update(pending)
        self._reclaim_due = True
        self._reclaim()
        if self._notes:
            disk.fsync(self._dir_fd)

    def _roll_back_to_last_meta(self, segments: list[tuple[int, str]]) -> list[tuple[int, str]]:
        """Discards every record after the last intact META record (the commit point, see
        "Commits" in the module docstring) and returns the segments that remain."""
        for pos in range(len(segments) - 1, -1, -1):
            seg_id, name = segments[pos]
            path = self._dir / name
            data = path.read_bytes()
            commit_end: int | None = None
            stop: WalkStop | None = None
            for item in records.walk(data):
                if isinstance(item, WalkStop):
                    stop = item
                    break
                if item.rtype == RecordType.META and item.crc_ok:
                    commit_end = item.offset + item.total_len
            if commit_end is None:
                continue
            if commit_end < len(data):
                # Damage, not an interrupted write: it may have hidden a later commit. A segment
                # with a successor was cut back and fsynced before the successor existed, so
                # nothing there is an interrupted write, whatever it looks like.
                if stop is not None and (not stop.torn or pos < len(segments) - 1):
                    location = f"{name}@{stop.offset}"
                    record = CorruptRecord(seq=None, location=location, reason=stop.reason)
                    self._corrupt_unknown.append((record, seg_id))
                # Trailing zeros are space reserved ahead of appends (engine/disk.py), not data.
                written = len(data[commit_end:].rstrip(b"\0"))
                if written:
                    self._notes.append(
                        f"{name}@{commit_end}: {written} bytes after the last commit rolled back"
                    )
                fd = os.open(path, _OPEN_FLAGS)
                try:
                    os.ftruncate(fd, commit_end)
                    disk.resized(fd, commit_end)
                    disk.fsync(fd)
                finally:
                    os.close(fd)
            for _later_id, later_name in segments[pos + 1 :]:
                os.unlink(self._dir / later_name)
                self._notes.append(f"{later_name}: written after the last commit, removed")
            return segments[: pos + 1]
        for _seg_id, name in segments:  # no commit at all: nothing was ever committed
            os.unlink(self._dir / name)
            self._notes.append(f"{name}: no commit record in the store, removed")
        return []

    def _recover_segment(
        self,
        seg_id: int,
        name: str,
        pending: dict[int, tuple[CorruptRecord, int]],
        *,
        is_last: bool,
    ) -> None:
        fd = os.open(self._dir / name, _OPEN_FLAGS)
        size = os.fstat(fd).st_size
        seg = _Segment(
            seg_id=seg_id, name=name, fd=fd, size_bytes=size, flushed_bytes=size, reserved=size
        )
        self._segments[seg_id] = seg
        data = _pread_all(fd, size)
        appendable = is_last
        for item in records.walk(data):
            if isinstance(item, WalkStop):
                appendable = self._recover_stop(seg, item, is_last=is_last)
                break
            failed = not item.crc_ok and not item.erased and is_last
            # the final record, when only zeros (reserved space) follow it
            if failed and disk.zeros_from(data, item.offset + item.total_len):
                self._truncate(seg, item.offset, f"final record (seq {item.seq}) failed its CRC")
                break
            self._recover_record(seg, data, item, pending)
        if appendable and seg.size_bytes < self._segment_bytes_max:
            self._active = seg

    def _recover_stop(self, seg: _Segment, stop: WalkStop, *, is_last: bool) -> bool:
        """Handles a segment that does not end cleanly; returns whether appends may continue."""
        if stop.torn and is_last:
            self._truncate(seg, stop.offset, stop.reason)
            return True
        record = CorruptRecord(seq=None, location=seg.location(stop.offset), reason=stop.reason)
        self._corrupt_unknown.append((record, seg.seg_id))
        seg.damaged = True
        self._notes.append(f"{record.location}: {stop.reason}; rest of the segment not read")
        return False

    def _truncate(self, seg: _Segment, offset: int, reason: str) -> None:
        self._notes.append(
            f"{seg.location(offset)}: {reason}; truncated {seg.size_bytes - offset} torn bytes"
        )
        os.ftruncate(seg.fd, offset)
        disk.resized(seg.fd, offset)
        disk.fsync(seg.fd)
        seg.size_bytes = seg.flushed_bytes = seg.reserved = offset

    def _recover_record(
        self,
        seg: _Segment,
        data: bytes,
        item: WalkedRecord,
        pending: dict[int, tuple[CorruptRecord, int]],
    ) -> None:
        rtype, seq = item.rtype, item.seq
        if rtype == RecordType.MSG:
            if seq <= self._last_seq:
                reason = f"sequence {seq} not above {self._last_seq}"
                record = CorruptRecord(seq=None, location=seg.location(item.offset), reason=reason)
                self._corrupt_unknown.append((record, seg.seg_id))
            elif item.crc_ok:
                self._index_msg(seg, seq, item.offset, item.total_len)
                self._last_seq = seq
            elif item.erased:
                self._last_seq = seq
            else:
                location = seg.location(item.offset)
                pending[seq] = (CorruptRecord(seq, location, "checksum mismatch"), seg.seg_id)
                self._last_seq = seq
        elif rtype == RecordType.REMOVE:  # header CRC vouches for seq: the removal holds
            pending.pop(seq, None)
            found = self._locate(seq)
            if found is not None:
                self._mark_dead(*found)
                if found[0] is not seg:
                    seg.refs.add(found[0].seg_id)
        elif rtype == RecordType.REMOVE_THROUGH:
            for dead_seq in [s for s in pending if s <= seq]:
                del pending[dead_seq]
            seg.refs.update(t.seg_id for t in self._kill_through(seq) if t is not seg)
        elif rtype == RecordType.META:
            if item.crc_ok:
                self._meta = records.meta_body(data, item.offset, item.total_len)
                self._meta_seg_id = seg.seg_id
            else:
                location = seg.location(item.offset)
                record = CorruptRecord(seq=None, location=location, reason="damaged meta record")
                self._corrupt_unknown.append((record, seg.seg_id))


def _pwrite_all(fd: int, data: bytearray, offset: int) -> None:
    written = 0
    with memoryview(data) as view:
        while written < len(data):
            written += os.pwrite(fd, view[written:], offset + written)


def _pread_all(fd: int, size: int) -> bytes:
    data = os.pread(fd, size, 0)
    while len(data) < size:
        more = os.pread(fd, size - len(data), len(data))
        if not more:
            break
        data += more
    return data
