"""A real jetraft process with route authorization: what strangers on the cluster port cost it.

Megabytes sent without a HELLO are cut after the HELLO budget instead of being buffered (the
node's resident memory barely moves), and a silent connection is closed at the handshake
deadline.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from protocol.route_frames import FRAME_HEADER, FrameKind
from tests.servers import free_port, jetraft_proc

pytestmark = pytest.mark.integration

FLOOD_BYTES = 10_000_000
FLOOD_CONNECTIONS = 2
RSS_GROWTH_MAX = 8 * 1024 * 1024
HANDSHAKE_TIMEOUT_S = 2.0  # route authorization's default timeout
CLOSE_WAIT_S = 10.0


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _closed_by_peer(sock: socket.socket, deadline_s: float) -> bool:
    sock.settimeout(deadline_s)
    try:
        while sock.recv(65536):
            pass
        return True
    except ConnectionError:
        return True
    except TimeoutError:
        return False


def _flood(port: int) -> socket.socket:
    """A frame header announcing 16 MiB, then FLOOD_BYTES, until the node cuts us off."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=CLOSE_WAIT_S)
    data = FRAME_HEADER.pack(16 * 1024 * 1024, FrameKind.HELLO) + b"x" * FLOOD_BYTES
    try:
        sock.sendall(data)
    except OSError:
        pass  # cut off while sending
    return sock


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_strangers_on_the_cluster_port_cost_no_memory_and_are_timed_out(tmp_path: Path) -> None:
    port = free_port()
    node = jetraft_proc(
        tmp_path,
        name="n1",
        extra_args=[
            "--cluster_name",
            "c",
            "--cluster",
            f"nats://route:s3cret@127.0.0.1:{port}",
            "--routes",
            f"nats://127.0.0.1:{port}",
        ],
    )
    with node.start():
        before = _rss(node.pid)
        socks = [_flood(port) for _ in range(FLOOD_CONNECTIONS)]
        try:
            for sock in socks:
                assert _closed_by_peer(sock, CLOSE_WAIT_S)
        finally:
            for sock in socks:
                sock.close()
        grown = _rss(node.pid) - before
        assert grown < RSS_GROWTH_MAX, f"RSS grew by {grown} bytes"

        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=CLOSE_WAIT_S) as silent:
            assert _closed_by_peer(silent, CLOSE_WAIT_S)
        elapsed = time.monotonic() - started
        assert HANDSHAKE_TIMEOUT_S * 0.5 < elapsed < HANDSHAKE_TIMEOUT_S + 3.0
        assert node.running
        log = node.log_tail()
        assert "frame length" in log and "no valid HELLO in time" in log
