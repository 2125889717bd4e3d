"""A backup restored into a 3-node cluster survives a SIGKILL of the node that seeded it.

The meta leader takes the upload, creates the stream's group with itself as the preferred leader
and seeds it: its replica adopts the upload, the others fetch it by state transfer. The restore
is answered once the seeding replica holds the state on disk, so a crash of that node right after
the answer may come before any follower fetched it: the followers wait (they cannot lead a
state they do not have), and when the node is back every replica ends with the restored stream.

Must never: sleep blindly (waits poll with deadlines), or leave a node running.
"""

from __future__ import annotations

import asyncio
import time

import nats.errors
import nats.js.errors
import pytest

from tests.cluster.replica_views import converged, settled_leader
from tests.integration.backup_wire import api, restore, snapshot
from tests.integration.clients import connect
from tests.servers import JetraftCluster

pytestmark = pytest.mark.integration

STREAM = "RST"
MSGS = 30
CONVERGE_TIMEOUT_S = 30.0
PUBLISH_TIMEOUT_S = 2.0
RETRY_S = 0.1


async def test_a_restore_survives_a_kill_of_the_seeding_node(
    fresh_jetraft_cluster: JetraftCluster,
) -> None:
    cluster = fresh_jetraft_cluster
    nc = await connect(cluster.urls[0])
    try:
        body = {"name": STREAM, "subjects": ["rst.>"], "num_replicas": 3}
        assert "error" not in await api(nc, f"STREAM.CREATE.{STREAM}", body)
        js = nc.jetstream(timeout=5.0)
        for i in range(MSGS):
            await js.publish(f"rst.{i % 4}", f"m{i}".encode())
        resp, data = await snapshot(nc, STREAM)
        await js.delete_stream(STREAM)
        created = await restore(nc, resp["config"], data)
        assert "error" not in created, created
        assert created["state"]["messages"] == MSGS
        seeder = cluster.index_of(created["cluster"]["leader"])
    finally:
        await nc.close()

    cluster.kill(seeder)
    cluster.restart(seeder)
    views = await cluster.await_for(
        lambda: converged(cluster, STREAM, messages=MSGS, last_seq=MSGS),
        CONVERGE_TIMEOUT_S,
        "every replica holds the restored stream",
    )
    assert views is not None and len(views) == 3

    # the restarted node may take its leadership back: publish once a leader has settled, and
    # again should the publish meet the moment its interest moves
    await settled_leader(cluster, STREAM, CONVERGE_TIMEOUT_S)
    nc = await connect(cluster.urls[(seeder + 1) % 3])
    try:
        js = nc.jetstream(timeout=PUBLISH_TIMEOUT_S)
        deadline = time.monotonic() + CONVERGE_TIMEOUT_S
        while True:
            try:
                ack = await js.publish("rst.new", b"after", headers={"Nats-Msg-Id": "after"})
                break
            except (
                nats.errors.NoRespondersError,
                nats.errors.TimeoutError,
                nats.js.errors.NoStreamResponseError,
            ):
                assert time.monotonic() < deadline, "the restored stream took no publish"
                await asyncio.sleep(RETRY_S)
        assert ack.seq == MSGS + 1
        msg = await js.get_msg(STREAM, 7)
        assert msg.data == b"m6"
    finally:
        await nc.close()
