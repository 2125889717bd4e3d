"""A stream replica whose Raft journal fails its fsync (a dying disk) stops on that node, says so
on ``/healthz``, and hands the stream to the others: publishes are acknowledged again by a new
leader, and nothing acknowledged before is lost. The journal may have lost what it had not
synced, and after a failed fsync it refuses everything: retrying it could only hide the loss.

Must never: sleep blindly, or leave a node running.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from engine import disk
from tests.cluster.inprocess import running_cluster, wait_for
from tests.integration.clients import connect

pytestmark = pytest.mark.integration

STREAM = "DISK"
FAILOVER_S = 30.0


async def test_a_replica_whose_journal_fsync_fails_stops_and_the_stream_moves_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_cluster(tmp_path, 3) as c:
        nc = await connect(c.urls[0])
        try:
            js = nc.jetstream(timeout=5)
            await js.add_stream(name=STREAM, subjects=["disk.>"], num_replicas=3)
            await wait_for(lambda: c.leader_of(STREAM) is not None, "a stream leader")
            assert (await js.publish("disk.a", b"before")).seq == 1
            dying = c.leader_of(STREAM)
            assert dying is not None
            host = c.replica(dying, STREAM)
            assert host is not None
            group = host.log.group
            journal_dir = str(group.journal.path)
            real_fsync = disk.fsync

            def fsync(fd: int, data_bytes: int | None = None) -> None:
                if os.readlink(f"/proc/self/fd/{fd}").startswith(journal_dir):
                    raise OSError(5, "Input/output error")
                real_fsync(fd, data_bytes)

            monkeypatch.setattr(disk, "fsync", fsync)
            deadline = asyncio.get_running_loop().time() + FAILOVER_S
            while True:  # the first publishes may time out while the others elect a leader
                try:
                    ack = await js.publish("disk.b", b"after", timeout=2)
                    break
                except Exception:
                    assert asyncio.get_running_loop().time() < deadline, "no new leader took over"
            assert group.failed is not None and "Input/output error" in group.failed
            assert not group.is_leader and c.leader_of(STREAM) not in (None, dying)
            why = c.js(dying).stream_health(STREAM)
            assert why is not None and "stopped on this node" in why, why
            info = await js.stream_info(STREAM)
            assert info.state.last_seq == ack.seq and info.state.messages >= 2
            monkeypatch.setattr(disk, "fsync", real_fsync)
        finally:
            await nc.close()
