"""``nats stream backup`` / ``nats stream restore`` spoken by hand with nats-py: the chunked
snapshot download (acking each chunk that asks) and the chunked restore upload. Shared by the
backup suites (single server, in-process cluster, process cluster, differential)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

TIMEOUT_S = 5.0
CHUNK = 1024  # nats-server's smallest chunk: several chunks for a small stream


async def api(nc: NATS, subject: str, body: dict[str, Any]) -> dict[str, Any]:
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
    resp = await api(nc, f"STREAM.SNAPSHOT.{stream}", {"deliver_subject": inbox, **body})
    eof = await asyncio.wait_for(done, TIMEOUT_S)
    await sub.unsubscribe()
    return resp, chunks, replies, eof


async def snapshot(nc: NATS, stream: str, **opts: Any) -> tuple[dict[str, Any], bytes]:
    body = {"chunk_size": CHUNK, "window_size": 4 * CHUNK, **opts}
    resp, chunks, _replies, eof = await snapshot_by_hand(nc, stream, body)
    assert eof.data == b""
    assert eof.headers is not None and eof.headers.get("Status") == "204", eof.headers
    return resp, b"".join(chunks)


async def restore(nc: NATS, config: dict[str, Any], data: bytes) -> dict[str, Any]:
    resp = await api(nc, f"STREAM.RESTORE.{config['name']}", {"config": config, "state": {}})
    assert resp["type"] == "io.nats.jetstream.api.v1.stream_restore_response", resp
    deliver = resp["deliver_subject"]
    assert deliver.startswith(f"$JS.SNAPSHOT.RESTORE.{config['name']}.")
    for pos in range(0, len(data), CHUNK):
        ack = await nc.request(deliver, data[pos : pos + CHUNK], timeout=TIMEOUT_S)
        if ack.data:  # an error ends the upload
            return dict(json.loads(ack.data))
    final = await nc.request(deliver, b"", timeout=TIMEOUT_S)
    return dict(json.loads(final.data))
