"""Differential: STREAM.SNAPSHOT and STREAM.RESTORE's protocol against nats-server (issue 17).

The bytes differ (each server's own format, docs/nats-differences.md), so what is compared is
the protocol a client sees: the snapshot response's keys, the chunks' ack subjects, the
end-of-stream status, the restore response's keys and deliver subject, the empty chunk acks and
the final STREAM.CREATE response's keys and state; each server restores its own bytes.
"""

from __future__ import annotations

import json
from typing import Any

import nats
import pytest

from tests.integration.backup_wire import snapshot_by_hand
from tests.servers import ServerProc

pytestmark = pytest.mark.differential

TIMEOUT_S = 5.0
CHUNK = 1024


async def _run(url: str, stream: str) -> dict[str, Any]:
    nc = await nats.connect(url)
    out: dict[str, Any] = {}
    try:
        js = nc.jetstream(timeout=TIMEOUT_S)
        await js.add_stream(name=stream, subjects=[f"{stream.lower()}.>"])
        for i in range(30):
            await js.publish(f"{stream.lower()}.x", b"payload %d " % i * 20)

        async def api(subject: str, body: dict[str, Any]) -> dict[str, Any]:
            msg = await nc.request(f"$JS.API.{subject}", json.dumps(body).encode(), TIMEOUT_S)
            return dict(json.loads(msg.data))

        body = {"chunk_size": CHUNK, "window_size": 2 * CHUNK}
        snap, chunks, replies, eof = await snapshot_by_hand(nc, stream, body)
        out["snapshot_keys"] = sorted(snap)
        out["snapshot_config_name"] = snap["config"]["name"]
        out["snapshot_state_messages"] = snap["state"]["messages"]
        out["eof"] = (eof.data, (eof.headers or {}).get("Status"))
        prefix = f"$JS.SNAPSHOT.ACK.{stream}."
        full = [r for r, c in zip(replies, chunks, strict=True) if len(c) == CHUNK]
        out["acks_shaped"] = all(
            r.startswith(prefix) and r.split(".")[-2:] == [str(CHUNK), str(i)]
            for i, r in enumerate(full, start=1)
        )
        out["last_short_without_reply"] = len(chunks[-1]) == CHUNK or replies[-1] == ""

        await js.delete_stream(stream)
        restore = await api(f"STREAM.RESTORE.{stream}", {"config": snap["config"]})
        out["restore_keys"] = sorted(restore)
        deliver = restore["deliver_subject"]
        out["restore_subject"] = deliver.startswith(f"$JS.SNAPSHOT.RESTORE.{stream}.")
        data = b"".join(chunks)
        acks = set()
        for pos in range(0, len(data), CHUNK):
            ack = await nc.request(deliver, data[pos : pos + CHUNK], timeout=TIMEOUT_S)
            acks.add(ack.data)
        out["chunk_acks"] = acks
        final = json.loads((await nc.request(deliver, b"", timeout=TIMEOUT_S)).data)
        out["final_type"] = final["type"]
        out["final_has_error"] = "error" in final
        out["final_state_messages"] = final["state"]["messages"]
        out["final_config_name"] = final["config"]["name"]
        await js.delete_stream(stream)
    finally:
        await nc.close()
    return out


async def test_snapshot_and_restore_protocol(
    oracle_server: ServerProc, candidate_server: ServerProc
) -> None:
    oracle = await _run(oracle_server.url, "BKDIFF")
    candidate = await _run(candidate_server.url, "BKDIFF")
    assert candidate == oracle
    assert oracle["eof"] == (b"", "204")
    assert oracle["final_has_error"] is False
