"""The layout of a local cluster: which ports each node gets, where its files live, what
``cluster.json`` records, and which of its nodes are running now (by their pid files).

Owns: planning the client/cluster/monitor ports of N nodes on 127.0.0.1 (node i of a cluster on
base port B gets B+i-1, +2000 cluster, +4000 monitor, as nats-server's defaults), the node
directories (store dir, log, pid file), reading and writing ``cluster.json``, and recognising a
node process by its /proc cmdline.
Must never: signal anything (stopping is ``local_cluster``'s, through ``cluster.ops.process``),
or treat a pid as a node without checking its cmdline (pids are reused). Standard library only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from cluster.ops.process import HOST, pid_alive, port_is_free, proc_cmdline, read_pid

DEFAULT_BASE_PORT = 4222  # client 4222, cluster 6222, monitor 8222, as nats-server
CLUSTER_PORT_OFFSET = 2000
MONITOR_PORT_OFFSET = 4000
DEFAULT_CLUSTER_NAME = "jetraft"
NODE_COUNTS = (3, 5)
MAX_PORT = 65535

CLUSTER_FILE = "cluster.json"
PID_FILE = "server.pid"
LOG_FILE = "server.log"
STORE_SUBDIR = "store"
CLUSTER_FILE_VERSION = 1


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


def plan_nodes(
    count: int,
    base_port: int,
    name: str = DEFAULT_CLUSTER_NAME,
    cluster_base: int | None = None,
    monitor_base: int | None = None,
) -> list[NodePlan]:
    """The nodes of a ``count``-node cluster: node i takes client port ``base_port``+i-1,
    cluster port ``cluster_base``+i-1 and monitor port ``monitor_base``+i-1 (by default the
    client base +2000 and +4000, as nats-server's 4222/6222/8222); ClusterError when a range
    leaves 1..65535 or two ranges overlap."""
    if count < 1:
        raise ClusterError(f"a cluster needs at least one node, not {count}")
    bases = {
        "client": base_port,
        "cluster": base_port + CLUSTER_PORT_OFFSET if cluster_base is None else cluster_base,
        "monitor": base_port + MONITOR_PORT_OFFSET if monitor_base is None else monitor_base,
    }
    for kind, base in bases.items():
        if base < 1 or base + count - 1 > MAX_PORT:
            raise ClusterError(
                f"{kind} base port {base} does not fit {count} nodes: ports run from {base} "
                f"to {base + count - 1}, the limit is 1..{MAX_PORT}"
            )
    ordered = sorted(bases.items(), key=lambda kv: kv[1])
    for (low_kind, low), (high_kind, high) in pairwise(ordered):
        if low + count > high:
            raise ClusterError(
                f"the {low_kind} ports {low}..{low + count - 1} overlap the {high_kind} ports "
                f"from {high}"
            )
    return [
        NodePlan(
            index=i,
            name=f"{name}-{i}",
            client_port=bases["client"] + i - 1,
            cluster_port=bases["cluster"] + i - 1,
            monitor_port=bases["monitor"] + i - 1,
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
    def planned(
        cls,
        directory: Path,
        count: int,
        base_port: int,
        name: str,
        cluster_base: int | None = None,
        monitor_base: int | None = None,
    ) -> ClusterInfo:
        plans = plan_nodes(count, base_port, name, cluster_base, monitor_base)
        nodes = [NodeRecord(p, directory / p.name) for p in plans]
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
# ports in use and running nodes


def taken_ports(plans: Sequence[NodePlan]) -> list[str]:
    """A description of every planned port that is in use, e.g. ``6222 (cluster port of ...)``."""
    return [
        f"{port} ({role} port of {plan.name})"
        for plan in plans
        for role, port in plan.ports().items()
        if not port_is_free(port)
    ]


def is_node_process(pid: int, store_dir: Path) -> bool:
    """True when ``pid`` runs ``jetraft server`` on ``store_dir``: the pid was not reused."""
    argv = proc_cmdline(pid)
    if "server" not in argv or str(store_dir) not in argv:
        return False
    return "cluster.cli" in argv or any(Path(arg).name == "jetraft" for arg in argv[:2])


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
