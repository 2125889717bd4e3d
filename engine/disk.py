"""The node's one fsync: every fsync of a file a node writes goes through ``fsync`` here.

The file store's segments and directory, the Raft journal, Raft snapshots and the atomic config
writes all call it, so whoever must know what was made durable registers one observer and sees
every fsync: the chaos harness's fsync ledger (``cluster/sync_ledger.py``) and the store tests.
It lives in ``engine/``, the lowest layer that writes files, because the file store may not import
``cluster/``; the cluster's writers import it from here.

Observers run after ``os.fsync`` returned, on the thread that fsynced (the file store and the
Raft journals are also fsynced in worker threads), and must not write to the fd. They get the
file's size from just before the fsync: another thread may append while it runs, and only what
was written before it began is sure to be covered. An fsync error propagates before any
observer runs: a file is never reported durable when its fsync failed.

Must never: change what is written or when it is synced; cost more than an empty loop when no
observer is registered.
"""

from __future__ import annotations

import os
from collections.abc import Callable

FsyncObserver = Callable[[int, int], None]  # (fd, its size when the fsync began)

# Empty in normal operation. Registered at start-up (or around a test), then only read, also
# from worker threads: a list is safe to iterate while nobody changes it.
_observers: list[FsyncObserver] = []


def fsync(fd: int) -> None:
    """``os.fsync(fd)``, then tell every observer that ``fd`` is durable."""
    if not _observers:
        os.fsync(fd)
        return
    size = os.fstat(fd).st_size
    os.fsync(fd)
    for observer in _observers:
        observer(fd, size)


def observe_fsync(observer: FsyncObserver) -> None:
    """Call ``observer(fd, size)`` after every successful ``fsync``."""
    _observers.append(observer)


def stop_observing_fsync(observer: FsyncObserver) -> None:
    _observers.remove(observer)
