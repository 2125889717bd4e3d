"""A core NATS cluster (routes, no JetStream on any node) through nats-py: messages cross nodes,
clients learn every node, a node that starts late is let in within the test's patience, and a
JetStream node is refused as a peer of core nodes (a cluster is all one or all the other)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from cluster.ops.process import jetraft_command
from cluster.ops.servers import ServerProc, server_proc
from tests.integration.clients import connect
from tests.servers import distinct_free_ports, stop_servers

pytestmark = pytest.mark.integration

MSG_TIMEOUT_S = 5.0
MESH_TIMEOUT_S = 20.0
POLL_S = 0.05
REFUSED_WAIT_S = 2.0  # long enough for several dial rounds, if the peer were let in


def _nodes(tmp_path: Path, count: int, *, js: tuple[bool, ...] = ()) -> list[ServerProc]:
    cluster_ports = distinct_free_ports(count)
    routes = ",".join(f"nats://127.0.0.1:{p}" for p in cluster_ports)
    nodes = []
    for i, port in enumerate(cluster_ports):
        command = [*jetraft_command(), "server"] + (["-js"] if js and js[i] else [])
        flags = ["--cluster_name", "core", "--cluster_listen", f"nats://127.0.0.1:{port}"]
        nodes.append(server_proc(command, tmp_path, f"c{i}", [*flags, "--routes", routes]))
    return nodes


async def _until_meshed(nodes: list[ServerProc]) -> None:
    """Every node's INFO names every node."""
    every = {f"127.0.0.1:{n.port}" for n in nodes}
    deadline = time.monotonic() + MESH_TIMEOUT_S
    for node in nodes:
        while True:
            nc = await connect(node.url)
            known = {f"{u.hostname}:{u.port}" for u in nc.servers}
            await nc.close()
            if known == every:
                break
            assert time.monotonic() < deadline, f"{node.name} knows {known}, not {every}"
            await asyncio.sleep(POLL_S)


async def test_messages_cross_a_core_cluster_and_clients_learn_every_node(
    tmp_path: Path,
) -> None:
    nodes = _nodes(tmp_path, 3)
    try:
        for node in nodes[:2]:
            node.start()
        await _until_meshed(nodes[:2])
        nodes[2].start()  # late: the others let it in once it knocks
        await _until_meshed(nodes)
        subscriber = await connect(nodes[0].url)
        publisher = await connect(nodes[2].url)
        try:
            sub = await subscriber.subscribe("core.>")
            await subscriber.flush()
            deadline = time.monotonic() + MSG_TIMEOUT_S
            while True:  # until node 2 has heard node 0's interest
                await publisher.publish("core.a", b"across")
                await publisher.flush()
                try:
                    msg = await sub.next_msg(POLL_S * 4)
                    break
                except TimeoutError:
                    assert time.monotonic() < deadline, "no message crossed the cluster"
            assert (msg.subject, msg.data) == ("core.a", b"across")
        finally:
            await subscriber.close()
            await publisher.close()
    finally:
        stop_servers(nodes)


async def test_a_jetstream_node_is_not_a_peer_of_core_nodes(tmp_path: Path) -> None:
    nodes = _nodes(tmp_path, 2, js=(False, True))
    try:
        for node in nodes:
            node.start()
        await asyncio.sleep(REFUSED_WAIT_S)
        for node, other in ((nodes[0], nodes[1]), (nodes[1], nodes[0])):
            nc = await connect(node.url)
            known = {f"{u.hostname}:{u.port}" for u in nc.servers}
            await nc.close()
            assert f"127.0.0.1:{other.port}" not in known
        assert "all JetStream or all core NATS" in nodes[0].log_tail()
    finally:
        stop_servers(nodes)
