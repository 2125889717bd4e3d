"""Lame duck mode: how a server leaves without dropping its clients all at once (nats-server's
``SIGUSR2``, server.go ``lameDuckMode``).

On the signal the server stops accepting clients, hands every Raft group it leads to a caught-up
follower (waiting a second when it handed any on), and tells each client that asked for
asynchronous INFO (protocol 1, past its first PONG) ``"ldm": true``, so that the client can
reconnect elsewhere on its own. After ``lame_duck_grace_period`` it closes the remaining clients
one at a time, spread over what is left of ``lame_duck_duration`` with a pause of at most a
second between two, and then shuts down as on ``SIGTERM``. Unlike nats-server, JetStream keeps
serving on this node (as a follower) until that shutdown: the node stays a replica for as long
as it runs.

This module holds the settings and the schedule; ``cluster/server.py`` carries it out.

Must never: accept a client once lame duck mode began, or take longer than the duration (plus
the leader hand-off's second) to shut down.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Final

LAME_DUCK_DURATION_S: Final = 120.0  # nats-server DEFAULT_LAME_DUCK_DURATION
LAME_DUCK_GRACE_PERIOD_S: Final = 10.0  # DEFAULT_LAME_DUCK_GRACE_PERIOD
LAME_DUCK_DURATION_MIN_S: Final = 30.0  # the config's minimum, as nats-server checks it
LEADER_HANDOFF_WAIT_S: Final = 1.0  # for the new leaders to take over before clients hear
CLOSE_PAUSE_MAX_S: Final = 1.0  # a few clients are not spread over the whole duration


class LameDuckConfigError(ValueError):
    """The lame duck settings are not ones nats-server would start with."""


@dataclass(frozen=True)
class LameDuckSettings:
    duration_s: float = LAME_DUCK_DURATION_S
    grace_period_s: float = LAME_DUCK_GRACE_PERIOD_S

    def __post_init__(self) -> None:
        if self.duration_s < LAME_DUCK_DURATION_MIN_S:
            raise LameDuckConfigError(
                f"invalid lame_duck_duration of {self.duration_s:g}s, minimum is 30 seconds"
            )
        if self.grace_period_s < 0:
            raise LameDuckConfigError("invalid lame_duck_grace_period, needs to be positive")
        if self.grace_period_s >= self.duration_s:
            raise LameDuckConfigError(
                f"lame duck grace period ({self.grace_period_s:g}s) should be strictly lower "
                f"than lame duck duration ({self.duration_s:g}s)"
            )


def close_pauses(clients: int, settings: LameDuckSettings, rng: random.Random) -> list[float]:
    """The pause after closing each client but the last, in seconds: the span left after the
    grace period shared evenly (at most a second each), each pause drawn from its upper half."""
    assert clients >= 0
    if clients <= 1:
        return []
    span = settings.duration_s - settings.grace_period_s  # > 0: the settings check it
    share = min(span / clients, CLOSE_PAUSE_MAX_S)
    return [rng.uniform(share / 2, share) for _ in range(clients - 1)]
