"""NATS over WebSocket (the ``websocket`` block), side by side with nats-server: the upgrade,
the INFO inside the first message, the protocol both ways (fragments and compression included),
the origin rules, and the close that a protocol error ends in. The client is the ``websockets``
library's, speaking raw NATS protocol.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from cluster.ops.servers import ServerStartError
from tests.differential.diff_mask import mask_json
from tests.differential.test_diff_tls_limits import Pair, both, same, server_pair
from tests.servers import http_get_json, jetraft_proc, start_jetraft, start_nats_server

pytestmark = pytest.mark.differential

WAIT_S = 5.0
ORIGIN = "http://app.example.com"


def _conf(extra: str = "") -> str:
    return f"websocket {{\n  port: -1\n  no_tls: true\n{extra}\n}}\n"


def _ws_port(proc_log: str) -> int:
    # both servers log it, in nats-server's words
    for line in proc_log.splitlines():
        if "Listening for websocket clients on ws://" in line:
            return int(line.rsplit(":", 1)[1])
    raise AssertionError(f"no websocket listener in the log:\n{proc_log}")


@pytest.fixture(scope="module")
def ws_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    extra = f'  compression: true\n  allowed_origins: ["{ORIGIN}"]'
    with server_pair(tmp_path_factory.mktemp("ws"), lambda _: _conf(extra)) as pair:
        yield pair


def _ports(pair: Pair) -> tuple[int, int]:
    return _ws_port(pair.oracle.log_tail(1 << 16)), _ws_port(pair.candidate.log_tail(1 << 16))


async def ws_both(pair: Pair, scenario: Any) -> tuple[Any, Any]:
    oracle_port, candidate_port = _ports(pair)
    ports = {pair.oracle.port: oracle_port, pair.candidate.port: candidate_port}
    return await both(pair, lambda port: scenario(ports[port]))


async def _read_until(ws: ClientConnection, marker: bytes) -> bytes:
    seen = b""
    while marker not in seen:
        message = await asyncio.wait_for(ws.recv(), WAIT_S)
        seen += message if isinstance(message, bytes) else message.encode()
    return seen


def _info(data: bytes) -> dict[str, Any]:
    line = data.split(b"\r\n", 1)[0]
    assert line.startswith(b"INFO "), data
    return dict(json.loads(line[5:]))


async def test_the_info_comes_in_the_first_message_and_the_protocol_follows(
    ws_pair: Pair,
) -> None:
    async def session(port: int) -> tuple[Any, bytes, bytes]:
        async with connect(f"ws://127.0.0.1:{port}", open_timeout=WAIT_S) as ws:
            first = await asyncio.wait_for(ws.recv(), WAIT_S)
            assert isinstance(first, bytes)
            info = _info(first)
            await ws.send(
                b'CONNECT {"verbose":false,"headers":true,"protocol":1}\r\nSUB t 1\r\n'
                b"HPUB t 12 14\r\nNATS/1.0\r\n\r\nhi\r\nPING\r\n"
            )
            echoed = await _read_until(ws, b"PONG\r\n")
            echoed = echoed[: echoed.index(b"PONG\r\n") + 6]  # not the async INFO after it
            # one PUB split over three websocket fragments still reads as one
            await ws.send([b"PUB t 5\r\nhel", b"lo\r\n", b"PING\r\n"])
            again = await _read_until(ws, b"PONG\r\n")
            assert ws.response is not None
            assert "permessage-deflate" in ws.response.headers.get("Sec-WebSocket-Extensions", "")
            return mask_json(info), echoed, again

    info, echoed, again = same(await ws_both(ws_pair, session))
    assert info["headers"] is True and "tls_required" not in info
    assert b"HMSG t 1 12 14\r\nNATS/1.0\r\n\r\nhi\r\n" in echoed
    assert b"MSG t 1 5\r\nhello\r\n" in again


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [(ORIGIN, True), (None, True), ("http://evil.example.com", False)],
    ids=["allowed", "no-origin", "other"],
)
async def test_allowed_origins(ws_pair: Pair, origin: str | None, allowed: bool) -> None:
    async def upgrade(port: int) -> int:
        try:
            async with connect(
                f"ws://127.0.0.1:{port}",
                origin=origin,
                open_timeout=WAIT_S,  # type: ignore[arg-type]
            ) as ws:
                await asyncio.wait_for(ws.recv(), WAIT_S)
                return 101
        except InvalidStatus as exc:
            return exc.response.status_code

    assert same(await ws_both(ws_pair, upgrade)) == (101 if allowed else 403)


async def test_a_protocol_error_closes_the_websocket(ws_pair: Pair) -> None:
    async def bad(port: int) -> tuple[bytes, bool]:
        async with connect(f"ws://127.0.0.1:{port}", open_timeout=WAIT_S) as ws:
            await asyncio.wait_for(ws.recv(), WAIT_S)
            await ws.send(b'CONNECT {"verbose":false}\r\nBOGUS\r\n')
            seen = b""
            try:
                while True:
                    message = await asyncio.wait_for(ws.recv(), WAIT_S)
                    seen += message if isinstance(message, bytes) else message.encode()
            except ConnectionClosed:
                return seen, True

    (_, oracle_closed), (seen, closed) = await ws_both(ws_pair, bad)
    assert oracle_closed and closed
    # nats-server drops a websocket client at a parse error without a word (over TCP it sends
    # the -ERR first); jetraft tells it, as over TCP, before its close frame
    assert seen == b"-ERR 'Unknown Protocol Operation'\r\n"


def test_websocket_without_tls_or_no_tls_is_refused(tmp_path: Path) -> None:
    conf = tmp_path / "ws.conf"
    conf.write_text("websocket { port: -1 }\n")
    proc = jetraft_proc(tmp_path, extra_args=("-c", str(conf)), monitor=False)
    with pytest.raises(ServerStartError) as refused:
        proc.start(ready_timeout_s=WAIT_S)
    assert "websocket requires TLS configuration" in str(refused.value)


def test_varz_shows_the_websocket_settings(tmp_path: Path) -> None:
    conf = tmp_path / "ws.conf"
    conf.write_text(
        _conf(
            '  compression: true\n  same_origin: true\n  handshake_timeout: "3s"\n'
            f'  allowed_origins: ["{ORIGIN}", "https://b.example.com:8443"]'
        )
    )
    seen = []
    for start in (start_nats_server, start_jetraft):
        proc = start(tmp_path / start.__name__, extra_args=("-c", str(conf)))
        try:
            status, body = http_get_json(proc.http_port, "/varz")
            assert status == 200
            ws = dict(body["websocket"])
            assert ws.pop("port") == _ws_port(proc.log_tail(1 << 16))
            seen.append(ws)
        finally:
            proc.stop()
    assert seen[1] == seen[0]
    assert seen[0]["allowed_origins"] == [ORIGIN, "https://b.example.com:8443"]
