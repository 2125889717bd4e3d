"""When an unacknowledged delivery is due for redelivery: ack wait and backoff.

A pending message is due ``wait`` after its pending timestamp, where ``wait`` is ``ack_wait``, or
with a backoff list the entry for its number of redeliveries so far (the last entry repeats;
nats-server checkPending). A NAK with a delay, or without one, moves the timestamp so that the
message is due exactly then; +WPI moves it to now. Functions of the numbers alone: the leader's
timer asks ``Consumer.next_redelivery_ns``; apply never looks at a clock.

Must never: read clocks.
"""

from __future__ import annotations

from engine.consumer.config import ConsumerConfig


def wait_ns(config: ConsumerConfig, redeliveries: int) -> int:
    """How long a message delivered ``redeliveries + 1`` times waits for its ack."""
    backoff = config.backoff
    if backoff:
        return backoff[min(max(redeliveries, 0), len(backoff) - 1)]
    return config.ack_wait


def deadline_ns(config: ConsumerConfig, ts_ns: int, redeliveries: int) -> int:
    """When a message pending since ``ts_ns`` is due for redelivery."""
    return ts_ns + wait_ns(config, redeliveries)


def timestamp_due_at(config: ConsumerConfig, due_ns: int, redeliveries: int) -> int:
    """The pending timestamp that makes a message due exactly at ``due_ns`` (NAK)."""
    return due_ns - wait_ns(config, redeliveries)
