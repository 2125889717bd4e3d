"""Atomic batch publish on this server: staging, replies, the idle timer and the advisory.

Wraps ``engine.batch.BatchStager`` (the rules) with what needs I/O: the reply to each staged or
rejected message (an empty payload, or nats-server's error PubAck; nothing without a reply
subject or on a ``no_ack`` stream), the ``$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.<stream>``
advisory, and one asyncio timer per stream for the idle timeout (10 s by default, reset by every
message of a batch, as nats-server does). A complete batch comes back to the stream host as a
``CommitReady``: the host proposes it as one ``BatchCommitEntry`` and sends its PubAck once that
entry is applied and durable.

Also reads the server config block ``jetstream { limits { batch { ... } } }`` the way nats-server
parses it (opts.go ``parseJetStreamLimitsBatch``).

Staged messages live in this process's memory only: a crash before the commit leaves no trace.

Must never: change stream state (only the host's proposals do), or block.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import string
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from cluster.router import Router
from engine.batch import (
    ABANDON_TIMEOUT,
    BatchLimits,
    BatchStager,
    CommitReady,
    InflightCounter,
    Rejected,
)
from engine.entries import InboundMsg
from protocol import api_json, gojson
from protocol.models import StreamConfig
from protocol.timefmt import format_rfc3339nano, parse_go_duration

ADVISORY_SUBJECT_PREFIX: Final = "$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED."
ADVISORY_TYPE: Final = "io.nats.jetstream.advisory.v1.stream_batch_abandoned"
EVENT_ID_CHARS: Final = 22  # a nuid is 22 base-62 characters
_BASE62: Final = string.digits + string.ascii_letters
NS_PER_S: Final = 1_000_000_000


class BatchConfigError(ValueError):
    """The ``jetstream.limits.batch`` block is not one nats-server would accept."""


@dataclass
class BatchContext:
    """What every stream's batching shares on one server: the limits and the count of open
    batches across all streams (the 1000-per-server limit)."""

    limits: BatchLimits = field(default_factory=BatchLimits)
    counter: InflightCounter = field(default_factory=InflightCounter)


def parse_batch_limits(batch_conf: Any) -> BatchLimits:
    """``jetstream { limits { batch { max_inflight_per_stream, max_inflight_total, max_msgs,
    timeout } } }``: keys case-insensitive, counts as integers, the timeout a Go duration string
    (``500ms``, ``"10s"``; a bare number is an error in nats-server too). A value <= 0 keeps the
    default; an unknown key is an error."""
    if not isinstance(batch_conf, Mapping):
        raise BatchConfigError(
            f"Expected a map to define batch limits, got {type(batch_conf).__name__}"
        )
    values: dict[str, int] = {}
    counts = {
        "max_inflight_per_stream": "inflight_per_stream_max",
        "max_inflight_total": "inflight_total_max",
        "max_msgs": "msgs_max",
    }
    for key, value in batch_conf.items():
        name = str(key).lower()
        if name in counts:
            if isinstance(value, bool) or not isinstance(value, int):
                raise BatchConfigError(f"batch {name}: expected an integer, got {value!r}")
            if value > 0:
                values[counts[name]] = value
        elif name == "timeout":
            if not isinstance(value, str):
                raise BatchConfigError(f"batch timeout: expected a duration, got {value!r}")
            try:
                timeout_ns = parse_go_duration(value)
            except ValueError as exc:
                raise BatchConfigError(f"batch timeout: {exc}") from None
            if timeout_ns > 0:
                values["idle_timeout_ns"] = timeout_ns
        else:
            raise BatchConfigError(f"unknown field {key!r} in jetstream limits batch")
    return dataclasses.replace(BatchLimits(), **values)


def batch_limits_from_config(conf: Mapping[str, Any]) -> BatchLimits | None:
    """The batch limits of a parsed server config, or None when it sets none."""
    js = conf.get("jetstream")
    if not isinstance(js, Mapping):
        return None
    js_limits = next((v for k, v in js.items() if str(k).lower() == "limits"), None)
    if js_limits is None:
        return None
    if not isinstance(js_limits, Mapping):
        raise BatchConfigError("Expected a map to define JetStreamLimits")
    batch = next((v for k, v in js_limits.items() if str(k).lower() == "batch"), None)
    return None if batch is None else parse_batch_limits(batch)


def new_event_id() -> str:
    """A random 22-character base-62 id, shaped like the nuid nats-server puts in advisories."""
    return "".join(secrets.choice(_BASE62) for _ in range(EVENT_ID_CHARS))


def abandoned_advisory(stream: str, batch_id: str, reason: str, now_ns: int) -> bytes:
    """The advisory body, keys in nats-server's order (JSStreamBatchAbandonedAdvisory)."""
    body = {
        "type": ADVISORY_TYPE,
        "id": new_event_id(),
        "timestamp": format_rfc3339nano(now_ns),
        "stream": stream,
        "batch": batch_id,
        "reason": reason,
    }
    return gojson.encode(body)


class AtomicBatches:
    """One stream's atomic batches on this server (see the module docstring)."""

    def __init__(
        self,
        stream_name: Callable[[], str],
        router: Router,
        context: BatchContext,
        *,
        clock_ns: Callable[[], int] = time.monotonic_ns,
        wall_clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self._stream_name = stream_name
        self._router = router
        self._stager = BatchStager(context.limits, context.counter)
        self._clock_ns = clock_ns
        self._wall_clock_ns = wall_clock_ns
        self._timer: asyncio.TimerHandle | None = None

    @property
    def stager(self) -> BatchStager:
        return self._stager

    def on_message(
        self, msg: InboundMsg, reply: str | None, batch_id: str, config: StreamConfig
    ) -> CommitReady | None:
        """Stage one batch message and answer it; a complete batch is returned for commit."""
        outcome = self._stager.stage(msg, batch_id, config, self._clock_ns())
        if isinstance(outcome, CommitReady):
            return outcome
        can_respond = bool(reply) and not config.no_ack
        if isinstance(outcome, Rejected):
            if outcome.abandon_reason is not None:  # nats-server advises, then replies
                self._advise(batch_id, outcome.abandon_reason)
            if can_respond:
                assert reply is not None
                body = api_json.pub_ack_error_json(config.name, outcome.error)
                self._router.publish(reply, None, None, body)
            return None
        if can_respond:
            assert reply is not None
            self._router.publish(reply, None, None, b"")
        self._arm_timer()
        return None

    def config_changed(self, config: StreamConfig) -> None:
        """allow_atomic switched off: every open batch is dropped silently (as nats-server's
        stream update does); a later message of one gets 10174, and after re-enabling 10176."""
        if not config.allow_atomic:
            self._stager.clear()

    def close(self) -> None:
        self._stager.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # ------------------------------------------------------------------ idle timeout

    def expire_due(self) -> list[str]:
        """Abandon the batches idle past the timeout, with a ``timeout`` advisory each (no
        reply: nobody is waiting); re-arm the timer for the next one. Returns their ids."""
        expired = self._stager.expire(self._clock_ns())
        for batch_id in expired:
            self._advise(batch_id, ABANDON_TIMEOUT)
        return expired

    def _arm_timer(self) -> None:
        if self._timer is not None:
            return
        deadline_ns = self._stager.next_deadline_ns()
        if deadline_ns is None:
            return
        delay_s = max(0.0, (deadline_ns - self._clock_ns()) / NS_PER_S)
        self._timer = asyncio.get_running_loop().call_later(delay_s, self._on_timer)

    def _on_timer(self) -> None:
        """Deadlines only move later (every message resets its batch's), so the timer fires at
        the earliest deadline known when it was armed and re-arms for the current earliest."""
        self._timer = None
        self.expire_due()
        self._arm_timer()

    def _advise(self, batch_id: str, reason: str) -> None:
        stream = self._stream_name()
        body = abandoned_advisory(stream, batch_id, reason, self._wall_clock_ns())
        self._router.publish(ADVISORY_SUBJECT_PREFIX + stream, None, None, body)
