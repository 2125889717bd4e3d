"""One NATS server process (jetraft or the reference nats-server) on fixed ports and a fixed
store directory, for tests and benchmarks.

Owns: the command lines of a standalone server (address, ports chosen at construction, store
dir, name, monitoring port), starting it and waiting until it speaks the NATS protocol,
stopping it (gracefully, or SIGKILL as a crash) and restarting it as the same server.
Must never: signal a process it did not start, bind to anything but 127.0.0.1, or know what the
server stores; process control is ``cluster.ops.process``'s.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from cluster.ops.probes import probe_ready
from cluster.ops.process import (
    HOST,
    KILL_WAIT_TIMEOUT_S,
    LOG_TAIL_BYTES,
    NATS_SERVER_BIN,
    PROJECT_ROOT,
    STOP_TIMEOUT_S,
    Spawned,
    free_port,
    jetraft_command,
    kill_popens,
    log_tail,
    spawn,
    stop_popens,
    wait_until,
)

READY_TIMEOUT_S = 20.0
READY_POLL_INTERVAL_S = 0.05


class ServerStartError(RuntimeError):
    """The server process died or did not answer PING in time; the message has its log tail."""


class ServerStopError(RuntimeError):
    """A server process survived SIGKILL."""


class ServerProc:
    """One server child process on fixed ports and a fixed store dir; restartable."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        name: str,
        port: int,
        http_port: int,
        store_dir: Path,
        log_path: Path,
        cwd: Path = PROJECT_ROOT,
    ) -> None:
        self.argv = list(argv)
        self.name = name
        self.port = port
        self.http_port = http_port
        self.store_dir = store_dir
        self.log_path = log_path
        self.cwd = cwd
        self._spawned: Spawned | None = None

    @property
    def url(self) -> str:
        return f"nats://{HOST}:{self.port}"

    @property
    def popen(self) -> subprocess.Popen[bytes] | None:
        """The process of the current start (None before a start and after a stop or kill)."""
        return None if self._spawned is None else self._spawned.popen

    @property
    def pid(self) -> int:
        if self._spawned is None:
            raise RuntimeError(f"server {self.name} is not running")
        return self._spawned.pid

    @property
    def running(self) -> bool:
        return self._spawned is not None and self._spawned.popen.poll() is None

    def start(self, ready_timeout_s: float = READY_TIMEOUT_S) -> ServerProc:
        """Launch the process and block until it answers PING (or raise with the log tail)."""
        if self.running:
            raise RuntimeError(f"server {self.name} already running (pid {self.pid})")
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self._spawned = spawn(self.argv, log_path=self.log_path, cwd=self.cwd)
        try:
            self.wait_ready(ready_timeout_s)
        except ServerStartError:
            self.kill()
            raise
        return self

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        def ready() -> bool:
            spawned = self._spawned
            if spawned is None or spawned.popen.poll() is not None:
                code = None if spawned is None else spawned.popen.returncode
                raise ServerStartError(self._failure(f"exited with code {code}"))
            return probe_ready(self.port)

        if not wait_until(ready, timeout_s, READY_POLL_INTERVAL_S):
            raise ServerStartError(self._failure(f"not ready after {timeout_s:.1f}s"))

    def _failure(self, what: str) -> str:
        # this start's output only: the log is appended to across restarts
        tail = self._spawned.tail() if self._spawned is not None else self.log_tail()
        return f"{self.name} ({' '.join(self.argv)}) {what}; log tail:\n{tail}"

    def log_tail(self, tail_bytes: int = LOG_TAIL_BYTES) -> str:
        """The end of the whole log, across restarts."""
        return log_tail(self.log_path, 0, tail_bytes)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM, wait up to timeout_s, then SIGKILL by pid."""
        stop_servers([self], timeout_s)

    def kill(self) -> None:
        """SIGKILL by pid (a crash, for tests that want one) and reap the process."""
        if self._spawned is None:
            return
        kill_popens([self._spawned.popen], KILL_WAIT_TIMEOUT_S)
        self._spawned = None

    def restart(self, ready_timeout_s: float = READY_TIMEOUT_S) -> ServerProc:
        """Stop (gracefully) and start again on the same ports and store dir."""
        self.stop()
        return self.start(ready_timeout_s)

    def __enter__(self) -> ServerProc:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def stop_servers(servers: Sequence[ServerProc], timeout_s: float = STOP_TIMEOUT_S) -> None:
    """Stop every started server at once (SIGTERM, SIGKILL after ``timeout_s``) and reap them;
    ServerStopError when one survives SIGKILL."""
    started = [s for s in servers if s._spawned is not None]
    outcome = stop_popens([s._spawned.popen for s in started if s._spawned is not None], timeout_s)
    for server in started:
        if server.pid not in outcome.survivors:
            server._spawned = None
    if outcome.survivors:
        raise ServerStopError(f"pids {outcome.survivors} survived SIGKILL")


def server_proc(
    command: Sequence[str],
    tmp_path: Path,
    name: str,
    extra_args: Sequence[str],
    *,
    monitor: bool = True,
) -> ServerProc:
    """``command`` plus the options both servers share (address, ports chosen now, store dir,
    server name, monitoring port unless not ``monitor``) and ``extra_args``; not yet started.
    Without ``monitor`` ``http_port`` is 0 (nats-server refuses -m next to an https_port)."""
    port, http_port = free_port(), free_port() if monitor else 0
    store_dir = tmp_path / f"{name}-store"
    common = ["-a", HOST, "-p", str(port), "-sd", str(store_dir), "-n", name]
    if monitor:
        common += ["-m", str(http_port)]
    return ServerProc(
        [*command, *common, *extra_args],
        name=name,
        port=port,
        http_port=http_port,
        store_dir=store_dir,
        log_path=tmp_path / f"{name}.log",
    )


def nats_server_proc(
    tmp_path: Path, *, name: str = "n1", extra_args: Sequence[str] = (), monitor: bool = True
) -> ServerProc:
    """A not-yet-started reference nats-server with JetStream, ports chosen now."""
    return server_proc([str(NATS_SERVER_BIN), "-js"], tmp_path, name, extra_args, monitor=monitor)


def jetraft_proc(
    tmp_path: Path, *, name: str = "j1", extra_args: Sequence[str] = (), monitor: bool = True
) -> ServerProc:
    """A not-yet-started jetraft node with JetStream (-js), ports chosen now."""
    return server_proc(
        [*jetraft_command(), "server", "-js"], tmp_path, name, extra_args, monitor=monitor
    )


def start_nats_server(
    tmp_path: Path, *, name: str = "n1", extra_args: Sequence[str] = (), monitor: bool = True
) -> ServerProc:
    """Start the reference nats-server (JetStream on) and wait until it answers PING."""
    return nats_server_proc(tmp_path, name=name, extra_args=extra_args, monitor=monitor).start()


def start_jetraft(
    tmp_path: Path, *, name: str = "j1", extra_args: Sequence[str] = (), monitor: bool = True
) -> ServerProc:
    """Start a jetraft node and wait until it answers PING."""
    return jetraft_proc(tmp_path, name=name, extra_args=extra_args, monitor=monitor).start()
