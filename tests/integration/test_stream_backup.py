"""STREAM.SNAPSHOT and STREAM.RESTORE on a single server, driven by hand with nats-py as
``nats stream backup`` / ``nats stream restore`` drive them (cluster/backup.py): a snapshot with
a durable consumer, the stream deleted, restored from the chunks, and everything equal; a corrupt
upload refused with no stream left; and the clear refusal in a 3-node cluster."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig

from cluster import backup
from cluster import local_streams as backup_limits
from cluster.router import Router
from engine.memstore import MemoryStore
from tests.cluster.inprocess import InProcessCluster
from tests.integration.clients import connect
from tests.servers import ServerProc

pytestmark = pytest.mark.integration

STREAM = "BK"
MSGS = 40
ACKED = 7
TIMEOUT_S = 5.0
CHUNK = 1024  # nats-server's smallest chunk: several chunks for a small stream


async def _api(nc: NATS, subject: str, body: dict[str, Any]) -> dict[str, Any]:
    msg = await nc.request(f"$JS.API.{subject}", json.dumps(body).encode(), timeout=TIMEOUT_S)
    doc: dict[str, Any] = json.loads(msg.data)
    return doc


async def snapshot_by_hand(
    nc: NATS, stream: str, body: dict[str, Any]
) -> tuple[dict[str, Any], list[bytes], list[str], Msg]:
    """The snapshot response, the chunks and their reply subjects (each acked that asks for
    it), and the end-of-stream message."""
    inbox = nc.new_inbox()
    chunks: list[bytes] = []
    replies: list[str] = []
    done: asyncio.Future[Msg] = asyncio.get_running_loop().create_future()

    async def on_chunk(msg: Msg) -> None:
        if not msg.data and msg.headers:
            if not done.done():
                done.set_result(msg)
            return
        chunks.append(msg.data)
        replies.append(msg.reply)
        if msg.reply:
            await nc.publish(msg.reply, b"")

    sub = await nc.subscribe(inbox, cb=on_chunk)
    resp = await _api(nc, f"STREAM.SNAPSHOT.{stream}", {"deliver_subject": inbox, **body})
    eof = await asyncio.wait_for(done, TIMEOUT_S)
    await sub.unsubscribe()
    return resp, chunks, replies, eof


async def _snapshot(nc: NATS, stream: str, **opts: Any) -> tuple[dict[str, Any], bytes]:
    body = {"chunk_size": CHUNK, "window_size": 4 * CHUNK, **opts}
    resp, chunks, _replies, eof = await snapshot_by_hand(nc, stream, body)
    assert eof.data == b""
    assert eof.headers is not None and eof.headers.get("Status") == "204", eof.headers
    return resp, b"".join(chunks)


async def _restore(nc: NATS, config: dict[str, Any], data: bytes) -> dict[str, Any]:
    resp = await _api(nc, f"STREAM.RESTORE.{config['name']}", {"config": config, "state": {}})
    assert resp["type"] == "io.nats.jetstream.api.v1.stream_restore_response", resp
    deliver = resp["deliver_subject"]
    assert deliver.startswith(f"$JS.SNAPSHOT.RESTORE.{config['name']}.")
    for pos in range(0, len(data), CHUNK):
        ack = await nc.request(deliver, data[pos : pos + CHUNK], timeout=TIMEOUT_S)
        if ack.data:  # an error ends the upload
            return dict(json.loads(ack.data))
    final = await nc.request(deliver, b"", timeout=TIMEOUT_S)
    return dict(json.loads(final.data))


async def _fill(nc: NATS) -> None:
    js = nc.jetstream(timeout=TIMEOUT_S)
    await js.add_stream(name=STREAM, subjects=["bk.>"], allow_direct=True)
    for i in range(MSGS):
        await js.publish(f"bk.{i % 3}", f"m{i}".encode() * (i + 1), headers={"H": str(i)})
    await _api(nc, f"STREAM.MSG.DELETE.{STREAM}", {"seq": 5})
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
        before = await _api(nc, f"STREAM.INFO.{STREAM}", {})
        consumer_before = await js.consumer_info(STREAM, "d")
        msgs_before = await _messages(nc)

        resp, data = await _snapshot(nc, STREAM)
        assert resp["type"] == "io.nats.jetstream.api.v1.stream_snapshot_response"
        assert resp["config"]["name"] == STREAM
        assert resp["state"] == before["state"]
        assert len(data) > 2 * CHUNK

        await js.delete_stream(STREAM)
        created = await _restore(nc, resp["config"], data)
        assert created["type"] == "io.nats.jetstream.api.v1.stream_create_response", created
        assert "error" not in created
        assert created["state"] == before["state"]

        after = await _api(nc, f"STREAM.INFO.{STREAM}", {})
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
        again = await _api(nc, f"STREAM.RESTORE.{STREAM}", {"config": resp["config"]})
        assert again["error"]["err_code"] == 10130

        # without consumers
        resp2, data2 = await _snapshot(nc, STREAM, no_consumers=True)
        await js.delete_stream(STREAM)
        created = await _restore(nc, resp2["config"], data2)
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
        resp, data = await _snapshot(nc, STREAM)
        await js.delete_stream(STREAM)
        flipped = bytearray(data)
        flipped[len(data) // 2] ^= 0xFF
        for bad in (bytes(flipped), data[: len(data) // 2], b"not a snapshot at all" * 100):
            created = await _restore(nc, resp["config"], bad)
            assert created["type"] == "io.nats.jetstream.api.v1.stream_create_response"
            assert created["error"]["err_code"] == 10062, created
            assert created["error"]["description"].startswith("restore failed: ")
            names = await _api(nc, "STREAM.NAMES", {})
            assert not names.get("streams"), names
        # the good bytes still restore
        created = await _restore(nc, resp["config"], data)
        assert "error" not in created, created
    finally:
        await nc.close()


async def test_a_cluster_stream_backs_up_and_refuses_restores(tmp_path: Path) -> None:
    """The stream's leader sends the snapshot; a cluster refuses restores (not yet)."""
    c = InProcessCluster(tmp_path, 3)
    await c.start()
    try:
        nc = await connect(c.urls[0])
        try:
            js = nc.jetstream(timeout=10)
            await js.add_stream(name=STREAM, subjects=["bk.>"], num_replicas=3)
            for i in range(5):
                await js.publish(f"bk.{i}", b"x" * 100)
            resp, data = await _snapshot(nc, STREAM)
            assert resp["state"]["messages"] == 5 and resp["config"]["num_replicas"] == 3
            assert data.startswith(backup.MAGIC)
            rest = await _api(nc, "STREAM.RESTORE.NEW", {"config": {"name": "NEW"}})
            assert rest["error"]["err_code"] == 10062
            assert "in a cluster are not supported" in rest["error"]["description"]
        finally:
            await nc.close()
    finally:
        await c.stop()


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
    session = backup.RestoreSession(router, "S", staging, MemoryStore(), lambda _s: {})
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
            resp = await _api(nc, "STREAM.RESTORE.UP", {"config": config, "state": {}})
            assert "deliver_subject" in resp, resp
        refused = await _api(nc, "STREAM.RESTORE.UP", {"config": config, "state": {}})
        assert refused["error"]["err_code"] == 10062, refused
        assert "already in progress" in refused["error"]["description"]
    finally:
        await nc.close()
