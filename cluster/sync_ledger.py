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
    assert _ledger_fd is not None  # registered only once the ledger is open
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return
        path = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return
    with _recorded_lock:
        last = _recorded.get(st.st_ino, 0)
        # a file now shorter than what was recorded was truncated: its own size counts
        durable = max(size, last) if st.st_size >= last else size
        _recorded[st.st_ino] = durable
        os.write(_ledger_fd, f"{st.st_ino}\t{durable}\t{path}\n".encode())


def _reset(fd: int, data_bytes: int) -> None:
    """The resize observer: a file created or truncated by a writer that reserves space (whose
    size cannot show it) durably holds at most ``data_bytes`` from now on."""
    assert _ledger_fd is not None
    try:
        st = os.fstat(fd)
        path = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return
    with _recorded_lock:
        durable = min(_recorded.get(st.st_ino, data_bytes), data_bytes)
        _recorded[st.st_ino] = durable
        os.write(_ledger_fd, f"{st.st_ino}\t{durable}\t{path}\n".encode())


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
