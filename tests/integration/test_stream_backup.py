"""STREAM.SNAPSHOT and STREAM.RESTORE, driven by hand with nats-py as ``nats stream backup`` /
``nats stream restore`` drive them (cluster/backup.py): a snapshot with a durable consumer, the
stream deleted, restored from the chunks, and everything equal, on a single server and in a
3-node cluster (where every replica must end up with the restored state, including one that
restarts right after the restore); a corrupt upload refused with no stream left."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client as NATS
from nats.js.api import AckPolicy, ConsumerConfig, StorageType

from cluster import backup
from cluster import backup as backup_limits
from cluster.router import Router
from engine.memstore import MemoryStore
from tests.cluster.inprocess import InProcessCluster, running_cluster, wait_for
from tests.integration.backup_wire import CHUNK, TIMEOUT_S, api, restore, snapshot
from tests.integration.clients import connect
from tests.servers import ServerProc

pytestmark = pytest.mark.integration

STREAM = "BK"
MSGS = 40
ACKED = 7
MORE = 20  # publishes right after a restore


async def _fill(nc: NATS, replicas: int = 1, storage: str = "file") -> None:
    js = nc.jetstream(timeout=TIMEOUT_S)
    await js.add_stream(
        name=STREAM,
        subjects=["bk.>"],
        allow_direct=True,
        num_replicas=replicas,
        storage=StorageType(storage),
    )
    for i in range(MSGS):
        await js.publish(f"bk.{i % 3}", f"m{i}".encode() * (i + 1), headers={"H": str(i)})
    await api(nc, f"STREAM.MSG.DELETE.{STREAM}", {"seq": 5})
    config = ConsumerConfig(durable_name="d", ack_policy=AckPolicy.EXPLICIT, ack_wait=30)
    await js.add_consumer(STREAM, config=config)
    psub = await js.pull_subscribe_bind("d", STREAM)
    msgs = await psub.fetch(ACKED + 3, timeout=TIMEOUT_S)
    for msg in msgs[:ACKED]:
        await msg.ack_sync()


async def _messages(nc: NATS) -> list[tuple[int, str, bytes, Any]]:
    js = nc.jetstream(timeout=TIMEOUT_S)
    out = []
    for seq in range(1, MSGS + 1):
        if seq == 5:
            continue
        msg = await js.get_msg(STREAM, seq, direct=True)
        out.append((msg.seq, msg.subject, msg.data, (msg.headers or {}).get("H")))
    return out


async def test_snapshot_delete_restore_round_trip(jetraft_server: ServerProc) -> None:
    nc = await connect(jetraft_server.url)
    try:
        js = nc.jetstream(timeout=TIMEOUT_S)
        await _fill(nc)
        before = await api(nc, f"STREAM.INFO.{STREAM}", {})
        consumer_before = await js.consumer_info(STREAM, "d")
        msgs_before = await _messages(nc)

        resp, data = await snapshot(nc, STREAM)
        assert resp["type"] == "io.nats.jetstream.api.v1.stream_snapshot_response"
        assert resp["config"]["name"] == STREAM
        assert resp["state"] == before["state"]
        assert len(data) > 2 * CHUNK

        await js.delete_stream(STREAM)
        created = await restore(nc, resp["config"], data)
        assert created["type"] == "io.nats.jetstream.api.v1.stream_create_response", created
        assert "error" not in created
        assert created["state"] == before["state"]

        after = await api(nc, f"STREAM.INFO.{STREAM}", {})
        assert after["state"] == before["state"]
        assert after["config"] == before["config"]
        assert after["created"] == before["created"]
        assert await _messages(nc) == msgs_before
        consumer_after = await js.consumer_info(STREAM, "d")
        assert consumer_after.delivered == consumer_before.delivered
        assert consumer_after.ack_floor == consumer_before.ack_floor
        assert consumer_after.num_ack_pending == consumer_before.num_ack_pending
        assert consumer_after.num_pending == consumer_before.num_pending

        # the restored stream takes new messages after the old ones
        ack = await js.publish("bk.new", b"x")
        assert ack.seq == MSGS + 1

        # a restore over an existing stream is refused before the upload
        again = await api(nc, f"STREAM.RESTORE.{STREAM}", {"config": resp["config"]})
        assert again["error"]["err_code"] == 10130

        # without consumers
        resp2, data2 = await snapshot(nc, STREAM, no_consumers=True)
        await js.delete_stream(STREAM)
        created = await restore(nc, resp2["config"], data2)
        assert "error" not in created, created
        assert created["state"]["consumer_count"] == 0
        assert created["state"]["messages"] == MSGS  # 40 - 1 deleted + 1 new
    finally:
        await nc.close()


async def test_corrupt_upload_is_refused_and_leaves_no_stream(jetraft_server: ServerProc) -> None:
    nc = await connect(jetraft_server.url)
    try:
        js = nc.jetstream(timeout=TIMEOUT_S)
        await _fill(nc)
        resp, data = await snapshot(nc, STREAM)
        await js.delete_stream(STREAM)
        flipped = bytearray(data)
        flipped[len(data) // 2] ^= 0xFF
        for bad in (bytes(flipped), data[: len(data) // 2], b"not a snapshot at all" * 100):
            created = await restore(nc, resp["config"], bad)
            assert created["type"] == "io.nats.jetstream.api.v1.stream_create_response"
            assert created["error"]["err_code"] == 10062, created
            assert created["error"]["description"].startswith("restore failed: ")
            names = await api(nc, "STREAM.NAMES", {})
            assert not names.get("streams"), names
        # the good bytes still restore
        created = await restore(nc, resp["config"], data)
        assert "error" not in created, created
    finally:
        await nc.close()


def _replicas_agree(c: InProcessCluster, stream: str) -> bool:
    """Every live node's replica of ``stream`` is online and holds one and the same state."""
    states = set()
    for i in c.live():
        host = c.replica(i, stream)
        if host is None or host.offline:
            return False
        states.add((host.stream.applied_index, host.stream.digest()))
    return len(states) == 1 and next(iter(states))[0] > 0


async def test_a_cluster_backs_up_and_restores_onto_every_replica(tmp_path: Path) -> None:
    """The stream leader sends the snapshot; the meta leader takes the upload and seeds the new
    group; every replica ends with the same state, serves it, and a replica restarted right
    after the restore still ends with it."""
    async with running_cluster(tmp_path, 3) as c:
        nc = await connect(c.urls[0])
        try:
            js = nc.jetstream(timeout=10)
            await _fill(nc, replicas=3)
            before = await api(nc, f"STREAM.INFO.{STREAM}", {})
            consumer_before = await js.consumer_info(STREAM, "d")
            msgs_before = await _messages(nc)
            resp, data = await snapshot(nc, STREAM)
            assert resp["state"] == before["state"] and resp["config"]["num_replicas"] == 3
            assert data.startswith(backup.MAGIC)
            await js.delete_stream(STREAM)
            await wait_for(lambda: all(c.replica(i, STREAM) is None for i in c.live()), "deleted")

            created = await restore(nc, resp["config"], data)
            assert "error" not in created, created
            assert created["state"] == before["state"]
            assert created["config"]["num_replicas"] == 3
            assert sorted(
                [created["cluster"]["leader"]] + [r["name"] for r in created["cluster"]["replicas"]]
            ) == ["n0", "n1", "n2"]
            # publishes right behind the seed: a follower may be handed them before its state
            # arrived, and must get a state that includes them
            acks = await asyncio.gather(*(js.publish("bk.more", b"y") for _ in range(MORE)))
            assert sorted(a.seq for a in acks) == list(range(MSGS + 1, MSGS + MORE + 1))
            await wait_for(lambda: _replicas_agree(c, STREAM), "replicas agree")
            for seq in range(MSGS + 1, MSGS + MORE + 1):
                await js.delete_msg(STREAM, seq)

            after = await api(nc, f"STREAM.INFO.{STREAM}", {})
            assert after["state"]["messages"] == before["state"]["messages"]
            assert after["created"] == before["created"]
            consumer_after = await js.consumer_info(STREAM, "d")
            assert consumer_after.delivered == consumer_before.delivered
            assert consumer_after.ack_floor == consumer_before.ack_floor
            assert consumer_after.num_pending == consumer_before.num_pending
            # every node serves the restored messages (Direct Get from its own replica)
            for url in c.urls:
                other = await connect(url)
                try:
                    assert await _messages(other) == msgs_before
                finally:
                    await other.close()

            # a follower restarted right after the restore: it still ends with the state
            leader = c.leader_of(STREAM)
            follower = next(i for i in c.live() if i not in (leader, 0))  # nc is on n0
            await c.stop_node(follower)
            ack = await js.publish("bk.new", b"x")
            assert ack.seq == MSGS + MORE + 1
            await c.start_node(follower)
            await wait_for(lambda: _replicas_agree(c, STREAM), "replicas agree after a restart")
            restarted = c.replica(follower, STREAM)
            assert restarted is not None and restarted.stream.last_seq == MSGS + MORE + 1

            # names taken meanwhile and placements that cannot be met are refused
            again = await api(nc, f"STREAM.RESTORE.{STREAM}", {"config": resp["config"]})
            assert again["error"]["err_code"] == 10130
            wide = {**resp["config"], "name": "WIDE", "num_replicas": 5}
            refused = await api(nc, "STREAM.RESTORE.WIDE", {"config": wide})
            assert refused["error"]["err_code"] == 10005
        finally:
            await nc.close()


async def test_a_cluster_restore_of_a_corrupt_upload_leaves_no_stream(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, 3) as c:
        nc = await connect(c.urls[1])
        try:
            js = nc.jetstream(timeout=10)
            await _fill(nc, replicas=3)
            resp, data = await snapshot(nc, STREAM)
            await js.delete_stream(STREAM)
            flipped = bytearray(data)
            flipped[len(data) // 2] ^= 0xFF
            created = await restore(nc, resp["config"], bytes(flipped))
            assert created["error"]["err_code"] == 10062, created
            names = await api(nc, "STREAM.NAMES", {})
            assert not names.get("streams"), names
            assert all(c.replica(i, STREAM) is None for i in c.live())
            # an R1 restore of the same bytes lands on the node that took the upload
            created = await restore(nc, {**resp["config"], "num_replicas": 1}, data)
            assert "error" not in created, created
            assert created["config"]["num_replicas"] == 1
            holders = [i for i in c.live() if c.replica(i, STREAM) is not None]
            assert len(holders) == 1 and c.js(holders[0]).is_meta_leader
        finally:
            await nc.close()


async def test_an_upload_that_would_fill_the_disk_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bytes from the network never fill the disk: a chunk that would leave less than the
    reserve free ends the restore with nats-server's storage error and drops the staging."""
    monkeypatch.setattr(backup, "RESTORE_DISK_RESERVE_BYTES", 1 << 62)  # more than any disk
    router = Router()
    replies: list[bytes] = []
    router.subscribe_internal("reply.>", lambda _s, _r, _h, data: replies.append(data))
    staging = tmp_path / "staging"
    staging.mkdir()

    async def finish(_stream: Any) -> dict[str, Any]:
        raise AssertionError("an upload that failed is never finished")

    session = backup.RestoreSession(router, "S", staging, MemoryStore(), finish)
    router.publish(session.subject, "reply.1", None, b"some bytes")
    (body,) = replies
    error = json.loads(body)["error"]
    assert error["err_code"] == 10062
    assert error["description"] == "restore failed: insufficient storage resources available"
    assert not staging.exists()
    assert not router.sublist.match(session.subject)  # the upload subject is gone


async def test_uploads_in_progress_are_bounded(jetraft_server: ServerProc) -> None:
    nc = await connect(jetraft_server.url)
    try:
        config = {"name": "UP", "subjects": ["up.>"]}
        for _ in range(backup_limits.RESTORES_IN_PROGRESS_MAX):
            resp = await api(nc, "STREAM.RESTORE.UP", {"config": config, "state": {}})
            assert "deliver_subject" in resp, resp
        refused = await api(nc, "STREAM.RESTORE.UP", {"config": config, "state": {}})
        assert refused["error"]["err_code"] == 10062, refused
        assert "already in progress" in refused["error"]["description"]
    finally:
        await nc.close()


async def test_a_memory_stream_restored_in_a_cluster_survives_its_seeder_restart(
    tmp_path: Path,
) -> None:
    """The seeder's memory store is empty after a restart: replaying the seed it must fetch the
    state from the others, not adopt the empty store as the stream (it did: one replica with no
    messages at the same applied index as two with all of them)."""
    async with running_cluster(tmp_path, 3) as c:
        nc = await connect(c.urls[0])
        try:
            js = nc.jetstream(timeout=10)
            await _fill(nc, replicas=3, storage="memory")
            resp, data = await snapshot(nc, STREAM)
            await js.delete_stream(STREAM)
            await wait_for(lambda: all(c.replica(i, STREAM) is None for i in c.live()), "deleted")
            created = await restore(nc, resp["config"], data)
            assert "error" not in created, created
            await wait_for(lambda: _replicas_agree(c, STREAM), "replicas agree")
            seeder = int(created["cluster"]["leader"].removeprefix("n"))
        finally:
            await nc.close()
        await c.stop_node(seeder)
        await c.start_node(seeder)
        await wait_for(lambda: _replicas_agree(c, STREAM), "replicas agree after the restart")
        restarted = c.replica(seeder, STREAM)
        assert restarted is not None and restarted.stream.state().messages == MSGS - 1
