"""Operate a local multi-node cluster: ``jetraft cluster up|status|down|run``.

Owns: planning the client/cluster/monitor ports of N nodes on 127.0.0.1, launching each node as a
detached ``python -m cluster.cli server`` process with its own store dir, log and pid file under
one directory, recording the nodes in ``cluster.json``, reading /healthz, /varz and /jsz for
``status``, and stopping nodes by the pids in their pid files.
Must never: signal a process unless /proc/<pid>/cmdline shows it is the jetraft node of that
directory, kill anything by name, silently pick other ports than the ones asked for, listen on
anything but 127.0.0.1, or import the server (nodes are separate processes, driven as a user
would drive them). Standard library only.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

HOST = "127.0.0.1"
DEFAULT_BASE_PORT = 4222  # client 4222, cluster 6222, monitor 8222, as nats-server
CLUSTER_PORT_OFFSET = 2000
MONITOR_PORT_OFFSET = 4000
DEFAULT_CLUSTER_NAME = "jetraft"
NODE_COUNTS = (3, 5)
MAX_PORT = 65535

UP_TIMEOUT_S = 60.0
DOWN_TIMEOUT_S = 10.0
KILL_WAIT_TIMEOUT_S = 5.0
HEALTH_POLL_INTERVAL_S = 0.2
STOP_POLL_INTERVAL_S = 0.05
RUN_POLL_INTERVAL_S = 0.2
HTTP_TIMEOUT_S = 2.0
LOG_TAIL_BYTES = 3000
DIGEST_SHORT_CHARS = 12
HTTP_OK = 200

CLUSTER_FILE = "cluster.json"
PID_FILE = "server.pid"
LOG_FILE = "server.log"
STORE_SUBDIR = "store"
CLUSTER_FILE_VERSION = 1

PROJECT_ROOT = Path(__file__).resolve().parents[1]

EXIT_OK = 0
EXIT_FAIL = 1

# monitoring is always on 127.0.0.1: an http_proxy in the environment must not capture it
_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ClusterError(Exception):
    """A user-facing failure of a cluster command; the message says what and why."""


# ---------------------------------------------------------------------------------------------
# port planning and the cluster file


@dataclass(frozen=True)
class NodePlan:
    """One node's name and ports; node i (1-based) gets base+i-1 (+2000 cluster, +4000 http)."""

    index: int
    name: str
    client_port: int
    cluster_port: int
    monitor_port: int

    @property
    def client_url(self) -> str:
        return f"nats://{HOST}:{self.client_port}"

    @property
    def cluster_url(self) -> str:
        return f"nats://{HOST}:{self.cluster_port}"

    @property
    def monitor_url(self) -> str:
        return f"http://{HOST}:{self.monitor_port}"

    def ports(self) -> dict[str, int]:
        return {
            "client": self.client_port,
            "cluster": self.cluster_port,
            "monitor": self.monitor_port,
        }


def plan_nodes(count: int, base_port: int, name: str = DEFAULT_CLUSTER_NAME) -> list[NodePlan]:
    """The nodes of a ``count``-node cluster on ``base_port``; ClusterError when out of range."""
    if count < 1:
        raise ClusterError(f"a cluster needs at least one node, not {count}")
    highest = base_port + MONITOR_PORT_OFFSET + count - 1
    if base_port < 1 or highest > MAX_PORT:
        raise ClusterError(
            f"base port {base_port} does not fit {count} nodes: ports run from {base_port} "
            f"to {highest}, the limit is 1..{MAX_PORT}"
        )
    return [
        NodePlan(
            index=i,
            name=f"{name}-{i}",
            client_port=base_port + i - 1,
            cluster_port=base_port + CLUSTER_PORT_OFFSET + i - 1,
            monitor_port=base_port + MONITOR_PORT_OFFSET + i - 1,
        )
        for i in range(1, count + 1)
    ]


@dataclass
class NodeRecord:
    """A planned node placed in its directory, with the pid it was started as (if any)."""

    plan: NodePlan
    node_dir: Path
    pid: int | None = None

    @property
    def store_dir(self) -> Path:
        return self.node_dir / STORE_SUBDIR

    @property
    def log_path(self) -> Path:
        return self.node_dir / LOG_FILE

    @property
    def pid_path(self) -> Path:
        return self.node_dir / PID_FILE

    def to_json(self) -> dict[str, Any]:
        p = self.plan
        return {
            "name": p.name,
            "index": p.index,
            "pid": self.pid,
            "client_port": p.client_port,
            "cluster_port": p.cluster_port,
            "monitor_port": p.monitor_port,
            "client_url": p.client_url,
            "cluster_url": p.cluster_url,
            "monitor_url": p.monitor_url,
            "dir": str(self.node_dir),
            "store_dir": str(self.store_dir),
            "log": str(self.log_path),
            "pid_file": str(self.pid_path),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], directory: Path) -> NodeRecord:
        plan = NodePlan(
            index=int(data["index"]),
            name=str(data["name"]),
            client_port=int(data["client_port"]),
            cluster_port=int(data["cluster_port"]),
            monitor_port=int(data["monitor_port"]),
        )
        pid = data.get("pid")
        node_dir = Path(data.get("dir") or directory / plan.name)
        return cls(plan=plan, node_dir=node_dir, pid=int(pid) if pid is not None else None)


@dataclass
class ClusterInfo:
    """Everything ``cluster.json`` records about a local cluster."""

    name: str
    base_port: int
    directory: Path
    nodes: list[NodeRecord] = field(default_factory=list)

    @classmethod
    def planned(cls, directory: Path, count: int, base_port: int, name: str) -> ClusterInfo:
        nodes = [NodeRecord(p, directory / p.name) for p in plan_nodes(count, base_port, name)]
        return cls(name=name, base_port=base_port, directory=directory, nodes=nodes)

    @property
    def client_urls(self) -> str:
        """The client URLs comma-joined, the form ``nats -s`` and nats-py's servers accept."""
        return ",".join(n.plan.client_url for n in self.nodes)

    @property
    def route_urls(self) -> str:
        return ",".join(n.plan.cluster_url for n in self.nodes)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": CLUSTER_FILE_VERSION,
            "cluster_name": self.name,
            "host": HOST,
            "base_port": self.base_port,
            "dir": str(self.directory),
            "client_urls": self.client_urls,
            "nodes": [n.to_json() for n in self.nodes],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], directory: Path) -> ClusterInfo:
        nodes = [NodeRecord.from_json(n, directory) for n in data.get("nodes", [])]
        return cls(
            name=str(data.get("cluster_name", DEFAULT_CLUSTER_NAME)),
            base_port=int(data.get("base_port", DEFAULT_BASE_PORT)),
            directory=directory,
            nodes=nodes,
        )


def write_cluster_file(info: ClusterInfo) -> Path:
    """Write ``cluster.json`` atomically (a reader never sees half a file)."""
    path = info.directory / CLUSTER_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(info.to_json(), indent=2) + "\n")
    os.replace(tmp, path)
    return path


def read_cluster_file(directory: Path) -> ClusterInfo:
    path = directory / CLUSTER_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise ClusterError(f"no cluster in {directory}: {path} does not exist") from exc
    except (OSError, ValueError) as exc:
        raise ClusterError(f"cannot read {path}: {exc}") from exc
    try:
        return ClusterInfo.from_json(data, directory)
    except (KeyError, TypeError, ValueError) as exc:
        raise ClusterError(f"{path} is malformed: {exc!r}") from exc


# ---------------------------------------------------------------------------------------------
# ports, processes and pid files


def port_is_free(port: int, host: str = HOST) -> bool:
    """True when ``port`` can be bound right now (SO_REUSEADDR, as the server's listeners)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def taken_ports(plans: Sequence[NodePlan]) -> list[str]:
    """A description of every planned port that is in use, e.g. ``6222 (cluster port of ...)``."""
    return [
        f"{port} ({role} port of {plan.name})"
        for plan in plans
        for role, port in plan.ports().items()
        if not port_is_free(port)
    ]


def _proc_cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (a zombie has already stopped serving)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc entry to read: trust kill(0)
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def is_node_process(pid: int, store_dir: Path) -> bool:
    """True when ``pid`` runs ``jetraft server`` on ``store_dir``: the pid was not reused."""
    argv = _proc_cmdline(pid)
    if "server" not in argv or str(store_dir) not in argv:
        return False
    return "cluster.cli" in argv or any(Path(arg).name == "jetraft" for arg in argv[:2])


def read_pid(pid_path: Path) -> int | None:
    try:
        text = pid_path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def running_pid(record: NodeRecord) -> int | None:
    """The pid in the node's pid file when that process is alive and is this node, else None."""
    pid = read_pid(record.pid_path)
    if pid is None or not pid_alive(pid) or not is_node_process(pid, record.store_dir):
        return None
    return pid


def _records_with_pid_files(directory: Path) -> list[NodeRecord]:
    """Every node directory under ``directory`` that has a pid file, named by its directory."""
    records = []
    for pid_path in sorted(directory.glob(f"*/{PID_FILE}")):
        plan = NodePlan(0, pid_path.parent.name, 0, 0, 0)
        records.append(NodeRecord(plan, pid_path.parent, read_pid(pid_path)))
    return records


def running_nodes(directory: Path) -> list[tuple[NodeRecord, int]]:
    """Nodes of ``directory`` still running; pid files of nodes that are gone are removed."""
    running = []
    for record in _records_with_pid_files(directory):
        pid = running_pid(record)
        if pid is None:
            record.pid_path.unlink(missing_ok=True)
        else:
            running.append((record, pid))
    return running


def _signal_node(pid: int, store_dir: Path, sig: signal.Signals) -> bool:
    if not is_node_process(pid, store_dir):
        return False
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def _wait_gone(pids: Sequence[int], timeout_s: float) -> list[int]:
    """Poll until every pid is gone or the deadline passes; the pids still alive."""
    deadline = time.monotonic() + timeout_s
    alive = [p for p in pids if pid_alive(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(STOP_POLL_INTERVAL_S)
        alive = [p for p in alive if pid_alive(p)]
    return alive


def stop_nodes(
    targets: Sequence[tuple[NodeRecord, int]], timeout_s: float, log: TextIO
) -> list[str]:
    """SIGTERM each node, wait up to ``timeout_s``, SIGKILL stragglers; remove the pid files.

    Returns the names of nodes that had to be killed.
    """
    signalled = [
        (rec, pid) for rec, pid in targets if _signal_node(pid, rec.store_dir, signal.SIGTERM)
    ]
    stragglers = set(_wait_gone([pid for _, pid in signalled], timeout_s))
    killed = []
    for rec, pid in signalled:
        if pid in stragglers and _signal_node(pid, rec.store_dir, signal.SIGKILL):
            print(f"{rec.plan.name}: still running after {timeout_s:.0f}s, killed", file=log)
            killed.append(rec.plan.name)
    still = _wait_gone([pid for _, pid in signalled if pid in stragglers], KILL_WAIT_TIMEOUT_S)
    for rec, pid in targets:
        if pid not in still:
            rec.pid_path.unlink(missing_ok=True)
    if still:
        raise ClusterError(f"pids {still} survived SIGKILL for {KILL_WAIT_TIMEOUT_S:.0f}s")
    return killed


def log_tail(path: Path, offset: int = 0, tail_bytes: int = LOG_TAIL_BYTES) -> str:
    """The last ``tail_bytes`` of ``path`` written after ``offset`` (this run, not earlier ones)."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(offset, size - tail_bytes))
            data = f.read()
    except OSError:
        return "<no log>"
    return data.decode("utf-8", "replace").rstrip() or "<empty log>"


# ---------------------------------------------------------------------------------------------
# monitoring endpoints


def http_get_json(url: str, timeout_s: float = HTTP_TIMEOUT_S) -> tuple[int | None, Any]:
    """(status, parsed JSON body or None); status None when nothing answered."""
    try:
        with _HTTP.open(url, timeout=timeout_s) as resp:
            status, body = int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    except (OSError, http.client.HTTPException, ValueError):
        return None, None
    try:
        return status, json.loads(body)
    except ValueError:
        return status, None


def healthz(plan: NodePlan) -> int | None:
    return http_get_json(f"{plan.monitor_url}/healthz")[0]


def health_reason(plan: NodePlan) -> str:
    """/healthz's status and, when unhealthy, the reason the node gives (e.g. no meta leader)."""
    code, body = http_get_json(f"{plan.monitor_url}/healthz")
    reason = _as_dict(body).get("error")
    return _health_cell(code) + (f": {reason}" if reason and code != HTTP_OK else "")


def _as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _stream_row(stream: dict[str, Any]) -> dict[str, Any]:
    state = _as_dict(stream.get("state"))
    replicas = stream.get("replicas")
    return {
        "name": stream.get("name"),
        "leader": stream.get("leader"),
        "is_leader": bool(stream.get("is_leader", False)),
        "replicas": [str(r) for r in replicas] if isinstance(replicas, list) else [],
        "lag": stream.get("lag"),
        "applied_index": stream.get("applied_index"),
        "commit_index": stream.get("commit_index"),
        "digest": stream.get("digest"),
        "direct_gets_served": stream.get("direct_gets_served"),
        "messages": state.get("messages"),
        "last_seq": state.get("last_seq"),
    }


def node_status(record: NodeRecord) -> dict[str, Any]:
    """What one node reports: liveness by pid file, /healthz, /varz connections and /jsz."""
    plan = record.plan
    pid = running_pid(record)
    row: dict[str, Any] = {
        "name": plan.name,
        "pid": pid,
        "alive": pid is not None,
        "healthz": None,
        "healthy": False,
        "connections": None,
        "meta_leader": None,
        "peers": [],
        "streams": [],
        "client_url": plan.client_url,
        "monitor_url": plan.monitor_url,
    }
    if pid is None:
        return row  # whatever answers on its ports now is not this node
    row["healthz"] = healthz(plan)
    row["healthy"] = row["healthz"] == HTTP_OK
    varz = _as_dict(http_get_json(f"{plan.monitor_url}/varz")[1])
    row["connections"] = varz.get("connections")
    jsz = _as_dict(http_get_json(f"{plan.monitor_url}/jsz")[1])
    meta = _as_dict(jsz.get("cluster"))
    row["meta_leader"] = meta.get("meta_leader")
    peers = meta.get("peers")
    row["peers"] = [str(p) for p in peers] if isinstance(peers, list) else []
    streams = jsz.get("streams")
    if isinstance(streams, list):
        row["streams"] = [_stream_row(s) for s in streams if isinstance(s, dict)]
    return row


def cluster_status(info: ClusterInfo) -> dict[str, Any]:
    nodes = [node_status(rec) for rec in info.nodes]
    return {
        "cluster_name": info.name,
        "dir": str(info.directory),
        "client_urls": info.client_urls,
        "healthy": bool(nodes) and all(n["healthy"] for n in nodes),
        "nodes": nodes,
    }


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ",".join(str(v) for v in value) or "-"
    return str(value)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [list(headers), *[[_cell(v) for v in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells
    )


def _health_cell(code: int | None) -> str:
    if code is None:
        return "-"
    return "ok" if code == HTTP_OK else str(code)


def format_status(status: dict[str, Any]) -> str:
    node_rows = [
        [
            n["name"],
            n["pid"],
            n["alive"],
            _health_cell(n["healthz"]),
            n["connections"],
            n["meta_leader"],
            n["client_url"],
        ]
        for n in status["nodes"]
    ]
    out = [
        f"cluster {status['cluster_name']} in {status['dir']}",
        format_table(
            ["NODE", "PID", "ALIVE", "HEALTH", "CONNS", "META LEADER", "CLIENT URL"], node_rows
        ),
    ]
    stream_rows = [
        [
            s["name"],
            n["name"],
            "leader" if s["is_leader"] else "replica",
            s["leader"],
            s["replicas"],
            s["messages"],
            s["applied_index"],
            s["lag"],
            (s["digest"] or "")[:DIGEST_SHORT_CHARS] or None,
            s["direct_gets_served"],
        ]
        for n in status["nodes"]
        for s in n["streams"]
    ]
    if stream_rows:
        headers = [
            "STREAM",
            "NODE",
            "ROLE",
            "LEADER",
            "REPLICAS",
            "MSGS",
            "APPLIED",
            "LAG",
            "DIGEST",
            "DIRECT GETS",
        ]
        out += [
            "",
            format_table(headers, sorted(stream_rows, key=lambda r: (str(r[0]), str(r[1])))),
        ]
    out += ["", f"client URLs: {status['client_urls']}"]
    return "\n".join(out)


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
    """A node this command launched; ``log_offset`` is where this run's log output begins."""

    record: NodeRecord
    popen: subprocess.Popen[bytes]
    log_offset: int

    @property
    def name(self) -> str:
        return self.record.plan.name

    def tail(self) -> str:
        return log_tail(self.record.log_path, self.log_offset)


def _spawn(info: ClusterInfo, record: NodeRecord) -> StartedNode:
    record.store_dir.mkdir(parents=True, exist_ok=True)
    argv = node_argv(info, record)
    with open(record.log_path, "ab") as log:
        offset = log.tell()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        log.write(f"=== jetraft cluster: starting {record.plan.name} at {stamp}\n".encode())
        log.flush()
        popen = subprocess.Popen(
            argv,
            cwd=record.node_dir,
            env=_child_env(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C in the terminal reaches us, not the nodes
        )
    record.pid = popen.pid
    record.pid_path.write_text(f"{popen.pid}\n")
    return StartedNode(record, popen, offset)


def _wait_healthy(
    started: Sequence[StartedNode], timeout_s: float, cancelled: Callable[[], bool]
) -> None:
    """Poll every node's /healthz until all answer 200; ClusterError on death or deadline."""
    deadline = time.monotonic() + timeout_s
    pending = list(started)
    while True:
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
        if not pending:
            return
        if time.monotonic() >= deadline:
            tails = "\n".join(
                f"--- {n.name} (/healthz {health_reason(n.record.plan)}), "
                f"last lines of {n.record.log_path}:\n{n.tail()}"
                for n in pending
            )
            names = ", ".join(n.name for n in pending)
            raise ClusterError(f"{names} not healthy after {timeout_s:.0f}s\n{tails}")
        time.sleep(HEALTH_POLL_INTERVAL_S)


def stop_started(started: Sequence[StartedNode], log: TextIO) -> None:
    """Stop the nodes this command launched and reap them; never raises."""
    live = [(n.record, n.popen.pid) for n in started if n.popen.poll() is None]
    try:
        stop_nodes(live, DOWN_TIMEOUT_S, log)
    except ClusterError as exc:
        print(f"jetraft cluster: {exc}", file=log)
    for node in started:
        try:
            node.popen.wait(timeout=KILL_WAIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            continue  # stop_nodes already reported it
        node.record.pid_path.unlink(missing_ok=True)


def start_cluster(
    directory: Path,
    count: int,
    base_port: int,
    name: str,
    timeout_s: float,
    cancelled: Callable[[], bool] = lambda: False,
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
    info = ClusterInfo.planned(directory, count, base_port, name)
    taken = taken_ports([rec.plan for rec in info.nodes])
    if taken:
        raise ClusterError(
            f"{'port' if len(taken) == 1 else 'ports'} {', '.join(taken)} "
            f"{'is' if len(taken) == 1 else 'are'} already in use; "
            "free them or choose another --base-port "
            f"(this cluster needs {base_port}.., {base_port + CLUSTER_PORT_OFFSET}.. and "
            f"{base_port + MONITOR_PORT_OFFSET}..)"
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


def cluster_run(args: argparse.Namespace, directory: Path, out: TextIO) -> int:
    with stop_signals() as stop:
        info, started = start_cluster(
            directory, args.nodes, args.base_port, args.name, args.timeout, stop
        )
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
        info, _ = start_cluster(
            directory, args.nodes, args.base_port, args.name, args.timeout, stop
        )
    print_up(info, out)
    return EXIT_OK


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
        help="client port of node 1; cluster ports +2000, monitor ports +4000",
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
        return cluster_run(args, directory, out)
    except (ClusterError, OSError) as exc:
        print(f"jetraft cluster {command}: {exc}", file=sys.stderr, flush=True)
        return EXIT_FAIL
