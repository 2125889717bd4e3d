"""The node's one fsync (every fsync of a file a node writes goes through ``fsync`` here), and
the space reserved ahead of appends (``reserve``).

The file store's segments and directory, the Raft journal, Raft snapshots and the atomic config
writes all call it, so whoever must know what was made durable registers one observer and sees
every fsync: the chaos harness's fsync ledger (``cluster/sync_ledger.py``) and the store tests.
It lives in ``engine/``, the lowest layer that writes files, because the file store may not import
``cluster/``; the cluster's writers import it from here.

Observers run after ``os.fsync`` returned, on the thread that fsynced (the file store and the
Raft journals are also fsynced in worker threads), and must not write to the fd. They get the
size of the file's data from just before the fsync: another thread may append while it runs, and
only what was written before it began is sure to be covered. A writer that reserves space passes
that size itself (the file's own size then counts the reserved zeros too). An fsync error
propagates before any observer runs: a file is never reported durable when its fsync failed.

Reserved space. The file store's segments and the Raft journal append, and an fsync after an
append that grew the file must also commit the new size to the filesystem's journal: on this
machine's ext4, 150-160 us for a small append against 90-100 us when the bytes land in space
reserved earlier (``fallocate``), which is most of a lone publisher's wait. So they reserve
ahead of their appends in steps (``reserve``) and cut the unused zeros off again when a file is
closed or rotated. After a crash the zeros remain; their recovery treats trailing zeros as never
written.

Must never: change what is written or when it is synced; cost more than an empty loop when no
observer is registered.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Callable
from typing import Final, cast

FsyncObserver = Callable[[int, int], None]  # (fd, its size when the fsync began)

# Empty in normal operation. Registered at start-up (or around a test), then only read, also
# from worker threads: a list is safe to iterate while nobody changes it.
_observers: list[FsyncObserver] = []
_resize_observers: list[FsyncObserver] = []


# A file's reservation grows by its own size (so a small file reserves little), within these.
RESERVE_STEP_BYTES_MIN: Final = 64 * 1024
RESERVE_STEP_BYTES_MAX: Final = 4 * 1024 * 1024
# fallocate failures meaning "this filesystem cannot": writers then append as before.
_RESERVE_UNSUPPORTED: Final = frozenset((errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL))
# ... and "not that much room": what the failed call allocated is given back, the writer stops
# reserving for that file and its plain writes meet the full disk as they did before.
_RESERVE_NO_ROOM: Final = frozenset((errno.ENOSPC, errno.EDQUOT, errno.EFBIG))


def _libc_fallocate() -> Callable[[int, int, int, int], int] | None:
    """fallocate(2) itself. Not ``os.posix_fallocate``: where a filesystem cannot reserve, glibc
    emulates it by writing a byte into every block, slower than not reserving at all."""
    try:
        function = ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
    function.restype = ctypes.c_int
    return cast(Callable[[int, int, int, int], int], function)


_LIBC_FALLOCATE = _libc_fallocate()


def _fallocate(fd: int, offset: int, length: int) -> None:
    """Allocate ``length`` bytes at ``offset`` (mode 0: the file grows to cover them)."""
    if _LIBC_FALLOCATE is None:
        raise OSError(errno.EOPNOTSUPP, "fallocate is not available")
    while _LIBC_FALLOCATE(fd, 0, offset, length) != 0:
        code = ctypes.get_errno()
        if code != errno.EINTR:  # a signal: retried, as os.posix_fallocate does
            raise OSError(code, os.strerror(code))


def fsync(fd: int, data_bytes: int | None = None) -> None:
    """``os.fsync(fd)``, then tell every observer that ``fd`` is durable. ``data_bytes``: how
    much of the file is data when it has reserved space beyond it (default: its size)."""
    if not _observers:
        os.fsync(fd)
        return
    size = os.fstat(fd).st_size if data_bytes is None else data_bytes
    os.fsync(fd)
    for observer in _observers:
        observer(fd, size)


def reserve(fd: int, reserved_end: int, needed_end: int, limit: int) -> int:
    """Reserve space so that ``fd`` can be written up to ``needed_end`` without growing it;
    returns the new reserved end (``reserved_end`` when no more is needed; everything before
    ``reserved_end`` must be data or reserved already). The step doubles the
    reservation up to ``RESERVE_STEP_BYTES_MAX`` and stops at ``limit`` (what the file is expected
    to grow to) unless ``needed_end`` is beyond it. Returns -1 when the filesystem cannot reserve
    or too full to reserve (what the failed call allocated is cut off again): the caller stops
    trying for that file. Other errors (EIO) propagate."""
    if needed_end <= reserved_end:
        return reserved_end
    step = min(RESERVE_STEP_BYTES_MAX, max(RESERVE_STEP_BYTES_MIN, reserved_end))
    new_end = max(needed_end, min(needed_end + step, limit))
    try:
        _fallocate(fd, reserved_end, new_end - reserved_end)
    except OSError as exc:
        if exc.errno in _RESERVE_UNSUPPORTED:
            return -1
        if exc.errno in _RESERVE_NO_ROOM:
            os.ftruncate(fd, reserved_end)  # ext4 keeps what a failed call did allocate
            return -1
        raise
    return new_end


def zeros_from(data: bytes, start: int) -> bool:
    """Whether nothing but zero bytes follows ``start`` in ``data`` (read back from a file that
    reserves space: the reserved part, never written; true when ``start`` is the end)."""
    return data.count(0, start) == len(data) - start


def resized(fd: int, data_bytes: int) -> None:
    """Tell the resize observers that ``fd``'s data now ends at ``data_bytes``: a file created
    (0) or truncated. A file with reserved space cannot show that by its size, and an fsync
    observer that keeps the largest size it saw per inode must not carry it over to a truncated
    file or to a new file that reuses a deleted one's inode."""
    for observer in _resize_observers:
        observer(fd, data_bytes)


def observe_resize(observer: FsyncObserver) -> None:
    """Call ``observer(fd, data_bytes)`` after a writer created or truncated a file it reserves
    space in (see ``resized``)."""
    _resize_observers.append(observer)


def stop_observing_resize(observer: FsyncObserver) -> None:
    _resize_observers.remove(observer)


def observe_fsync(observer: FsyncObserver) -> None:
    """Call ``observer(fd, size)`` after every successful ``fsync``."""
    _observers.append(observer)


def stop_observing_fsync(observer: FsyncObserver) -> None:
    _observers.remove(observer)
