"""Slow consumers are cut off before they cost the server memory, as in nats-server.

The finding behind these tests: 1,000 Direct Gets of a 1 MB message sent in one write by a client
that never reads made jetraft hold about 2 GB, because replies piled up within one loop turn and
the cut-off still delivered what it had buffered. Now no connection holds more than
``max_pending`` unsent bytes (ours and the transports'), the cut drops them, and a reader whose
socket stops taking data is cut once ``write_deadline`` passes, with TLS as without.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import nats
import pytest
import trustme

from tests.servers import (
    HOST,
    ServerProc,
    http_get_json,
    start_jetraft,
    start_nats_server,
)

pytestmark = pytest.mark.integration

MiB = 1024 * 1024
MAX_PENDING_DEFAULT = 64 * MiB
RSS_BOUND_BYTES = MAX_PENDING_DEFAULT + 100 * MiB  # what the flood may add to the server's RSS
DIRECT_GETS = 1000
MESSAGE_BYTES = MiB - 200  # with its headers, within the default max_payload of 1 MiB
SOCKET_TIMEOUT_S = 10.0
CUT_WAIT_S = 20.0
POLL_S = 0.05
WRITE_DEADLINE_S = 1.0
RECV_BUFFER_BYTES = 4096  # the reader's socket takes almost nothing
CHUNK = b"x" * 4096

STARTERS: dict[str, Callable[..., ServerProc]] = {
    "nats-server": start_nats_server,
    "jetraft": start_jetraft,
}


def _status_bytes(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {key} in /proc/{pid}/status")


def _slow_consumers(server: ServerProc) -> int:
    _status, varz = http_get_json(server.http_port, "/varz")
    count: int = varz["slow_consumers"]
    return count


def _wait_for(cond: Callable[[], bool], timeout_s: float = CUT_WAIT_S) -> bool:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_S)
    return True


def _read_line(sock: socket.socket) -> bytes:
    line = b""
    while not line.endswith(b"\r\n"):
        chunk = sock.recv(1)
        if not chunk:
            break
        line += chunk
    return line


def _read_to_eof(sock: socket.socket) -> int:
    got = 0
    try:
        while chunk := sock.recv(1 << 20):
            got += len(chunk)
    except (TimeoutError, ConnectionError, ssl.SSLError):
        pass
    return got


def _reader(
    port: int, wrap: Callable[[socket.socket], socket.socket] | None = None
) -> socket.socket:
    """A subscriber to ``flood`` that will not read another byte once subscribed."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECV_BUFFER_BYTES)
    sock.settimeout(SOCKET_TIMEOUT_S)
    sock.connect((HOST, port))
    _read_line(sock)  # INFO
    if wrap is not None:
        sock = wrap(sock)
    sock.sendall(b'CONNECT {"verbose":false}\r\nSUB flood 1\r\nPING\r\n')
    while _read_line(sock) != b"PONG\r\n":
        pass
    return sock


def _flood(port: int, total: int, wrap: Callable[[socket.socket], socket.socket] | None) -> None:
    sock = socket.create_connection((HOST, port), timeout=SOCKET_TIMEOUT_S)
    _read_line(sock)
    if wrap is not None:
        sock = wrap(sock)
    sock.sendall(b'CONNECT {"verbose":false}\r\n')
    pub = b"PUB flood %d\r\n%s\r\n" % (len(CHUNK), CHUNK)
    for _ in range(total // len(CHUNK)):
        sock.sendall(pub)
    sock.sendall(b"PING\r\n")
    while _read_line(sock) not in (b"PONG\r\n", b""):
        pass
    sock.close()


# --- the finding: Direct Gets of a 1 MB message for a client that never reads -----------------


async def _stream_with_one_big_message(port: int) -> None:
    nc = await nats.connect(f"nats://{HOST}:{port}", allow_reconnect=False)
    try:
        js = nc.jetstream()
        await js.add_stream(name="BIG", subjects=["big"], allow_direct=True)
        await js.publish("big", b"b" * MESSAGE_BYTES)
    finally:
        await nc.close()


async def _direct_get_size(port: int) -> int:
    nc = await nats.connect(f"nats://{HOST}:{port}", allow_reconnect=False)
    try:
        reply = await nc.request("$JS.API.DIRECT.GET.BIG", b'{"seq":1}', timeout=5)
        return len(reply.data)
    finally:
        await nc.close()


def test_direct_get_flood_to_a_reader_that_never_reads(tmp_path: Path) -> None:
    server = start_jetraft(tmp_path)
    try:
        asyncio.run(_stream_with_one_big_message(server.port))
        rss_before = _status_bytes(server.pid, "VmRSS")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECV_BUFFER_BYTES)
        sock.connect((HOST, server.port))
        request = b'PUB $JS.API.DIRECT.GET.BIG _INBOX.flood 9\r\n{"seq":1}\r\n'
        sock.sendall(b'CONNECT {"verbose":false}\r\nSUB _INBOX.flood 1\r\n' + request * DIRECT_GETS)
        assert _wait_for(lambda: _slow_consumers(server) >= 1), server.log_tail()
        peak = _status_bytes(server.pid, "VmHWM")  # the process's highest RSS so far
        assert peak - rss_before < RSS_BOUND_BYTES, (rss_before // MiB, peak // MiB)
        # the connection is cut and what it was owed dropped: far less than 1,000 MB arrives
        sock.settimeout(SOCKET_TIMEOUT_S)
        assert _read_to_eof(sock) < MAX_PENDING_DEFAULT
        sock.close()
        # everyone else is still served, the big message included
        assert asyncio.run(_direct_get_size(server.port)) == MESSAGE_BYTES
        assert f"Slow Consumer Detected: MaxPending of {MAX_PENDING_DEFAULT} Exceeded" in (
            server.log_tail(20000)
        )
    finally:
        server.stop()


# --- the write deadline -------------------------------------------------------------------------


@pytest.fixture(params=list(STARTERS))
def deadline_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServerProc]:
    conf = tmp_path / "deadline.conf"
    conf.write_text(f'write_deadline: "{WRITE_DEADLINE_S:g}s"\n')
    proc = STARTERS[request.param](tmp_path, extra_args=("-c", str(conf)))
    try:
        yield proc
    finally:
        proc.stop()


def test_write_deadline_cuts_a_reader_that_stopped_reading(deadline_server: ServerProc) -> None:
    """8 MB (an eighth of max_pending) for a reader that reads nothing: only the deadline cuts."""
    server = deadline_server
    reader = _reader(server.port)
    published = 8 * MiB
    _flood(server.port, published, None)
    flooded = time.monotonic()
    assert _wait_for(lambda: _slow_consumers(server) >= 1), server.log_tail()
    # nats-server's deadline is per write call, jetraft's per check of what was written before
    # the previous one: either way a byte may wait up to two deadlines before the cut
    assert time.monotonic() - flooded < 2 * WRITE_DEADLINE_S + 2.0
    assert _read_to_eof(reader) < published  # the rest was dropped
    reader.close()
    assert "Slow Consumer Detected: WriteDeadline of 1s exceeded with" in server.log_tail(20000)
    other = socket.create_connection((HOST, server.port), timeout=SOCKET_TIMEOUT_S)
    _read_line(other)
    other.sendall(b'CONNECT {"verbose":false}\r\nPING\r\n')
    assert _read_line(other) == b"PONG\r\n"
    other.close()


# --- over TLS: the encrypted bytes count too ----------------------------------------------------


@pytest.fixture
def tls_server(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[ServerProc, ssl.SSLContext]]:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(tmp_path / "s.pem")
    cert.private_key_pem.write_to_path(tmp_path / "s.key")
    conf = tmp_path / "tls.conf"
    conf.write_text(
        f'tls {{\n  cert_file: "{tmp_path / "s.pem"}"\n  key_file: "{tmp_path / "s.key"}"\n}}\n'
        f"max_pending: {MiB}\n"
    )
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    proc = STARTERS[request.param](tmp_path, extra_args=("-c", str(conf)))
    try:
        yield proc, ctx
    finally:
        proc.stop()


@pytest.mark.parametrize("tls_server", list(STARTERS), indirect=True)
def test_a_tls_reader_that_never_reads_is_cut(
    tls_server: tuple[ServerProc, ssl.SSLContext],
) -> None:
    server, ctx = tls_server

    def wrap(sock: socket.socket) -> socket.socket:
        return ctx.wrap_socket(sock, server_hostname=HOST)

    reader = _reader(server.port, wrap)
    rss_before = _status_bytes(server.pid, "VmRSS")
    published = 64 * MiB
    _flood(server.port, published, wrap)
    assert _wait_for(lambda: _slow_consumers(server) >= 1), server.log_tail()
    peak = _status_bytes(server.pid, "VmRSS")
    assert peak - rss_before < 48 * MiB, (rss_before // MiB, peak // MiB)
    assert _read_to_eof(reader) < published // 4
    reader.close()
