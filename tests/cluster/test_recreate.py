"""A stream deleted and created again under the same name while one node's meta group stood
still: that node applies both at once, and must end with a replica of the new stream (in the new
Raft group, with the new config and none of the old messages), not keep the old one.

(A failed restore's undo followed by the client's retry is this pattern; found by review.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster.inprocess import running_cluster, wait_for
from tests.integration.clients import connect

pytestmark = pytest.mark.integration

STREAM = "AGAIN"
OLD_MSGS = 5


async def test_a_node_that_applies_a_delete_and_a_create_at_once_opens_the_new_stream(
    tmp_path: Path,
) -> None:
    async with running_cluster(tmp_path, 3) as c:
        nc = await connect(c.urls[0])
        try:
            js = nc.jetstream(timeout=10)
            await js.add_stream(name=STREAM, subjects=["old.>"], num_replicas=3)
            for i in range(OLD_MSGS):
                await js.publish("old.x", b"%d" % i)
            await wait_for(
                lambda: all(
                    (h := c.replica(i, STREAM)) is not None and h.stream.last_seq == OLD_MSGS
                    for i in c.live()
                ),
                "every replica holds the old messages",
            )
            still = next(i for i in c.live() if not c.js(i).is_meta_leader and i != 0)
            meta = c.js(still).meta
            assert meta is not None
            old_incarnation = c.replica(still, STREAM).log.incarnation  # type: ignore[union-attr]
            meta.paused = True  # its driver skips the meta group: nothing is applied there
            await js.delete_stream(STREAM)
            await js.add_stream(name=STREAM, subjects=["new.>"], num_replicas=3)
            assert c.replica(still, STREAM).log.incarnation == old_incarnation  # type: ignore[union-attr]
            meta.paused = False
            c.js(still).driver.kick(meta.group_name)

            def renewed() -> bool:
                incarnations = set()
                for i in c.live():
                    host = c.replica(i, STREAM)
                    if host is None or host.stream.last_seq != 0:
                        return False
                    if list(host.config.subjects) != ["new.>"]:
                        return False
                    incarnations.add(host.log.incarnation)
                return len(incarnations) == 1 and old_incarnation not in incarnations

            await wait_for(renewed, "every node on the new stream")
            ack = await js.publish("new.x", b"n")
            assert ack.seq == 1
            await wait_for(
                lambda: all(
                    (h := c.replica(i, STREAM)) is not None and h.stream.last_seq == 1
                    for i in c.live()
                ),
                "the new stream replicated to every node, the one that stood still included",
            )
        finally:
            await nc.close()
