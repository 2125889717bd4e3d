"""nats-py connections for the integration tests: fail fast, never reconnect on their own, so a
dead server is a test failure and not a hang."""

from __future__ import annotations

import time
from typing import Any

import nats
import nats.errors
from nats.aio.client import Client as NATS
from nats.js.client import JetStreamContext

CONNECT_TIMEOUT_S = 5
NATS_KIND = "nats"
JETRAFT_KIND = "jetraft"
SERVER_KINDS = [NATS_KIND, JETRAFT_KIND]


async def connect(url: str, **options: Any) -> NATS:
    """A nats-py connection to ``url`` that does not reconnect."""
    options.setdefault("connect_timeout", CONNECT_TIMEOUT_S)
    options.setdefault("allow_reconnect", False)
    options.setdefault("max_reconnect_attempts", 0)
    return await nats.connect(url, **options)


async def drain_acking(
    psub: JetStreamContext.PullSubscription,
    count: int,
    *,
    confirmed_through: int,
    fetch_timeout_s: float,
    deadline_s: float,
) -> dict[int, int]:
    """Fetch and ``ack_sync`` until ``count`` distinct stream seqs came, within ``deadline_s``:
    {seq: its delivery count}. A seq up to ``confirmed_through`` (acked and confirmed before)
    coming back fails the test."""
    seen: dict[int, int] = {}
    deadline = time.monotonic() + deadline_s
    while len(seen) < count:
        assert time.monotonic() < deadline, f"only {sorted(seen)} were delivered"
        try:
            msgs = await psub.fetch(count, timeout=fetch_timeout_s)
        except nats.errors.TimeoutError:
            continue
        for msg in msgs:
            seq = msg.metadata.sequence.stream
            assert seq > confirmed_through, f"seq {seq} was acked (confirmed) and came back"
            seen[seq] = msg.metadata.num_delivered
            await msg.ack_sync()
    return seen
