"""Monitoring survives hostile requests: oversize lines get 431, malformed 400, no traceback."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.servers import HOST, free_port, http_get_json, start_jetraft

pytestmark = pytest.mark.integration

SOCKET_TIMEOUT_S = 10.0


def _raw(port: int, request: bytes) -> bytes:
    with socket.create_connection((HOST, port), timeout=SOCKET_TIMEOUT_S) as sock:
        try:
            sock.sendall(request)
        except OSError:
            pass  # the server may answer and close before it read everything
        answer = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            answer += chunk
        return answer


def test_oversize_and_malformed_requests_get_an_answer_and_monitoring_goes_on(
    tmp_path: Path,
) -> None:
    http_port = free_port()
    server = start_jetraft(tmp_path, extra_args=("-m", str(http_port)))
    try:
        long_line = b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n"
        assert _raw(http_port, long_line).startswith(b"HTTP/1.0 431 ")
        many_headers = b"GET /varz HTTP/1.1\r\n" + (b"X-A: " + b"b" * 1000 + b"\r\n") * 80
        assert _raw(http_port, many_headers + b"\r\n").startswith(b"HTTP/1.0 431 ")
        assert _raw(http_port, b"GARBAGE\r\n\r\n").startswith(b"HTTP/1.0 400 ")
        assert _raw(http_port, b"POST /varz HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.0 405 ")
        status, varz = http_get_json(http_port, "/varz")
        assert status == 200 and varz["server_name"] == "j1"
    finally:
        server.stop()
    log = server.log_tail(100_000)
    assert "Traceback" not in log, log
