"""Where bcrypt password comparisons run: a few worker threads, never the event loop.

A bcrypt comparison is slow on purpose: about 0.1 s at cost 11, the cost ``nats server passwd``
uses. On the event loop every login (or every wrong guess an outsider sends) would stall all
clients and the Raft groups the loop drives; nats-server pays the same CPU but on the client's own
goroutine. The ``bcrypt`` package releases the GIL while hashing, so worker threads run it in
parallel with the loop. The pool is small and bounded: a flood of logins waits in its queue
(each connection has at most one check queued, and the auth timeout still closes it) instead of
taking every core from the loop.

Must never: log or keep a password; run a check for a connection that is already closed.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from protocol.auth import PasswordCheck

WORKERS_MAX = 4  # at most this many cores hash at once; the loop keeps at least its own

_pool: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        workers = max(1, min(WORKERS_MAX, (os.cpu_count() or 2) - 1))
        _pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bcrypt")
    return _pool


def _run(check: PasswordCheck, wanted: Callable[[], bool]) -> bool:
    # a connection that went away while queued (auth timeout, client gone) costs nothing
    return wanted() and check.matches()


def check_password(check: PasswordCheck, wanted: Callable[[], bool]) -> asyncio.Future[bool]:
    """Compare in a worker thread; ``wanted`` (read from that thread) says whether the answer is
    still needed when its turn comes."""
    return asyncio.get_running_loop().run_in_executor(_executor(), _run, check, wanted)
