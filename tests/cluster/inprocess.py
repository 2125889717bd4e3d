"""Several jetraft nodes in one process and one event loop: fast cluster tests without processes.

Each node is a real ``cluster.server.Server`` with real routes over 127.0.0.1 TCP; only process
boundaries are missing (so no SIGKILL here: crash tests live in the process-level suites).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from cluster.meta_streams import MetaStreams
from cluster.raft_log import RaftLog
from cluster.server import Server, ServerOptions
from cluster.stream_host import StreamHost
from tests.servers import free_port

WAIT_S = 20.0


@dataclass
class InProcessCluster:
    base: Path
    size: int
    client_ports: list[int] = field(default_factory=list)
    cluster_ports: list[int] = field(default_factory=list)
    servers: list[Server | None] = field(default_factory=list)

    def options(self, i: int) -> ServerOptions:
        return ServerOptions(
            host="127.0.0.1",
            port=self.client_ports[i],
            server_name=f"n{i}",
            store_dir=self.base / f"n{i}",
            cluster_name="c",
            cluster_host="127.0.0.1",
            cluster_port=self.cluster_ports[i],
            routes=[f"nats://127.0.0.1:{p}" for p in self.cluster_ports],
        )

    @property
    def urls(self) -> list[str]:
        return [f"nats://127.0.0.1:{p}" for p in self.client_ports]

    async def start(self) -> None:
        self.client_ports = [free_port() for _ in range(self.size)]
        self.cluster_ports = [free_port() for _ in range(self.size)]
        self.servers = [None] * self.size
        for i in range(self.size):
            await self.start_node(i)
        await wait_for(lambda: all(self.js(i).ready.is_set() for i in self.live()), "meta leader")

    async def start_node(self, i: int) -> None:
        server = Server(self.options(i))
        await server.start()
        self.servers[i] = server

    async def stop_node(self, i: int) -> None:
        server = self.servers[i]
        self.servers[i] = None
        if server is not None:
            await server.shutdown()

    async def stop(self) -> None:
        for i in range(self.size):
            await self.stop_node(i)

    def live(self) -> list[int]:
        return [i for i, s in enumerate(self.servers) if s is not None]

    def js(self, i: int) -> MetaStreams:
        """Node ``i``'s stream authority: its meta group and its replicas."""
        server = self.servers[i]
        assert server is not None and server.jetstream is not None
        authority = server.jetstream.authority
        assert isinstance(authority, MetaStreams)
        return authority

    def replica(self, i: int, stream: str) -> StreamHost[RaftLog] | None:
        return self.js(i).replicas.get(stream)

    def leader_of(self, stream: str) -> int | None:
        for i in self.live():
            host = self.replica(i, stream)
            if host is not None and host.is_leader:
                return i
        return None


async def wait_for(cond: Callable[[], object], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


@asynccontextmanager
async def running_cluster(base: Path, size: int) -> AsyncIterator[InProcessCluster]:
    """A started cluster of ``size`` nodes under ``base``, stopped (every node) on the way out."""
    cluster = InProcessCluster(base, size)
    await cluster.start()
    try:
        yield cluster
    finally:
        await cluster.stop()
