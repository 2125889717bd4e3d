"""Start, probe and stop server processes for tests: the shared operator-side helpers under
the names the test files import, and a local jetraft cluster for pytest.

Owns: a local jetraft cluster (N routed nodes), ready once every node's monitoring ``/healthz``
answers 200 and the routes form a full mesh, with polling helpers for sync and async tests.
Single servers, ports, probes and process control are ``cluster.ops``'s (re-exported here so
that test files keep importing ``tests.servers``; benchmarks import ``cluster.ops`` directly).
Must never: kill anything by name, bind to anything but 127.0.0.1, or know about JetStream
beyond reading the monitoring endpoints.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from cluster.ops.probes import HTTP_OK, monitor_url, probe_ready
from cluster.ops.probes import http_get_json as _http_get_json
from cluster.ops.process import (
    HOST,
    JETRAFT_BIN,
    LOG_TAIL_BYTES,
    NATS_SERVER_BIN,
    PROJECT_ROOT,
    VENV_BIN,
    distinct_free_ports,
    free_port,
    jetraft_command,
    wait_until,
    wait_until_async,
)
from cluster.ops.servers import (
    READY_TIMEOUT_S,
    ServerProc,
    ServerStartError,
    jetraft_proc,
    nats_server_proc,
    start_jetraft,
    start_nats_server,
    stop_servers,
)

__all__ = [
    "HOST",
    "JETRAFT_BIN",
    "NATS_SERVER_BIN",
    "PROJECT_ROOT",
    "READY_TIMEOUT_S",
    "VENV_BIN",
    "JetraftCluster",
    "ServerProc",
    "ServerStartError",
    "free_port",
    "http_get_json",
    "jetraft_command",
    "jetraft_proc",
    "nats_server_proc",
    "probe_ready",
    "start_jetraft",
    "start_jetraft_cluster",
    "start_nats_server",
]

# --- a local jetraft cluster ------------------------------------------------------------------

CLUSTER_NAME = "c"
CLUSTER_READY_TIMEOUT_S = 60.0
HTTP_TIMEOUT_S = 2.0
WAIT_POLL_INTERVAL_S = 0.1


def http_get_json(port: int, path: str, timeout_s: float = HTTP_TIMEOUT_S) -> tuple[int, Any]:
    """(status, JSON body or None) of ``GET http://127.0.0.1:port/path``; OSError when nothing
    answers (the tests' form: a test that expects an answer fails loudly without one)."""
    status, body = _http_get_json(monitor_url(port, path), timeout_s)
    if status is None:
        raise OSError(f"nothing answered GET {monitor_url(port, path)}")
    return status, body


T = TypeVar("T")


class JetraftCluster:
    """N ``jetraft server`` processes routed to each other (full mesh), one store dir each.

    Node ``i`` (0-based) is named ``n{i+1}``. Ports and store dirs are fixed at construction, so
    a killed or stopped node restarts as the same member.
    """

    def __init__(self, tmp_path: Path, nodes: int = 3, name: str = CLUSTER_NAME) -> None:
        self.name = name
        ports = distinct_free_ports(3 * nodes)
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
                "-js",
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
        """Every running node has its route up to every other running one (``/routez``: the
        routes it dialed)."""
        running = [node for node in self.nodes if node.running]
        for node in running:
            try:
                status, routez = http_get_json(node.http_port, "/routez")
            except OSError:
                return False
            routes = (routez or {}).get("routes", [])
            dialed = {r.get("remote_name") for r in routes if r.get("did_solicit")}
            if status != HTTP_OK or len(dialed) < len(running) - 1:
                return False
        return True

    def stop(self) -> None:
        """SIGTERM every running node (all at once, escalating to SIGKILL on timeout)."""
        stop_servers(self.nodes)

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
        return status == HTTP_OK

    def jetraftz(self, i: int) -> dict[str, Any] | None:
        """Node ``i``'s ``GET /jetraftz`` (its stream replicas' Raft view), or None if the node
        is down or does not answer."""
        if not self.nodes[i].running:
            return None
        try:
            status, body = http_get_json(self.nodes[i].http_port, "/jetraftz")
        except (OSError, ValueError):
            return None
        return body if status == HTTP_OK and isinstance(body, dict) else None

    def stream_view(self, i: int, stream: str) -> dict[str, Any] | None:
        """Stream ``stream``'s entry in node ``i``'s /jetraftz (None: node down or not a
        replica)."""
        view = self.jetraftz(i)
        if view is None:
            return None
        for entry in view.get("streams", []):
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
        value = wait_until(cond, timeout_s, interval_s)
        if value is None:
            raise TimeoutError(f"{what} not met within {timeout_s:.1f}s")
        return value

    async def await_for(
        self,
        cond: Callable[[], T],
        timeout_s: float,
        what: str = "condition",
        interval_s: float = WAIT_POLL_INTERVAL_S,
    ) -> T:
        """``wait_for`` for async tests: sleeps without blocking the event loop (clients keep
        being served between polls)."""

        async def polled() -> T:
            return cond()

        value = await wait_until_async(polled, timeout_s, interval_s)
        if value is None:
            raise TimeoutError(f"{what} not met within {timeout_s:.1f}s")
        return value

    def log_tails(self, tail_bytes: int = LOG_TAIL_BYTES) -> str:
        return "\n".join(
            f"--- {node.name} log tail ---\n{node.log_tail(tail_bytes)}" for node in self.nodes
        )


def start_jetraft_cluster(tmp_path: Path, nodes: int = 3) -> JetraftCluster:
    """Start ``nodes`` routed jetraft nodes and wait until every ``/healthz`` answers 200."""
    return JetraftCluster(tmp_path, nodes).start()
