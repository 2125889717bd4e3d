"""A replicated counter stream with RePublish across a SIGKILL of its leader (issue 15).

Counter totals are computed when an entry is applied, so every replica stores the same totals;
RePublish runs on the leader that applies a committed message, so each message is republished
once by the cluster, also after the leader changes. Increments carry a ``Nats-Msg-Id``, so a
publish retried across the failover is counted once.

Must never: sleep blindly (waits poll with deadlines), or leave a node running.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

import nats.errors
import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from tests.cluster.replica_views import converged, settled_leader
from tests.integration.clients import connect
from tests.servers import JetraftCluster

pytestmark = pytest.mark.integration

STREAM = "CTR"
PER_PHASE = 10
REQUEST_TIMEOUT_S = 2.0
FAILOVER_TIMEOUT_S = 30.0
CONVERGE_TIMEOUT_S = 20.0


async def _api(nc: NATS, subject: str, body: dict[str, Any]) -> dict[str, Any]:
    reply = await nc.request(f"$JS.API.{subject}", json.dumps(body).encode(), timeout=5.0)
    data: dict[str, Any] = json.loads(reply.data)
    return data


async def _acked(
    nc: NATS, subject: str, payload: bytes, headers: dict[str, str], deadline: float
) -> dict[str, Any]:
    """A publish retried (with the same headers, so the same Nats-Msg-Id) until a PubAck comes:
    the PubAck. A retry of a publish already stored answers as a duplicate."""
    while True:
        try:
            ack = await nc.request(subject, payload, headers=headers, timeout=REQUEST_TIMEOUT_S)
            body: dict[str, Any] = json.loads(ack.data)
            if "error" not in body:
                return body
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
            pass
        assert time.monotonic() < deadline, f"{subject} {headers} never acknowledged"
        await asyncio.sleep(0.1)


async def _increment(nc: NATS, step: int, msg_id: str, deadline: float) -> int:
    """One increment; the total its PubAck reports (-1 for a duplicate: it has none)."""
    headers = {"Nats-Incr": str(step), "Nats-Msg-Id": msg_id}
    body = await _acked(nc, "ctr.a", b"", headers, deadline)
    return int(body["val"]) if "val" in body else -1


async def test_counter_and_republish_survive_a_leader_kill(
    fresh_jetraft_cluster: JetraftCluster,
) -> None:
    cluster = fresh_jetraft_cluster
    admin = await connect(cluster.urls[0])
    try:
        created = await _api(
            admin,
            f"STREAM.CREATE.{STREAM}",
            {
                "name": STREAM,
                "subjects": ["ctr.>"],
                "num_replicas": 3,
                "allow_msg_counter": True,
                "republish": {"src": ">", "dest": "rp.>"},
            },
        )
        assert "error" not in created, created
        leader = await settled_leader(cluster, STREAM, FAILOVER_TIMEOUT_S)
    finally:
        await admin.close()
    survivor = next(i for i in range(3) if i != leader)
    watcher = await connect(cluster.urls[survivor])
    client = await connect(cluster.urls[survivor])
    republished: list[int] = []
    try:

        async def on_republished(msg: Msg) -> None:
            republished.append(int((msg.headers or {})["Nats-Sequence"]))

        sub = await watcher.subscribe("rp.>", cb=on_republished)
        await watcher.flush()
        deadline = time.monotonic() + FAILOVER_TIMEOUT_S
        totals = [await _increment(client, n, f"a{n}", deadline) for n in range(1, PER_PHASE + 1)]
        assert totals == [n * (n + 1) // 2 for n in range(1, PER_PHASE + 1)]
        await cluster.await_for(
            lambda: converged(cluster, STREAM), CONVERGE_TIMEOUT_S, "replicas in step"
        )

        cluster.kill(leader)
        survivors = [i for i in range(3) if i != leader]
        deadline = time.monotonic() + FAILOVER_TIMEOUT_S
        for n in range(PER_PHASE + 1, 2 * PER_PHASE + 1):
            await _increment(client, n, f"a{n}", deadline)
        views = await cluster.await_for(
            lambda: converged(cluster, STREAM, survivors, messages=2 * PER_PHASE),
            CONVERGE_TIMEOUT_S,
            "the survivors in step",
        )
        assert views is not None
        expected_total = sum(range(1, 2 * PER_PHASE + 1))
        last = await client.request(
            f"$JS.API.STREAM.MSG.GET.{STREAM}",
            json.dumps({"last_by_subj": "ctr.a"}).encode(),
            timeout=5.0,
        )
        stored = json.loads(last.data)["message"]
        assert json.loads(base64.b64decode(stored["data"])) == {"val": str(expected_total)}

        # every stored message republished exactly once, whichever leader applied it: the new
        # leader republishes in apply order over one route, so a duplicate of an earlier
        # message would arrive before the last one
        await cluster.await_for(
            lambda: 2 * PER_PHASE in republished, CONVERGE_TIMEOUT_S, "the last republish"
        )
        assert sorted(republished) == list(range(1, 2 * PER_PHASE + 1))
        await sub.unsubscribe()
    finally:
        await client.close()
        await watcher.close()


async def test_a_source_is_taken_exactly_once_across_a_leader_kill(
    fresh_jetraft_cluster: JetraftCluster,
) -> None:
    cluster = fresh_jetraft_cluster
    nc = await connect(cluster.urls[0])
    try:
        for body in (
            {"name": "ORG", "subjects": ["org.>"], "num_replicas": 3},
            {"name": "SRC", "num_replicas": 3, "sources": [{"name": "ORG"}]},
        ):
            created = await _api(nc, f"STREAM.CREATE.{body['name']}", body)
            assert "error" not in created, created
        leader = await settled_leader(cluster, "SRC", FAILOVER_TIMEOUT_S)
        deadline = time.monotonic() + FAILOVER_TIMEOUT_S
        for n in range(1, PER_PHASE + 1):
            await _acked(nc, f"org.{n % 3}", b"x", {"Nats-Msg-Id": f"m{n}"}, deadline)
        await cluster.await_for(
            lambda: converged(cluster, "SRC", messages=PER_PHASE),
            CONVERGE_TIMEOUT_S,
            "the first half sourced everywhere",
        )
    finally:
        await nc.close()

    cluster.kill(leader)
    survivors = [i for i in range(3) if i != leader]
    nc = await connect(cluster.urls[survivors[0]])
    try:
        deadline = time.monotonic() + FAILOVER_TIMEOUT_S
        for n in range(PER_PHASE + 1, 2 * PER_PHASE + 1):
            await _acked(nc, f"org.{n % 3}", b"x", {"Nats-Msg-Id": f"m{n}"}, deadline)
        await cluster.await_for(
            lambda: converged(cluster, "SRC", survivors, messages=2 * PER_PHASE),
            CONVERGE_TIMEOUT_S,
            "every message sourced by the new leader",
        )
        origins = []
        for seq in range(1, 2 * PER_PHASE + 1):
            reply = await nc.request(
                "$JS.API.STREAM.MSG.GET.SRC", json.dumps({"seq": seq}).encode(), timeout=5.0
            )
            hdrs = base64.b64decode(json.loads(reply.data)["message"]["hdrs"]).decode()
            source = next(line for line in hdrs.split("\r\n") if line.startswith("Nats-Stream"))
            origins.append(int(source.split(" ")[2]))  # "Nats-Stream-Source: ORG <seq> ..."
        assert origins == list(range(1, 2 * PER_PHASE + 1))
    finally:
        await nc.close()
