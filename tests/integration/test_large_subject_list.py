"""One STREAM.CREATE with thousands of subjects does not freeze the server for other clients."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import nats
import pytest

from tests.servers import HOST, start_jetraft

pytestmark = pytest.mark.integration

SUBJECTS = 8_000  # took 13 s of event loop with the pairwise overlap check
PING_EVERY_S = 0.05
CREATE_TIMEOUT_S = 60.0
# a liveness bound, not a benchmark: with the quadratic check no PONG came for 13 s
PONG_GAP_MAX_S = 3.0


async def _pinger(port: int, stop: asyncio.Event) -> list[float]:
    reader, writer = await asyncio.open_connection(HOST, port)
    await reader.readline()  # INFO
    writer.write(b'CONNECT {"verbose":false}\r\n')
    gaps: list[float] = []
    try:
        while not stop.is_set():
            sent = time.monotonic()
            writer.write(b"PING\r\n")
            await writer.drain()
            line = await asyncio.wait_for(reader.readline(), CREATE_TIMEOUT_S)
            assert line == b"PONG\r\n", line
            gaps.append(time.monotonic() - sent)
            await asyncio.sleep(PING_EVERY_S)
    finally:
        writer.close()
    return gaps


async def test_pings_are_answered_while_a_huge_stream_is_created(tmp_path: Path) -> None:
    server = start_jetraft(tmp_path)
    try:
        nc = await nats.connect(server.url)
        stop = asyncio.Event()
        pinger = asyncio.create_task(_pinger(server.port, stop))
        await asyncio.sleep(0.2)
        subjects = [f"orders.{n}.*" for n in range(SUBJECTS)]
        body = json.dumps({"name": "BIG", "subjects": subjects}).encode()
        reply = await nc.request("$JS.API.STREAM.CREATE.BIG", body, timeout=CREATE_TIMEOUT_S)
        stop.set()
        gaps = await pinger
        answer = json.loads(reply.data)
        assert answer.get("error") is None, answer
        assert len(answer["config"]["subjects"]) == SUBJECTS
        assert gaps and max(gaps) < PONG_GAP_MAX_S, max(gaps)
        await nc.close()
    finally:
        server.stop()
