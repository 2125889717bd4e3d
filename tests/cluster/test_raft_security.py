"""Raft on the cluster port cannot be used to run code or poison a node's state.

An attacker here has what /varz shows (cluster name, a peer name) and reaches a route port of
a cluster without route authentication; each forged message must close its link, leave nothing
on disk, and leave the cluster working.
"""

from __future__ import annotations

import asyncio
import pickle
from pathlib import Path
from typing import Any

import nats
import pytest

from cluster.clustered_jetstream import META_GROUP
from protocol.raft_messages import RAFT_VALUE_MAX
from protocol.route_frames import FrameKind, encode_frame
from tests.cluster.inprocess import InProcessCluster, wait_for

pytestmark = pytest.mark.integration

LINK_CLOSE_TIMEOUT_S = 5.0


class _CreateFile:
    """Unpickling this creates ``path``: the proof that code ran."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.path), "w"))


async def _attack(port: int, hello: dict[str, Any], frames: list[bytes]) -> bool:
    """Send a HELLO and frames like a peer; True when the node closed the link."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(encode_frame(FrameKind.HELLO, hello) + b"".join(frames))
    await writer.drain()
    try:
        while True:
            chunk = await asyncio.wait_for(reader.read(65536), LINK_CLOSE_TIMEOUT_S)
            if not chunk:
                return True
    except (ConnectionError, TimeoutError) as exc:
        return not isinstance(exc, TimeoutError)
    finally:
        writer.close()


def _raft(message: dict[str, Any], group: str = META_GROUP) -> bytes:
    return encode_frame(FrameKind.RAFT, [group, message])


async def _cluster_still_serves(url: str, stream: str) -> None:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(name=stream, subjects=[f"{stream.lower()}.>"], num_replicas=3)
        ack = await js.publish(f"{stream.lower()}.1", b"x")
        assert ack.seq == 1
    finally:
        await nc.close()


async def test_pickled_transmission_never_runs(tmp_path: Path) -> None:
    cluster = InProcessCluster(tmp_path / "c", 3)
    await cluster.start()
    try:
        proof = tmp_path / "PROOF"
        payload = pickle.dumps(_CreateFile(proof))
        # the current term: pysyncobj ignores appends from older terms
        base = {"type": "append_entries", "term": cluster.js(0).meta.term, "commit_index": 0}
        base |= {"prevLogIdx": 1, "prevLogTerm": 0}
        frames = [
            _raft({**base, "transmission": "start", "data": payload[:10]}),
            _raft({**base, "transmission": "finish", "data": payload[10:]}),
        ]
        hello = {"v": 1, "name": "n1", "cluster": "c"}
        assert await _attack(cluster.cluster_ports[0], hello, frames)
        await asyncio.sleep(0.2)  # let any (wrongly) delivered frame be processed
        assert not proof.exists()
        await _cluster_still_serves(cluster.urls[0], "AFTER")
    finally:
        await cluster.stop()


async def test_a_forged_huge_term_is_refused_and_elections_still_work(tmp_path: Path) -> None:
    cluster = InProcessCluster(tmp_path / "c", 3)
    await cluster.start()
    try:
        term_before = cluster.js(0).meta.term
        hello = {"v": 1, "name": "n1", "cluster": "c"}
        for term in (2**64 - 1, RAFT_VALUE_MAX + 1):
            vote = {"type": "request_vote", "term": term, "last_log_index": 10**6}
            vote["last_log_term"] = term
            assert await _attack(cluster.cluster_ports[0], hello, [_raft(vote)])
        bad_commit = {"type": "append_entries", "term": term_before, "commit_index": "zz"}
        bad_commit |= {"prevLogIdx": 1, "prevLogTerm": 0, "entries": []}
        assert await _attack(cluster.cluster_ports[0], hello, [_raft(bad_commit)])
        meta = cluster.js(0).meta
        assert meta.term < RAFT_VALUE_MAX and meta.journal.getCurrentTerm() < RAFT_VALUE_MAX
        assert type(meta.raftCommitIndex) is int
        # across a restart of the attacked node the cluster still elects and serves
        await cluster.stop_node(0)
        await cluster.start_node(0)
        await wait_for(lambda: cluster.js(0).ready.is_set(), "meta leader after restart")
        assert cluster.js(0).meta.term < RAFT_VALUE_MAX
        await _cluster_still_serves(cluster.urls[0], "AFTERRESTART")
    finally:
        await cluster.stop()
