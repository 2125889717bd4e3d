"""Push consumers that pace their deliveries: ``rate_limit_bps`` and ``replay_policy: original``.

Both are lower bounds on time (a slow machine only makes them pass more easily): at a rate of R
bits per second, N messages of S bytes take at least N*S*8/R seconds after the first; with
``original`` replay, messages stored G seconds apart are delivered at least about G apart.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path

import pytest
from nats.aio.subscription import Subscription
from nats.js.api import ConsumerConfig, DeliverPolicy, ReplayPolicy

from tests.integration.clients import connect
from tests.servers import start_jetraft

pytestmark = pytest.mark.integration

TIMEOUT_S = 10.0
PAYLOAD = b"x" * 200
MSGS = 5
RATE_BPS = 8 * 1000  # 1,000 bytes a second: five ~210-byte messages need about a second
STORED_GAP_S = 0.4
SLACK = 0.8  # timers and scheduling may fire a little early relative to our clock reads


async def _collect(sub: Subscription, count: int) -> list[float]:
    times: list[float] = []
    for _ in range(count):
        await sub.next_msg(timeout=TIMEOUT_S)
        times.append(time.monotonic())
    return times


async def test_rate_limit_and_original_replay_pace_a_push_consumer(tmp_path: Path) -> None:
    server = start_jetraft(tmp_path)
    try:
        nc = await connect(server.url)
        js = nc.jetstream(timeout=TIMEOUT_S)
        await js.add_stream(name="PACE", subjects=["pace.>"])
        for _ in range(MSGS):
            await js.publish("pace.rate", PAYLOAD)
        for _ in range(3):
            await js.publish("pace.replay", b"r")
            await asyncio.sleep(STORED_GAP_S)

        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        rate = ConsumerConfig(
            durable_name="rate",
            deliver_subject=inbox,
            filter_subject="pace.rate",
            rate_limit_bps=RATE_BPS,
        )
        await js.add_consumer("PACE", config=rate)
        times = await _collect(sub, MSGS)
        sent_bits = (MSGS - 1) * len(PAYLOAD) * 8  # the first goes at once
        assert times[-1] - times[0] >= SLACK * sent_bits / RATE_BPS, times

        inbox2 = nc.new_inbox()
        sub2 = await nc.subscribe(inbox2)
        replay = ConsumerConfig(
            durable_name="replay",
            deliver_subject=inbox2,
            filter_subject="pace.replay",
            deliver_policy=DeliverPolicy.ALL,
            replay_policy=ReplayPolicy.ORIGINAL,
        )
        await js.add_consumer("PACE", config=replay)
        times = await _collect(sub2, 3)
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert all(gap >= SLACK * STORED_GAP_S for gap in gaps), gaps
        await nc.close()
    finally:
        server.stop()
