"""A real 3-node jetraft cluster used by nats-py 2.16 clients, checked through /jetraftz (issue 4).

Each client connects to one node only, so every check also crosses the routes. What is checked:
publishes from every node land on one contiguous sequence and every replica reaches the same
digest; Direct Get is answered by every replica; a SIGKILLed stream leader is replaced, no
acknowledged publish is lost, and the restarted node catches up to the same digest; MSG.GET on
another node always sees a publish acknowledged just before; an atomic batch and TTL expiry
(with subject delete markers) leave identical replicas; the stream API answers from followers.

Tests that only add and remove their own stream share one cluster (module fixture); tests that
kill nodes get their own. Must never: sleep blindly (every wait polls with a deadline), or leave
a node running (the fixtures stop them by pid).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import nats.errors
import pytest
from nats.aio.client import Client as NATS
from nats.js.client import JetStreamContext
from nats.js.errors import NotFoundError

from tests.cluster.replica_views import converged, leader_index, replica_views, settled_leader
from tests.integration.clients import connect
from tests.servers import HTTP_OK, JetraftCluster, http_get_json

pytestmark = pytest.mark.integration

REPLICAS = 3
REQUEST_TIMEOUT_S = 5.0
CONVERGE_TIMEOUT_S = 20.0
FAILOVER_TIMEOUT_S = 30.0
CATCHUP_TIMEOUT_S = 30.0
RETRY_PUBLISH_TIMEOUT_S = 2.0
RETRY_BACKOFF_S = 0.1

PUBLISH_ROUNDS = 20  # sequential publishes per node in test 1...
BURST_PER_NODE = 20  # ...then this many per node at once
DIRECT_STREAM_MSGS = 50
DIRECT_GETS = 300
DIRECT_GET_CONCURRENCY = 25
PRE_KILL_MSGS = 20
POST_FAILOVER_MSGS = 20
STALE_READ_ROUNDS = 100
BATCH_MSGS = 50
BATCH_PREFIX_MSGS = 2  # plain publishes before the batch, so its sequences do not start at 1
TTL_EXPIRED_GETS = 60
MARKER_TTL_NS = 1_000_000_000  # markers expire too, so the stream settles at the kept message
CLUSTER_NO_PEERS = 10005
STREAM_NOT_FOUND = 10059


# --- helpers ----------------------------------------------------------------------------------


@asynccontextmanager
async def _clients(urls: Sequence[str]) -> AsyncIterator[list[NATS]]:
    """One connection per URL (each to that node only), all closed afterwards."""
    clients: list[NATS] = []
    try:
        for url in urls:
            clients.append(await connect(url))
        yield clients
    finally:
        for nc in clients:
            if not nc.is_closed:
                await nc.close()


def _js(nc: NATS) -> JetStreamContext:
    return nc.jetstream(timeout=REQUEST_TIMEOUT_S)


async def _api(nc: NATS, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    payload = b"" if body is None else json.dumps(body).encode()
    reply = await nc.request(f"$JS.API.{subject}", payload, timeout=REQUEST_TIMEOUT_S)
    data: dict[str, Any] = json.loads(reply.data)
    return data


async def _create(nc: NATS, name: str, subjects: list[str], **config: Any) -> dict[str, Any]:
    body = {"name": name, "subjects": subjects, "num_replicas": REPLICAS, **config}
    created = await _api(nc, f"STREAM.CREATE.{name}", body)
    assert "error" not in created, created
    return created


async def _delete_quietly(url: str, name: str) -> None:
    """Best-effort cleanup on the shared cluster; a failed test must not hide its own error."""
    try:
        nc = await connect(url)
    except Exception:
        return
    try:
        await _api(nc, f"STREAM.DELETE.{name}")
    except Exception:
        pass
    finally:
        await nc.close()


async def _until(cluster: JetraftCluster, cond: Any, timeout_s: float, what: str) -> Any:
    """Poll ``cond`` (returns a truthy value when met); on timeout fail with every log tail."""
    try:
        return await cluster.await_for(cond, timeout_s, what)
    except TimeoutError as exc:
        views = {node.name: cluster.jetraftz(i) for i, node in enumerate(cluster.nodes)}
        pytest.fail(f"{exc}\n/jetraftz: {json.dumps(views)}\n{cluster.log_tails()}")


def _serving_direct(cluster: JetraftCluster, stream: str) -> dict[str, int] | None:
    views = replica_views(cluster, stream)
    if views is None:
        return None
    return {cluster.names[i]: int(v["direct_gets_served"]) for i, v in enumerate(views)}


# --- 1. publishes from every node -------------------------------------------------------------


async def test_publishes_through_every_node_get_contiguous_seqs_and_identical_replicas(
    jetraft_cluster: JetraftCluster,
) -> None:
    cluster, stream = jetraft_cluster, "EVERYNODE"
    async with _clients(cluster.urls) as clients:
        try:
            await _create(clients[0], stream, ["every.>"], allow_direct=True)
            jss = [_js(nc) for nc in clients]
            acks: list[int] = []
            for r in range(PUBLISH_ROUNDS):
                for i, js in enumerate(jss):
                    ack = await js.publish(f"every.n{i}", f"seq-{r}-{i}".encode())
                    assert ack.stream == stream
                    acks.append(ack.seq)
            burst = await asyncio.gather(
                *(
                    js.publish(f"every.n{i}", f"burst-{k}-{i}".encode())
                    for k in range(BURST_PER_NODE)
                    for i, js in enumerate(jss)
                )
            )
            acks += [ack.seq for ack in burst]
            total = (PUBLISH_ROUNDS + BURST_PER_NODE) * len(jss)
            assert sorted(acks) == list(range(1, total + 1))
            views = await _until(
                cluster,
                lambda: converged(cluster, stream, messages=total, last_seq=total),
                CONVERGE_TIMEOUT_S,
                "all replicas at the same applied index, digest and message count",
            )
            assert len({v["raft_group"] for v in views}) == 1
            assert all(sorted(v["replicas"]) == cluster.names for v in views)
        finally:
            await _delete_quietly(cluster.urls[0], stream)


# --- 2. Direct Get from every replica ---------------------------------------------------------


async def test_direct_gets_are_spread_over_every_replica_and_all_correct(
    jetraft_cluster: JetraftCluster,
) -> None:
    cluster, stream = jetraft_cluster, "DIRECTSPREAD"
    async with _clients(cluster.urls[:1]) as (nc,):
        try:
            await _create(nc, stream, ["spread.>"], allow_direct=True)
            js = _js(nc)
            for seq in range(1, DIRECT_STREAM_MSGS + 1):
                ack = await js.publish(f"spread.{seq % 7}", f"payload-{seq}".encode())
                assert ack.seq == seq
            await _until(
                cluster,
                lambda: converged(cluster, stream, messages=DIRECT_STREAM_MSGS),
                CONVERGE_TIMEOUT_S,
                "replicas converged before the reads",
            )
            before = _serving_direct(cluster, stream)
            assert before is not None

            async def one(k: int) -> None:
                seq = k % DIRECT_STREAM_MSGS + 1
                msg = await js.get_msg(stream, seq=seq, direct=True)
                assert (msg.seq, msg.subject, msg.data) == (
                    seq,
                    f"spread.{seq % 7}",
                    f"payload-{seq}".encode(),
                )

            for start in range(0, DIRECT_GETS, DIRECT_GET_CONCURRENCY):
                await asyncio.gather(
                    *(one(k) for k in range(start, start + DIRECT_GET_CONCURRENCY))
                )
            after = _serving_direct(cluster, stream)
            assert after is not None
            served = {name: after[name] - before[name] for name in after}
            assert all(n > 0 for n in served.values()), served
            assert sum(served.values()) == DIRECT_GETS, served
        finally:
            await _delete_quietly(cluster.urls[0], stream)


# --- 3. leader crash, failover, catch-up ------------------------------------------------------


async def _publish_retrying(js: JetStreamContext, subject: str, k: int, deadline: float) -> int:
    """Publish message ``k`` until acknowledged; the msg id makes a retry of a publish that was
    committed but not acknowledged come back with the original sequence."""
    payload = f"msg-{k}".encode()
    while True:
        try:
            ack = await js.publish(
                subject,
                payload,
                timeout=RETRY_PUBLISH_TIMEOUT_S,
                headers={"Nats-Msg-Id": f"id-{k}"},
            )
            return ack.seq
        except (nats.errors.Error, TimeoutError) as exc:
            if time.monotonic() > deadline:
                raise AssertionError(f"publish {k} never acknowledged: {exc!r}") from exc
            await asyncio.sleep(RETRY_BACKOFF_S)


async def test_killed_leader_is_replaced_without_losing_acked_publishes_and_catches_up(
    fresh_jetraft_cluster: JetraftCluster,
) -> None:
    cluster, stream, subject = fresh_jetraft_cluster, "FAILOVER", "fail.x"
    async with _clients(cluster.urls[:1]) as (nc,):
        await _create(nc, stream, ["fail.>"], allow_direct=True)
    old = await settled_leader(cluster, stream, CONVERGE_TIMEOUT_S)
    survivors = [i for i in range(len(cluster.nodes)) if i != old]
    acked: dict[int, int] = {}  # message number -> acked sequence
    async with _clients([cluster.urls[survivors[0]]]) as (nc,):
        js = _js(nc)
        deadline = time.monotonic() + FAILOVER_TIMEOUT_S
        for k in range(PRE_KILL_MSGS):
            acked[k] = await _publish_retrying(js, subject, k, deadline)
        old_view = cluster.stream_view(old, stream)
        assert old_view is not None and old_view["is_leader"], old_view
        cluster.kill(old)
        killed_at = time.monotonic()
        new: int | None = None
        failover_s = 0.0
        after_new = 0
        k = PRE_KILL_MSGS
        while after_new < POST_FAILOVER_MSGS:
            acked[k] = await _publish_retrying(js, subject, k, deadline)
            k += 1
            if new is None:
                new = leader_index(cluster, stream, survivors)
                failover_s = time.monotonic() - killed_at
            else:
                after_new += 1
        assert new is not None and new != old
        new_view = cluster.stream_view(new, stream)
        assert new_view is not None and new_view["term"] > old_view["term"], new_view
        print(f"failover: new leader {cluster.names[new]} seen after {failover_s:.2f}s")

    total = len(acked)
    assert sorted(acked.values()) == list(range(1, total + 1)), acked
    async with _clients([cluster.urls[new]]) as (nc,):
        js = _js(nc)
        for k, seq in sorted(acked.items()):
            msg = await js.get_msg(stream, seq=seq)
            assert (msg.seq, msg.data) == (seq, f"msg-{k}".encode())
    await _until(
        cluster,
        lambda: converged(cluster, stream, survivors, messages=total),
        CONVERGE_TIMEOUT_S,
        "the survivors agree",
    )

    await asyncio.to_thread(cluster.restart, old)
    views = await _until(
        cluster,
        lambda: converged(cluster, stream, messages=total, last_seq=total),
        CATCHUP_TIMEOUT_S,
        "the restarted node caught up to the same applied index and digest",
    )
    assert views[old]["lag"] == 0


# --- 3a. clients learn every node from the one they reach --------------------------------------


async def test_a_client_given_one_node_learns_every_node(jetraft_cluster: JetraftCluster) -> None:
    cluster = jetraft_cluster
    every = sorted(f"127.0.0.1:{node.port}" for node in cluster.nodes)

    def complete() -> bool:  # every route up both ways, as the nodes see it
        for node in cluster.nodes:
            status, varz = http_get_json(node.http_port, "/varz")
            if status != HTTP_OK or sorted(varz.get("connect_urls", [])) != every:
                return False
        return True

    await _until(cluster, complete, CONVERGE_TIMEOUT_S, "every node lists every client URL")
    for i in range(len(cluster.nodes)):
        async with _clients([cluster.urls[i]]) as (nc,):
            known = sorted(f"{u.hostname}:{u.port}" for u in nc.servers)
            assert known == every, known  # nats-py adds the INFO's connect_urls to its pool
            discovered = sorted(f"{u.hostname}:{u.port}" for u in nc.discovered_servers)
            assert discovered == sorted(set(every) - {f"127.0.0.1:{cluster.nodes[i].port}"})
        status, varz = http_get_json(cluster.nodes[i].http_port, "/varz")
        assert status == HTTP_OK and sorted(varz["connect_urls"]) == every
        assert varz["connect_urls"][0] == f"127.0.0.1:{cluster.nodes[i].port}"  # its own first


# --- 3b. lame duck mode hands leadership on --------------------------------------------------


async def test_a_lame_duck_stream_leader_hands_on_and_exits_without_losing_a_publish(
    fresh_jetraft_cluster: JetraftCluster,
) -> None:
    cluster, stream, subject = fresh_jetraft_cluster, "LAMEDUCK", "ldm.x"
    async with _clients(cluster.urls[:1]) as (nc,):
        await _create(nc, stream, ["ldm.>"])
    old = await settled_leader(cluster, stream, CONVERGE_TIMEOUT_S)
    survivors = [i for i in range(len(cluster.nodes)) if i != old]
    acked: list[int] = []
    async with _clients([cluster.urls[survivors[0]]]) as (nc,):
        js = _js(nc)
        deadline = time.monotonic() + FAILOVER_TIMEOUT_S
        for k in range(PRE_KILL_MSGS):
            acked.append(await _publish_retrying(js, subject, k, deadline))
        os.kill(cluster.nodes[old].pid, signal.SIGUSR2)
        # handed on, not lost: a survivor leads while the lame duck still runs
        new = await _until(
            cluster,
            lambda: None if (i := leader_index(cluster, stream, survivors)) is None else (i,),
            FAILOVER_TIMEOUT_S,
            "a survivor leads the stream",
        )
        assert new[0] != old
        assert cluster.nodes[old].running  # it waits a second after handing on before it goes
        for k in range(PRE_KILL_MSGS, PRE_KILL_MSGS + POST_FAILOVER_MSGS):
            acked.append(await _publish_retrying(js, subject, k, deadline))
    assert acked == list(range(1, len(acked) + 1))
    # no client of its own: it shuts down right after the hand-off
    await _until(
        cluster,
        lambda: not cluster.nodes[old].running,
        FAILOVER_TIMEOUT_S,
        "the lame duck exits",
    )
    gone = f"127.0.0.1:{cluster.nodes[old].port}"

    def forgotten() -> bool:
        status, varz = http_get_json(cluster.nodes[survivors[0]].http_port, "/varz")
        return status == HTTP_OK and gone not in varz["connect_urls"]

    await _until(cluster, forgotten, FAILOVER_TIMEOUT_S, "the survivors forget its client URL")
    await _until(
        cluster,
        lambda: converged(cluster, stream, survivors, messages=len(acked)),
        CONVERGE_TIMEOUT_S,
        "the survivors hold every acknowledged publish",
    )


# --- 4. MSG.GET is never stale ----------------------------------------------------------------


async def test_msg_get_on_another_node_sees_the_publish_acked_just_before(
    jetraft_cluster: JetraftCluster,
) -> None:
    cluster, stream = jetraft_cluster, "NOSTALE"
    pairs = list(itertools.permutations(range(len(cluster.nodes)), 2))
    async with _clients(cluster.urls) as clients:
        try:
            await _create(clients[0], stream, ["nostale.>"])
            jss = [_js(nc) for nc in clients]
            for k in range(STALE_READ_ROUNDS):
                a, b = pairs[k % len(pairs)]
                payload = f"write-{k}-via-{a}".encode()
                ack = await jss[a].publish(f"nostale.{k % 5}", payload)
                msg = await jss[b].get_msg(stream, seq=ack.seq)
                assert (msg.seq, msg.data) == (ack.seq, payload), (k, a, b)
        finally:
            await _delete_quietly(cluster.urls[0], stream)


# --- 5. atomic batch and TTL expiry -----------------------------------------------------------


def _batch_headers(batch_id: str, seq: int, commit: bool) -> dict[str, str]:
    headers = {"Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(seq)}
    if commit:
        headers["Nats-Batch-Commit"] = "1"
    return headers


async def test_atomic_batch_commits_whole_on_every_replica(
    jetraft_cluster: JetraftCluster,
) -> None:
    cluster, stream, batch_id = jetraft_cluster, "ATOMIC3", "b-1"
    async with _clients(cluster.urls) as clients:
        try:
            await _create(clients[0], stream, ["atom.>"], allow_atomic=True, allow_direct=True)
            leader = await settled_leader(cluster, stream, CONVERGE_TIMEOUT_S)
            # the batch goes in through a follower, so every part crosses a route
            nc = clients[(leader + 1) % len(clients)]
            for _ in range(BATCH_PREFIX_MSGS):
                await _js(nc).publish("atom.plain", b"plain")
            for seq in range(1, BATCH_MSGS):
                await nc.publish(
                    f"atom.{seq % 4}",
                    f"part-{seq}".encode(),
                    headers=_batch_headers(batch_id, seq, False),
                )
            reply = await nc.request(
                "atom.last",
                f"part-{BATCH_MSGS}".encode(),
                timeout=REQUEST_TIMEOUT_S,
                headers=_batch_headers(batch_id, BATCH_MSGS, True),
            )
            last = BATCH_PREFIX_MSGS + BATCH_MSGS
            assert json.loads(reply.data) == {
                "stream": stream,
                "seq": last,
                "batch": batch_id,
                "count": BATCH_MSGS,
            }
            views = await _until(
                cluster,
                lambda: converged(cluster, stream, messages=last, last_seq=last),
                CONVERGE_TIMEOUT_S,
                "every replica holds the whole batch",
            )
            assert len({v["digest"] for v in views}) == 1
            js = _js(clients[0])
            for seq in (BATCH_PREFIX_MSGS + 1, BATCH_PREFIX_MSGS + BATCH_MSGS // 2, last):
                msg = await js.get_msg(stream, seq=seq)
                assert msg.data == f"part-{seq - BATCH_PREFIX_MSGS}".encode()
        finally:
            await _delete_quietly(cluster.urls[0], stream)


async def test_ttl_expiry_and_markers_leave_identical_replicas_and_404_everywhere(
    jetraft_cluster: JetraftCluster,
) -> None:
    cluster, stream = jetraft_cluster, "TTL3"
    async with _clients(cluster.urls[:1]) as (nc,):
        try:
            await _create(
                nc,
                stream,
                ["ttl.>"],
                allow_direct=True,
                allow_msg_ttl=True,
                subject_delete_marker_ttl=MARKER_TTL_NS,
            )
            js = _js(nc)
            kept = await js.publish("ttl.keep", b"forever")
            short = await js.publish("ttl.short", b"one second", headers={"Nats-TTL": "1s"})
            assert (kept.seq, short.seq) == (1, 2)
            # the expiry removes seq 2 and writes a marker (seq 3) that expires 1 s later: the
            # replicas settle at the kept message alone, and agree at every step on the way
            views = await _until(
                cluster,
                lambda: converged(cluster, stream, messages=1, first_seq=1, last_seq=3),
                CONVERGE_TIMEOUT_S,
                "the message and its marker expired on every replica alike",
            )
            assert len({v["digest"] for v in views}) == 1
            before = _serving_direct(cluster, stream)
            assert before is not None

            async def expired_get() -> None:
                with pytest.raises(NotFoundError):
                    await js.get_msg(stream, seq=short.seq, direct=True)

            await asyncio.gather(*(expired_get() for _ in range(TTL_EXPIRED_GETS)))
            after = _serving_direct(cluster, stream)
            assert after is not None
            served = {name: after[name] - before[name] for name in after}
            assert all(n > 0 for n in served.values()), served
            kept_msg = await js.get_msg(stream, seq=kept.seq, direct=True)
            assert kept_msg.data == b"forever"
        finally:
            await _delete_quietly(cluster.urls[0], stream)


# --- 6. the stream API from any node ----------------------------------------------------------


async def test_stream_api_answers_from_a_follower(jetraft_cluster: JetraftCluster) -> None:
    cluster, stream = jetraft_cluster, "APIANY"
    async with _clients(cluster.urls) as clients:
        try:
            await _create(clients[0], stream, ["apiany.>"])
            leader = await settled_leader(cluster, stream, CONVERGE_TIMEOUT_S)
            follower = (leader + 1) % len(clients)
            nc = clients[follower]
            await _js(nc).publish("apiany.a", b"x")

            names = await _api(nc, "STREAM.NAMES")
            assert "error" not in names, names
            assert stream in names["streams"]
            listed = await _api(nc, "STREAM.LIST")
            assert "error" not in listed, listed
            assert stream in [s["config"]["name"] for s in listed["streams"]]

            info = await _api(nc, f"STREAM.INFO.{stream}")
            assert "error" not in info, info
            assert info["state"]["messages"] == 1
            cinfo = info["cluster"]
            assert cinfo["name"] == cluster.name
            view_leader = cluster.stream_view(leader, stream)
            view_follower = cluster.stream_view(follower, stream)
            assert view_leader is not None and view_follower is not None
            assert view_leader["is_leader"] and not view_follower["is_leader"]
            assert cinfo["raft_group"] == view_leader["raft_group"]
            assert cinfo["leader"] == view_leader["leader"] == cluster.names[leader]
            others = sorted(n for n in cluster.names if n != cluster.names[leader])
            assert sorted(r["name"] for r in cinfo["replicas"]) == others

            too_many = await _api(
                nc,
                "STREAM.CREATE.APIFIVE",
                {"name": "APIFIVE", "subjects": ["apifive.>"], "num_replicas": 5},
            )
            assert too_many["error"]["err_code"] == CLUSTER_NO_PEERS, too_many
            assert all(
                "APIFIVE" not in [s["name"] for s in (cluster.jetraftz(i) or {}).get("streams", [])]
                for i in range(len(cluster.nodes))
            )

            deleted = await _api(nc, f"STREAM.DELETE.{stream}")
            assert deleted.get("success") is True, deleted
            await _until(
                cluster,
                lambda: all(
                    (view := cluster.jetraftz(i)) is not None
                    and stream not in [s["name"] for s in view["streams"]]
                    for i in range(len(cluster.nodes))
                ),
                CONVERGE_TIMEOUT_S,
                "the stream gone from every node's /jetraftz",
            )
            gone = await _api(nc, f"STREAM.INFO.{stream}")
            assert gone["error"]["err_code"] == STREAM_NOT_FOUND, gone
        finally:
            await _delete_quietly(cluster.urls[0], stream)
