"""Route authorization, differential: nats-server 2.15.1 and jetraft started with the same flags
(``--cluster nats://route:s3cret@127.0.0.1:PORT``) refuse a route connection that presents no or
wrong credentials, and close one that presents nothing within the authorization timeout.

The route protocols differ (nats-server: INFO, then the dialer's ``CONNECT {json}``; jetraft: a
binary HELLO frame), so each side gets the same attempt in its own protocol and the outcomes are
compared. nats-server answers ``-ERR 'Authorization Violation'`` and logs
``authentication error - User "route"`` / ``Router connection closed: Authentication Failure``,
and for silence ``-ERR 'Authentication Timeout'`` after 2 s; jetraft closes without an answer
(an unauthenticated peer learns nothing, not even the node's name) and logs
``authorization violation`` / ``no valid HELLO in time``.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from protocol.route_frames import FrameKind, encode_frame
from tests.servers import HOST, ServerProc, free_port, jetraft_proc, nats_server_proc

pytestmark = pytest.mark.differential

CLUSTER = "c"
USER, PASSWORD = "route", "s3cret"
AUTH_TIMEOUT_S = 2.0  # the route authorization timeout both servers default to
CLOSE_WAIT_S = 8.0

Attempt = Callable[[socket.socket, dict[str, str]], None]


def _nats_attempt(sock: socket.socket, creds: dict[str, str]) -> None:
    sock.recv(65536)  # the route INFO comes first
    connect = {"verbose": False, "pedantic": False, "name": "intruder", "cluster": CLUSTER}
    sock.sendall(b"CONNECT " + json.dumps({**connect, **creds}).encode() + b"\r\n")


def _jetraft_attempt(sock: socket.socket, creds: dict[str, str]) -> None:
    hello = {"v": 1, "name": "intruder", "cluster": CLUSTER, **creds}
    sock.sendall(encode_frame(FrameKind.HELLO, hello))


def _outcome(
    port: int, attempt: Attempt | None, creds: dict[str, str]
) -> tuple[bool, bytes, float]:
    """(closed by the server, what it sent after the attempt, seconds until closed)."""
    with socket.create_connection((HOST, port), timeout=CLOSE_WAIT_S) as sock:
        started = time.monotonic()
        if attempt is not None:
            attempt(sock, creds)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except ConnectionError:
            pass
        except TimeoutError:
            return False, received, time.monotonic() - started
        return True, received, time.monotonic() - started


def _server(kind: str, tmp_path: Path) -> tuple[ServerProc, int]:
    port = free_port()
    flags = [
        "--cluster_name",
        CLUSTER,
        "--cluster",
        f"nats://{USER}:{PASSWORD}@{HOST}:{port}",
        # itself as the only route: nats-server's JetStream needs a route to start
        "--routes",
        f"nats://{USER}:{PASSWORD}@{HOST}:{port}",
    ]
    make = nats_server_proc if kind == "nats" else jetraft_proc
    return make(tmp_path / kind, name=f"{kind}-1", extra_args=flags), port


@pytest.mark.parametrize("kind", ["nats", "jetraft"])
def test_a_route_without_the_right_credentials_is_refused(kind: str, tmp_path: Path) -> None:
    (tmp_path / kind).mkdir()
    server, port = _server(kind, tmp_path)
    attempt = _nats_attempt if kind == "nats" else _jetraft_attempt
    with server.start():
        for creds in ({}, {"user": USER, "pass": "wrong"}, {"user": "other", "pass": PASSWORD}):
            closed, answer, elapsed = _outcome(port, attempt, creds)
            assert closed and elapsed < AUTH_TIMEOUT_S, (creds, answer, elapsed)
            if kind == "nats":
                assert b"Authorization Violation" in answer
            else:
                assert answer == b""
        closed, answer, elapsed = _outcome(port, None, {})
        assert closed and AUTH_TIMEOUT_S * 0.5 < elapsed < AUTH_TIMEOUT_S + 3.0, elapsed
        if kind == "nats":
            assert b"Authentication Timeout" in answer
        assert server.running
        log = server.log_tail(20_000)
        if kind == "nats":
            assert "Authentication Failure" in log and "Authentication Timeout" in log
        else:
            assert "authorization violation" in log and "no valid HELLO in time" in log
