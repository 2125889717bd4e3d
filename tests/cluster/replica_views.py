"""What the replicas of a stream in a process-level cluster say about it (their /jetraftz entries):
who leads, and whether they hold the same state. Shared by the cluster suites."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import pytest

from tests.servers import JetraftCluster

LEADER_SETTLE_S = 0.5


def replica_views(
    cluster: JetraftCluster, stream: str, nodes: Sequence[int] | None = None
) -> list[dict[str, Any]] | None:
    """The stream's /jetraftz entry on each of ``nodes`` (all by default); None if one is
    missing."""
    views = []
    for i in range(len(cluster.nodes)) if nodes is None else nodes:
        view = cluster.stream_view(i, stream)
        if view is None:
            return None
        views.append(view)
    return views


def converged(
    cluster: JetraftCluster,
    stream: str,
    nodes: Sequence[int] | None = None,
    **expect: int,
) -> list[dict[str, Any]] | None:
    """Every replica at the same applied index with the same digest and state, and that state
    matching ``expect`` (keys of /jetraftz ``state``); else None."""
    views = replica_views(cluster, stream, nodes)
    if views is None:
        return None
    keys = {
        (v["applied_index"], v["digest"], json.dumps(v["state"], sort_keys=True)) for v in views
    }
    if len(keys) != 1:
        return None
    state = views[0]["state"]
    if any(state[k] != v for k, v in expect.items()):
        return None
    return views


def leader_index(
    cluster: JetraftCluster, stream: str, nodes: Sequence[int] | None = None
) -> int | None:
    """The node that says it leads ``stream`` and that every other listed replica agrees on."""
    views = replica_views(cluster, stream, nodes)
    if views is None:
        return None
    leaders = [v for v in views if v["is_leader"]]
    if len(leaders) != 1 or any(v["leader"] != leaders[0]["leader"] for v in views):
        return None
    return cluster.index_of(leaders[0]["leader"])


async def settled_leader(cluster: JetraftCluster, stream: str, timeout_s: float) -> int:
    """Wait for a settled leader: every replica agrees on it, and on the term, for
    ``LEADER_SETTLE_S`` in a row. A new stream's first leader may hand over to the placement's
    preferred peer right after the election; a test that routes around the leader must not pick
    the one about to step down. On timeout, fails with every node's /jetraftz and log tail."""
    seen: list[Any] = [None, 0.0]  # (leader, term) last polled, and since when

    def poll() -> tuple[int] | None:
        index = leader_index(cluster, stream)
        view = None if index is None else cluster.stream_view(index, stream)
        key = None if view is None else (index, view["term"])
        now = time.monotonic()
        if key != seen[0]:
            seen[0], seen[1] = key, now
            return None
        if index is None or now - seen[1] < LEADER_SETTLE_S:
            return None
        return (index,)  # a tuple: node 0 leads too, but 0 is not a truthy poll result

    try:
        (index,) = await cluster.await_for(poll, timeout_s, "a settled stream leader")
    except TimeoutError as exc:
        views = {node.name: cluster.jetraftz(i) for i, node in enumerate(cluster.nodes)}
        pytest.fail(f"{exc}\n/jetraftz: {json.dumps(views)}\n{cluster.log_tails()}")
    return index
