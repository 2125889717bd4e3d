"""A stopping server closes its clients' connections last, as nats-server does: by the time a
client reads the end of its connection, the stores, routes and monitoring are already down, so a
client that reconnects elsewhere at once finds this server gone rather than still closing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cluster.server import Server, ServerOptions
from tests.servers import free_port

IO_TIMEOUT_S = 10.0


def _recorded(steps: list[str], name: str, fn: Callable[[], Any]) -> Callable[[], Any]:
    if asyncio.iscoroutinefunction(fn):

        async def done_async() -> None:
            await fn()
            steps.append(name)

        return done_async

    def done() -> None:
        fn()
        steps.append(name)

    return done


async def test_the_clients_are_closed_after_jetstream_and_monitoring_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = Server(
        ServerOptions(host="127.0.0.1", port=free_port(), store_dir=tmp_path, http_port=free_port())
    )
    await server.start()
    steps: list[str] = []
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        await asyncio.wait_for(reader.readline(), IO_TIMEOUT_S)  # INFO
        writer.write(b"CONNECT {}\r\nPING\r\n")
        await asyncio.wait_for(reader.readuntil(b"PONG\r\n"), IO_TIMEOUT_S)
        [conn] = server._conns.values()
        assert server.jetstream is not None and server.monitor is not None
        for target, attr, name in [
            (server.jetstream, "close", "jetstream"),
            (server.monitor, "stop", "monitor"),
            (conn, "close", "client"),
        ]:
            monkeypatch.setattr(target, attr, _recorded(steps, name, getattr(target, attr)))
        await server.shutdown()
        assert steps == ["jetstream", "monitor", "client"]
        assert await asyncio.wait_for(reader.read(), IO_TIMEOUT_S) == b""  # closed, not reset
        writer.close()
    finally:
        if server.monitor is not None and not steps:
            await server.shutdown()
