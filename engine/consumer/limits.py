"""Every bound and default of the consumer state machine, with the reason for it.

Defaults are nats-server's (server/consumer.go); the bounds that are jetraft's own keep one log
entry, one snapshot and one config small enough to replicate and decode safely.

Must never: hold state or depend on anything but ``engine.limits``.
"""

from __future__ import annotations

from typing import Final

from engine.limits import NS_PER_MS, NS_PER_S, SEQ_MAX

# nats-server's default ack wait for consumers that need acks (JsAckWaitDefault).
ACK_WAIT_DEFAULT_NS: Final = 30 * NS_PER_S
# nats-server's default max_ack_pending for consumers that need acks (JsDefaultMaxAckPending):
# without it a slow pull client could hold every message of the stream unacknowledged.
MAX_ACK_PENDING_DEFAULT: Final = 1000
# -1 means "no limit" for max_deliver and max_ack_pending, as in nats-server's configs.
UNLIMITED: Final = -1
# The leader's redelivery timer fires this much after the earliest deadline (nats-server's
# ackWaitDelay), so deadlines that fall within a burst are handled by one timer firing and one
# entry rather than one each. Only the leader's timer uses it; apply never does.
ACK_TIMER_SLACK_NS: Final = 1 * NS_PER_MS

# Consumer names: nats-server's JSMaxNameLen (a name becomes a subject token and a directory name).
CONSUMER_NAME_BYTES_MAX: Final = 255
# Characters a consumer name may not hold (nats-server isValidAssetName): they would break the
# subjects ($JS.API.CONSUMER.INFO.<stream>.<name>, $JS.ACK.<stream>.<name>...) and paths.
CONSUMER_NAME_FORBIDDEN: Final = frozenset(".*>/\\ \t\r\n\f\x00")
# nats-server's JSMaxDescriptionLen.
DESCRIPTION_BYTES_MAX: Final = 4096
# A config arrives in one API request, which cannot exceed the default max_payload (1 MiB);
# refusing larger ones keeps a create entry bounded however it was produced.
CONFIG_JSON_BYTES_MAX: Final = 1024 * 1024

# One deliver entry names at most this many stream seqs: a pull request's batch larger than this
# is proposed as several entries, so no single entry (8 bytes a seq) grows past ~80 KiB.
DELIVER_SEQS_MAX: Final = 10_000
# One ack entry coalesces at most this many acks (about 20 to 40 bytes each): the leader starts
# a new entry past it, which bounds the entry and the work of one apply.
ACKS_PER_ENTRY_MAX: Final = 10_000
# A +TERM reason is free text from the client; it only goes into an advisory, so it is cut here.
TERM_REASON_BYTES_MAX: Final = 1024
# NAK delays and timestamps are int64 nanoseconds on the wire (Go's time.Duration).
NS_MAX: Final = (1 << 63) - 1
NS_MIN: Final = -(1 << 63)
# Sequences are uint64 (engine.limits).
SEQ_LIMIT: Final = SEQ_MAX
