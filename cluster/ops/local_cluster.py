"""Operate a local multi-node cluster: ``jetraft cluster up|status|down|run``.

Owns: launching each node of a planned cluster (see ``plan``) as a detached
``python -m cluster.cli server`` process with its own store dir, log and pid file under one
directory, waiting until every node's /healthz answers 200, recording the nodes in
``cluster.json``, stopping nodes by the pids in their pid files, the route credentials of the
cluster, and the command line of the tool.
Must never: signal a process unless /proc/<pid>/cmdline shows it is the jetraft node of that
directory, kill anything by name, silently pick other ports than the ones asked for, listen on
anything but 127.0.0.1, or import the server (nodes are separate processes, driven as a user
would drive them). Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TextIO

from cluster.ops.plan import (
    DEFAULT_BASE_PORT,
    DEFAULT_CLUSTER_NAME,
    NODE_COUNTS,
    ClusterError,
    ClusterInfo,
    NodeRecord,
    is_node_process,
    read_cluster_file,
    running_nodes,
    running_pid,
    taken_ports,
    write_cluster_file,
)
from cluster.ops.probes import HTTP_OK
from cluster.ops.process import (
    HOST,
    KILL_WAIT_TIMEOUT_S,
    PROJECT_ROOT,
    Spawned,
    spawn,
    stop_pids,
    stop_popens,
    wait_until,
)
from cluster.ops.status import cluster_status, format_status, health_reason, healthz

UP_TIMEOUT_S = 60.0
DOWN_TIMEOUT_S = 10.0
HEALTH_POLL_INTERVAL_S = 0.2
RUN_POLL_INTERVAL_S = 0.2
LOG_TAIL_BYTES = 3000

EXIT_OK = 0
EXIT_FAIL = 1


# ---------------------------------------------------------------------------------------------
# stopping nodes by pid


def stop_nodes(
    targets: Sequence[tuple[NodeRecord, int]], timeout_s: float, log: TextIO
) -> list[str]:
    """SIGTERM each node, wait up to ``timeout_s``, SIGKILL stragglers; remove the pid files.

    Returns the names of nodes that had to be killed.
    """
    store_dirs = {pid: rec.store_dir for rec, pid in targets}

    def owned(pid: int) -> bool:
        # a pid file outlives its process: signal only while the pid is still this node
        return pid in store_dirs and is_node_process(pid, store_dirs[pid])

    outcome = stop_pids(list(store_dirs), timeout_s, owned=owned, kill_wait_s=KILL_WAIT_TIMEOUT_S)
    killed = []
    for rec, pid in targets:
        if pid in outcome.killed:
            print(f"{rec.plan.name}: still running after {timeout_s:.0f}s, killed", file=log)
            killed.append(rec.plan.name)
        if pid not in outcome.survivors:
            rec.pid_path.unlink(missing_ok=True)
    if outcome.survivors:
        raise ClusterError(
            f"pids {outcome.survivors} survived SIGKILL for {KILL_WAIT_TIMEOUT_S:.0f}s"
        )
    return killed


# ---------------------------------------------------------------------------------------------
# up, down, run


ROUTE_AUTH_FILE = "route-auth.conf"
ROUTE_USER = "jetraft"
ROUTE_SECRET_BYTES = 32


def route_auth_config(directory: Path) -> Path:
    """The cluster's route credentials as a config file only the owner can read, made once per
    cluster directory: nodes accept only peers that present them (not on the command line,
    where `ps` would show them)."""
    path = directory / ROUTE_AUTH_FILE
    if not path.exists():
        directory.mkdir(parents=True, exist_ok=True)
        secret = secrets.token_urlsafe(ROUTE_SECRET_BYTES)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(
                "# route credentials of this local cluster (made by jetraft cluster up)\n"
                f'cluster {{ authorization {{ user: {ROUTE_USER}, password: "{secret}" }} }}\n'
            )
    return path


def node_argv(info: ClusterInfo, record: NodeRecord) -> list[str]:
    """``jetraft server`` for one node; every node routes to every cluster URL, its own too."""
    plan = record.plan
    return [
        sys.executable,
        "-m",
        "cluster.cli",
        "server",
        "-js",
        "-n",
        plan.name,
        "-a",
        HOST,
        "-p",
        str(plan.client_port),
        "-m",
        str(plan.monitor_port),
        "-sd",
        str(record.store_dir),
        "--cluster_name",
        info.name,
        "--cluster",
        plan.cluster_url,
        "--routes",
        info.route_urls,
        "-c",
        str(route_auth_config(info.directory)),
    ]


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    # a node's cwd is its own directory; `-m cluster.cli` must still import this checkout
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH")) if p)
    return env


@dataclass
class StartedNode:
    """A node this command launched; its log output of this run begins at the spawn's offset."""

    record: NodeRecord
    spawned: Spawned

    @property
    def name(self) -> str:
        return self.record.plan.name

    @property
    def popen(self) -> subprocess.Popen[bytes]:
        return self.spawned.popen

    def tail(self) -> str:
        return self.spawned.tail(LOG_TAIL_BYTES)


def _spawn(info: ClusterInfo, record: NodeRecord) -> StartedNode:
    record.store_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    spawned = spawn(
        node_argv(info, record),
        log_path=record.log_path,
        cwd=record.node_dir,
        env=_child_env(),
        banner=f"=== jetraft cluster: starting {record.plan.name} at {stamp}",
        new_session=True,  # a Ctrl-C in the terminal reaches us, not the nodes
    )
    record.pid = spawned.pid
    record.pid_path.write_text(f"{spawned.pid}\n")
    return StartedNode(record, spawned)


def _wait_healthy(
    started: Sequence[StartedNode], timeout_s: float, cancelled: Callable[[], bool]
) -> None:
    """Poll every node's /healthz until all answer 200; ClusterError on death or deadline."""
    pending = list(started)

    def all_healthy() -> bool:
        nonlocal pending
        for node in started:
            code = node.popen.poll()
            if code is not None:
                raise ClusterError(
                    f"{node.name} exited with code {code}; last lines of {node.record.log_path}:"
                    f"\n{node.tail()}"
                )
        if cancelled():
            raise ClusterError("interrupted while waiting for the nodes to become healthy")
        pending = [n for n in pending if healthz(n.record.plan) != HTTP_OK]
        return not pending

    if wait_until(all_healthy, timeout_s, HEALTH_POLL_INTERVAL_S):
        return
    tails = "\n".join(
        f"--- {n.name} (/healthz {health_reason(n.record.plan)}), "
        f"last lines of {n.record.log_path}:\n{n.tail()}"
        for n in pending
    )
    names = ", ".join(n.name for n in pending)
    raise ClusterError(f"{names} not healthy after {timeout_s:.0f}s\n{tails}")


def stop_started(started: Sequence[StartedNode], log: TextIO) -> None:
    """Stop the nodes this command launched and reap them; never raises."""
    outcome = stop_popens([n.popen for n in started], DOWN_TIMEOUT_S, KILL_WAIT_TIMEOUT_S)
    for node in started:
        if node.popen.pid in outcome.killed:
            print(f"{node.name}: still running after {DOWN_TIMEOUT_S:.0f}s, killed", file=log)
        if node.popen.pid not in outcome.survivors:
            node.record.pid_path.unlink(missing_ok=True)
    if outcome.survivors:
        print(f"jetraft cluster: pids {outcome.survivors} survived SIGKILL", file=log)


def start_cluster(
    directory: Path,
    count: int,
    base_port: int,
    name: str,
    timeout_s: float,
    cancelled: Callable[[], bool] = lambda: False,
    cluster_base: int | None = None,
    monitor_base: int | None = None,
) -> tuple[ClusterInfo, list[StartedNode]]:
    """Launch ``count`` nodes into ``directory`` and wait until all are healthy.

    On any failure the nodes launched so far are stopped before the error propagates.
    """
    directory.mkdir(parents=True, exist_ok=True)
    running = running_nodes(directory)
    if running:
        names = ", ".join(f"{rec.plan.name} (pid {pid})" for rec, pid in running)
        raise ClusterError(
            f"{directory} already has a running cluster: {names}; "
            f"stop it first with: jetraft cluster down --dir {directory}"
        )
    info = ClusterInfo.planned(directory, count, base_port, name, cluster_base, monitor_base)
    taken = taken_ports([rec.plan for rec in info.nodes])
    if taken:
        first = info.nodes[0].plan
        raise ClusterError(
            f"{'port' if len(taken) == 1 else 'ports'} {', '.join(taken)} "
            f"{'is' if len(taken) == 1 else 'are'} already in use; "
            "free them or choose other ports with --base-port, --cluster-port, --monitor-port "
            f"(this cluster needs {first.client_port}.., {first.cluster_port}.. and "
            f"{first.monitor_port}..)"
        )
    started: list[StartedNode] = []
    try:
        for record in info.nodes:
            started.append(_spawn(info, record))
            write_cluster_file(info)  # after each start: a crashed `up` still leaves a record
        _wait_healthy(started, timeout_s, cancelled)
    except BaseException:
        stop_started(started, sys.stderr)
        raise
    return info, started


def print_up(info: ClusterInfo, out: TextIO) -> None:
    print(f"cluster {info.name}: {len(info.nodes)} nodes up in {info.directory}", file=out)
    for rec in info.nodes:
        p = rec.plan
        print(
            f"  {p.name}  pid {rec.pid}  client {p.client_url}  cluster {p.cluster_url}  "
            f"monitor {p.monitor_url}  log {rec.log_path}",
            file=out,
        )
    print(info.client_urls, file=out, flush=True)


def cluster_down(directory: Path, timeout_s: float, out: TextIO) -> int:
    if not directory.is_dir():
        print(f"no cluster in {directory}: nothing to stop", file=out)
        return EXIT_OK
    targets = running_nodes(directory)
    if not targets:
        print(f"no running nodes in {directory}", file=out)
        return EXIT_OK
    stop_nodes(targets, timeout_s, out)
    print(f"stopped {', '.join(rec.plan.name for rec, _ in targets)}", file=out)
    return EXIT_OK


def cluster_status_command(directory: Path, as_json: bool, out: TextIO) -> int:
    status = cluster_status(read_cluster_file(directory))
    print(json.dumps(status, indent=2) if as_json else format_status(status), file=out)
    return EXIT_OK if status["healthy"] else EXIT_FAIL


class StopFlag:
    """Set by SIGINT/SIGTERM while a command that owns node processes is running."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def __call__(self) -> bool:
        return self.signum is not None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.signum = signum


@contextmanager
def stop_signals() -> Iterator[StopFlag]:
    """Turn SIGINT/SIGTERM into a flag so that the nodes get stopped instead of orphaned."""
    flag = StopFlag()
    previous = {sig: signal.signal(sig, flag._handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield flag
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _watch_foreground(started: Sequence[StartedNode], stop: StopFlag, out: TextIO) -> None:
    reported: set[str] = set()
    while not stop():
        for node in started:
            code = node.popen.poll()
            if code is not None and node.name not in reported:
                reported.add(node.name)
                print(f"{node.name} exited with code {code}; see {node.record.log_path}", file=out)
        time.sleep(RUN_POLL_INTERVAL_S)


def _start_from_args(
    args: argparse.Namespace, directory: Path, stop: Callable[[], bool]
) -> tuple[ClusterInfo, list[StartedNode]]:
    return start_cluster(
        directory,
        args.nodes,
        args.base_port,
        args.name,
        args.timeout,
        stop,
        cluster_base=args.cluster_port,
        monitor_base=args.monitor_port,
    )


def cluster_run(args: argparse.Namespace, directory: Path, out: TextIO) -> int:
    with stop_signals() as stop:
        info, started = _start_from_args(args, directory, stop)
        try:
            print_up(info, out)
            print("running in the foreground; Ctrl-C stops the cluster", file=out, flush=True)
            _watch_foreground(started, stop, out)
            print("stopping the cluster", file=out, flush=True)
        finally:
            stop_started(started, out)
    return EXIT_OK


def cluster_up(args: argparse.Namespace, directory: Path, out: TextIO) -> int:
    with stop_signals() as stop:
        info, _ = _start_from_args(args, directory, stop)
    print_up(info, out)
    return EXIT_OK


# ---------------------------------------------------------------------------------------------
# one node: stop, start, restart


def _node_record(info: ClusterInfo, wanted: str) -> NodeRecord:
    """The node named ``wanted`` (``jetraft-2``) or numbered (``2``)."""
    for number, rec in enumerate(info.nodes, start=1):
        if wanted in (rec.plan.name, str(number)):
            return rec
    names = ", ".join(rec.plan.name for rec in info.nodes)
    raise ClusterError(f"no node {wanted!r} in {info.directory} (its nodes: {names})")


def node_stop(directory: Path, wanted: str, timeout_s: float, out: TextIO) -> int:
    record = _node_record(read_cluster_file(directory), wanted)
    pid = running_pid(record)
    if pid is None:
        print(f"{record.plan.name} is not running", file=out)
        return EXIT_OK
    stop_nodes([(record, pid)], timeout_s, out)
    print(f"{record.plan.name} stopped (pid {pid})", file=out)
    return EXIT_OK


def node_start(directory: Path, wanted: str, timeout_s: float, out: TextIO) -> int:
    info = read_cluster_file(directory)
    record = _node_record(info, wanted)
    pid = running_pid(record)
    if pid is not None:
        print(f"{record.plan.name} is already running (pid {pid})", file=out)
        return EXIT_OK
    taken = taken_ports([record.plan])
    if taken:
        raise ClusterError(f"{record.plan.name} cannot start: port {', '.join(taken)} in use")
    started = _spawn(info, record)
    write_cluster_file(info)
    with stop_signals() as stop:
        try:
            _wait_healthy([started], timeout_s, stop)
        except BaseException:
            stop_started([started], sys.stderr)
            write_cluster_file(info)
            raise
    print(f"{record.plan.name} started (pid {started.popen.pid}), healthy", file=out)
    return EXIT_OK


def node_restart(directory: Path, wanted: str, args: argparse.Namespace, out: TextIO) -> int:
    node_stop(directory, wanted, args.stop_timeout, out)
    return node_start(directory, wanted, args.timeout, out)


# ---------------------------------------------------------------------------------------------
# command line


def _cluster_name(value: str) -> str:
    if not value or not all(c.isalnum() or c in "-_" for c in value):
        raise argparse.ArgumentTypeError(f"{value!r}: use letters, digits, '-' and '_'")
    return value


def _start_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodes", type=int, choices=NODE_COUNTS, default=NODE_COUNTS[0])
    p.add_argument("--dir", type=Path, required=True, help="directory for logs, stores, pids")
    p.add_argument(
        "--base-port",
        type=int,
        default=DEFAULT_BASE_PORT,
        help="client port of node 1 (node i: +i-1)",
    )
    p.add_argument(
        "--cluster-port", type=int, help="cluster port of node 1 (default: --base-port +2000)"
    )
    p.add_argument(
        "--monitor-port", type=int, help="monitor port of node 1 (default: --base-port +4000)"
    )
    p.add_argument("--name", type=_cluster_name, default=DEFAULT_CLUSTER_NAME, help="cluster name")
    p.add_argument(
        "--timeout", type=float, default=UP_TIMEOUT_S, help="seconds to wait for /healthz"
    )


def add_cluster_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``jetraft cluster up|status|down|run`` on the top-level subparsers."""
    p = sub.add_parser("cluster", help="operate a local multi-node cluster on 127.0.0.1")
    actions = p.add_subparsers(dest="cluster_command", required=True, metavar="ACTION")
    _start_arguments(actions.add_parser("up", help="start nodes in the background, wait healthy"))
    _start_arguments(actions.add_parser("run", help="up, stay in the foreground, down on Ctrl-C"))
    status = actions.add_parser("status", help="liveness, health, leaders and streams per node")
    status.add_argument("--dir", type=Path, required=True)
    status.add_argument("--json", action="store_true", help="machine-readable output")
    down = actions.add_parser("down", help="stop the nodes (SIGTERM, then SIGKILL)")
    down.add_argument("--dir", type=Path, required=True)
    down.add_argument("--timeout", type=float, default=DOWN_TIMEOUT_S, help="seconds to SIGKILL")
    for action, what in (
        ("stop", "stop one node (SIGTERM, then SIGKILL)"),
        ("start", "start one stopped node again and wait until it is healthy"),
        ("restart", "stop one node, start it again, wait until it is healthy"),
    ):
        one = actions.add_parser(action, help=what)
        one.add_argument("node", help="the node's name (jetraft-2) or number (2)")
        one.add_argument("--dir", type=Path, required=True)
        if action != "start":
            one.add_argument(
                "--stop-timeout", type=float, default=DOWN_TIMEOUT_S, help="seconds to SIGKILL"
            )
        if action != "stop":
            one.add_argument(
                "--timeout", type=float, default=UP_TIMEOUT_S, help="seconds to wait for /healthz"
            )


def run_cluster_command(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run a parsed ``jetraft cluster ...`` command; the process exit code."""
    out = out or sys.stdout
    directory = Path(args.dir).resolve()
    command = args.cluster_command
    try:
        if command == "status":
            return cluster_status_command(directory, args.json, out)
        if command == "down":
            return cluster_down(directory, args.timeout, out)
        if command == "up":
            return cluster_up(args, directory, out)
        if command == "stop":
            return node_stop(directory, args.node, args.stop_timeout, out)
        if command == "start":
            return node_start(directory, args.node, args.timeout, out)
        if command == "restart":
            return node_restart(directory, args.node, args, out)
        return cluster_run(args, directory, out)
    except (ClusterError, OSError) as exc:
        print(f"jetraft cluster {command}: {exc}", file=sys.stderr, flush=True)
        return EXIT_FAIL
