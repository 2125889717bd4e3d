"""nats-py connections for the integration tests: fail fast, never reconnect on their own, so a
dead server is a test failure and not a hang."""

from __future__ import annotations

from typing import Any

import nats
from nats.aio.client import Client as NATS

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
