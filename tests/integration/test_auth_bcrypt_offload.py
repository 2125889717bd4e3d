"""bcrypt logins do not stall the server: while several CONNECTs with a slow (cost 13) bcrypt
password are being checked, an already logged-in client still gets its PONG at once, and every
slow login then succeeds (cluster/password_pool.py runs the comparisons off the event loop)."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import bcrypt

from tests.servers import HOST, start_jetraft

SLOW_COST = 13  # about a second per comparison here: a stalled loop could not hide it
SLOW_LOGINS = 3
READ_DEADLINE_S = 30.0


def _open(port: int) -> socket.socket:
    sock = socket.create_connection((HOST, port), timeout=READ_DEADLINE_S)
    buf = b""
    while b"\r\n" not in buf:
        chunk = sock.recv(4096)
        assert chunk, "closed before INFO"
        buf += chunk
    return sock


def _login(sock: socket.socket, user: str, password: str) -> None:
    opts = {"verbose": False, "pedantic": False, "user": user, "pass": password}
    sock.sendall(b"CONNECT " + json.dumps(opts).encode() + b"\r\nPING\r\n")


def _read_pong(sock: socket.socket) -> bytes:
    deadline = time.monotonic() + READ_DEADLINE_S
    buf = b""
    while b"PONG\r\n" not in buf and time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        chunk = sock.recv(4096)
        if not chunk:
            break
        buf += chunk
    return buf


def test_bcrypt_logins_leave_the_loop_responsive(tmp_path: Path) -> None:
    hashed = bcrypt.hashpw(b"slowpw", bcrypt.gensalt(SLOW_COST))
    started = time.monotonic()
    assert bcrypt.checkpw(b"slowpw", hashed)
    one_check_s = time.monotonic() - started
    conf = tmp_path / "auth.conf"
    conf.write_text(
        "authorization { timeout: 20, users: [\n"
        f'  {{ user: slow, password: "{hashed.decode()}" }}\n'
        "  { user: fast, password: fastpw }\n"
        "] }\n"
    )
    with start_jetraft(tmp_path, extra_args=["-c", str(conf)]) as server:
        fast = _open(server.port)
        slow = [_open(server.port) for _ in range(SLOW_LOGINS)]
        try:
            _login(fast, "fast", "fastpw")
            assert b"PONG\r\n" in _read_pong(fast)
            for sock in slow:
                _login(sock, "slow", "slowpw")
            time.sleep(0.05)  # let the server read the slow CONNECTs first
            sent = time.monotonic()
            fast.sendall(b"PING\r\n")
            assert b"PONG\r\n" in _read_pong(fast)
            waited = time.monotonic() - sent
            assert waited < one_check_s / 2, (waited, one_check_s)
            for sock in slow:
                got = _read_pong(sock)
                assert got.endswith(b"PONG\r\n") and b"-ERR" not in got, got
        finally:
            for sock in [fast, *slow]:
                sock.close()
