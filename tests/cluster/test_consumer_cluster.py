"""Consumers of a replicated stream in a real 3-node cluster (issue 14).

Consumer operations are entries of the stream's Raft log, so every replica holds the same
consumer state (the stream digest covers it) and a new leader carries on where the old one
stopped: a message whose ack was confirmed (``ack_sync``) is never delivered again, every other
message is delivered at least once, across a SIGKILL of the stream leader.

Must never: sleep blindly (waits poll with deadlines), or leave a node running.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import nats.errors
import pytest
from nats.aio.client import Client as NATS
from nats.js.api import AckPolicy, ConsumerConfig

from tests.cluster.replica_views import converged, leader_index
from tests.integration.clients import connect, drain_acking
from tests.servers import JetraftCluster

pytestmark = pytest.mark.integration

STREAM = "CQ"
MSGS = 20
FIRST_FETCH = 10
ACKED_FIRST = 5
ACK_WAIT_S = 2.0
REQUEST_TIMEOUT_S = 5.0
FAILOVER_TIMEOUT_S = 30.0
CONVERGE_TIMEOUT_S = 20.0
DRAIN_TIMEOUT_S = 40.0
FETCH_TIMEOUT_S = 1.0
NS_PER_S = 1_000_000_000


async def _api(nc: NATS, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    payload = b"" if body is None else json.dumps(body).encode()
    reply = await nc.request(f"$JS.API.{subject}", payload, timeout=REQUEST_TIMEOUT_S)
    data: dict[str, Any] = json.loads(reply.data)
    return data


async def _create_r3_stream(nc: NATS) -> None:
    created = await _api(
        nc,
        f"STREAM.CREATE.{STREAM}",
        {"name": STREAM, "subjects": ["cq.>"], "num_replicas": 3},
    )
    assert "error" not in created, created


async def _settled_leader(cluster: JetraftCluster, deadline: float) -> int:
    """The stream's leader once there is one and every replica converged."""
    while (leader := leader_index(cluster, STREAM, [0, 1, 2])) is None or not converged(
        cluster, STREAM, [0, 1, 2]
    ):
        assert time.monotonic() < deadline, "no settled leader"
        await asyncio.sleep(0.1)
    return leader


async def _info_via(nc: NATS, name: str) -> dict[str, Any] | None:
    """CONSUMER.INFO through any node (the stream leader answers); None while there is none."""
    try:
        info = await _api(nc, f"CONSUMER.INFO.{STREAM}.{name}")
    except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
        return None
    return None if "error" in info else info


async def test_consumer_state_survives_a_leader_kill(fresh_jetraft_cluster: JetraftCluster) -> None:
    cluster = fresh_jetraft_cluster
    everyone = [0, 1, 2]
    nc = await connect(cluster.urls[0])
    try:
        await _create_r3_stream(nc)
        js = nc.jetstream(timeout=REQUEST_TIMEOUT_S)
        for i in range(MSGS):
            await js.publish(f"cq.{i % 3}", str(i).encode())
        config = ConsumerConfig(
            durable_name="work",
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=ACK_WAIT_S,
        )
        await js.add_consumer(STREAM, config=config)
        psub = await js.pull_subscribe_bind("work", STREAM)
        first = await psub.fetch(FIRST_FETCH, timeout=REQUEST_TIMEOUT_S)
        assert [m.metadata.sequence.stream for m in first] == list(range(1, FIRST_FETCH + 1))
        for msg in first[:ACKED_FIRST]:
            await msg.ack_sync()  # confirmed: these must never come back
        info = await _info_via(nc, "work")
        assert info is not None
        assert info["delivered"]["stream_seq"] == FIRST_FETCH
        assert info["ack_floor"]["stream_seq"] == ACKED_FIRST
        assert info["num_ack_pending"] == FIRST_FETCH - ACKED_FIRST
        assert info["num_pending"] == MSGS - FIRST_FETCH
        deadline = time.monotonic() + CONVERGE_TIMEOUT_S
        while not converged(cluster, STREAM, everyone):
            assert time.monotonic() < deadline, "replicas never reached one consumer state"
            await asyncio.sleep(0.1)
        leader = leader_index(cluster, STREAM, everyone)
        assert leader is not None
    finally:
        await nc.close()

    cluster.kill(leader)
    survivors = [i for i in everyone if i != leader]
    nc = await connect(cluster.urls[survivors[0]])
    try:
        deadline = time.monotonic() + FAILOVER_TIMEOUT_S
        info = None
        while info is None:
            assert time.monotonic() < deadline, "no new leader answered for the consumer"
            if leader_index(cluster, STREAM, survivors) is not None:
                info = await _info_via(nc, "work")
            if info is None:
                await asyncio.sleep(0.2)
        # the replicated state the new leader starts from: nothing confirmed is forgotten
        assert info["ack_floor"]["stream_seq"] >= ACKED_FIRST
        assert info["delivered"]["stream_seq"] >= FIRST_FETCH

        js = nc.jetstream(timeout=REQUEST_TIMEOUT_S)
        psub = await js.pull_subscribe_bind("work", STREAM)
        seen = await drain_acking(
            psub,
            MSGS - ACKED_FIRST,
            confirmed_through=ACKED_FIRST,
            fetch_timeout_s=FETCH_TIMEOUT_S,
            deadline_s=DRAIN_TIMEOUT_S,
        )
        assert sorted(seen) == list(range(ACKED_FIRST + 1, MSGS + 1))
        # the five delivered before the kill and never acked came back as redeliveries
        assert all(seen[s] >= 2 for s in range(ACKED_FIRST + 1, FIRST_FETCH + 1)), seen
        info = await _info_via(nc, "work")
        assert info is not None
        assert info["num_ack_pending"] == 0 and info["num_pending"] == 0
        assert info["ack_floor"]["stream_seq"] == MSGS
    finally:
        await nc.close()


async def _new_leader(cluster: JetraftCluster, old: int) -> int:
    deadline = time.monotonic() + FAILOVER_TIMEOUT_S
    while True:
        leader = leader_index(cluster, STREAM, [0, 1, 2])
        if leader is not None and leader != old:
            return leader
        assert time.monotonic() < deadline, "leadership never moved"
        await asyncio.sleep(0.1)


async def test_stream_and_consumer_leader_stepdown(jetraft_cluster: JetraftCluster) -> None:
    """STREAM.LEADER.STEPDOWN and CONSUMER.LEADER.STEPDOWN hand the stream's leadership (the
    consumer's too: its operations are the stream's entries) to another replica."""
    cluster = jetraft_cluster
    nc = await connect(cluster.urls[0])
    try:
        await _create_r3_stream(nc)
        body = {"stream_name": STREAM, "config": {"durable_name": "S", "ack_policy": "explicit"}}
        created = await _api(nc, f"CONSUMER.CREATE.{STREAM}.S", body)
        assert "error" not in created, created
        deadline = time.monotonic() + FAILOVER_TIMEOUT_S
        first = await _settled_leader(cluster, deadline)
        reply = await _api(nc, f"STREAM.LEADER.STEPDOWN.{STREAM}")
        assert reply == {
            "type": "io.nats.jetstream.api.v1.stream_leader_stepdown_response",
            "success": True,
        }, reply
        second = await _new_leader(cluster, first)
        while not converged(cluster, STREAM, [0, 1, 2]):
            assert time.monotonic() < deadline, "replicas never caught up"
            await asyncio.sleep(0.1)
        reply = await _api(nc, f"CONSUMER.LEADER.STEPDOWN.{STREAM}.S")
        assert reply.get("success") is True, reply
        await _new_leader(cluster, second)
        reply = await _api(nc, f"CONSUMER.LEADER.STEPDOWN.{STREAM}.NOPE")
        assert reply["error"]["err_code"] == 10014, reply
        info = await _info_via(nc, "S")
        assert info is not None and info["num_pending"] == 0
    finally:
        await _api(nc, f"STREAM.DELETE.{STREAM}")
        await nc.close()


async def test_node_stop_tells_waiting_pull_requests(
    fresh_jetraft_cluster: JetraftCluster,
) -> None:
    """A stopping node (SIGTERM) tells the waiting pull requests of its consumers configured
    with num_replicas 0 or 1 ``409 Server Shutdown`` with what they still wanted, as
    nats-server's signalPullConsumers does (a client then re-sends its request once
    reconnected), and those of a consumer configured with more replicas nothing; never "409
    Consumer Deleted", which clients take as the end of the consumer. The client is on another
    node, so it hears through the route. (Found by nats.py's ordered consumer restart test.)"""
    cluster = fresh_jetraft_cluster
    nc = await connect(cluster.urls[0])
    try:
        await _create_r3_stream(nc)
        for name, extra in (("PLAIN", {}), ("R3", {"num_replicas": 3})):
            body = {
                "stream_name": STREAM,
                "config": {"durable_name": name, "ack_policy": "explicit", **extra},
            }
            created = await _api(nc, f"CONSUMER.CREATE.{STREAM}.{name}", body)
            assert "error" not in created, created
        deadline = time.monotonic() + FAILOVER_TIMEOUT_S
        leader = await _settled_leader(cluster, deadline)
        await nc.close()
        client = next(i for i in range(3) if i != leader)
        nc = await connect(cluster.urls[client])
        heard: dict[str, list[tuple[str | None, str | None, str | None, str | None]]] = {}

        async def on_status(msg: Any) -> None:
            h = msg.headers or {}
            heard.setdefault(msg.subject, []).append(
                (
                    h.get("Status"),
                    h.get("Description"),
                    h.get("Nats-Pending-Messages"),
                    h.get("Nats-Pending-Bytes"),
                )
            )

        await nc.subscribe("_PULL.>", cb=on_status)
        requests = (
            ("PLAIN", "_PULL.plain", {"batch": 5, "expires": 30 * NS_PER_S}),
            ("PLAIN", "_PULL.bytes", {"batch": 3, "max_bytes": 1000, "expires": 30 * NS_PER_S}),
            ("R3", "_PULL.r3", {"batch": 5, "expires": 30 * NS_PER_S}),
        )
        for name, inbox, request in requests:
            next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.{name}"
            await nc.publish(next_subject, json.dumps(request).encode(), reply=inbox)
        await nc.flush()
        while (info := await _info_via(nc, "PLAIN")) is None or info["num_waiting"] != 2:
            assert time.monotonic() < deadline, f"requests not waiting: {info}"
            await asyncio.sleep(0.1)
        cluster.nodes[leader].stop()  # SIGTERM: a graceful stop
        while len(heard) < 2:
            assert time.monotonic() < deadline, f"heard only {heard}"
            await asyncio.sleep(0.05)
        await nc.flush()
        assert heard == {
            "_PULL.plain": [("409", "Server Shutdown", "5", "0")],
            "_PULL.bytes": [("409", "Server Shutdown", "3", "1000")],
        }, heard
    finally:
        await nc.close()
