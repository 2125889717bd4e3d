"""Issue 5 on a real 5-node cluster: an R3 upstream and an R3 mirror; the mirror catches up with
the upstream's exact messages; with every upstream node stopped, Direct Gets addressed to the
upstream are still answered, by the mirror's nodes; the upstream comes back, the mirror resumes
without a gap, its lag returns to 0 and its content digest equals the upstream's.

Must never: sleep blindly (every wait polls with a deadline), or leave a node running.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats.errors
import pytest
from nats.aio.client import Client as NATS

from cluster.direct_get_responder import SERVED_BY_HEADER
from tests.integration.clients import connect
from tests.servers import JetraftCluster

pytestmark = pytest.mark.integration

NODES = 5
UPSTREAM = "UP"
MIRROR = "UPM"
FIRST_MSGS = 200
LATER_MSGS = 50
READS_WHILE_DOWN = 40
REQUEST_TIMEOUT_S = 5.0
CONVERGE_TIMEOUT_S = 40.0
RETRY_S = 0.2


@pytest.fixture
def cluster5(tmp_path: Path) -> Iterator[JetraftCluster]:
    cluster = JetraftCluster(tmp_path, NODES).start()
    try:
        yield cluster
    finally:
        cluster.stop()


async def _api(nc: NATS, subject: str, body: dict[str, Any]) -> dict[str, Any]:
    msg = await nc.request(f"$JS.API.{subject}", json.dumps(body).encode(), timeout=5)
    doc: dict[str, Any] = json.loads(msg.data)
    return doc


def _views(cluster: JetraftCluster, stream: str) -> dict[int, dict[str, Any]]:
    """The stream's /jetraftz entry on every running node that hosts a replica of it."""
    out = {}
    for i in range(len(cluster.nodes)):
        view = cluster.stream_view(i, stream)
        if view is not None:
            out[i] = view
    return out


def _mirror_caught_up(cluster: JetraftCluster, last_seq: int) -> tuple[str, str] | None:
    """(mirror content digest, upstream content digest) once every running mirror replica holds
    everything through ``last_seq`` with lag 0 and they all agree; else None."""
    mirrors = _views(cluster, MIRROR)
    ups = _views(cluster, UPSTREAM)
    if not mirrors or not ups:
        return None
    if any(v["state"]["last_seq"] != last_seq for v in mirrors.values()):
        return None
    leaders = [v for v in mirrors.values() if v["is_leader"]]
    if len(leaders) != 1 or leaders[0].get("mirror", {}).get("lag") != 0:
        return None
    digests = {v["content_digest"] for v in mirrors.values()}
    up_digests = {v["content_digest"] for v in ups.values() if v["state"]["last_seq"] == last_seq}
    if len(digests) != 1 or len(up_digests) != 1:
        return None
    return digests.pop(), up_digests.pop()


async def _publish(nc: NATS, count: int, start: int) -> None:
    js = nc.jetstream(timeout=REQUEST_TIMEOUT_S)
    deadline = time.monotonic() + CONVERGE_TIMEOUT_S
    i = start
    while i < start + count:
        try:
            await js.publish(f"up.k{i % 7}", f"m{i}".encode(), headers={"Nats-Msg-Id": f"m{i}"})
            i += 1
        except (
            nats.errors.TimeoutError,
            nats.errors.NoRespondersError,
            nats.js.errors.APIError,
            nats.js.errors.NoStreamResponseError,
        ):
            # a restarted upstream is briefly unavailable (no leader, routes coming up)
            assert time.monotonic() < deadline, "the upstream did not take publishes"
            await _sleep(RETRY_S)


async def _sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


async def test_mirror_serves_the_upstreams_reads_while_the_upstream_is_down(
    cluster5: JetraftCluster,
) -> None:
    cluster = cluster5
    nc = await connect(cluster.urls[0])
    try:
        created = await _api(
            nc,
            f"STREAM.CREATE.{UPSTREAM}",
            {"name": UPSTREAM, "subjects": ["up.>"], "num_replicas": 3, "allow_direct": True},
        )
        assert "error" not in created, created
        await _publish(nc, FIRST_MSGS, 0)
        created = await _api(
            nc,
            f"STREAM.CREATE.{MIRROR}",
            {"name": MIRROR, "num_replicas": 3, "mirror": {"name": UPSTREAM}},
        )
        assert "error" not in created, created
        assert created["config"]["mirror_direct"] is True
        mirror_digest, up_digest = await cluster.await_for(
            lambda: _mirror_caught_up(cluster, FIRST_MSGS), CONVERGE_TIMEOUT_S, "mirror catch-up"
        )
        assert mirror_digest == up_digest
    finally:
        await nc.close()

    upstream_nodes = sorted(_views(cluster, UPSTREAM))
    mirror_nodes = sorted(_views(cluster, MIRROR))
    assert len(upstream_nodes) == 3 and len(mirror_nodes) == 3
    survivors = [i for i in mirror_nodes if i not in upstream_nodes]
    assert survivors, (upstream_nodes, mirror_nodes)  # placement spreads the two streams
    for i in upstream_nodes:
        cluster.kill(i)

    reader = await connect(cluster.urls[survivors[0]])
    try:
        deadline = time.monotonic() + CONVERGE_TIMEOUT_S
        answered = 0
        served_by: set[str] = set()
        while answered < READS_WHILE_DOWN:
            key = answered % 7
            body = json.dumps({"last_by_subj": f"up.k{key}"}).encode()
            try:
                reply = await reader.request(
                    f"$JS.API.DIRECT.GET.{UPSTREAM}",
                    body,
                    timeout=REQUEST_TIMEOUT_S,
                    headers={SERVED_BY_HEADER: "?"},
                )
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
                assert time.monotonic() < deadline, "no mirror answered the upstream's reads"
                await _sleep(RETRY_S)
                continue
            assert reply.headers is not None, reply
            assert reply.headers["Nats-Stream"] == MIRROR  # only the mirror is left to answer
            seq = int(reply.headers["Nats-Sequence"])
            # the last of its key among the first FIRST_MSGS (the i-th publish got seq i + 1)
            assert reply.headers["Nats-Subject"] == f"up.k{key}"
            assert FIRST_MSGS - 7 < seq <= FIRST_MSGS and (seq - 1) % 7 == key
            assert reply.data == f"m{seq - 1}".encode()
            served_by.add(reply.headers[SERVED_BY_HEADER])
            answered += 1
        # the surviving mirror replicas, followers included, share the reads
        alive_mirrors = {cluster.names[i] for i in mirror_nodes if i not in upstream_nodes}
        assert served_by <= alive_mirrors
        assert len(served_by) >= min(2, len(alive_mirrors)), (served_by, alive_mirrors)
    finally:
        await reader.close()

    for i in upstream_nodes:
        cluster.restart(i)
    nc = await connect(cluster.urls[upstream_nodes[0]])
    try:
        await _publish(nc, LATER_MSGS, FIRST_MSGS)
    finally:
        await nc.close()
    mirror_digest, up_digest = await cluster.await_for(
        lambda: _mirror_caught_up(cluster, FIRST_MSGS + LATER_MSGS),
        CONVERGE_TIMEOUT_S,
        "mirror catch-up after the upstream returned",
    )
    assert mirror_digest == up_digest
