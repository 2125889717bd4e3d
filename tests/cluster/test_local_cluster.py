"""``jetraft cluster up|status|down|run`` (cluster/ops/): port planning, cluster.json, pid
safety, real runs.

The integration tests start real node processes on ports found free at run time, and stop every
one of them by pid, also when an assertion fails.
"""

from __future__ import annotations

import itertools
import json
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster import cli
from cluster.cli import main
from cluster.ops import local_cluster
from cluster.ops.local_cluster import ROUTE_AUTH_FILE, node_argv, stop_nodes
from cluster.ops.plan import (
    CLUSTER_FILE,
    CLUSTER_PORT_OFFSET,
    MAX_PORT,
    MONITOR_PORT_OFFSET,
    PID_FILE,
    ClusterError,
    ClusterInfo,
    NodeRecord,
    plan_nodes,
    read_cluster_file,
    running_nodes,
    write_cluster_file,
)
from cluster.ops.process import HOST, PROJECT_ROOT, pid_alive
from cluster.ops.status import format_status, unavailable_streams

BASE_SEARCH_RANGE = (20000, 40000)
BASE_SEARCH_ATTEMPTS = 200
UP_TIMEOUT_S = 60.0
CLI_TIMEOUT_S = UP_TIMEOUT_S + 30.0
DOWN_TIMEOUT_S = 10.0
POLL_INTERVAL_S = 0.05
RUN_READY_TIMEOUT_S = UP_TIMEOUT_S + 10.0
RUN_EXIT_TIMEOUT_S = 30.0
FOREIGN_SLEEP_S = 60


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def free_base_port(count: int) -> int:
    """A base port whose client, cluster and monitor ports for ``count`` nodes are all free."""
    rng = random.Random()
    for _ in range(BASE_SEARCH_ATTEMPTS):
        base = rng.randrange(*BASE_SEARCH_RANGE)
        if all(_bindable(port) for p in plan_nodes(count, base) for port in p.ports().values()):
            return base
    raise RuntimeError(f"no free base port for {count} nodes in {BASE_SEARCH_RANGE}")


def _cli(*argv: str) -> int:
    return main(["cluster", *argv])


def _cli_argv(*argv: str) -> list[str]:
    """``jetraft cluster ...`` as a separate process, the way a user runs it."""
    return [sys.executable, "-m", "cluster.cli", "cluster", *argv, "--timeout", str(UP_TIMEOUT_S)]


def _stop_leftovers(directory: Path) -> None:
    """Whatever a failed test left running in ``directory``, stopped by pid."""
    if directory.is_dir():
        stop_nodes(running_nodes(directory), DOWN_TIMEOUT_S, sys.stderr)


# --- port planning and cluster.json -----------------------------------------------------------


def test_default_ports_are_the_nats_server_ones() -> None:
    nodes = plan_nodes(3, 4222)
    assert [n.name for n in nodes] == ["jetraft-1", "jetraft-2", "jetraft-3"]
    assert [(n.client_port, n.cluster_port, n.monitor_port) for n in nodes] == [
        (4222, 6222, 8222),
        (4223, 6223, 8223),
        (4224, 6224, 8224),
    ]
    assert nodes[0].client_url == "nats://127.0.0.1:4222"
    assert nodes[0].cluster_url == "nats://127.0.0.1:6222"
    assert nodes[0].monitor_url == "http://127.0.0.1:8222"


@settings(max_examples=100, deadline=None)
@given(
    count=st.sampled_from([3, 5]),
    base=st.integers(1, MAX_PORT - MONITOR_PORT_OFFSET - 4),
    name=st.sampled_from(["jetraft", "js", "a_b-c"]),
)
def test_planned_ports_are_distinct_and_follow_the_offsets(
    count: int, base: int, name: str
) -> None:
    nodes = plan_nodes(count, base, name)
    ports = [port for n in nodes for port in n.ports().values()]
    assert len(set(ports)) == len(ports) == 3 * count
    for i, n in enumerate(nodes, start=1):
        assert n.index == i
        assert n.name == f"{name}-{i}"
        assert n.client_port == base + i - 1
        assert n.cluster_port == n.client_port + CLUSTER_PORT_OFFSET
        assert n.monitor_port == n.client_port + MONITOR_PORT_OFFSET
        assert max(n.ports().values()) <= MAX_PORT


@pytest.mark.parametrize("base", [0, -1, MAX_PORT - MONITOR_PORT_OFFSET - 1])
def test_plan_refuses_ports_out_of_range(base: int) -> None:
    with pytest.raises(ClusterError, match="does not fit"):
        plan_nodes(3, base)


@given(
    count=st.sampled_from([3, 5]),
    bases=st.lists(st.integers(1, MAX_PORT - 4), min_size=3, max_size=3),
)
def test_chosen_port_bases_are_used_or_refused_when_they_overlap(
    count: int, bases: list[int]
) -> None:
    client, cluster, monitor = bases
    starts = sorted(bases)
    overlap = any(high < low + count for low, high in itertools.pairwise(starts))
    if overlap:
        with pytest.raises(ClusterError, match="overlap"):
            plan_nodes(count, client, "c", cluster, monitor)
        return
    nodes = plan_nodes(count, client, "c", cluster, monitor)
    assert [n.cluster_port for n in nodes] == list(range(cluster, cluster + count))
    assert [n.monitor_port for n in nodes] == list(range(monitor, monitor + count))
    ports = [port for n in nodes for port in n.ports().values()]
    assert len(set(ports)) == len(ports)


def test_cluster_file_round_trip(tmp_path: Path) -> None:
    info = ClusterInfo.planned(tmp_path, 5, 30000, "orders")
    for i, rec in enumerate(info.nodes):
        rec.pid = 1000 + i
    info.nodes[4].pid = None  # a node that never started
    path = write_cluster_file(info)
    assert path == tmp_path / CLUSTER_FILE
    data = json.loads(path.read_text())
    assert data["cluster_name"] == "orders"
    assert data["client_urls"] == ",".join(f"nats://127.0.0.1:{30000 + i}" for i in range(5))
    assert data["nodes"][1]["monitor_url"] == "http://127.0.0.1:34001"
    assert data["nodes"][1]["store_dir"] == str(tmp_path / "orders-2" / "store")
    assert read_cluster_file(tmp_path) == info


def test_reading_a_missing_or_broken_cluster_file_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="does not exist"):
        read_cluster_file(tmp_path)
    (tmp_path / CLUSTER_FILE).write_text('{"nodes": [{"name": "x"}]}')
    with pytest.raises(ClusterError, match="malformed"):
        read_cluster_file(tmp_path)


def test_every_node_routes_to_every_cluster_url(tmp_path: Path) -> None:
    info = ClusterInfo.planned(tmp_path, 3, 30000, "jetraft")
    argv = node_argv(info, info.nodes[1])
    assert argv[1:5] == ["-m", "cluster.cli", "server", "-js"]
    flags = dict(zip(argv[5::2], argv[6::2], strict=True))
    assert flags == {
        "-n": "jetraft-2",
        "-a": "127.0.0.1",
        "-p": "30001",
        "-m": "34001",
        "-sd": str(tmp_path / "jetraft-2" / "store"),
        "--cluster_name": "jetraft",
        "--cluster": "nats://127.0.0.1:32001",
        "--routes": "nats://127.0.0.1:32000,nats://127.0.0.1:32001,nats://127.0.0.1:32002",
        "-c": str(tmp_path / ROUTE_AUTH_FILE),
    }


def test_the_local_cluster_has_route_credentials_only_its_owner_reads(tmp_path: Path) -> None:
    info = ClusterInfo.planned(tmp_path, 3, 30000, "jetraft")
    conf = Path(node_argv(info, info.nodes[0])[-1])
    assert conf.stat().st_mode & 0o777 == 0o600
    text = conf.read_text()
    assert "authorization" in text and "password" in text
    # every node gets the same file; a second `up` in the same directory keeps the secret
    assert node_argv(info, info.nodes[2])[-1] == str(conf) and conf.read_text() == text
    opts = cli.server_options(node_argv(info, info.nodes[0])[4:])
    assert opts.route_auth.enabled and len(opts.route_auth.password) >= 32


def test_status_table_tolerates_missing_keys() -> None:
    node = {
        "name": "jetraft-1",
        "pid": 42,
        "alive": True,
        "healthz": 503,
        "connections": 2,
        "meta_leader": None,
        "client_url": "nats://127.0.0.1:4222",
        "streams": [
            {
                "name": "ORDERS",
                "leader": "jetraft-1",
                "is_leader": True,
                "replicas": ["jetraft-1", "jetraft-2"],
                "messages": 7,
                "applied_index": 9,
                "lag": 0,
                "digest": "0123456789abcdef0123",
                "direct_gets_served": None,
            }
        ],
    }
    text = format_status(
        {"cluster_name": "jetraft", "dir": "/d", "client_urls": "nats://x:1", "nodes": [node]}
    )
    assert "503" in text
    assert "0123456789ab" in text and "0123456789abc" not in text  # short digest
    assert "jetraft-1,jetraft-2" in text


def test_a_stream_whose_replicas_are_all_down_is_named_unavailable() -> None:
    up = {
        "name": "jetraft-1",
        "assignments": {"ORDERS": ["jetraft-1", "jetraft-2"], "R1": ["jetraft-3"]},
        "streams": [{"name": "ORDERS"}],
    }
    down = {"name": "jetraft-3", "assignments": {}, "streams": []}
    assert unavailable_streams([up, down]) == [{"name": "R1", "replicas": ["jetraft-3"]}]
    text = format_status(
        {
            "cluster_name": "c",
            "dir": "/d",
            "client_urls": "nats://x:1",
            "nodes": [],
            "problems": ["stream R1 is unavailable: none of its replicas (jetraft-3) is running"],
        }
    )
    assert text.splitlines()[-2:] == [
        "not healthy:",
        "  stream R1 is unavailable: none of its replicas (jetraft-3) is running",
    ]


# --- safety: ports, pids ------------------------------------------------------------------------


def test_up_refuses_a_taken_port_and_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = free_base_port(3)
    taken = base + CLUSTER_PORT_OFFSET + 1  # cluster port of jetraft-2
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, taken))
        sock.listen()
        rc = _cli("up", "--nodes", "3", "--dir", str(tmp_path), "--base-port", str(base))
    assert rc != 0
    err = capsys.readouterr().err
    assert f"port {taken} (cluster port of jetraft-2) is already in use" in err
    assert list(tmp_path.glob(f"*/{PID_FILE}")) == []
    assert not (tmp_path / CLUSTER_FILE).exists()


def test_down_never_signals_a_process_that_is_not_the_node(tmp_path: Path) -> None:
    foreign = subprocess.Popen(
        [sys.executable, "-c", f"import time; time.sleep({FOREIGN_SLEEP_S})"]
    )
    try:
        (tmp_path / "jetraft-1").mkdir()
        pid_file = tmp_path / "jetraft-1" / PID_FILE
        pid_file.write_text(f"{foreign.pid}\n")
        assert _cli("down", "--dir", str(tmp_path)) == 0
        assert foreign.poll() is None, "down signalled a process that is not a jetraft node"
        assert not pid_file.exists(), "a pid file of another process is stale and removed"
    finally:
        foreign.kill()
        foreign.wait()


def test_stale_pid_files_are_cleaned(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (tmp_path / "jetraft-2").mkdir()
    pid_file = tmp_path / "jetraft-2" / PID_FILE
    pid_file.write_text(f"{gone.pid}\n")
    assert running_nodes(tmp_path) == []
    assert not pid_file.exists()


def test_up_reports_a_node_that_dies_and_stops_the_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def dying_node(info: ClusterInfo, record: NodeRecord) -> list[str]:
        if record.plan.index == 2:
            return [sys.executable, "-c", "import sys; print('boom: bad store'); sys.exit(3)"]
        return real_argv(info, record)

    real_argv = local_cluster.node_argv
    monkeypatch.setattr(local_cluster, "node_argv", dying_node)
    base = free_base_port(3)
    rc = _cli("up", "--dir", str(tmp_path), "--base-port", str(base), "--timeout", "30")
    assert rc != 0
    err = capsys.readouterr().err
    assert "jetraft-2 exited with code 3" in err
    assert "boom: bad store" in err
    pids = _pids(tmp_path)
    assert len(pids) == 3 and not any(pid_alive(p) for p in pids)
    assert list(tmp_path.glob(f"*/{PID_FILE}")) == []


def test_up_gives_up_at_the_deadline_and_stops_the_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = free_base_port(3)
    rc = _cli("up", "--dir", str(tmp_path), "--base-port", str(base), "--timeout", "0")
    assert rc != 0
    assert "not healthy after 0s" in capsys.readouterr().err
    pids = _pids(tmp_path)
    assert len(pids) == 3 and not any(pid_alive(p) for p in pids)
    assert list(tmp_path.glob(f"*/{PID_FILE}")) == []


# --- real clusters ------------------------------------------------------------------------------


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "cluster"
    yield directory
    _stop_leftovers(directory)


def _pids(directory: Path) -> list[int]:
    return [rec.pid for rec in read_cluster_file(directory).nodes if rec.pid is not None]


@pytest.mark.integration
def test_up_status_down_three_nodes(cluster_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = free_base_port(3)
    up = subprocess.run(
        _cli_argv("up", "--nodes", "3", "--dir", str(cluster_dir), "--base-port", str(base)),
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
    )
    assert up.returncode == 0, up.stdout + up.stderr
    urls = ",".join(f"nats://127.0.0.1:{base + i}" for i in range(3))
    assert up.stdout.splitlines()[-1] == urls
    pids = _pids(cluster_dir)
    assert len(pids) == 3 and all(pid_alive(p) for p in pids)

    assert _cli("status", "--dir", str(cluster_dir), "--json") == 0
    status = json.loads(capsys.readouterr().out)
    assert [n["name"] for n in status["nodes"]] == ["jetraft-1", "jetraft-2", "jetraft-3"]
    assert [n["alive"] for n in status["nodes"]] == [True] * 3
    assert [n["healthz"] for n in status["nodes"]] == [200] * 3
    assert sorted(n["pid"] for n in status["nodes"]) == sorted(pids)
    assert status["healthy"] is True

    assert _cli("up", "--dir", str(cluster_dir), "--base-port", str(base)) != 0
    assert "already has a running cluster" in capsys.readouterr().err

    # one node at a time: stop it (the others carry on), start it again, restart it
    assert _cli("stop", "2", "--dir", str(cluster_dir)) == 0
    assert "jetraft-2 stopped" in capsys.readouterr().out
    assert not pid_alive(pids[1])
    assert _cli("status", "--dir", str(cluster_dir), "--json") != 0
    status = json.loads(capsys.readouterr().out)
    assert [n["alive"] for n in status["nodes"]] == [True, False, True]
    # (the others may report a meta election for a moment, should jetraft-2 have led it)
    assert any(p.startswith("jetraft-2 is not running") for p in status["problems"])
    assert _cli("stop", "jetraft-2", "--dir", str(cluster_dir)) == 0
    assert "is not running" in capsys.readouterr().out
    assert _cli("start", "jetraft-2", "--dir", str(cluster_dir)) == 0
    assert "healthy" in capsys.readouterr().out
    assert _cli("restart", "2", "--dir", str(cluster_dir)) == 0
    pids = _pids(cluster_dir)
    assert len(pids) == 3 and all(pid_alive(p) for p in pids)
    assert _cli("stop", "9", "--dir", str(cluster_dir)) != 0
    assert "no node '9'" in capsys.readouterr().err

    assert _cli("down", "--dir", str(cluster_dir)) == 0
    assert not any(pid_alive(p) for p in pids)
    assert list(cluster_dir.glob(f"*/{PID_FILE}")) == []
    assert _cli("status", "--dir", str(cluster_dir)) == 1


def _wait_for_text(path: Path, text: str, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(POLL_INTERVAL_S)
    raise AssertionError(f"{text!r} not seen; output:\n{path.read_text(errors='replace')}")


@pytest.mark.integration
def test_run_stays_in_the_foreground_and_stops_the_nodes_on_sigint(
    cluster_dir: Path, tmp_path: Path
) -> None:
    base = free_base_port(3)
    out_path = tmp_path / "run.out"
    with open(out_path, "wb") as out:
        run = subprocess.Popen(
            _cli_argv("run", "--nodes", "3", "--dir", str(cluster_dir), "--base-port", str(base)),
            cwd=PROJECT_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_for_text(out_path, "running in the foreground", run, RUN_READY_TIMEOUT_S)
        pids = _pids(cluster_dir)
        assert len(pids) == 3 and all(pid_alive(p) for p in pids)
        run.send_signal(signal.SIGINT)
        assert run.wait(timeout=RUN_EXIT_TIMEOUT_S) == 0, out_path.read_text()
        assert not any(pid_alive(p) for p in pids)
        assert list(cluster_dir.glob(f"*/{PID_FILE}")) == []
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
