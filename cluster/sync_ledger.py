"""The fsync ledger: what a node has made durable, for the chaos harness's power-loss nemesis.

With ``JETRAFT_SYNC_LEDGER=PATH`` set, every fsync of a regular file by the node appends
``<inode>\\t<size>\\t<path>`` to PATH: the stores, the Raft journal and snapshots and the config
files all fsync through ``engine.disk.fsync``, which this module observes. The ledger is written
with ``O_APPEND`` and no fsync of its own: it must survive a process kill, not a real power cut,
which the harness only simulates. After SIGKILLing every node, the harness truncates each data
file to the size its inode last had when fsynced (never fsynced: to zero) — the data a power cut
could lose. Inodes, not paths, because files reach their final names by rename after their fsync.

Must never: change what is written or when it is synced; cost anything when the variable is unset.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable

from engine import disk

LEDGER_ENV = "JETRAFT_SYNC_LEDGER"

_ledger_fd: int | None = None
# inode -> the size last written for it: two fsyncs of one file (the file store's worker and an
# inline one) may finish in either order, and the later line must not claim less than the other
_recorded: dict[int, int] = {}
_recorded_lock = threading.Lock()


def _note(fd: int, size: int) -> None:
    """The fsync observer: one ledger line for a regular file (directories are not truncated),
    with its size when the fsync began (what was appended while it ran may not be covered)."""

    def durable(last: int | None, file_size: int) -> int:
        last = last or 0
        # a file now shorter than what was recorded was truncated: its own size counts
        return max(size, last) if file_size >= last else size

    _record(fd, durable)


def _reset(fd: int, data_bytes: int) -> None:
    """The resize observer: a file created or truncated by a writer that reserves space (whose
    size cannot show it) durably holds at most ``data_bytes`` from now on."""
    _record(fd, lambda last, _file_size: data_bytes if last is None else min(last, data_bytes))


def _record(fd: int, durable: Callable[[int | None, int], int]) -> None:
    """One ledger line for regular file ``fd``: ``durable(size recorded so far or None, the
    file's size now)`` is what its inode now durably holds."""
    assert _ledger_fd is not None  # registered only once the ledger is open
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return
        path = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return
    with _recorded_lock:
        size = durable(_recorded.get(st.st_ino), st.st_size)
        _recorded[st.st_ino] = size
        os.write(_ledger_fd, f"{st.st_ino}\t{size}\t{path}\n".encode())


def install_from_env() -> bool:
    """Open the ledger named by the environment, if any, and observe every fsync of the node."""
    global _ledger_fd
    path = os.environ.get(LEDGER_ENV)
    if not path or _ledger_fd is not None:
        return _ledger_fd is not None
    _ledger_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    disk.observe_fsync(_note)
    disk.observe_resize(_reset)
    return True
