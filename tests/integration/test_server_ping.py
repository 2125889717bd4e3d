"""Server-initiated PINGs: both servers probe an idle client and cut one that never answers.

Runs against nats-server and jetraft with the same config file (``ping_interval``/``ping_max``),
so jetraft's keep-alive is checked against the reference, not against a number of our own.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.integration.clients import JETRAFT_KIND, NATS_KIND
from tests.servers import HOST, ServerProc, start_jetraft, start_nats_server

pytestmark = pytest.mark.integration

DEADLINE_S = 8.0


def _start(kind: str, tmp_path: Path, conf_text: str) -> ServerProc:
    conf = tmp_path / "ping.conf"
    conf.write_text(conf_text)
    start = start_nats_server if kind == NATS_KIND else start_jetraft
    return start(tmp_path, extra_args=("-c", str(conf)))


async def _read_until(reader: asyncio.StreamReader, wanted: bytes, deadline: float) -> bytes:
    seen = b""
    while wanted not in seen:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            chunk = await asyncio.wait_for(reader.read(4096), remaining)
        except TimeoutError:
            break
        if not chunk:
            break
        seen += chunk
    return seen


@pytest.mark.parametrize("kind", [NATS_KIND, JETRAFT_KIND])
async def test_idle_client_gets_ping_and_stays_when_it_answers(kind: str, tmp_path: Path) -> None:
    server = _start(kind, tmp_path, "ping_interval: 1\nping_max: 2\n")
    try:
        reader, writer = await asyncio.open_connection(HOST, server.port)
        writer.write(b'CONNECT {"verbose":false}\r\n')
        for _ in range(3):  # answer three probes: the connection must survive them all
            seen = await _read_until(reader, b"PING\r\n", time.monotonic() + DEADLINE_S)
            assert b"PING\r\n" in seen
            writer.write(b"PONG\r\n")
        writer.write(b"PING\r\n")
        assert b"PONG\r\n" in await _read_until(reader, b"PONG\r\n", time.monotonic() + 2)
        writer.close()
    finally:
        server.stop()


@pytest.mark.parametrize("kind", [NATS_KIND, JETRAFT_KIND])
async def test_client_that_never_answers_is_stale(kind: str, tmp_path: Path) -> None:
    server = _start(kind, tmp_path, "ping_interval: 1\nping_max: 1\n")
    try:
        reader, writer = await asyncio.open_connection(HOST, server.port)
        writer.write(b'CONNECT {"verbose":false}\r\n')
        seen = await _read_until(reader, b"Stale Connection", time.monotonic() + DEADLINE_S)
        assert b"-ERR 'Stale Connection'\r\n" in seen
        assert await reader.read() == b""  # and the server closed it
        writer.close()
    finally:
        server.stop()


@pytest.mark.parametrize("kind", [NATS_KIND, JETRAFT_KIND])
async def test_first_ping_comes_no_later_than_the_ping_interval(kind: str, tmp_path: Path) -> None:
    server = _start(kind, tmp_path, 'ping_interval: "300ms"\nping_max: 5\n')
    try:
        reader, writer = await asyncio.open_connection(HOST, server.port)
        writer.write(b'CONNECT {"verbose":false}\r\n')
        # the default first probe comes after 2 s; a shorter interval must bring it forward
        seen = await _read_until(reader, b"PING\r\n", time.monotonic() + 1.5)
        assert b"PING\r\n" in seen
        writer.close()
    finally:
        server.stop()
