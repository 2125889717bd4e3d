"""A single server's consumer state survives SIGKILL (issue 14), and a server that stops tells
the pull requests waiting on it.

The consumers' state is part of the stream's engine meta, written with every entry and fsynced
before an ack is confirmed: after a kill -9 and a restart, CONSUMER.INFO shows the same
deliveries and ack floor, an ack answered to ``ack_sync`` never comes back, and the messages
that were delivered but not acked are redelivered once their ack wait passes.

jetraft only: nats-server writes consumer state lazily and makes no such promise.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig

from tests.integration.clients import connect, drain_acking
from tests.servers import start_jetraft

pytestmark = pytest.mark.integration

STREAM = "CR"
MSGS = 12
FETCHED = 8
ACKED = 4
ACK_WAIT_S = 1.0
TIMEOUT_S = 5.0
DRAIN_TIMEOUT_S = 20.0
NS_PER_S = 1_000_000_000


async def test_consumer_state_survives_sigkill(tmp_path: Path) -> None:
    server = start_jetraft(tmp_path)
    try:
        nc = await connect(server.url)
        js = nc.jetstream(timeout=TIMEOUT_S)
        await js.add_stream(name=STREAM, subjects=["cr.>"])
        for i in range(MSGS):
            await js.publish("cr.x", str(i).encode())
        config = ConsumerConfig(
            durable_name="d", ack_policy=AckPolicy.EXPLICIT, ack_wait=ACK_WAIT_S
        )
        await js.add_consumer(STREAM, config=config)
        psub = await js.pull_subscribe_bind("d", STREAM)
        msgs = await psub.fetch(FETCHED, timeout=TIMEOUT_S)
        for msg in msgs[:ACKED]:
            await msg.ack_sync()
        before = await js.consumer_info(STREAM, "d")
        await nc.close()

        server.kill()
        server.start()

        nc = await connect(server.url)
        js = nc.jetstream(timeout=TIMEOUT_S)
        after = await js.consumer_info(STREAM, "d")
        assert after.delivered.stream_seq == before.delivered.stream_seq == FETCHED
        assert after.ack_floor.stream_seq == before.ack_floor.stream_seq == ACKED
        assert after.num_ack_pending == FETCHED - ACKED
        assert after.num_pending == MSGS - FETCHED

        psub = await js.pull_subscribe_bind("d", STREAM)
        seen = await drain_acking(
            psub,
            MSGS - ACKED,
            confirmed_through=ACKED,
            fetch_timeout_s=ACK_WAIT_S,
            deadline_s=DRAIN_TIMEOUT_S,
        )
        assert sorted(seen) == list(range(ACKED + 1, MSGS + 1))
        assert all(seen[s] == 2 for s in range(ACKED + 1, FETCHED + 1)), seen
        assert all(seen[s] == 1 for s in range(FETCHED + 1, MSGS + 1)), seen
        await nc.close()
    finally:
        server.stop()


async def test_a_stopping_server_tells_waiting_pull_requests(tmp_path: Path) -> None:
    """SIGTERM: a waiting pull request hears ``409 Server Shutdown`` with what it still wanted
    (nats-server's signalPullConsumers; a client re-sends it once reconnected), before the
    server closes its connection, and never ``409 Consumer Deleted`` (the end of the consumer
    for clients)."""
    server = start_jetraft(tmp_path)
    try:
        nc = await connect(server.url)
        js = nc.jetstream(timeout=TIMEOUT_S)
        await js.add_stream(name=STREAM, subjects=["cr.>"])
        config = ConsumerConfig(durable_name="w", ack_policy=AckPolicy.EXPLICIT)
        await js.add_consumer(STREAM, config=config)
        heard: list[dict[str, Any]] = []

        async def on_status(msg: Msg) -> None:
            heard.append(dict(msg.headers or {}))

        await nc.subscribe("_PULL.w", cb=on_status)
        request = {"batch": 5, "expires": 30 * NS_PER_S}
        await nc.publish(
            f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.w", json.dumps(request).encode(), reply="_PULL.w"
        )
        deadline = time.monotonic() + TIMEOUT_S
        while (await js.consumer_info(STREAM, "w")).num_waiting != 1:
            assert time.monotonic() < deadline, "the pull request is not waiting"
            await asyncio.sleep(0.05)
        await asyncio.to_thread(server.stop)
        deadline = time.monotonic() + TIMEOUT_S
        while not heard:
            assert time.monotonic() < deadline, "the waiting pull request heard nothing"
            await asyncio.sleep(0.05)
        assert heard[0]["Status"] == "409"
        assert heard[0]["Description"] == "Server Shutdown"
        assert heard[0]["Nats-Pending-Messages"] == "5"
        await nc.close()
    finally:
        server.stop()
