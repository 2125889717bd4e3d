"""The same raw byte streams sent to nats-server and to ClientSession (through the
one-connection test server): the bytes that come back must be identical, INFO included."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.protocol.core_cases import CASES, INFO_CASES, NO_INFO_CASES
from tests.protocol.wire import run
from tests.servers import HOST, ServerProc, start_nats_server

pytestmark = pytest.mark.differential

READ_TIMEOUT_S = 2.0
IDLE_AFTER_EXPECTED_S = 0.1


@pytest.fixture(scope="module")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    tmp: Path = tmp_path_factory.mktemp("core-diff")
    server = start_nats_server(tmp)
    try:
        yield server
    finally:
        server.stop()


def _exchange(
    port: int, data: bytes, expected_len: int, expect_close: bool
) -> tuple[dict[str, Any], bytes, bool]:
    """Send ``data`` on a fresh connection; return (INFO, reply bytes, closed by server).
    Reads until the server closes, or (when no close is expected) until it has sent at least
    ``expected_len`` bytes and then stays quiet for a moment."""
    with socket.create_connection((HOST, port), timeout=READ_TIMEOUT_S) as sock:
        buf = b""
        while b"\r\n" not in buf:
            chunk = sock.recv(65536)
            assert chunk, "server closed before INFO"
            buf += chunk
        line, _, rest = buf.partition(b"\r\n")
        info = json.loads(line[5:])
        sock.sendall(data)
        out = rest
        deadline = time.monotonic() + READ_TIMEOUT_S
        while time.monotonic() < deadline:
            quiet_ok = len(out) >= expected_len and not expect_close
            sock.settimeout(IDLE_AFTER_EXPECTED_S if quiet_ok else 0.25)
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                if quiet_ok:
                    return info, out, False
                continue
            except ConnectionResetError:
                return info, out, True
            if not chunk:
                return info, out, True
            out += chunk
        return info, out, False


ALL = (
    [(c[0], c[1]) for c in CASES]
    + [(c[0], c[1]) for c in INFO_CASES]
    + [(c[0], c[1]) for c in NO_INFO_CASES]
)


@pytest.mark.parametrize(("data",), [(c[1],) for c in ALL], ids=[c[0] for c in ALL])
def test_same_bytes_as_nats_server(nats_server: ServerProc, data: bytes) -> None:
    # Our output is computed with the INFO this very connection got, so even the async
    # connect_info INFO (client_id included) must match byte for byte.
    probe_info = run(data, {"client_id": 0, "headers": True})
    info, theirs, their_closed = _exchange(
        nats_server.port, data, len(probe_info.output), probe_info.closed
    )
    ours = run(data, info)
    assert ours.output == theirs
    assert ours.closed == their_closed
