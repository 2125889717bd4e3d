"""A stream's consumers on this node: their API, deliveries, acks and timers.

Consumer state lives in the engine (``engine/consumer/``) and changes only by entries of the
stream's own log, proposed through the stream host like any other operation: a consumer's
create and delete, each batch of deliveries (``DeliverEntry``, before the messages are sent, so a
delivery is never forgotten by a new leader), the acks received while the previous ack entry was
in flight (one ``AckEntry``), and the redelivery timer's verdict on messages past max_deliver.

What is not state runs here, on the stream's leader only: pull requests waiting for messages, the
redelivery queue, timers (ack wait, pull request expiry, idle heartbeats, inactivity), push
delivery to a deliver subject while it has interest, and the ``$JS.ACK`` subscription. A new
leader starts with none of it: clients re-send pull requests (theirs time out), due redeliveries
are found again from the replicated pending set.

Must never: send a message before the entry that records its delivery was applied; change
consumer state other than by a proposal; run timers or deliver on a follower.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from cluster.router import Router, Subscription
from engine.consumer.consumer import Consumer
from engine.consumer.entries import (
    Ack,
    AckEntry,
    AckKind,
    AckTimeoutEntry,
    CreateAction,
    CreateConsumerEntry,
    DeleteConsumerEntry,
    DeliverEntry,
    ResetConsumerEntry,
)
from engine.consumer.limits import ACKS_PER_ENTRY_MAX, DELIVER_SEQS_MAX
from engine.consumer.results import (
    REFUSED_EXISTS,
    REFUSED_NOT_FOUND,
    AckResult,
    CreateResult,
    DeleteResult,
    DeliverResult,
    Refusal,
    ResetResult,
    SeqPair,
    TimeoutResult,
)
from engine.entries import (
    BatchCommitEntry,
    ExpireEntry,
    LogEntry,
    MirrorEntry,
    PublishEntry,
    SourceEntry,
)
from engine.stream import Stream
from protocol import consumer_wire as W
from protocol import errors as E
from protocol.consumer_config import PullRequest, config_obj, parse_next_request
from protocol.errors import ApiError
from protocol.gojson import encode as go_json
from protocol.headers import set_header
from protocol.timefmt import format_go_duration, format_rfc3339nano, parse_rfc3339

log = logging.getLogger("jetraft.consumer")

PUSH_BATCH_MAX: Final = 256  # deliveries per entry for a push consumer
FLOW_CONTROL_MAX_PENDING: Final = 32 * 1024 * 1024  # JsFlowControlMaxPending
FLOW_CONTROL_FIRST_WINDOW: Final = FLOW_CONTROL_MAX_PENDING // 16
FC_PREFIX: Final = "$JS.FC."
NEXT_PREFIX: Final = "$JS.API.CONSUMER.MSG.NEXT."
# entries that may store messages a consumer has to be told of (an expiry stores subject
# delete markers and fires message schedules)
_STORING_ENTRIES: Final = (PublishEntry, BatchCommitEntry, MirrorEntry, SourceEntry, ExpireEntry)
ACK_METRIC_PREFIX: Final = "$JS.EVENT.METRIC.CONSUMER.ACK."
INACTIVITY_CHECK_S: Final = 1.0
CONFIGS_CACHED: Final = 1024  # distinct consumer configs whose parsed extras are kept
PULL_BATCH_MAX: Final = DELIVER_SEQS_MAX
ACK_REPLY_BODY: Final = b""
NS_PER_S: Final = 1_000_000_000
ADVISORY_PREFIX: Final = "$JS.EVENT.ADVISORY.CONSUMER."
# CONSUMER.RESET waits this long for the delivery in flight to apply (a commit round trip,
# unless the group lost its quorum), looking this often
RESET_DELIVERY_WAIT_S: Final = 5.0
RESET_POLL_S: Final = 0.001


@dataclass(slots=True)
class _Pull:
    """One waiting pull request."""

    reply: str
    left: int  # messages still wanted
    bytes_left: int  # 0: no max_bytes
    expires_at: float  # loop time; 0: never
    no_wait: bool
    heartbeat_s: float
    delivered: int = 0
    max_bytes: bool = False
    closing: bool = False  # a message did not fit its max_bytes: 409 once its batch went out
    hb_handle: asyncio.TimerHandle | None = None
    expiry_handle: asyncio.TimerHandle | None = None


@dataclass(slots=True)
class _Live:
    """The leader's runtime state of one consumer (none of it is replicated)."""

    name: str
    waiting: deque[_Pull] = field(default_factory=deque)
    redeliver: set[int] = field(default_factory=set)
    delivering: bool = False
    # a CONSUMER.RESET waiting for the delivery in flight to apply, then being applied: no new
    # delivery is proposed meanwhile (one chosen from the old position would follow the reset
    # in the log and skip what the reset gives back)
    resetting: bool = False
    # the seqs of the delivery being proposed: still due by their pending records until it is
    # applied, so the timer must not queue them for redelivery again
    in_flight: frozenset[int] = frozenset()
    timing_out: bool = False
    timer: asyncio.TimerHandle | None = None
    timer_at_ns: int = 0
    heartbeat: asyncio.TimerHandle | None = None
    last_active: float = field(default_factory=time.monotonic)
    deleting: bool = False
    watched: str = ""  # the deliver subject whose interest wakes this push consumer
    # the consumer's own subscriptions, as nats-server has them: pull requests (pull consumers)
    # and acks (unless ack_policy none); without them a request gets no-responders
    subs: list[Subscription] = field(default_factory=list)
    # push flow control (nats-server's): bytes sent since the last answered request, the window
    # (doubles with every answer), the outstanding request's reply subject and what it covers
    fc_bytes: int = 0
    fc_window: int = FLOW_CONTROL_FIRST_WINDOW
    fc_id: str = ""
    fc_covers: int = 0
    # replay_policy original: the stream time of the last message sent and when it was sent
    replay_ts_ns: int = 0
    replay_sent_at: float = 0.0
    wake: asyncio.TimerHandle | None = None  # a pump when a pause, pacing or rate wait ends
    rate_free_at: float = 0.0  # rate_limit_bps: loop time the next push message may leave


@dataclass(slots=True)
class _PendingAck:
    ack: Ack
    reply: str | None
    delivered_ns: int = 0  # when the acked message was last delivered (ack sampling)


class StreamOwner(Protocol):
    """What the consumers need of their stream's host (``cluster/stream_host.py``)."""

    @property
    def name(self) -> str: ...

    @property
    def stream(self) -> Stream: ...

    @property
    def router(self) -> Router: ...

    async def propose(self, entry: LogEntry) -> Any: ...


class ConsumerHost:
    """The consumers of one hosted stream (see the module docstring)."""

    def __init__(self, host: StreamOwner) -> None:
        self._host = host
        self._live: dict[str, _Live] = {}
        self._acks: list[_PendingAck] = []
        self._acking = False
        self._fc_sub: Subscription | None = None
        self._deleted_reason = "Leadership Change"  # what waiting pull requests hear on stop
        self._leading = False
        self._pump_scheduled = False
        self._closed = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._ticker: asyncio.TimerHandle | None = None

    # --- engine views ------------------------------------------------------------------------
    def _consumer(self, name: str) -> Consumer | None:
        return self._host.stream.consumers.get(name)

    def names(self) -> list[str]:
        return self._host.stream.consumers.names()

    def config_obj(self, name: str) -> dict[str, Any] | None:
        consumer = self._consumer(name)
        return None if consumer is None else _nats_config(consumer)

    # --- lifecycle (the stream host calls these) ---------------------------------------------
    def serve(self, leading: bool) -> None:
        """Called when the host's role or subscriptions change."""
        leading = leading and not self._closed
        if leading == self._leading:
            return
        self._leading = leading
        router = self._host.router
        if leading:
            self._fc_sub = router.subscribe_internal(
                f"{FC_PREFIX}{self._host.name}.>", self._on_flow_control
            )
            for name in self.names():
                self._live_for(name)
            self._schedule_pump()
            self._ticker = asyncio.get_running_loop().call_later(INACTIVITY_CHECK_S, self._tick)
        else:
            if self._fc_sub is not None:
                router.remove(self._fc_sub)
                self._fc_sub = None
            if self._ticker is not None:
                self._ticker.cancel()
                self._ticker = None
            for live in self._live.values():
                self._stop_live(live, self._deleted_reason)
            self._live.clear()
            self._acks.clear()

    def server_shutdown(self) -> None:
        """The node is stopping (not the stream going away): nats-server's signalPullConsumers.
        The waiting pull requests of a consumer configured with ``num_replicas`` 0 or 1 hear
        ``409 Server Shutdown`` with what they still wanted (Nats-Pending-Messages and -Bytes),
        so that a client re-sends its request once reconnected; those of a consumer configured
        with more replicas hear nothing (nats-server keeps them for the next leader; here the
        client's request expires). Either way none hears "Consumer Deleted" from close()."""
        publish = self._host.router.publish
        for live in self._live.values():
            consumer = self._consumer(live.name)
            signal = consumer is not None and _extra_int(consumer, "num_replicas") <= 1
            for pull in list(live.waiting):
                self._finish_pull(live, pull)
                if signal:
                    body = W.pending_status(409, "Server Shutdown", pull.left, pull.bytes_left)
                    publish(pull.reply, None, body, b"")

    async def close(self) -> None:
        """The stream goes away (deleted, or the node stops): waiting pull requests hear that
        their consumer is gone (on a node stop, server_shutdown came first and left none)."""
        self._closed = True
        self._deleted_reason = "Consumer Deleted"
        self.serve(False)
        for task in list(self._tasks):
            task.cancel()

    def _tick(self) -> None:
        """Inactivity: an ephemeral (or a consumer with inactive_threshold) nobody used for that
        long is deleted, as nats-server does."""
        self._ticker = None
        if not self._leading:
            return
        self._ticker = asyncio.get_running_loop().call_later(INACTIVITY_CHECK_S, self._tick)
        now = time.monotonic()
        for live in list(self._live.values()):
            consumer = self._consumer(live.name)
            if consumer is None:
                continue
            threshold_ns = _extra_int(consumer, "inactive_threshold")
            deliver = consumer.config.deliver_subject
            self._drop_unheard(live)
            if deliver and self._host.router.has_literal_interest(deliver):
                live.last_active = now
            elif live.waiting:
                live.last_active = now
            if threshold_ns > 0 and not live.deleting:
                if (now - live.last_active) * NS_PER_S > threshold_ns:
                    live.deleting = True
                    self._spawn(self._delete_inactive(live.name))

    def applied(self, entry: LogEntry, result: Any) -> None:
        """After every apply of this stream's log, on every replica."""
        if not self._leading:
            return
        if isinstance(entry, _STORING_ENTRIES):
            if self._live:
                self._schedule_pump()
        elif isinstance(entry, DeleteConsumerEntry):
            live = self._live.pop(entry.name, None)
            if live is not None:
                self._stop_live(live, "Consumer Deleted")
        elif isinstance(entry, CreateConsumerEntry):
            if isinstance(result, CreateResult):
                self._watch(self._live_for(result.name))
                self._schedule_pump()
        elif isinstance(entry, ResetConsumerEntry) and isinstance(result, ResetResult):
            live = self._live.get(result.name)
            if live is not None:  # nothing is pending any more: nothing to redeliver or time
                live.redeliver.clear()
                self._arm_timer(live)
            self._schedule_pump()

    # --- API --------------------------------------------------------------------------------
    async def create(self, name: str, config: dict[str, Any], action: str) -> bool:
        """Propose the create (or update); whether it created the consumer."""
        actions = {"": CreateAction.CREATE_OR_UPDATE, "create": CreateAction.CREATE}
        entry = CreateConsumerEntry(
            time.time_ns(),
            name,
            go_json(config),
            actions.get(action, CreateAction.UPDATE),
        )
        result = await self._host.propose(entry)
        if isinstance(result, Refusal):
            if result.reason == REFUSED_EXISTS:
                raise ApiError(E.CONSUMER_ALREADY_EXISTS)
            if result.reason == REFUSED_NOT_FOUND:
                raise ApiError(E.CONSUMER_DOES_NOT_EXIST)
            raise ApiError(E.CONSUMER_CREATE, err=result.description)
        if not isinstance(result, CreateResult):
            raise ApiError(E.CONSUMER_CREATE, err="unexpected apply result")
        if result.created:
            self._advisory("CREATED", name, "create")
        return result.created

    async def reset(self, name: str, seq: int) -> int:
        """Propose CONSUMER.RESET (the request was checked) once no delivery of the consumer is
        in flight, proposing none until it applied; the stream seq it delivers from."""
        live = self._live.get(name)
        if live is not None:
            if live.resetting:
                raise ApiError(E.CONSUMER_INVALID_RESET, err="a reset is in progress")
            live.resetting = True
        try:
            deadline = time.monotonic() + RESET_DELIVERY_WAIT_S
            while live is not None and live.delivering:
                if time.monotonic() > deadline:
                    raise ApiError(E.CONSUMER_INVALID_RESET, err="a delivery is still in flight")
                await asyncio.sleep(RESET_POLL_S)
            result = await self._host.propose(ResetConsumerEntry(time.time_ns(), name, seq))
        finally:
            if live is not None:
                live.resetting = False
                self._schedule_pump()
        if not isinstance(result, ResetResult):
            raise ApiError(E.CONSUMER_NOT_FOUND)
        return result.seq

    async def delete(self, name: str) -> None:
        if self._consumer(name) is None:
            raise ApiError(E.CONSUMER_NOT_FOUND)
        result = await self._host.propose(DeleteConsumerEntry(time.time_ns(), name))
        if isinstance(result, Refusal):
            raise ApiError(E.CONSUMER_NOT_FOUND)
        self._advisory("DELETED", name, "delete")

    def info(self, name: str, cluster: dict[str, Any] | None = None) -> dict[str, Any] | None:
        consumer = self._consumer(name)
        if consumer is None:
            return None
        stream = self._host.stream
        live = self._live.get(name)
        if live is not None:
            self._drop_unheard(live)
        out: dict[str, Any] = {
            "stream_name": self._host.name,
            "name": name,
            "created": format_rfc3339nano(consumer.created_ns),
            "config": _nats_config(consumer),
            "delivered": _seq_info(consumer.delivered, consumer.delivered_active_ns),
            "ack_floor": _seq_info(consumer.ack_floor, consumer.acked_active_ns),
            "num_ack_pending": consumer.num_ack_pending,
            "num_redelivered": consumer.num_redelivered,
            "num_waiting": len(live.waiting) if live is not None else 0,
            "num_pending": consumer.num_pending(stream),
        }
        if cluster is not None:
            out["cluster"] = cluster
        deliver = consumer.config.deliver_subject
        if deliver and self._host.router.has_literal_interest(deliver):
            out["push_bound"] = True
        paused_ns = _pause_until_ns(consumer) - time.time_ns()
        if paused_ns > 0:
            out["paused"] = True
            out["pause_remaining"] = paused_ns
        out["ts"] = format_rfc3339nano(time.time_ns())
        return out

    # --- pull requests ------------------------------------------------------------------------
    def on_next(self, name: str, reply: str, body: bytes) -> None:
        """``$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>`` on the leader."""
        consumer = self._consumer(name)
        live = self._live.get(name)
        if consumer is None or live is None:
            return  # nats-server: no reply for a consumer it does not have
        send = self._host.router.publish
        if consumer.config.deliver_subject:
            send(reply, None, W.status(409, "Consumer is push based"), b"")
            return
        try:
            req = parse_next_request(body)
        except ValueError as exc:
            send(reply, None, W.status(400, f"Bad Request - {exc}"), b"")
            return
        max_batch = _extra_int(consumer, "max_batch")
        if max_batch > 0 and req.batch > max_batch:
            send(reply, None, W.status(409, f"Exceeded MaxRequestBatch of {max_batch}"), b"")
            return
        max_expires = _extra_int(consumer, "max_expires")
        if req.expires_ns and max_expires > 0 and req.expires_ns > max_expires:
            text = f"Exceeded MaxRequestExpires of {format_go_duration(max_expires)}"
            send(reply, None, W.status(409, text), b"")
            return
        max_bytes = _extra_int(consumer, "max_bytes")
        if req.max_bytes > 0 and max_bytes > 0 and req.max_bytes > max_bytes:
            send(reply, None, W.status(409, f"Exceeded MaxRequestMaxBytes of {max_bytes}"), b"")
            return
        live.last_active = time.monotonic()
        if req.no_wait:
            paused = _pause_until_ns(consumer) > time.time_ns()
            available = 0 if paused else consumer.num_pending(self._host.stream)
            available += 0 if paused else len(live.redeliver)
            if available == 0 and req.expires_ns == 0:
                send(reply, None, W.status(404, "No Messages"), b"")
                return
        max_waiting = _extra_int(consumer, "max_waiting")
        if max_waiting > 0 and len(live.waiting) >= max_waiting:
            self._drop_unheard(live)
        if max_waiting > 0 and len(live.waiting) >= max_waiting:
            if req.heartbeat_ns == 0:
                send(reply, None, W.status(409, "Exceeded MaxWaiting"), b"")
            return
        self._add_pull(live, reply, req)

    def _add_pull(self, live: _Live, reply: str, req: PullRequest) -> None:
        loop = asyncio.get_running_loop()
        pull = _Pull(
            reply=reply,
            left=max(req.batch, 1),
            bytes_left=req.max_bytes,
            expires_at=loop.time() + req.expires_ns / NS_PER_S if req.expires_ns else 0.0,
            no_wait=req.no_wait,
            heartbeat_s=req.heartbeat_ns / NS_PER_S,
            max_bytes=req.max_bytes > 0,
        )
        if pull.expires_at:
            pull.expiry_handle = loop.call_at(pull.expires_at, self._expire_pull, live, pull)
        if pull.heartbeat_s > 0:
            pull.hb_handle = loop.call_later(pull.heartbeat_s, self._pull_heartbeat, live, pull)
        live.waiting.append(pull)
        self._schedule_pump()

    def _expire_pull(self, live: _Live, pull: _Pull) -> None:
        pull.expiry_handle = None
        if pull not in live.waiting:
            return
        self._finish_pull(live, pull)
        body = W.pending_status(408, "Request Timeout", pull.left, pull.bytes_left)
        self._host.router.publish(pull.reply, None, body, b"")

    def _pull_heartbeat(self, live: _Live, pull: _Pull) -> None:
        pull.hb_handle = None
        if pull not in live.waiting:
            return
        if not self._heard(pull.reply):
            self._finish_pull(live, pull)
            return
        consumer = self._consumer(live.name)
        if consumer is not None:
            hb = W.heartbeat(consumer.delivered.consumer_seq, consumer.delivered.stream_seq)
            self._host.router.publish(pull.reply, None, hb, b"")
        pull.hb_handle = asyncio.get_running_loop().call_later(
            pull.heartbeat_s, self._pull_heartbeat, live, pull
        )

    def _finish_pull(self, live: _Live, pull: _Pull) -> None:
        try:
            live.waiting.remove(pull)
        except ValueError:
            pass
        for handle in (pull.expiry_handle, pull.hb_handle):
            if handle is not None:
                handle.cancel()
        pull.expiry_handle = pull.hb_handle = None

    def _heard(self, reply: str) -> bool:
        """Does anyone (here or behind a route, wildcards included) subscribe to a pull
        request's reply subject? nats-server's ``HasInterest`` on the request's reply."""
        result = self._host.router.sublist.match(reply)
        return bool(result.plain) or any(result.queues.values())

    def _drop_unheard(self, live: _Live) -> None:
        """Drop, without a status, the waiting pull requests whose reply nobody subscribes to
        any more, as nats-server does before it serves a request or counts ``num_waiting``:
        no message is delivered to nobody (it stays pending for the next request)."""
        for pull in [p for p in live.waiting if not self._heard(p.reply)]:
            self._finish_pull(live, pull)

    # --- delivery ----------------------------------------------------------------------------
    def _live_for(self, name: str) -> _Live:
        live = self._live.get(name)
        if live is None:
            live = self._live[name] = _Live(name)
            self._subscribe(live)
            self._watch(live)
            self._arm_timer(live)
            self._arm_push_heartbeat(live)
        return live

    def _subscribe(self, live: _Live) -> None:
        consumer = self._consumer(live.name)
        if consumer is None:
            return
        router, stream, name = self._host.router, self._host.name, live.name

        def on_next(_s: str, reply: str | None, _h: bytes | None, body: bytes) -> None:
            if reply:
                self.on_next(name, reply, body)

        live.subs.append(router.subscribe_internal(f"{NEXT_PREFIX}{stream}.{name}", on_next))
        if consumer.config.ack_policy != "none":
            live.subs.append(
                router.subscribe_internal(f"{W.ACK_PREFIX}{stream}.{name}.>", self._on_ack)
            )

    def _watch(self, live: _Live) -> None:
        """A push consumer delivers as soon as its deliver subject gets a subscriber."""
        consumer = self._consumer(live.name)
        subject = consumer.config.deliver_subject if consumer is not None else ""
        if subject == live.watched:
            return
        router = self._host.router
        if live.watched:
            router.unwatch_interest(live.watched, self._schedule_pump)
        live.watched = subject
        if subject:
            router.watch_interest(subject, self._schedule_pump)

    def _stop_live(self, live: _Live, reason: str) -> None:
        """Stop serving a consumer here; waiting pull requests get a 409 with ``reason``."""
        for sub in live.subs:
            self._host.router.remove(sub)
        live.subs = []
        for pull in list(live.waiting):
            self._finish_pull(live, pull)
            self._host.router.publish(pull.reply, None, W.status(409, reason), b"")
        for handle in (live.timer, live.heartbeat, live.wake):
            if handle is not None:
                handle.cancel()
        live.timer = live.heartbeat = live.wake = None
        if live.watched:
            self._host.router.unwatch_interest(live.watched, self._schedule_pump)
            live.watched = ""

    def _schedule_pump(self) -> None:
        if self._pump_scheduled or not self._leading:
            return
        self._pump_scheduled = True
        asyncio.get_running_loop().call_soon(self._pump)

    def _pump(self) -> None:
        """Start a delivery for every consumer that has demand and nothing in flight."""
        self._pump_scheduled = False
        if not self._leading:
            return
        for live in list(self._live.values()):
            if not live.delivering and not live.resetting:
                self._try_deliver(live)

    def _demand(self, live: _Live, consumer: Consumer) -> int:
        config = consumer.config
        loop = asyncio.get_running_loop()
        paused_ns = _pause_until_ns(consumer) - time.time_ns()
        if paused_ns > 0:
            self._wake_at(live, loop.time() + paused_ns / NS_PER_S)
            return 0
        if config.deliver_subject:
            if _extra_int(consumer, "rate_limit_bps") > 0:
                if loop.time() < live.rate_free_at:
                    self._wake_at(live, live.rate_free_at)
                    return 0
                return 1  # paced message by message
            if not self._host.router.has_literal_interest(config.deliver_subject):
                return 0
            if _extra_bool(consumer, "flow_control") and live.fc_bytes > live.fc_window:
                return 0  # stalled until the client answers the flow control request
            if config.replay_policy == "original":
                return 1
            return PUSH_BATCH_MAX
        self._drop_unheard(live)
        return min(sum(p.left for p in live.waiting if not p.closing), PULL_BATCH_MAX)

    def _try_deliver(self, live: _Live) -> None:
        consumer = self._consumer(live.name)
        if consumer is None:
            return
        demand = self._demand(live, consumer)
        if demand <= 0:
            return
        stream = self._host.stream
        seqs = sorted(s for s in live.redeliver if s in consumer.pending)[:demand]
        live.redeliver.difference_update(seqs)
        if len(seqs) < demand:
            seqs += consumer.next_new_seqs(stream, demand - len(seqs))
        if not seqs:
            self._end_of_stream(live)
            return
        replays_original = consumer.config.replay_policy == "original"
        if replays_original and not self._replay_due(live, seqs[0]):
            live.redeliver.update(s for s in seqs if s in consumer.pending)
            return
        plan: dict[int, _Pull] = {}
        if not consumer.config.deliver_subject:
            seqs = self._plan_pulls(live, consumer, seqs, plan)
            if not seqs:
                self._close_planned(live, plan)  # requests a message did not fit
                self._schedule_pump()
                return
        live.delivering = True
        live.in_flight = frozenset(seqs)
        entry = DeliverEntry(time.time_ns(), live.name, tuple(seqs))
        self._spawn(self._deliver(live, entry, plan))

    def _plan_pulls(
        self, live: _Live, consumer: Consumer, seqs: list[int], plan: dict[int, _Pull]
    ) -> list[int]:
        """Which waiting request gets which message, as nats-server serves them: one message
        each in turn; a message that does not fit a request's remaining ``max_bytes`` (subject,
        ack reply, headers and payload counted) closes that request with a 409 once its earlier
        messages went out. Reserves the batch and bytes; returns the seqs to deliver."""
        stream = self._host.stream
        pending_now = consumer.num_pending(stream)
        cseq = consumer.delivered.consumer_seq
        firsts = 0
        out: list[int] = []
        for seq in seqs:
            msg = stream.load(seq)
            if msg is None:
                continue
            first = seq not in consumer.pending
            dc = 1 if first else consumer.deliveries(seq) + 1
            reply = W.ack_reply(
                self._host.name,
                live.name,
                dc,
                seq,
                cseq + len(out) + 1,
                msg.ts_ns,
                pending_now - firsts - (1 if first else 0),
            )
            size = len(msg.subject) + len(reply) + len(msg.hdr) + len(msg.data)
            while True:
                pull = next((p for p in live.waiting if p.left > 0 and not p.closing), None)
                if pull is None:
                    return out
                if pull.max_bytes and size > pull.bytes_left:
                    pull.closing = True  # 409 Message Size Exceeds MaxBytes after its messages
                    continue
                break
            live.waiting.remove(pull)  # round robin: the served request goes to the back
            live.waiting.append(pull)
            pull.left -= 1
            if pull.max_bytes:
                pull.bytes_left -= size
                if pull.bytes_left == 0:
                    pull.left = 0
            plan[seq] = pull
            out.append(seq)
            firsts += 1 if first else 0
        return out

    def _replay_due(self, live: _Live, seq: int) -> bool:
        """replay_policy original: is it time for the message at ``seq``? (Else a timer waits
        for it: messages go out as far apart as they were stored.)"""
        msg = self._host.stream.load(seq)
        if msg is None or live.replay_ts_ns == 0:
            return True
        loop = asyncio.get_running_loop()
        due = live.replay_sent_at + max(0, msg.ts_ns - live.replay_ts_ns) / NS_PER_S
        if loop.time() >= due:
            return True
        self._wake_at(live, due)
        return False

    def _wake_at(self, live: _Live, when: float) -> None:
        """Pump again at loop time ``when`` (the earliest of the waits asked for)."""
        if live.wake is not None:
            if live.wake.when() <= when:
                return
            live.wake.cancel()
        live.wake = asyncio.get_running_loop().call_at(when, self._woken, live)

    def _woken(self, live: _Live) -> None:
        live.wake = None
        self._schedule_pump()

    def _end_of_stream(self, live: _Live) -> None:
        """Nothing to deliver now: no-wait pull requests are answered (nats-server: 404 when
        they got nothing or never expire, else they wait for their expiry)."""
        for pull in [p for p in live.waiting if p.no_wait]:
            if pull.expires_at == 0 or pull.delivered > 0:
                self._finish_pull(live, pull)
                self._host.router.publish(pull.reply, None, W.status(404, "No Messages"), b"")

    async def _deliver(self, live: _Live, entry: DeliverEntry, plan: dict[int, _Pull]) -> None:
        try:
            result = await self._host.propose(entry)
        except ApiError:
            live.delivering = False
            live.in_flight = frozenset()
            return
        live.delivering = False
        live.in_flight = frozenset()
        if isinstance(result, DeliverResult) and self._leading:
            self._send(live, result, plan)
            self._arm_timer(live)
        self._close_planned(live, plan)
        self._schedule_pump()

    def _close_planned(self, live: _Live, plan: dict[int, _Pull]) -> None:
        """Requests served to the end of their batch or bytes, or closed by a message too big
        for them, end now that their messages went out."""
        publish = self._host.router.publish
        for pull in list(live.waiting):
            if pull.closing:
                self._finish_pull(live, pull)
                body = W.pending_status(
                    409, "Message Size Exceeds MaxBytes", pull.left, pull.bytes_left
                )
                publish(pull.reply, None, body, b"")
            elif pull.left <= 0 and pull in plan.values():
                self._finish_pull(live, pull)
                if pull.max_bytes and pull.bytes_left > 0:
                    body = W.pending_status(409, "Batch Completed", 0, pull.bytes_left)
                    publish(pull.reply, None, body, b"")

    def _send(self, live: _Live, result: DeliverResult, plan: dict[int, _Pull]) -> None:
        consumer = self._consumer(live.name)
        if consumer is None or not result.delivered:
            return
        stream = self._host.stream
        config = consumer.config
        publish = self._host.router.publish
        name, stream_name = live.name, self._host.name
        headers_only = _extra_bool(consumer, "headers_only")
        flow_control = _extra_bool(consumer, "flow_control")
        rate_bps = _extra_int(consumer, "rate_limit_bps")
        # num_pending as each message leaves: what is still undelivered after it
        pending = consumer.num_pending(stream) + sum(
            1 for d in result.delivered if d.deliveries == 1
        )
        push = config.deliver_subject
        for delivery in result.delivered:
            if delivery.deliveries == 1:
                pending -= 1
            msg = stream.load(delivery.stream_seq)
            if msg is None:
                continue  # removed since: the pending entry goes with the next timeout
            reply = W.ack_reply(
                stream_name,
                name,
                delivery.deliveries,
                delivery.stream_seq,
                delivery.consumer_seq,
                msg.ts_ns,
                pending,
            )
            hdr, data = msg.hdr or None, msg.data
            if headers_only:
                hdr = set_header(hdr or b"", W.HDR_MSG_SIZE, str(len(data)))
                data = b""
            if config.replay_policy == "original" and delivery.deliveries == 1:
                live.replay_ts_ns = msg.ts_ns
                live.replay_sent_at = asyncio.get_running_loop().time()
            if push:
                publish(push, reply, hdr, data, shown=msg.subject)
                size = len(msg.subject) + len(msg.hdr) + len(msg.data)
                if flow_control:
                    self._count_flow(live, size)
                if rate_bps > 0:
                    now = asyncio.get_running_loop().time()
                    live.rate_free_at = max(now, live.rate_free_at) + size * 8 / rate_bps
                continue
            pull = plan.get(delivery.stream_seq)
            if pull is None or pull not in live.waiting:
                continue  # its request expired meanwhile: redelivered after ack_wait
            publish(pull.reply, reply, hdr, data, shown=msg.subject)
            pull.delivered += 1
        if push:
            self._arm_push_heartbeat(live)

    # --- push flow control ------------------------------------------------------------------
    def _count_flow(self, live: _Live, size: int) -> None:
        live.fc_bytes += size
        if not live.fc_id and live.fc_bytes > live.fc_window // 2:
            consumer = self._consumer(live.name)
            if consumer is None:
                return
            token = "".join(_FC_DIGITS[b % len(_FC_DIGITS)] for b in os.urandom(4))
            live.fc_id = f"{FC_PREFIX}{self._host.name}.{live.name}.{token}"
            live.fc_covers = live.fc_bytes
            self._host.router.publish(
                consumer.config.deliver_subject, live.fc_id, W.FLOW_CONTROL_REQUEST, b""
            )

    def _on_flow_control(
        self, subject: str, _reply: str | None, _hdr: bytes | None, _body: bytes
    ) -> None:
        for live in self._live.values():
            if live.fc_id and live.fc_id == subject:
                live.fc_window = min(live.fc_window * 2, FLOW_CONTROL_MAX_PENDING)
                live.fc_bytes = max(0, live.fc_bytes - live.fc_covers)
                live.fc_id, live.fc_covers = "", 0
                self._schedule_pump()
                return

    # --- push heartbeats -----------------------------------------------------------------------
    def _arm_push_heartbeat(self, live: _Live) -> None:
        consumer = self._consumer(live.name)
        if consumer is None or not consumer.config.deliver_subject:
            return
        interval_ns = _extra_int(consumer, "idle_heartbeat")
        if interval_ns <= 0:
            return
        if live.heartbeat is not None:
            live.heartbeat.cancel()
        live.heartbeat = asyncio.get_running_loop().call_later(
            interval_ns / NS_PER_S, self._push_heartbeat, live
        )

    def _push_heartbeat(self, live: _Live) -> None:
        live.heartbeat = None
        consumer = self._consumer(live.name)
        if consumer is None or not self._leading:
            return
        deliver = consumer.config.deliver_subject
        if self._host.router.has_literal_interest(deliver):
            hb = W.heartbeat(
                consumer.delivered.consumer_seq, consumer.delivered.stream_seq, live.fc_id
            )
            self._host.router.publish(deliver, None, hb, b"")
            self._schedule_pump()  # interest may have appeared since the last look
        self._arm_push_heartbeat(live)

    # --- redelivery ---------------------------------------------------------------------------
    def _arm_timer(self, live: _Live) -> None:
        """Collect what is due now into the redelivery queue; wake at the next deadline."""
        consumer = self._consumer(live.name)
        if consumer is None or not self._leading:
            return
        now = time.time_ns()
        plan = consumer.redelivery_due(now)
        queued = [seq for seq in plan.redeliver if seq not in live.in_flight]
        if queued:
            live.redeliver.update(queued)
            self._schedule_pump()
        if plan.exhausted and not live.timing_out:
            live.timing_out = True
            self._spawn(self._time_out(live, AckTimeoutEntry(now, live.name)))
        due = consumer.pending.next_deadline_after(now)
        if live.timer is not None and (due is None or due != live.timer_at_ns):
            live.timer.cancel()
            live.timer = None
        if due is not None and live.timer is None:
            live.timer_at_ns = due
            delay = max(0.0, (due - now) / NS_PER_S)
            live.timer = asyncio.get_running_loop().call_later(delay, self._timer_fired, live)

    def _timer_fired(self, live: _Live) -> None:
        live.timer = None
        self._arm_timer(live)

    async def _time_out(self, live: _Live, entry: AckTimeoutEntry) -> None:
        try:
            result = await self._host.propose(entry)
        except ApiError:
            return
        finally:
            live.timing_out = False
        if isinstance(result, TimeoutResult):
            for exhausted in result.exhausted:
                self._max_deliveries_advisory(live.name, exhausted.stream_seq, exhausted.deliveries)
        self._arm_timer(live)

    # --- acks -----------------------------------------------------------------------------------
    def _on_ack(self, subject: str, reply: str | None, _hdr: bytes | None, body: bytes) -> None:
        parsed = W.parse_ack_subject(subject)
        if parsed is None or parsed.stream != self._host.name:
            return
        live = self._live.get(parsed.consumer)
        consumer = self._consumer(parsed.consumer)
        if live is None or consumer is None:
            return
        ack_body = W.parse_ack_body(body)
        if ack_body is None:
            if reply:  # nats-server answers even an ack it does not understand
                self._host.router.publish(reply, None, None, ACK_REPLY_BODY)
            return
        live.last_active = time.monotonic()
        kinds = {W.ACK: AckKind.ACK, W.NEXT: AckKind.ACK, W.NAK: AckKind.NAK}
        kinds |= {W.WPI: AckKind.WPI, W.TERM: AckKind.TERM}
        kind = kinds[ack_body.kind]
        ack = Ack(
            parsed.consumer,
            kind,
            parsed.stream_seq,
            parsed.consumer_seq,
            ack_body.delay_ns if kind == AckKind.NAK else 0,
            ack_body.reason if kind == AckKind.TERM else "",
        )
        record = consumer.pending.get(parsed.stream_seq)
        delivered_ns = record.ts_ns if record is not None else 0
        if ack_body.kind == W.NEXT and reply:
            self._acks.append(_PendingAck(ack, None, delivered_ns))
            self.on_next(parsed.consumer, reply, ack_body.next_request)
        else:
            self._acks.append(_PendingAck(ack, reply, delivered_ns))
        if not self._acking:
            self._acking = True
            self._spawn(self._flush_acks())

    async def _flush_acks(self) -> None:
        """One AckEntry for every ack received while the previous one was in flight."""
        try:
            while self._acks and self._leading:
                batch, self._acks = (
                    self._acks[:ACKS_PER_ENTRY_MAX],
                    self._acks[ACKS_PER_ENTRY_MAX:],
                )
                entry = AckEntry(time.time_ns(), tuple(p.ack for p in batch))
                try:
                    result = await self._host.propose(entry)
                except ApiError:
                    return  # deposed: the acks are lost with the leadership (clients retry)
                publish = self._host.router.publish
                for pending in batch:
                    if pending.reply:
                        publish(pending.reply, None, None, ACK_REPLY_BODY)
                if isinstance(result, AckResult):
                    for ack in result.terminated:
                        self._terminated_advisory(ack)
                    self._sample(batch, result)
                touched = {p.ack.consumer for p in batch}
                for name in touched:
                    live = self._live.get(name)
                    if live is not None:
                        self._arm_timer(live)
                self._schedule_pump()
        finally:
            self._acking = False

    # --- inactivity -----------------------------------------------------------------------------
    async def _delete_inactive(self, name: str) -> None:
        try:
            result = await self._host.propose(DeleteConsumerEntry(time.time_ns(), name))
        except ApiError:
            live = self._live.get(name)
            if live is not None:
                live.deleting = False
            return
        if isinstance(result, DeleteResult):
            self._advisory("DELETED", name, "delete")

    # --- advisories -----------------------------------------------------------------------------
    def _publish_advisory(self, kind: str, name: str, event_type: str, **fields: Any) -> None:
        """``$JS.EVENT.ADVISORY.CONSUMER.<kind>.<stream>.<consumer>`` with nats-server's
        envelope (type, id, timestamp, stream, consumer) and ``fields``."""
        stream = self._host.name
        body = {
            "type": event_type,
            "id": os.urandom(11).hex(),
            "timestamp": format_rfc3339nano(time.time_ns()),
            "stream": stream,
            "consumer": name,
            **fields,
        }
        subject = f"{ADVISORY_PREFIX}{kind}.{stream}.{name}"
        self._host.router.publish(subject, None, None, go_json(body))

    def _advisory(self, kind: str, name: str, action: str) -> None:
        event = "io.nats.jetstream.advisory.v1.consumer_action"
        self._publish_advisory(kind, name, event, action=action)

    def _max_deliveries_advisory(self, name: str, seq: int, deliveries: int) -> None:
        event = "io.nats.jetstream.advisory.v1.max_deliver"
        self._publish_advisory("MAX_DELIVERIES", name, event, stream_seq=seq, deliveries=deliveries)

    def _sample(self, batch: list[_PendingAck], result: AckResult) -> None:
        """sample_freq: an ack metric for that share of the applied acks (nats-server's)."""
        applied = set(result.applied)
        now = time.time_ns()
        for pending in batch:
            ack = pending.ack
            if ack.kind != AckKind.ACK or ack not in applied:
                continue
            consumer = self._consumer(ack.consumer)
            freq = _sample_percent(consumer) if consumer is not None else 0
            if freq <= 0 or int.from_bytes(os.urandom(2), "big") % 100 >= freq:
                continue
            metric = {
                "type": "io.nats.jetstream.metric.v1.consumer_ack",
                "id": os.urandom(11).hex(),
                "timestamp": format_rfc3339nano(now),
                "stream": self._host.name,
                "consumer": ack.consumer,
                "consumer_seq": ack.consumer_seq,
                "stream_seq": ack.stream_seq,
                "ack_time": now - pending.delivered_ns if pending.delivered_ns else 0,
                "deliveries": consumer.deliveries(ack.stream_seq) if consumer else 1,
            }
            subject = f"{ACK_METRIC_PREFIX}{self._host.name}.{ack.consumer}"
            self._host.router.publish(subject, None, None, go_json(metric))

    def _terminated_advisory(self, ack: Ack) -> None:
        consumer = self._consumer(ack.consumer)
        self._publish_advisory(
            "MSG_TERMINATED",
            ack.consumer,
            "io.nats.jetstream.advisory.v1.terminated",
            consumer_seq=ack.consumer_seq,
            stream_seq=ack.stream_seq,
            deliveries=consumer.deliveries(ack.stream_seq) if consumer else 1,
            reason=ack.reason,
        )

    # --- helpers ----------------------------------------------------------------------------
    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "stream %s: a consumer task failed", self._host.name, exc_info=task.exception()
            )


_FC_DIGITS: Final = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _pause_until_ns(consumer: Consumer) -> int:
    """The consumer's pause_until as Unix ns (0: not paused)."""
    return _parse_pause(_extra(consumer).get("pause_until", ""))


@functools.lru_cache(maxsize=CONFIGS_CACHED)
def _parse_pause(raw: str) -> int:
    """A pause_until as the config stores it (canonical JSON text) -> Unix ns; asked on every
    pump, parsed once per distinct value."""
    if not raw:
        return 0
    try:
        text = json.loads(raw)
        return parse_rfc3339(text) if isinstance(text, str) else 0
    except ValueError:
        return 0


def _sample_percent(consumer: Consumer) -> int:
    raw = _extra(consumer).get("sample_freq", "")
    text = raw.strip('"').removesuffix("%")
    return int(text) if text.isdigit() else 0


def _extra(consumer: Consumer) -> dict[str, str]:
    """The config fields the state machine keeps verbatim (read-only: shared per config)."""
    return _extra_map(consumer.config.extra)


@functools.lru_cache(maxsize=CONFIGS_CACHED)
def _extra_map(extra: tuple[tuple[str, str], ...]) -> dict[str, str]:
    # read on the delivery path for every message batch: built once per distinct config
    return dict(extra)


def _extra_int(consumer: Consumer, key: str) -> int:
    raw = _extra(consumer).get(key)
    try:
        return int(raw) if raw is not None else 0
    except ValueError:
        return 0


def _extra_bool(consumer: Consumer, key: str) -> bool:
    return _extra(consumer).get(key) == "true"


def _seq_info(pair: SeqPair, active_ns: int) -> dict[str, Any]:
    out: dict[str, Any] = {"consumer_seq": pair.consumer_seq, "stream_seq": pair.stream_seq}
    if active_ns:
        out["last_active"] = format_rfc3339nano(active_ns)
    return out


def _nats_config(consumer: Consumer) -> dict[str, Any]:
    return config_obj(consumer.config.to_obj())
