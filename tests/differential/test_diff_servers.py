"""The shared process helpers in tests/servers.py, exercised on the reference server."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.ops.process import listen_port_candidates
from tests.servers import ServerStartError, free_port, nats_server_proc, probe_ready

pytestmark = pytest.mark.differential


def test_start_restart_kill_stop(tmp_path: Path) -> None:
    with nats_server_proc(tmp_path, name="helper") as server:
        server.start()
        first_pid = server.pid
        assert server.running and probe_ready(server.port)
        assert server.url == f"nats://127.0.0.1:{server.port}"
        server.restart()
        assert server.pid != first_pid and probe_ready(server.port)
        assert server.store_dir.is_dir()
        server.kill()
        assert not server.running and not probe_ready(server.port)
        server.stop()  # stopping a stopped server is a no-op
        with pytest.raises(RuntimeError):
            _ = server.pid
    assert (tmp_path / "helper.log").exists()


def test_start_failure_reports_the_log_tail(tmp_path: Path) -> None:
    server = nats_server_proc(tmp_path, name="broken", extra_args=["--no-such-flag"])
    with pytest.raises(ServerStartError, match="no-such-flag"):
        server.start(ready_timeout_s=5.0)
    assert not server.running


def test_free_port_is_not_listening() -> None:
    assert not probe_ready(free_port(), timeout_s=0.2)


def test_free_ports_avoid_the_ephemeral_range_and_never_repeat() -> None:
    # an outgoing connection takes its source port from the ephemeral range, so a listener port
    # chosen there could be taken between the choice and the bind (a CI run lost a test so)
    candidates = listen_port_candidates()
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    if candidates:
        assert all(p in candidates for p in ports)
