"""``jetraft cluster status``: what each node of a local cluster reports, as a table or JSON.

Owns: reading every running node's /healthz, /varz and /jetraftz, and formatting liveness, health,
connections, the meta leader and each stream's replicas, lag and digest per node.
Must never: report numbers from whatever answers on a node's ports when that node's pid file
does not name a live node process (another program may have the port now), or change anything.
Standard library only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cluster.ops.plan import ClusterInfo, NodePlan, NodeRecord, running_pid
from cluster.ops.probes import HTTP_OK, http_get_json

DIGEST_SHORT_CHARS = 12


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
    """What one node reports: liveness by pid file, /healthz, /varz connections and /jetraftz
    (the meta group and the stream replicas as the node sees them)."""
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
    view = _as_dict(http_get_json(f"{plan.monitor_url}/jetraftz")[1])
    meta = _as_dict(view.get("cluster"))
    row["meta_leader"] = meta.get("meta_leader")
    assignments = _as_dict(meta.get("assignments"))
    row["assignments"] = {
        str(name): [str(p) for p in peers]
        for name, peers in assignments.items()
        if isinstance(peers, list)
    }
    peers = meta.get("peers")
    row["peers"] = [str(p) for p in peers] if isinstance(peers, list) else []
    streams = view.get("streams")
    if isinstance(streams, list):
        row["streams"] = [_stream_row(s) for s in streams if isinstance(s, dict)]
    return row


def cluster_status(info: ClusterInfo) -> dict[str, Any]:
    nodes = [node_status(rec) for rec in info.nodes]
    unavailable = unavailable_streams(nodes)
    return {
        "cluster_name": info.name,
        "dir": str(info.directory),
        "client_urls": info.client_urls,
        "healthy": bool(nodes) and all(n["healthy"] for n in nodes),
        "nodes": nodes,
        "unavailable_streams": unavailable,
        "problems": problems(info, nodes, unavailable),
    }


def unavailable_streams(nodes: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Streams the meta group assigned that no running node reports (all their replicas are
    down), with the nodes their replicas live on."""
    assigned: dict[str, list[str]] = {}
    for node in nodes:
        assigned.update(node.get("assignments") or {})
    reported = {s["name"] for node in nodes for s in node["streams"]}
    return [
        {"name": name, "replicas": peers}
        for name, peers in sorted(assigned.items())
        if name not in reported
    ]


def problems(
    info: ClusterInfo, nodes: Sequence[dict[str, Any]], unavailable: Sequence[dict[str, Any]]
) -> list[str]:
    """Why the cluster is not healthy, one line each (``status`` exits 1 while there is one)."""
    out = []
    for record, node in zip(info.nodes, nodes, strict=True):
        if not node["alive"]:
            out.append(
                f"{node['name']} is not running (start it: jetraft cluster start {node['name']} "
                f"--dir {info.directory})"
            )
        elif not node["healthy"]:
            out.append(f"{node['name']}: /healthz {health_reason(record.plan)}")
    for stream in unavailable:
        out.append(
            f"stream {stream['name']} is unavailable: none of its replicas "
            f"({', '.join(stream['replicas'])}) is running"
        )
    return out


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
    found = status.get("problems") or []
    if found:
        out += ["", "not healthy:", *(f"  {line}" for line in found)]
    return "\n".join(out)
