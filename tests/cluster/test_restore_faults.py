"""A cluster restore whose seeding node goes silent at the worst moment: right after the other
replicas stored its CMD_SEED entry, before it learnt the entry committed.

The others then elect one of themselves, which commits the seed and, holding no state, must not
keep the leadership (nor may the group wedge with every member waiting for the state of a node
whose log is now behind theirs). Once the seeder is heard again the restore ends: answered with
the stream, which every replica then holds, or with an error, which leaves no stream behind.

The seeder's silence is injected in its Raft driver (its stream group neither ticks nor hears
peers for SILENCE_S), in one process: no sleeping races, the moment is observed in the journals.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from cluster.raft import RaftDriver, RaftGroup
from cluster.raft_log import CMD_SEED
from tests.cluster.inprocess import InProcessCluster, running_cluster, wait_for
from tests.integration.backup_wire import CHUNK, api, snapshot
from tests.integration.clients import connect

pytestmark = pytest.mark.integration

STREAM = "SEEDED"
MSGS = 20
SILENCE_S = 3.0  # above the election timeout: the others elect a leader meanwhile
ANSWER_TIMEOUT_S = 45.0
CONVERGE_TIMEOUT_S = 30.0


def _silence(driver: RaftDriver, silenced: set[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """While ``silenced`` holds "yes", the driver's stream-group ticks and inbound Raft
    messages of STREAM are dropped (the node looks partitioned and stalled to its peers)."""
    prefix = f"S.{STREAM}."
    on_raft, tick_all = driver.on_raft, driver.tick_all

    def quiet_on_raft(peer: str, group: str, message: object) -> None:
        if silenced and group.startswith(prefix):
            return
        on_raft(peer, group, message)

    def quiet_tick_all(groups: list[RaftGroup]) -> None:
        tick_all([g for g in groups if not (silenced and g.group_name.startswith(prefix))])

    monkeypatch.setattr(driver, "on_raft", quiet_on_raft)
    monkeypatch.setattr(driver, "tick_all", quiet_tick_all)


def _holds_seed(group: RaftGroup) -> bool:
    journal = group.journal
    return any(bytes(journal[i][0])[1:2] == bytes([CMD_SEED]) for i in range(len(journal)))


def _everywhere(c: InProcessCluster) -> bool:
    views = set()
    for i in c.live():
        host = c.replica(i, STREAM)
        if host is None or host.offline or not host.caught_up:
            return False
        views.add((host.stream.applied_index, host.stream.digest(), host.stream.last_seq))
    return len(views) == 1 and next(iter(views))[2] == MSGS


async def test_a_seeder_silent_before_its_seed_commits_does_not_wedge_the_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_cluster(tmp_path, 3) as c:
        nc = await connect(c.urls[0])
        try:
            js = nc.jetstream(timeout=10)
            await js.add_stream(name=STREAM, subjects=["seeded.>"], num_replicas=3)
            for i in range(MSGS):
                await js.publish(f"seeded.{i % 3}", b"m%d" % i)
            resp, data = await snapshot(nc, STREAM)
            await js.delete_stream(STREAM)
            await wait_for(lambda: all(c.replica(i, STREAM) is None for i in c.live()), "gone")

            seeder = next(i for i in c.live() if c.js(i).is_meta_leader)
            silenced: set[str] = set()
            _silence(c.js(seeder).driver, silenced, monkeypatch)
            others = [i for i in c.live() if i != seeder]
            silent_at: list[float] = []

            async def silence_when_the_others_hold_the_seed() -> None:
                while True:
                    hosts = [c.replica(i, STREAM) for i in others]
                    if all(h is not None and _holds_seed(h.log.group) for h in hosts):
                        silenced.add("yes")
                        silent_at.append(time.monotonic())
                        await asyncio.sleep(SILENCE_S)
                        silenced.clear()
                        return
                    await asyncio.sleep(0)

            watcher = asyncio.get_running_loop().create_task(
                silence_when_the_others_hold_the_seed()
            )
            started = await api(nc, f"STREAM.RESTORE.{STREAM}", {"config": resp["config"]})
            deliver = started["deliver_subject"]
            for pos in range(0, len(data), CHUNK):
                await nc.request(deliver, data[pos : pos + CHUNK], timeout=5)
            final = await nc.request(deliver, b"", timeout=ANSWER_TIMEOUT_S)
            answer: dict[str, Any] = json.loads(final.data)
            await asyncio.wait_for(watcher, SILENCE_S + 1)
            assert silent_at, "the seeder was never silenced: the test did not test anything"

            if "error" in answer:
                # refused: nothing of it stays behind, and the same upload then restores
                await wait_for(
                    lambda: all(c.replica(i, STREAM) is None for i in c.live()), "undone"
                )
                names = await api(nc, "STREAM.NAMES", {})
                assert not names.get("streams"), names
                started = await api(nc, f"STREAM.RESTORE.{STREAM}", {"config": resp["config"]})
                deliver = started["deliver_subject"]
                for pos in range(0, len(data), CHUNK):
                    await nc.request(deliver, data[pos : pos + CHUNK], timeout=5)
                final = await nc.request(deliver, b"", timeout=ANSWER_TIMEOUT_S)
                answer = json.loads(final.data)
            assert "error" not in answer, answer
            assert answer["state"]["messages"] == MSGS
            await wait_for(lambda: _everywhere(c), "every replica holds it", CONVERGE_TIMEOUT_S)
            leader = c.leader_of(STREAM)
            assert leader is not None
            assert c.replica(leader, STREAM) is not None
        finally:
            await nc.close()
