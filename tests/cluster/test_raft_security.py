"""Raft on the cluster port cannot be used to run code or poison a node's state.

An attacker here has what /varz shows (cluster name, a peer name) and reaches a route port of
a cluster without route authentication; each forged message must close its link (logged once,
at WARNING, without a traceback), leave nothing on disk, and leave the cluster working. The
sender side never produces pysyncobj's pickled ``transmission`` chunks: a large entry still
replicates, whole.
"""

from __future__ import annotations

import asyncio
import json
import logging
import pickle
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest

from cluster.meta_streams import META_GROUP
from cluster.raft import RaftDriver, RaftGroup
from cluster.raft import group as raft_group
from cluster.raft.adapter import _GroupTransport
from cluster.raft.journal import DurableJournal
from protocol.raft_messages import RAFT_VALUE_MAX, CatchupMessage, RaftMessageError
from protocol.route_frames import ROUTE_PROTOCOL_VERSION, FrameKind, encode_frame
from tests.cluster.inprocess import InProcessCluster, wait_for

LINK_CLOSE_TIMEOUT_S = 5.0
PEER = "n1"  # the attacked node is n0; n1 is a real peer of it
ROUTE_LOGGER = "jetraft.routes"


# --- speaking on the cluster port like a peer ---------------------------------------------------
def peer_hello(name: str, cluster: str, **credentials: str) -> dict[str, Any]:
    """The HELLO a peer dialing a route port sends (cluster/routes.py ``hello_body``); with
    route authorization configured, pass its credentials (``user``/``pass`` or ``token``)."""
    return {"v": ROUTE_PROTOCOL_VERSION, "name": name, "cluster": cluster, **credentials}


def raft_frame(message: dict[str, Any], group: str = META_GROUP) -> bytes:
    return encode_frame(FrameKind.RAFT, [group, message])


async def send_as_peer(port: int, hello: dict[str, Any], frames: list[bytes]) -> bool:
    """Send a HELLO and then ``frames`` on one connection; True once the node closed it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(encode_frame(FrameKind.HELLO, hello) + b"".join(frames))
        await writer.drain()
        while await asyncio.wait_for(reader.read(65536), LINK_CLOSE_TIMEOUT_S):
            pass  # the node's own HELLO
        return True
    except ConnectionError:
        return True
    except TimeoutError:
        return False
    finally:
        writer.close()


class _CreateFile:
    """Unpickling this creates ``path``: the proof that code ran."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.path), "w"))


def _meta(cluster: InProcessCluster, i: int) -> RaftGroup:
    group = cluster.js(i).meta
    assert group is not None
    return group


def _refusals(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == ROUTE_LOGGER
        and "bad frame" in r.getMessage()
        and f"from {PEER}" in r.getMessage()
    ]


async def _refused(
    cluster: InProcessCluster, caplog: pytest.LogCaptureFixture, frames: list[bytes], why: str
) -> None:
    """The node closes the link over the first frame, for ``why``, in exactly one WARNING line
    without a traceback (the frame reached the Raft codec: the HELLO itself was accepted)."""
    before = len(_refusals(caplog))
    assert await send_as_peer(cluster.cluster_ports[0], peer_hello(PEER, "c"), frames)
    await wait_for(lambda: len(_refusals(caplog)) > before, "the refusal to be logged")
    new = _refusals(caplog)[before:]
    assert len(new) == 1, [r.getMessage() for r in new]
    assert new[0].levelno == logging.WARNING and not new[0].exc_info
    assert why in new[0].getMessage()


def _mesh_restored(cluster: InProcessCluster) -> bool:
    """Every node is routed to every other and knows its $JS.API interest again. Without route
    authorization the forged HELLO displaced the real n1's link to n0 (the newest link wins,
    cluster/routes.py); n1 redials at once, and a request sent before it is back would reach no
    meta leader."""
    for i in cluster.live():
        server = cluster.servers[i]
        assert server is not None and server.routes is not None
        others = {f"n{j}" for j in cluster.live() if j != i}
        if set(server.routes.connected_peers()) != others:
            return False
        api = server.router.sublist.match("$JS.API.INFO").plain
        if {sub.route for sub in api if sub.route is not None} != others:
            return False
    return True


async def _cluster_still_serves(cluster: InProcessCluster, stream: str) -> None:
    await wait_for(lambda: _mesh_restored(cluster), "the route mesh to form again")
    nc = await nats.connect(cluster.urls[0])
    try:
        js = nc.jetstream(timeout=10)
        await js.add_stream(name=stream, subjects=[f"{stream.lower()}.>"], num_replicas=3)
        ack = await js.publish(f"{stream.lower()}.1", b"x")
        assert ack.seq == 1
    finally:
        await nc.close()


@pytest.fixture
async def cluster(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> AsyncIterator[InProcessCluster]:
    caplog.set_level(logging.INFO, logger=ROUTE_LOGGER)
    c = InProcessCluster(tmp_path / "c", 3)
    try:
        await c.start()
        routes = c.servers[0].routes if c.servers[0] is not None else None
        assert routes is not None
        # the HELLO is accepted only from a node n0 has dialed itself
        await wait_for(lambda: PEER in routes.resolved.values(), "n0 to know n1")
        yield c
    finally:
        await c.stop()


# --- (a) no code runs ---------------------------------------------------------------------------
async def test_pickled_transmission_never_runs(
    cluster: InProcessCluster, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    proof = tmp_path / "PROOF"
    payload = pickle.dumps(_CreateFile(proof))
    meta = _meta(cluster, 0)
    # the current term and a real log position: pysyncobj would act on these
    base = {"type": "append_entries", "term": meta.term, "commit_index": 0}
    base |= {"prevLogIdx": meta.last_log_index, "prevLogTerm": meta.term_of(meta.last_log_index)}
    start = raft_frame({**base, "transmission": "start", "data": payload[:10]})
    finish = raft_frame({**base, "transmission": "finish", "data": payload[10:]})
    await _refused(cluster, caplog, [start, finish], "transmission")
    await _refused(cluster, caplog, [finish], "transmission")
    # pysyncobj's other pickles: a MEMBERSHIP entry and a forwarded VERSION command
    index = meta.last_log_index + 1
    entry = [b"\x02" + payload, index, meta.term]
    await _refused(cluster, caplog, [raft_frame({**base, "entries": [entry]})], "command type 2")
    command = {"type": "apply_command", "command": b"\x03" + payload}
    await _refused(cluster, caplog, [raft_frame(command)], "command type 3")

    await _cluster_still_serves(cluster, "AFTER")
    # every frame above was handled before the stream's creation was: nothing ran
    assert not proof.exists()
    assert meta.last_log_index >= index - 1
    for i in range(3):  # whatever a log holds at the forged entry's index is jetraft's own
        journal = _meta(cluster, i).journal
        first = int(journal[0][1])
        if first <= index <= int(journal[-1][1]):
            assert journal[index - first][0][:1] in (b"\x00", b"\x01")


# --- (b) term poisoning, (c) a non-integer commit index -----------------------------------------
async def test_a_forged_huge_term_is_refused_and_elections_still_work(
    cluster: InProcessCluster, caplog: pytest.LogCaptureFixture
) -> None:
    meta = _meta(cluster, 0)
    term_before = meta.journal.getCurrentTerm()
    vote_before = meta.journal.getVotedForNodeId()
    for term in (2**64 - 1, RAFT_VALUE_MAX + 1):
        vote = {"type": "request_vote", "term": term, "last_log_index": 10**6}
        vote["last_log_term"] = term
        await _refused(cluster, caplog, [raft_frame(vote)], "term")
    # nothing was persisted: the term moved at most by a real election meanwhile (none expected)
    term_after = meta.journal.getCurrentTerm()
    assert term_before <= term_after < term_before + 10
    if term_after == term_before:
        assert meta.journal.getVotedForNodeId() == vote_before

    # every node restarts: the meta group must elect a leader from the terms on disk
    await cluster.stop()
    for i in range(3):
        await cluster.start_node(i)
    await wait_for(lambda: all(cluster.js(i).ready.is_set() for i in range(3)), "meta leader")
    assert all(_meta(cluster, i).term < RAFT_VALUE_MAX for i in range(3))
    await _cluster_still_serves(cluster, "AFTERRESTART")


async def test_a_non_integer_commit_index_is_refused(
    cluster: InProcessCluster, caplog: pytest.LogCaptureFixture
) -> None:
    meta = _meta(cluster, 0)
    bad = {"type": "append_entries", "term": meta.term, "commit_index": "zz"}
    bad |= {"prevLogIdx": meta.last_log_index, "prevLogTerm": meta.term_of(meta.last_log_index)}
    bad["entries"] = []
    await _refused(cluster, caplog, [raft_frame(bad)], "commit_index")
    bad["commit_index"] = True  # a bool is not an index either
    await _refused(cluster, caplog, [raft_frame(bad)], "commit_index")
    assert type(meta.commit_index) is int
    assert type(meta.journal.getRaftCommitIndex()) is int
    await _cluster_still_serves(cluster, "AFTERZZ")


# --- the sender never uses transmission ---------------------------------------------------------
async def test_an_entry_larger_than_the_append_limit_replicates_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    limit = 4096
    monkeypatch.setattr(raft_group, "RAFT_APPEND_BYTES_MAX", limit)
    whole_entries: list[int] = []
    original = _GroupTransport._whole_entry

    def counting(message: dict[str, Any], journal: DurableJournal) -> dict[str, Any] | None:
        whole_entries.append(int(message["prevLogIdx"]) + 1)
        return original(message, journal)

    monkeypatch.setattr(_GroupTransport, "_whole_entry", staticmethod(counting))
    c = InProcessCluster(tmp_path / "c", 3)
    try:
        await c.start()
        payload = bytes(range(256)) * (4 * limit // 256)  # 16 KiB: four times the limit
        nc = await nats.connect(c.urls[0])
        try:
            js = nc.jetstream(timeout=10)
            await js.add_stream(name="BIG", subjects=["big.>"], num_replicas=3)
            ack = await js.publish("big.1", payload)
            small = await js.publish("big.2", b"after")
        finally:
            await nc.close()
        assert (ack.seq, small.seq) == (1, 2)

        def replicated() -> bool:
            hosts = [c.replica(i, "BIG") for i in range(3)]
            return all(h is not None and h.stream.last_seq >= small.seq for h in hosts)

        await wait_for(replicated, "the large entry on every replica")
        assert whole_entries, "the large entry did not take pysyncobj's transmission path"
        for i in range(3):  # each replica's own store holds the entry, byte for byte
            host = c.replica(i, "BIG")
            assert host is not None
            stored = host.stream.load(1)
            assert stored is not None and stored.data == payload
    finally:
        await c.stop()


class _Routes:
    """Stands in for RouteManager (a RaftTransport): records what a group sends."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, dict[str, Any]]] = []
        self.catchups: list[tuple[str, list[Any]]] = []

    def send_raft(self, peer: str, group: str, message: dict[str, Any]) -> bool:
        self.sent.append((peer, group, message))
        return True

    def send_catchup(self, peer: str, message: list[Any]) -> bool:
        self.catchups.append((peer, message))
        return True

    def connected(self, _peer: str) -> bool:
        return False

    def flush(self) -> None:
        pass


def test_transmission_chunks_become_one_whole_append(tmp_path: Path) -> None:
    routes = _Routes()
    journal = DurableJournal(tmp_path / "j")
    journal.add(b"\x01", 1, 1)
    big = b"\x00" + b"x" * 100
    journal.add(big, 2, 3)
    transport = _GroupTransport("S.X", routes, journal, lambda: None)
    node = _Peer("n2")
    base = {"type": "append_entries", "term": 3, "commit_index": 1}
    base |= {"prevLogIdx": 1, "prevLogTerm": 1}
    pickled = pickle.dumps((big, 2, 3))
    for kind, data in (("start", pickled[:40]), ("process", pickled[40:80]), ("finish", b"")):
        assert transport.send(node, {**base, "transmission": kind, "data": data})
    assert routes.sent == [("n2", "S.X", {**base, "entries": [(big, 2, 3)]})]
    journal._destroy()


# --- what a group accepts from a peer -----------------------------------------------------------
def _group(tmp_path: Path, routes: _Routes, name: str, **kwargs: Any) -> RaftGroup:
    return RaftGroup(
        name,
        "n1",
        ["n1", "n2", "n3"],
        tmp_path / name,
        routes,
        _Sync(),
        lambda _i, _p: None,
        **kwargs,
    )


class _Sync:
    def request_sync(self, _name: str) -> None:
        pass


class _Peer:
    """What the adapter's transport reads of pysyncobj's Node: its id."""

    def __init__(self, node_id: str) -> None:
        self.id = node_id


async def test_only_the_meta_group_takes_proposals_forwarded_by_a_peer(tmp_path: Path) -> None:
    routes = _Routes()
    driver = RaftDriver()
    stream = _group(tmp_path, routes, "S.X")
    meta = _group(tmp_path, routes, "META", forward_proposals=True)
    driver.add(stream)
    driver.add(meta)
    try:
        forwarded = {"type": "apply_command", "command": b"\x00publish", "request_id": 1}
        for group in (stream, meta):
            driver.on_raft("n2", group.group_name, dict(forwarded))
        assert stream.core.drain_proposals() == []
        assert meta.core.drain_proposals() == [(b"\x00publish", ("n2", 1))]
        with pytest.raises(RaftMessageError):  # unknown groups are checked too
            driver.on_raft("n2", "NOPE", {"type": "apply_command", "command": b"\x02x"})
    finally:
        await driver.close()


async def test_a_state_transfer_reaches_only_its_group_from_its_members(tmp_path: Path) -> None:
    routes = _Routes()
    driver = RaftDriver()
    got: list[tuple[str, CatchupMessage]] = []
    stream = _group(tmp_path, routes, "S.X", on_catchup=lambda p, m: got.append((p, m)))
    driver.add(stream)
    try:
        driver.on_catchup("n2", ["S.X", 3, "chunk", b"data"])
        driver.on_catchup("n9", ["S.X", 4, "chunk", b"outsider"])  # not a member: dropped
        driver.on_catchup("n2", ["S.OTHER", 5, "chunk", b"elsewhere"])  # no such group here
        assert got == [("n2", CatchupMessage("S.X", 3, "chunk", b"data"))]
        for bad in (
            ["S.X", 3, "chunk"],
            ["S.X", -1, "chunk", b""],
            ["S.X", 3, "exec", b""],
            ["S.X", 3, "chunk", "text"],
            [b"S.X", 3, "chunk", b""],
            {"group": "S.X"},
        ):
            with pytest.raises(RaftMessageError):  # the route closes the link
                driver.on_catchup("n2", bad)
        assert len(got) == 1
        assert stream.send_catchup("n2", 6, "req", b"ask")
        assert routes.catchups == [("n2", ["S.X", 6, "req", b"ask"])]
    finally:
        await driver.close()


def _snapshot_doc(group: str, last: int, term: int) -> bytes:
    doc = {
        "v": 1,
        "group": group,
        "last": ["AA==", last, term],
        "prev": ["AQ==", last - 1, term],
        "peers": ["n1", "n2", "n3"],
        "state": {"applied_index": last},
    }
    return json.dumps(doc).encode()


async def test_a_snapshot_is_checked_whole_before_it_is_installed(tmp_path: Path) -> None:
    routes = _Routes()
    driver = RaftDriver()
    restored: list[tuple[int, dict[str, Any]]] = []
    group = _group(tmp_path, routes, "S.X", restore_fn=lambda i, s: restored.append((i, s)))
    driver.add(group)
    try:

        def chunks(raw: bytes) -> list[dict[str, Any]]:
            parts = [(raw[:20], True, False), (raw[20:], False, False), (b"", False, True)]
            return [
                {"type": "append_entries", "term": 2, "commit_index": 0, "serialized": list(p)}
                for p in parts
            ]

        bad_docs = [
            b"\x80\x04not json",
            _snapshot_doc("S.OTHER", 40, 2),
            _snapshot_doc("S.X", 40, 2).replace(b'"state": {', b'"state": [{') + b"]",
            _snapshot_doc("S.X", 40, 2).replace(b'"AA=="', b'"!!"'),
            _snapshot_doc("S.X", 40, 2).replace(b", 40, 2]", b", 40, 18446744073709551615]"),
            json.dumps({**json.loads(_snapshot_doc("S.X", 40, 2)), "x": 1}).encode(),
        ]
        for raw in bad_docs:
            messages = chunks(raw)
            for message in messages[:-1]:
                driver.on_raft("n2", "S.X", message)
            with pytest.raises(RaftMessageError, match="snapshot"):
                driver.on_raft("n2", "S.X", messages[-1])
            # pysyncobj still holds the refused transfer's file open: a stray "last" chunk (a new
            # link) must not complete and install it
            driver.on_raft("n2", "S.X", {**messages[-1], "serialized": [b"}", False, True]})
            assert not group.snapshot_path.exists() and restored == []
            assert group.last_log_index == 1

        for message in chunks(_snapshot_doc("S.X", 40, 2)):
            driver.on_raft("n2", "S.X", message)
        assert restored == [(40, {"applied_index": 40})]
        assert group.last_log_index == 40 and group.snapshot_path.exists()
    finally:
        await driver.close()


async def test_a_leader_ignores_an_append_reply_beyond_its_log(tmp_path: Path) -> None:
    routes = _Routes()
    driver = RaftDriver()
    group = _group(tmp_path, routes, "S.X")
    driver.add(group)
    try:
        group.core.become_leader()
        assert group.is_leader
        last = group.last_log_index
        for next_index in (last + 2, RAFT_VALUE_MAX):
            reply = {"type": "next_node_idx", "next_node_idx": next_index}
            driver.on_raft("n2", "S.X", reply | {"reset": False, "success": True})
            assert group.peer_progress()["n2"][0] == 0
        reply = {"type": "next_node_idx", "next_node_idx": last + 1}
        driver.on_raft("n2", "S.X", reply | {"reset": False, "success": True})
        assert group.peer_progress()["n2"][0] == last
    finally:
        await driver.close()


async def test_pysyncobjs_own_unpickling_stays_unreachable(tmp_path: Path) -> None:
    """The receive path aside, pysyncobj unpickles MEMBERSHIP/VERSION commands when it applies
    them and membership requests when dynamic membership is on: both must stay switched off."""
    routes = _Routes()
    group = _group(tmp_path, routes, "S.X")
    try:
        assert group.core.dynamic_membership is False
        proof = tmp_path / "PROOF"
        payload = pickle.dumps(_CreateFile(proof))
        for command_type in (b"\x02", b"\x03"):  # MEMBERSHIP, VERSION
            assert group.core.apply_log_command(command_type + payload) is None
        assert not proof.exists()
    finally:
        group.close()
