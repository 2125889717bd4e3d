"""nats-server's system requests in a real 3-node cluster (docs/features.md "Monitoring").

A ``$SYS.REQ.SERVER.PING[.<KIND>]`` published on any node reaches every node through the routes
and each answers for itself, as every server of a nats-server cluster does (``nats server ls``
collects them); ``$SYS.REQ.SERVER.<id>.<KIND>`` reaches the one node it names; a filter or
``leader_only`` leaves the other nodes silent. The statsz of each node lists its routes and the
meta group, in full on the meta leader only, with the keys a 3-node nats-server cluster gives
(probed; jetraft leaves out ``gomaxprocs``). An account's request reaches every node too;
``$SYS.REQ.USER.INFO`` is answered by the requesting client's own node alone.

Must never: sleep blindly (waits poll with deadlines), or leave a node running.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from tests.integration.clients import connect
from tests.servers import JetraftCluster

pytestmark = pytest.mark.integration

PING = "$SYS.REQ.SERVER.PING"
FIRST_WAIT_S = 5.0
MORE_WAIT_S = 0.5  # after the replies expected: long enough to catch one more
NODES = 3
# a statsz of a node of a 3-node nats-server 2.15.1 cluster, without the Go runtime's gomaxprocs
STATSZ_KEYS = [
    "start",
    "mem",
    "cores",
    "cpu",
    "connections",
    "total_connections",
    "active_accounts",
    "subscriptions",
    "sent",
    "sent_to_clients",
    "received",
    "received_from_clients",
    "slow_consumers",
    "routes",
    "active_servers",
    "jetstream",
]
ROUTE_STAT_KEYS = ["rid", "name", "sent", "received", "pending"]
META_KEYS = [
    "name",
    "leader",
    "peer",
    "replicas",
    "cluster_size",
    "quorum_needed",
    "pending",
    "pending_requests",
    "pending_infos",
    "snapshot",
]


async def collect(
    nc: NATS,
    subject: str,
    body: bytes = b"",
    expect: int = NODES,
    first_wait_s: float = FIRST_WAIT_S,
) -> list[dict[str, Any]]:
    """Every reply to one request: until ``expect`` came (or ``first_wait_s`` passed), and then
    any that follow within MORE_WAIT_S."""
    inbox = nc.new_inbox()
    replies: list[dict[str, Any]] = []
    enough = asyncio.Event()

    async def on_reply(msg: Msg) -> None:
        replies.append(json.loads(msg.data))
        if len(replies) >= expect:
            enough.set()

    sub = await nc.subscribe(inbox, cb=on_reply)
    try:
        await nc.publish(subject, body, reply=inbox)
        try:
            await asyncio.wait_for(enough.wait(), first_wait_s)
        except TimeoutError:
            pass
        await asyncio.sleep(MORE_WAIT_S)
        return list(replies)
    finally:
        await sub.unsubscribe()


async def statsz_of_every_node(nc: NATS) -> list[dict[str, Any]]:
    """A PING's replies once every node sees its two peers and a meta leader."""
    deadline = time.monotonic() + 30.0
    while True:
        replies = await collect(nc, PING)
        stats = [r["statsz"] for r in replies]
        settled = len(replies) == NODES and all(
            s["active_servers"] == NODES and s["jetstream"]["meta"].get("leader") for s in stats
        )
        if settled or time.monotonic() > deadline:
            return replies
        await asyncio.sleep(0.2)


@pytest.fixture
async def clients(jetraft_cluster: JetraftCluster) -> Any:
    ncs = [await connect(url) for url in jetraft_cluster.urls]
    yield ncs
    for nc in ncs:
        await nc.close()


async def test_a_ping_is_answered_by_every_node(
    jetraft_cluster: JetraftCluster, clients: list[NATS]
) -> None:
    for nc in clients:  # from whichever node the request enters
        replies = await statsz_of_every_node(nc)
        servers = [r["server"] for r in replies]
        assert len({s["id"] for s in servers}) == NODES, servers
        assert sorted(s["name"] for s in servers) == jetraft_cluster.names
        assert {s["cluster"] for s in servers} == {jetraft_cluster.name}
        assert all(s["jetstream"] is True and s["flags"] == 1 for s in servers)
        for reply in replies:
            assert list(reply) == ["server", "statsz"]
            statsz = reply["statsz"]
            assert list(statsz) == STATSZ_KEYS
            assert statsz["active_servers"] == NODES
            assert {r["name"] for r in statsz["routes"]} == (
                set(jetraft_cluster.names) - {reply["server"]["name"]}
            )
            assert all(list(r) == ROUTE_STAT_KEYS for r in statsz["routes"])
        metas = {r["server"]["name"]: r["statsz"]["jetstream"]["meta"] for r in replies}
        leaders = {meta["leader"] for meta in metas.values()}
        assert len(leaders) == 1, metas
        leader = leaders.pop()
        assert list(metas[leader]) == META_KEYS
        assert metas[leader]["name"] == jetraft_cluster.name
        for name, meta in metas.items():
            if name != leader:  # a follower's short form, named as nats-server's followers do
                assert list(meta) == [k for k in META_KEYS if k != "replicas"]
                assert meta["name"] == "_meta_"


async def test_every_kind_is_answered_by_every_node(clients: list[NATS]) -> None:
    nc = clients[0]
    kinds = ("VARZ", "CONNZ", "ROUTEZ", "SUBSZ", "ACCOUNTZ", "JSZ", "HEALTHZ", "STATSZ")
    answers = await asyncio.gather(*(collect(nc, f"{PING}.{kind}") for kind in kinds))
    for kind, replies in zip(kinds, answers, strict=True):
        assert len({r["server"]["id"] for r in replies}) == NODES, (kind, replies)
        key = "statsz" if kind == "STATSZ" else "data"
        for reply in replies:
            assert list(reply) == ["server", key], (kind, reply)
            data = reply[key]
            if kind == "HEALTHZ":
                assert data == {"status": "ok", "status_code": 200}
            elif kind == "ROUTEZ":
                assert data["server_id"] == reply["server"]["id"]
                assert data["num_routes"] == 2 * (NODES - 1)  # dialed and accepted, per peer
            elif kind != "STATSZ":
                assert data["server_id"] == reply["server"]["id"], (kind, data)
    idz = await collect(nc, f"{PING}.IDZ")
    assert sorted(list(r) for r in idz) == [["name", "host", "id"]] * NODES


async def test_a_request_to_one_server_reaches_that_server_alone(
    jetraft_cluster: JetraftCluster, clients: list[NATS]
) -> None:
    ids = {r["name"]: r["id"] for r in await collect(clients[0], f"{PING}.IDZ")}
    # all at once, each with its own inbox: the waits for replies that must not come overlap
    asked = [(name, nc) for name in ids for nc in clients]
    by_name = json.dumps({"server_name": "n2", "exact_match": True}).encode()
    in_cluster = json.dumps({"cluster": jetraft_cluster.name}).encode()
    *per_server, named, other_cluster, this_cluster = await asyncio.gather(
        *(collect(nc, f"$SYS.REQ.SERVER.{ids[name]}.VARZ", expect=1) for name, nc in asked),
        collect(clients[0], f"{PING}.JSZ", by_name, expect=1),
        # none may come: the usual wait for one more reply, not the wait for a first one
        collect(clients[0], PING, b'{"cluster": "other"}', first_wait_s=MORE_WAIT_S),
        collect(clients[0], PING, in_cluster),
    )
    for (name, _nc), replies in zip(asked, per_server, strict=True):
        assert [r["data"]["server_name"] for r in replies] == [name]
    assert [r["server"]["name"] for r in named] == ["n2"]
    assert other_cluster == []
    assert len(this_cluster) == NODES


async def test_a_leader_only_jsz_is_answered_by_the_meta_leader(clients: list[NATS]) -> None:
    statsz = await statsz_of_every_node(clients[0])
    leader = statsz[0]["statsz"]["jetstream"]["meta"]["leader"]
    for nc in clients:
        replies = await collect(nc, f"{PING}.JSZ", b'{"leader_only": true}', expect=1)
        assert [r["server"]["name"] for r in replies] == [leader]
        assert replies[0]["data"]["meta_cluster"]["leader"] == leader


async def test_user_info_is_answered_by_the_client_s_own_node_alone(
    jetraft_cluster: JetraftCluster, clients: list[NATS]
) -> None:
    """``$SYS.REQ.USER.INFO`` describes the connection that sent it, so only the node that
    connection is on answers (nats-server does not propagate its interest): one reply, from
    that node, whichever node it enters."""
    for name, nc in zip(jetraft_cluster.names, clients, strict=True):
        replies = await collect(nc, "$SYS.REQ.USER.INFO", expect=1)
        assert [r["server"]["name"] for r in replies] == [name], replies
        assert replies[0]["data"] == {"user": "", "account": "$G", "account_name": "$G"}


async def test_an_account_request_is_answered_by_every_node(clients: list[NATS]) -> None:
    """``$SYS.REQ.ACCOUNT.<account>.<KIND>`` reaches every node, as a PING does; STATZ and
    CONNS only from the nodes with a client of the account (every node here)."""
    nc = clients[0]
    kinds = ("SUBSZ", "CONNZ", "LEAFZ", "JSZ", "INFO", "STATZ", "CONNS")
    *answers, connz, statz, replies = await asyncio.gather(
        *(collect(nc, f"$SYS.REQ.ACCOUNT.$G.{kind}") for kind in kinds),
        collect(nc, "$SYS.REQ.ACCOUNT.$G.CONNZ"),
        collect(nc, "$SYS.REQ.ACCOUNT.PING.STATZ"),
        collect(nc, "$SYS.REQ.ACCOUNT.nope.JSZ"),
    )
    for kind, kind_replies in zip(kinds, answers, strict=True):
        assert len({r["server"]["id"] for r in kind_replies}) == NODES, (kind, kind_replies)
    for reply in connz:
        assert reply["data"]["server_id"] == reply["server"]["id"]
        assert reply["data"]["num_connections"] == 1  # each node's own client
    for reply in statz:
        assert [s["conns"] for s in reply["data"]["account_statz"]] == [1], reply
    assert len(replies) == NODES
    assert {r["error"]["description"] for r in replies} == {'account "nope" not found'}
