"""A durable Raft log for pysyncobj: checksummed records in our own versioned format, no pickle.

``DurableJournal`` implements pysyncobj's journal interface (the methods of its ``Journal``, with
pysyncobj's names, which pysyncobj calls directly: cluster/raft/adapter.py installs it in place of
pysyncobj's own; this module does not import pysyncobj). It keeps every entry in memory, because
pysyncobj indexes and slices the log all the time, and mirrors it in one append-only file; memory
and file size are bounded only by log compaction (``deleteEntriesTo``), which pysyncobj triggers
and cluster/raft/group.py configures.

Files, all in the journal's directory:

* ``raft.log``: a 16-byte header (magic ``JRRAFTLG``, u32 format version, u32 reserved = 0), then
  records ``[u32 len][u32 crc32][u64 idx][u64 term][command]``, little-endian, where ``len`` counts
  the bytes after the crc and the crc covers exactly those bytes.
* ``meta.json``: ``{"format", "version", "current_term", "voted_for", "commit_index"}``, always
  replaced whole (write tmp, fsync, rename, fsync directory), so it is the old or the new one.
* ``LOCK``: an exclusive ``flock`` held while the journal is open, so two processes (or two opens
  in one process) never write the same log.
* ``*.tmp``: a compaction, creation or meta write that a crash interrupted; removed on open.

Durability. ``add`` writes its record to the OS at once (a process crash keeps it) but never
fsyncs: the caller group-commits with ``sync()``, which fsyncs the log file once for everything
appended or truncated before it began. ``append_generation`` counts mutations (add, truncation,
compaction, clear); ``synced_generation`` is the latest generation a completed sync covered, so an
entry added at generation ``g`` is durable once ``synced_generation >= g``; ``synced_index`` is the
Raft index of the last entry that is durable and still in the log. ``setCurrentTerm`` is durable
before it returns (Raft must not act on a term or vote that a crash could forget). The commit index
is written lazily (``sync()`` and ``onOneSecondTimer``) and is clamped to ``synced_index`` first:
entries beyond the last sync may come back different after a power loss (a truncation that was
not synced can resurrect old entries), and pysyncobj applies everything up to the stored commit
index on restart. ``deleteEntriesTo`` rewrites the remaining entries into a new file (fsync,
rename, fsync directory), so after it every remaining entry is durable. ``add`` reserves space
ahead of the log's end (``engine/disk.py`` ``reserve``: an fsync then need not commit a new file
size each time); closing cuts it off, and recovery drops the zeros a crash left after the last
record without a note.

Threads. One owning thread (pysyncobj's) calls everything; ``sync()`` may also run in one worker
thread at the same time (so the owner keeps appending while an fsync is under way). A lock guards
the bookkeeping the two share; the fsync itself runs on a ``dup`` of the log's fd, outside the
lock, so a compaction or ``_destroy`` meanwhile cannot close it under the worker. Meta writes are
serialised by a second lock. An I/O error while the file may be half-changed, or a failed fsync
(after which Linux may have dropped the dirty pages), poisons the journal: every later mutation or
sync raises ``JournalFailedError`` and the node must restart and recover from disk.

Recovery. Records are read in order until the first one that is cut short, fails its crc, has an
impossible length, or does not follow its predecessor (idx + 1, term not lower); the file is
truncated there and the cut is logged at WARNING and listed in ``recovery_notes()``. A crash
mid-append explains a bad tail; damage earlier in the file also drops every later entry (they
cannot be trusted to follow it), which Raft repairs from the leader as long as only a minority
is damaged. When recovery can tell that synced entries were lost (an intact record after the bad
one, or a stored commit index beyond the log) it sets
``lost_synced_entries``: the node may have acknowledged those entries, so its Raft group must not
vote until a leader has brought it back (``RaftGroup.abstaining``). A damaged tail with nothing
intact after it is indistinguishable from an interrupted append and is not flagged.
A bad header or unreadable meta raises ``JournalCorruptError``: that is not a crash
artefact (both are only ever replaced atomically), and silently resetting a term or vote would
break Raft.

Must never: fsync inside ``add``, use pickle, return an entry whose checksum failed, act on a
term/vote that is not yet durable, or persist a commit index beyond the durable log.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import struct
import threading
from array import array
from bisect import bisect_right
from pathlib import Path
from typing import Any, Final, TypeGuard, overload

from engine import disk
from engine.checksum import crc32

log = logging.getLogger(__name__)

LOG_FILE_NAME: Final = "raft.log"
META_FILE_NAME: Final = "meta.json"
LOCK_FILE_NAME: Final = "LOCK"
TMP_SUFFIX: Final = ".tmp"

LOG_MAGIC: Final = b"JRRAFTLG"
LOG_FORMAT_VERSION: Final = 1
META_FORMAT_NAME: Final = "jetraft-raft-meta"
META_FORMAT_VERSION: Final = 1
META_BYTES_MAX: Final = 64 * 1024  # the meta is three scalars; anything bigger is damage

_HEADER: Final = struct.Struct("<8sII")  # magic, format version, reserved (0)
HEADER_BYTES: Final = _HEADER.size
_PREFIX: Final = struct.Struct("<II")  # payload length, crc32 of the payload
_IDS: Final = struct.Struct("<QQ")  # idx, term: the start of the payload
RECORD_PREFIX_BYTES: Final = _PREFIX.size
RECORD_PAYLOAD_BYTES_MIN: Final = _IDS.size
RECORD_PAYLOAD_BYTES_MAX: Final = 0xFFFF_FFFF  # the u32 length field
COMMAND_BYTES_MAX: Final = RECORD_PAYLOAD_BYTES_MAX - RECORD_PAYLOAD_BYTES_MIN
U64_MAX: Final = 0xFFFF_FFFF_FFFF_FFFF

DEFAULT_COMMIT_INDEX: Final = 1  # pysyncobj's first entry (a NO_OP at idx 1) is always committed
DEFAULT_TERM: Final = 0

_FILE_MODE: Final = 0o644
_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)

JournalEntry = tuple[bytes, int, int]  # (command, idx, term), the shape pysyncobj uses


class JournalError(Exception):
    """Base class of the journal's own errors."""


class JournalCorruptError(JournalError):
    """The log header or the meta file is damaged or of an unknown format."""


class JournalFailedError(JournalError):
    """An earlier I/O error left the journal in an unknown state; reopen it from disk."""


class JournalLockedError(JournalError):
    """Another open journal (this process or another) holds the directory."""


class DurableJournal:
    """pysyncobj's ``Journal`` interface over ``raft.log`` + ``meta.json`` in ``path``."""

    def __init__(self, path: Path) -> None:
        self._dir = Path(path)
        self._dir.mkdir(parents=True, exist_ok=True)
        self._log_path = self._dir / LOG_FILE_NAME
        self._meta_path = self._dir / META_FILE_NAME
        self._notes: list[str] = []
        # Set when recovery proves that entries this node had fsynced (and so may have
        # acknowledged to a leader or counted in a vote) are gone: see RaftGroup.abstaining.
        self.lost_synced_entries = False
        self._closed = False
        self._failed: str | None = None
        # Shared with a worker thread running sync(): the fd, the generations and the lists.
        self._lock = threading.Lock()
        # Serialises meta file writes (setCurrentTerm on the owner, sync() on a worker).
        self._meta_lock = threading.Lock()
        self._entries: list[JournalEntry] = []
        self._offsets = array("Q")  # file offset of each entry's record
        self._gens = array("Q")  # append_generation of the add that wrote each entry
        self._generation = 0
        self._synced_generation = 0
        self._fd = -1
        self._lock_fd = self._acquire_dir_lock()
        try:
            self._remove_leftover_tmp_files()
            self._term_vote, self._commit_index = self._read_meta()
            self._persisted = (*self._term_vote, self._commit_index)
            self._fd = self._open_log()
            self._end = self._recover_log()
            # The file's end including space reserved ahead of appends (engine/disk.py
            # ``reserve``); -1 once the filesystem refused to reserve.
            self._reserved = self._end
            # What a crashed predecessor wrote may sit only in the page cache: make it (and any
            # rename it did) durable, so that synced_index may cover every recovered entry.
            disk.fsync(self._fd)
            self._fsync_dir()
        except BaseException:
            if self._fd >= 0:
                os.close(self._fd)
            os.close(self._lock_fd)
            raise
        if self._entries and self._commit_index > self._entries[-1][1]:
            self.lost_synced_entries = True  # the commit index is only stored once synced
            self._note(
                f"commit index {self._commit_index} beyond the log's last index "
                f"{self._entries[-1][1]}; clamped"
            )
            self._commit_index = self._entries[-1][1]

    # ------------------------------------------------------------------ pysyncobj's interface

    def add(self, command: bytes | bytearray | memoryview, idx: int, term: int) -> None:
        cmd = command if type(command) is bytes else bytes(command)
        if not (0 <= idx <= U64_MAX and 0 <= term <= U64_MAX):
            raise AssertionError(f"idx {idx} / term {term} outside u64")
        if len(cmd) > COMMAND_BYTES_MAX:
            raise ValueError(f"command of {len(cmd)} bytes exceeds {COMMAND_BYTES_MAX}")
        if self._entries:
            _, last_idx, last_term = self._entries[-1]
            if idx != last_idx + 1:
                raise AssertionError(f"add idx {idx} does not follow last idx {last_idx}")
            if term < last_term:
                raise AssertionError(f"add term {term} below last term {last_term}")
        record = _encode_record(cmd, idx, term)
        with self._lock:
            self._check_writable()
            offset = self._end
            end = offset + len(record)
            try:
                if end > self._reserved >= 0:
                    self._reserved = disk.reserve(self._fd, self._reserved, end, _NO_LIMIT)
                _pwrite_all(self._fd, record, offset)
            except OSError as exc:
                self._undo_partial_write(offset, exc)
                raise
            self._end = end
            self._generation += 1
            self._entries.append((cmd, idx, term))
            self._offsets.append(offset)
            self._gens.append(self._generation)

    def clear(self) -> None:
        self.deleteEntriesFrom(0)

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        """Log truncation: drops the entries at positions ``entryFrom`` and later."""
        if entryFrom < 0:
            raise AssertionError(f"deleteEntriesFrom({entryFrom}): negative position")
        if entryFrom >= len(self._entries):
            return
        with self._lock:
            self._check_writable()
            offset = self._offsets[entryFrom]
            try:
                os.ftruncate(self._fd, offset)
            except OSError as exc:
                self._fail(f"ftruncate to {offset} failed: {exc}")
                raise
            self._end = offset
            self._reserved = min(self._reserved, offset)
            disk.resized(self._fd, offset)
            self._generation += 1
            del self._entries[entryFrom:]
            del self._offsets[entryFrom:]
            del self._gens[entryFrom:]

    def deleteEntriesTo(self, entryTo: int) -> None:
        """Compaction: drops the first ``entryTo`` entries by rewriting the file (crash-safe)."""
        if entryTo < 0:
            raise AssertionError(f"deleteEntriesTo({entryTo}): negative position")
        if entryTo == 0:
            return
        self._check_writable()
        remaining = self._entries[entryTo:]
        content = bytearray(_encode_header())
        offsets = array("Q")
        for cmd, idx, term in remaining:
            offsets.append(len(content))
            content += _encode_record(cmd, idx, term)
        # Until the rename the old file is intact; after it the new one is complete and fsynced.
        self._write_file_atomically(self._log_path, bytes(content))
        try:
            new_fd = os.open(self._log_path, os.O_RDWR | _CLOEXEC)
        except OSError as exc:
            self._fail(f"reopening {self._log_path} after compaction failed: {exc}")
            raise
        with self._lock:
            old_fd, self._fd = self._fd, new_fd
            self._end = self._reserved = len(content)
            self._generation += 1
            self._synced_generation = self._generation
            self._entries = remaining
            self._offsets = offsets
            self._gens = array("Q", [self._generation]) * len(remaining)
        # A worker fsyncing concurrently holds its own dup, so closing ours is safe.
        os.close(old_fd)

    @overload
    def __getitem__(self, item: int) -> JournalEntry: ...

    @overload
    def __getitem__(self, item: slice) -> list[JournalEntry]: ...

    def __getitem__(self, item: int | slice) -> JournalEntry | list[JournalEntry]:
        return self._entries[item]

    def __len__(self) -> int:
        return len(self._entries)

    def entry_at(self, index: int) -> JournalEntry | None:
        """The entry with Raft index ``index``; None when compacted away or beyond the log."""
        entries = self._entries
        if not entries:
            return None
        position = index - entries[0][1]
        return entries[position] if 0 <= position < len(entries) else None

    def _destroy(self) -> None:
        """Closes the files (idempotent). Does not sync: what was added is already with the OS.
        The reserved space is cut off (a crash before that leaves zeros that recovery drops)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            fd = self._fd
            if self._reserved > self._end and self._failed is None:
                with contextlib.suppress(OSError):  # the zeros are harmless, only untidy
                    os.ftruncate(fd, self._end)
        os.close(fd)
        with self._meta_lock:  # a worker's meta write finishes before the lock is released
            os.close(self._lock_fd)

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:
        self._commit_index = int(raftCommitIndex)

    def getRaftCommitIndex(self) -> int:
        return self._commit_index

    def setCurrentTerm(self, term: int, votedForNodeId: str | None) -> None:
        """Stores term and vote durably (fsync, rename, fsync directory) before returning."""
        if votedForNodeId is not None and not isinstance(votedForNodeId, str):
            raise TypeError(f"node id must be str or None, not {type(votedForNodeId).__name__}")
        if not 0 <= term <= U64_MAX:
            raise AssertionError(f"term {term} outside u64")
        old_term, old_vote = self._term_vote
        if term < old_term:
            raise AssertionError(f"term going back from {old_term} to {term}")
        if term == old_term and old_vote is not None and votedForNodeId != old_vote:
            raise AssertionError(f"second vote in term {term}: {old_vote} then {votedForNodeId}")
        self._check_writable()
        self._term_vote = (term, votedForNodeId)  # one assignment: a worker never sees half
        try:
            self._store_meta()
        except BaseException:
            self._term_vote = (old_term, old_vote)  # never report a term that is not durable
            raise

    def getCurrentTerm(self) -> int:
        return self._term_vote[0]

    def getVotedForNodeId(self) -> str | None:
        return self._term_vote[1]

    def onOneSecondTimer(self) -> None:
        """Persists the commit index (clamped to ``synced_index``) if it changed."""
        if not self._closed and self._failed is None:
            self._store_meta()

    # ------------------------------------------------------------------ our additions

    def sync(self, *, commit_index: bool = True) -> None:
        """Makes every add and truncation made before the call durable (one fsync of the log).

        A no-op for the log when nothing is pending. With ``commit_index`` it also persists a
        changed commit index (clamped to ``synced_index``): that costs a meta write (two more
        fsyncs), so a hot group-commit path may pass ``False`` and leave it to the timer.
        May run in one worker thread while the owning thread keeps calling everything else.
        """
        with self._lock:
            self._check_writable()
            gen = self._generation
            end = self._end
            fd = os.dup(self._fd) if gen != self._synced_generation else -1
        if fd >= 0:
            try:
                disk.fsync(fd, end)
            except OSError as exc:
                self._fail(f"fsync failed: {exc}")
                raise
            finally:
                os.close(fd)
            with self._lock:
                if gen > self._synced_generation:
                    self._synced_generation = gen
        if commit_index:
            self._store_meta()

    @property
    def dirty(self) -> bool:
        """Whether something was appended or truncated since the last completed sync."""
        return self._generation != self._synced_generation

    @property
    def append_generation(self) -> int:
        """Counts mutations (add, truncation, compaction, clear); read it right after an add."""
        return self._generation

    @property
    def synced_generation(self) -> int:
        """Every mutation up to this generation is durable."""
        return self._synced_generation

    @property
    def synced_index(self) -> int:
        """Raft idx of the last entry that is durable and still in the log; 0 when none is."""
        with self._lock:
            count = self._synced_count()
            return self._entries[count - 1][1] if count else 0

    @property
    def failed(self) -> str | None:
        """Why the journal refuses everything (an I/O error or failed fsync); None while usable.
        Set by whichever thread met the error, before that error is raised."""
        return self._failed

    @property
    def unsynced_bytes(self) -> int:
        """Bytes of the log's entries that no completed sync covers yet (what the next fsync
        has to write out, near enough: a truncation since is not counted)."""
        with self._lock:
            position = self._synced_count()
            return self._end - self._offsets[position] if position < len(self._offsets) else 0

    def _synced_count(self) -> int:
        """How many of the log's entries (from the first) a completed sync covers; the caller
        holds the lock."""
        return bisect_right(self._gens, self._synced_generation)

    @property
    def size_bytes(self) -> int:
        """Current size of ``raft.log`` (header included)."""
        return self._end

    @property
    def path(self) -> Path:
        return self._dir

    def recovery_notes(self) -> list[str]:
        """What opening found and repaired (cut records, leftover tmp files, clamped values)."""
        return list(self._notes)

    # ------------------------------------------------------------------ internals

    def _check_writable(self) -> None:
        if self._closed:
            raise JournalError(f"journal {self._dir} is closed")
        if self._failed is not None:
            raise JournalFailedError(f"journal {self._dir} failed earlier: {self._failed}")

    def _fail(self, reason: str) -> None:
        log.error("raft journal %s: %s; journal unusable until reopened", self._dir, reason)
        self._failed = reason

    def _undo_partial_write(self, offset: int, exc: OSError) -> None:
        try:
            os.ftruncate(self._fd, offset)
        except OSError as exc2:
            self._fail(f"write at {offset} failed ({exc}) and could not be undone ({exc2})")
            return
        self._reserved = min(self._reserved, offset)
        disk.resized(self._fd, offset)

    def _note(self, text: str) -> None:
        log.warning("raft journal %s: %s", self._dir, text)
        self._notes.append(text)

    def _acquire_dir_lock(self) -> int:
        fd = os.open(self._dir / LOCK_FILE_NAME, os.O_RDWR | os.O_CREAT | _CLOEXEC, _FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise JournalLockedError(f"journal {self._dir} is already open") from None
        return fd

    def _remove_leftover_tmp_files(self) -> None:
        for name in (LOG_FILE_NAME, META_FILE_NAME):
            tmp = self._dir / (name + TMP_SUFFIX)
            if tmp.exists():
                tmp.unlink()
                self._note(f"removed {tmp.name} left by an interrupted write")

    def _fsync_dir(self) -> None:
        fd = os.open(self._dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC)
        try:
            disk.fsync(fd)
        finally:
            os.close(fd)

    def _write_file_atomically(self, path: Path, content: bytes) -> None:
        """tmp + fsync + rename + directory fsync; a failure before the rename changes nothing."""
        tmp = path.with_name(path.name + TMP_SUFFIX)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _CLOEXEC, _FILE_MODE)
            try:
                _pwrite_all(fd, content, 0)
                disk.fsync(fd)
            finally:
                os.close(fd)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        try:
            os.replace(tmp, path)  # a failed rename(2) changes nothing
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        try:
            self._fsync_dir()
        except OSError as exc:
            # The rename happened but may not survive a power loss: the disk state is unknown.
            self._fail(f"fsync of the directory after replacing {path.name} failed: {exc}")
            raise

    def _open_log(self) -> int:
        if not self._log_path.exists():
            self._write_file_atomically(self._log_path, _encode_header())
        return os.open(self._log_path, os.O_RDWR | _CLOEXEC)

    def _recover_log(self) -> int:
        """Loads the records; cuts the file at the first bad one. Returns the end offset."""
        size = os.fstat(self._fd).st_size
        data = _pread_all(self._fd, size)
        if size < HEADER_BYTES:
            raise JournalCorruptError(f"{self._log_path}: {size} bytes, shorter than its header")
        magic, version, reserved = _HEADER.unpack_from(data, 0)
        if magic != LOG_MAGIC:
            raise JournalCorruptError(f"{self._log_path}: bad magic {magic!r}")
        if version != LOG_FORMAT_VERSION or reserved != 0:
            raise JournalCorruptError(
                f"{self._log_path}: unsupported format version {version} (reserved {reserved})"
            )
        offset = HEADER_BYTES
        reason = ""
        last_idx = last_term = -1
        while offset < size:
            if size - offset < RECORD_PREFIX_BYTES:
                reason = "record prefix cut short"
                break
            plen, crc = _PREFIX.unpack_from(data, offset)
            if plen < RECORD_PAYLOAD_BYTES_MIN:
                reason = f"impossible record length {plen}"
                break
            start = offset + RECORD_PREFIX_BYTES
            if size - start < plen:
                reason = f"record of {plen} bytes cut short at {size - start}"
                break
            payload = memoryview(data)[start : start + plen]
            if crc32(payload) != crc:
                reason = "record checksum mismatch"
                # An intact record after it: damage in the middle, not an interrupted append.
                if _intact_record_at(data, start + plen):
                    self.lost_synced_entries = True
                break
            idx, term = _IDS.unpack_from(payload, 0)
            if last_idx >= 0 and (idx != last_idx + 1 or term < last_term):
                reason = (
                    f"record (idx {idx}, term {term}) does not follow ({last_idx}, {last_term})"
                )
                break  # (an unsynced truncation's stale tail after a power loss: not a loss)
            self._entries.append((bytes(payload[RECORD_PAYLOAD_BYTES_MIN:]), idx, term))
            self._offsets.append(offset)
            self._gens.append(0)
            last_idx, last_term = idx, term
            offset = start + plen
        # Nothing but zeros after the last record: space reserved ahead of appends, not data.
        if not disk.zeros_from(data, offset):
            self._note(
                f"{LOG_FILE_NAME}: {reason} at offset {offset}; cut {size - offset} bytes, "
                f"kept {len(self._entries)} entries"
                + (f" (last idx {last_idx})" if self._entries else "")
            )
        if offset < size:
            os.ftruncate(self._fd, offset)
            disk.resized(self._fd, offset)
        return offset

    def _read_meta(self) -> tuple[tuple[int, str | None], int]:
        try:
            raw = self._meta_path.read_bytes()
        except FileNotFoundError:
            return (DEFAULT_TERM, None), DEFAULT_COMMIT_INDEX
        if len(raw) > META_BYTES_MAX:
            raise JournalCorruptError(f"{self._meta_path}: {len(raw)} bytes, too big")
        try:
            meta: Any = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise JournalCorruptError(f"{self._meta_path}: not JSON ({exc})") from None
        if not isinstance(meta, dict) or meta.get("format") != META_FORMAT_NAME:
            raise JournalCorruptError(f"{self._meta_path}: not a raft meta file")
        if meta.get("version") != META_FORMAT_VERSION:
            raise JournalCorruptError(
                f"{self._meta_path}: unsupported version {meta.get('version')!r}"
            )
        term, vote, commit = (
            meta.get("current_term"),
            meta.get("voted_for"),
            meta.get("commit_index"),
        )
        if not _is_u64(term) or not _is_u64(commit) or not (vote is None or isinstance(vote, str)):
            raise JournalCorruptError(f"{self._meta_path}: bad field types in {meta!r}")
        return (term, vote), commit

    def _persistable_commit_index(self) -> int:
        # Only entries covered by a completed sync are sure to come back as they are now.
        return max(DEFAULT_COMMIT_INDEX, min(self._commit_index, self.synced_index))

    def _store_meta(self) -> None:
        with self._meta_lock:
            self._check_writable()
            term, vote = self._term_vote
            values = (term, vote, self._persistable_commit_index())
            if values == self._persisted:
                return
            body = {
                "format": META_FORMAT_NAME,
                "version": META_FORMAT_VERSION,
                "current_term": values[0],
                "voted_for": values[1],
                "commit_index": values[2],
            }
            self._write_file_atomically(
                self._meta_path, json.dumps(body, sort_keys=True).encode() + b"\n"
            )
            self._persisted = values


_NO_LIMIT: Final = 1 << 62  # the log has no size it is expected to stop at: reserve in steps


def _is_u64(value: object) -> TypeGuard[int]:
    return type(value) is int and 0 <= value <= U64_MAX


def _encode_header() -> bytes:
    return _HEADER.pack(LOG_MAGIC, LOG_FORMAT_VERSION, 0)


def _encode_record(command: bytes, idx: int, term: int) -> bytes:
    ids = _IDS.pack(idx, term)
    crc = crc32(command, crc32(ids))
    return b"".join((_PREFIX.pack(len(ids) + len(command), crc), ids, command))


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


def _pread_all(fd: int, size: int) -> bytes:
    chunks: list[bytes] = []
    offset = 0
    while offset < size:
        chunk = os.pread(fd, size - offset, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _intact_record_at(data: bytes, offset: int) -> bool:
    """Whether a whole record whose checksum holds starts at ``offset``."""
    if len(data) - offset < RECORD_PREFIX_BYTES:
        return False
    plen, crc = _PREFIX.unpack_from(data, offset)
    start = offset + RECORD_PREFIX_BYTES
    if plen < RECORD_PAYLOAD_BYTES_MIN or len(data) - start < plen:
        return False
    return bool(crc32(memoryview(data)[start : start + plen]) == crc)
