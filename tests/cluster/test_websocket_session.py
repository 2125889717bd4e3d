"""WebSocketSession driven without sockets: a client's bytes from the ``websockets`` library's
own sans-I/O client, a transport that records what the session writes, and a stand-in for the
ClientConnection behind it."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from websockets.client import ClientProtocol
from websockets.frames import CloseCode, Frame, Opcode
from websockets.protocol import State
from websockets.uri import parse_uri

from cluster.client_conn import ClientConnection
from cluster.router import Router
from cluster.websocket import WebSocketOptions, WebSocketSession

BOUND = 1024


class RawTransport:
    def __init__(self) -> None:
        self.out = bytearray()
        self.closed = False
        self.aborted = False

    def writelines(self, chunks: list[bytes]) -> None:
        for chunk in chunks:
            self.out += chunk

    def write(self, data: bytes) -> None:
        self.out += data

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 50000) if name == "peername" else default

    def get_write_buffer_size(self) -> int:
        return 0

    def take(self) -> bytes:
        data, self.out = bytes(self.out), bytearray()
        return data


class Conn:
    """What the session needs of a ClientConnection: it says INFO and hears the protocol."""

    def __init__(self) -> None:
        self.transport: Any = None
        self.heard = b""
        self.lost = False
        self.stats = type("Stats", (), {"reason": ""})()

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        transport.write(b"INFO {}\r\n")

    def data_received(self, data: bytes) -> None:
        self.heard += data

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True


def _opened(timeout_s: float = 5.0) -> tuple[WebSocketSession, RawTransport, Conn, ClientProtocol]:
    conn = Conn()
    opts = WebSocketOptions(host="127.0.0.1", port=1, tls=None, handshake_timeout_s=timeout_s)
    session = WebSocketSession(opts, lambda: cast(Any, conn), BOUND)
    raw = RawTransport()
    session.connection_made(cast(asyncio.Transport, raw))
    client = ClientProtocol(parse_uri("ws://127.0.0.1:1/"))
    client.send_request(client.connect())
    for chunk in client.data_to_send():
        session.data_received(chunk)
    client.receive_data(raw.take())
    return session, raw, conn, client


def _frames(client: ClientProtocol, raw: RawTransport) -> list[Any]:
    client.receive_data(raw.take())
    return client.events_received()


def _send(session: WebSocketSession, client: ClientProtocol) -> None:
    for chunk in client.data_to_send():
        session.data_received(chunk)


async def test_the_upgrade_hands_the_connection_its_transport_and_the_info_goes_out() -> None:
    _session, raw, conn, client = _opened()
    assert client.state is State.OPEN and conn.transport is not None
    response, info = client.events_received()
    assert response.status_code == 101
    assert isinstance(info, Frame) and info.opcode is Opcode.BINARY
    assert info.data == b"INFO {}\r\n" and not raw.closed


async def test_fragments_reach_the_connection_as_one_stream_and_pings_are_answered() -> None:
    session, raw, conn, client = _opened()
    client.events_received()
    client.send_binary(b"PUB a 5\r\nhe", fin=False)
    client.send_continuation(b"llo\r\n", fin=True)
    client.send_ping(b"p")
    _send(session, client)
    assert conn.heard == b"PUB a 5\r\nhello\r\n"
    assert any(isinstance(e, Frame) and e.opcode is Opcode.PONG for e in _frames(client, raw))


async def test_a_message_over_the_bound_closes_with_1009_unread() -> None:
    session, raw, conn, client = _opened()
    client.events_received()
    client.send_binary(b"x" * (BOUND + 1))
    _send(session, client)
    assert conn.heard == b""
    _frames(client, raw)
    assert client.close_rcvd is not None and client.close_rcvd.code == CloseCode.MESSAGE_TOO_BIG
    assert raw.closed


async def test_the_server_closing_sends_a_close_frame_with_the_reason() -> None:
    _session, raw, conn, client = _opened()
    client.events_received()
    conn.stats.reason = "Authentication Timeout"
    conn.transport.close()
    _frames(client, raw)
    assert client.close_rcvd is not None
    assert client.close_rcvd.code == CloseCode.POLICY_VIOLATION
    assert client.close_rcvd.reason == "Authentication Timeout" and raw.closed


async def test_a_silent_client_is_dropped_at_the_handshake_timeout() -> None:
    conn = Conn()
    opts = WebSocketOptions(host="127.0.0.1", port=1, tls=None, handshake_timeout_s=0.01)
    session = WebSocketSession(opts, lambda: cast(Any, conn), BOUND)
    raw = RawTransport()
    session.connection_made(cast(asyncio.Transport, raw))
    deadline = asyncio.get_running_loop().time() + 5.0
    while not raw.aborted and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)
    assert raw.aborted and conn.transport is None


async def test_a_websocket_client_is_never_told_the_tcp_client_urls() -> None:
    told = {}
    for websocket in (False, True):
        conn = ClientConnection(Router(), {"server_id": "S", "max_payload": 1024}, 1024, 1)
        conn.websocket = websocket
        raw = RawTransport()
        conn.connection_made(cast(asyncio.Transport, raw))
        conn.data_received(b'CONNECT {"protocol":1,"verbose":false}\r\nPING\r\n')
        await asyncio.sleep(0)
        raw.take()
        conn.send_lame_duck_info(["10.0.0.2:4222"])
        await asyncio.sleep(0)
        told[websocket] = raw.take()
        conn.close()
    assert b'"ldm":true' in told[True] and b"connect_urls" not in told[True]
    assert b'"connect_urls":["10.0.0.2:4222"]' in told[False]
