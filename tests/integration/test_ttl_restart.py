"""Per-message TTL across a restart of a real jetraft process (ADR-43, issue 3).

A message with ``Nats-TTL: 2s`` is stored on a file stream with subject delete markers, the server
is stopped (SIGTERM; SIGKILL if it is not down by just before the deadline) and started again
after the deadline: the first expire entry after the start removes the message and writes its
marker, with a timestamp from after the restart (the deadlines were rebuilt from the stored
headers, and nothing expired while down).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client as NATS

from protocol.timefmt import parse_rfc3339
from tests.integration.clients import connect
from tests.servers import jetraft_proc

pytestmark = pytest.mark.integration

STREAM = "TTLRESTART"
SUBJECT = "ttlr.a"
TTL_S = 2
MARKER_TTL_NS = 5_000_000_000
REQUEST_TIMEOUT_S = 5.0
EXPIRY_WAIT_S = 10.0
POLL_INTERVAL_S = 0.05
DOWN_PAST_DEADLINE_S = 0.3
# A stop still under way this close to the message's deadline is ended with SIGKILL.
STOP_MARGIN_S = 0.5


async def _api(nc: NATS, subject: str, body: dict[str, Any]) -> dict[str, Any]:
    reply = await nc.request(f"$JS.API.{subject}", json.dumps(body).encode(), REQUEST_TIMEOUT_S)
    data: dict[str, Any] = json.loads(reply.data)
    return data


async def _direct_get(nc: NATS, seq: int) -> tuple[dict[str, str], bytes]:
    body = json.dumps({"seq": seq}).encode()
    reply = await nc.request(f"$JS.API.DIRECT.GET.{STREAM}", body, REQUEST_TIMEOUT_S)
    return dict(reply.headers or {}), reply.data


async def test_message_due_while_down_is_removed_on_start_with_its_marker(
    tmp_path: Path,
) -> None:
    server = jetraft_proc(tmp_path).start()
    try:
        nc = await connect(server.url)
        try:
            created = await _api(
                nc,
                f"STREAM.CREATE.{STREAM}",
                {
                    "name": STREAM,
                    "subjects": ["ttlr.>"],
                    "storage": "file",
                    "allow_direct": True,
                    "subject_delete_marker_ttl": MARKER_TTL_NS,
                    # one message per subject: the 2 s TTL is not raised to the 5 s marker TTL
                    "max_msgs_per_subject": 1,
                },
            )
            assert "error" not in created, created
            # The server stamps the message between these two instants, so its deadline lies
            # between them plus the TTL.
            sent_at = time.time()
            ack = await nc.request(
                SUBJECT, b"short-lived", REQUEST_TIMEOUT_S, headers={"Nats-TTL": f"{TTL_S}s"}
            )
            published_at = time.time()
            assert json.loads(ack.data) == {"stream": STREAM, "seq": 1}
            headers, data = await _direct_get(nc, 1)
            assert data == b"short-lived" and headers["Nats-TTL"] == f"{TTL_S}s"
        finally:
            await nc.close()
        # Down before the deadline however slowly a loaded machine shuts the server down: the
        # stop waits for the process to exit until just before the earliest deadline, then
        # kills it (the acked message is on disk either way, and the restart must rebuild its
        # deadline the same way), instead of hoping a SIGTERM stop ends within the 2 s TTL.
        server.stop(timeout_s=max(0.0, sent_at + TTL_S - STOP_MARGIN_S - time.time()))
        stopped_at = time.time()
        assert stopped_at < sent_at + TTL_S, "the message was due before the server was down"
        # down until past the deadline (nothing to poll while no server runs)
        await asyncio.sleep(published_at + TTL_S + DOWN_PAST_DEADLINE_S - time.time())
        server.start()
        nc = await connect(server.url)
        try:
            state: dict[str, Any] = {}
            deadline = time.monotonic() + EXPIRY_WAIT_S
            while time.monotonic() < deadline:
                state = (await _api(nc, f"STREAM.INFO.{STREAM}", {}))["state"]
                if state["last_seq"] == 2:
                    break
                await asyncio.sleep(POLL_INTERVAL_S)
            assert (state["messages"], state["first_seq"], state["last_seq"]) == (1, 2, 2), state
            gone, _ = await _direct_get(nc, 1)
            assert gone.get("Status") == "404", gone
            marker, payload = await _direct_get(nc, 2)
            assert payload == b""
            assert {k: marker[k] for k in ("Nats-Marker-Reason", "Nats-TTL", "Nats-Rollup")} == {
                "Nats-Marker-Reason": "MaxAge",
                "Nats-TTL": "5s",
                "Nats-Rollup": "sub",
            }
            assert marker["Nats-Subject"] == SUBJECT
            marker_s = parse_rfc3339(marker["Nats-Time-Stamp"]) / 1e9
            assert marker_s > stopped_at, "the marker was written before the restart"
        finally:
            await nc.close()
    finally:
        server.stop()
