"""Fixtures for the client integration tests: a server process per test, and nats-py on it.

``server`` is parametrized over the reference nats-server and jetraft, so every behaviour is
checked on nats-server first (the oracle) and then on jetraft. Each test gets its own process and
store directory under ``tmp_path``, and the process is stopped by pid afterwards whatever
happened.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from nats.aio.client import Client as NATS
from nats.js.client import JetStreamContext

from tests.integration.clients import JETRAFT_KIND, NATS_KIND, SERVER_KINDS, connect
from tests.servers import ServerProc, start_jetraft, start_nats_server

JS_TIMEOUT_S = 5.0

_STARTERS: dict[str, Callable[[Path], ServerProc]] = {
    NATS_KIND: start_nats_server,
    JETRAFT_KIND: start_jetraft,
}


@pytest.fixture(params=SERVER_KINDS)
def server_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


@pytest.fixture
def server(server_kind: str, tmp_path: Path) -> Iterator[ServerProc]:
    proc = _STARTERS[server_kind](tmp_path)
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def jetraft_server(tmp_path: Path) -> Iterator[ServerProc]:
    proc = start_jetraft(tmp_path)
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
async def nc(server: ServerProc) -> AsyncIterator[NATS]:
    client = await connect(server.url)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
def js(nc: NATS) -> JetStreamContext:
    return nc.jetstream(timeout=JS_TIMEOUT_S)
