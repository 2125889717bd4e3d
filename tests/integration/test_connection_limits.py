"""max_connections, max_control_line and max_pending act as in nats-server: same texts, and a
reader that does not keep up is cut off with its buffer dropped instead of holding memory."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import (
    HOST,
    ServerProc,
    http_get_json,
    start_jetraft,
    start_nats_server,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.differential]

SOCKET_TIMEOUT_S = 5.0
MAX_PENDING = 1024 * 1024
PUBLISHED_BYTES = 64 * 1024 * 1024  # 64x max_pending pushed at a reader that never reads
PAYLOAD = b"x" * (64 * 1024)
RSS_GROWTH_MAX_BYTES = 48 * 1024 * 1024  # far below what was published
CUT_OFF_WAIT_S = 30.0  # nats-server lists it until its write deadline (10 s) has passed
CONF = f"max_connections: 3\nmax_control_line: 256\nmax_pending: {MAX_PENDING}\n"


@pytest.fixture(params=["nats-server", "jetraft"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServerProc]:
    conf = tmp_path / "limits.conf"
    conf.write_text(CONF)
    start = start_nats_server if request.param == "nats-server" else start_jetraft
    proc = start(tmp_path, extra_args=("-c", str(conf)))
    try:
        yield proc
    finally:
        proc.stop()


def _connect(port: int) -> tuple[socket.socket, bytes]:
    sock = socket.create_connection((HOST, port), timeout=SOCKET_TIMEOUT_S)
    return sock, _read_line(sock)


def _read_line(sock: socket.socket) -> bytes:
    line = b""
    while not line.endswith(b"\r\n"):
        chunk = sock.recv(1)
        if not chunk:
            break
        line += chunk
    return line


def _rest(sock: socket.socket) -> bytes:
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return data


def test_connections_beyond_max_connections_are_refused(server: ServerProc) -> None:
    held = [_connect(server.port)[0] for _ in range(3)]
    try:
        for sock in held:  # each fully connected before the next one counts
            sock.sendall(b'CONNECT {"verbose":false}\r\nPING\r\n')
            assert _read_line(sock).startswith((b"PONG", b"INFO"))
        extra, info = _connect(server.port)
        assert info.startswith(b"INFO ")
        assert _rest(extra).startswith(b"-ERR 'maximum connections exceeded'\r\n")
        extra.close()
    finally:
        for sock in held:
            sock.close()


def test_an_oversize_control_line_gets_the_same_error(server: ServerProc) -> None:
    sock, _info = _connect(server.port)
    sock.sendall(b'CONNECT {"verbose":false}\r\nSUB ' + b"a" * 400 + b" 1\r\n")
    answer = _rest(sock)
    sock.close()
    assert answer.startswith(b"-ERR 'maximum control line exceeded'\r\n"), answer


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_a_reader_that_does_not_keep_up_is_cut_off(server: ServerProc) -> None:
    reader, _ = _connect(server.port)
    reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    reader.sendall(b'CONNECT {"verbose":false}\r\nSUB flood 1\r\nPING\r\n')
    assert _read_line(reader) == b"PONG\r\n"
    writer, _ = _connect(server.port)
    writer.sendall(b'CONNECT {"verbose":false}\r\n')
    rss_before = _rss(server.pid)
    peak = rss_before
    pub = b"PUB flood %d\r\n%s\r\n" % (len(PAYLOAD), PAYLOAD)
    for _ in range(PUBLISHED_BYTES // len(PAYLOAD)):
        writer.sendall(pub)
    writer.sendall(b"PING\r\n")
    deadline = time.monotonic() + 30
    while _read_line(writer) != b"PONG\r\n" and time.monotonic() < deadline:
        pass
    peak = max(peak, _rss(server.pid))
    assert peak - rss_before < RSS_GROWTH_MAX_BYTES, (rss_before, peak)
    # the slow reader's connection is gone: the server lists the writer alone. (Reading the
    # reader's socket to its end would show it too, but the few MB its kernel already holds
    # trickle through the 4 KiB window one persist-timer probe at a time: ~100 s.)

    def only_the_writer_left() -> bool:
        _status, connz = http_get_json(server.http_port, "/connz")
        return connz["num_connections"] == 1

    assert wait_until(only_the_writer_left, CUT_OFF_WAIT_S), "the slow reader was not cut off"
    if "jetraft" in server.argv[0] or any("jetraft" in a for a in server.argv[:2]):
        _status, varz = http_get_json(server.http_port, "/varz")
        assert varz["slow_consumers"] >= 1
    writer.close()
    reader.close()
