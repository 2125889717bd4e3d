"""Differential: JetStream consumers ($JS.API.CONSUMER.*, pull requests, push delivery, acks).

The consumer JSON API (CREATE, DURABLE.CREATE, INFO, NAMES, LIST, DELETE and their errors),
pull requests to ``$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>`` and every status they end
with (404, 408, 409, 400, 100 heartbeats, 503), the ``$JS.ACK`` reply subjects of delivered
messages and the acks sent to them, push delivery to a deliver subject, deliver and ack policies,
and interest / workqueue retention.

Pulls, pushes and acks go over a raw connection, one subscription (sid) per request, so the exact
frames are compared: the MSG line of a delivered message carries the stream subject (not the
inbox), the request's sid and the ack reply subject; status messages carry the inbox subject.
Masked on top of the harness (diff_mask): ``last_active`` timestamps inside ``delivered`` and
``ack_floor``; the timestamp token of ``$JS.ACK`` reply subjects (checked separately against the
stored message time); server-chosen ephemeral consumer names, aliased per scenario in order of
creation (``<ephemeral1>``...) wherever they appear.
"""

from __future__ import annotations

import asyncio
import calendar
import re
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.differential.diff_harness import (
    NO_REPLY_TIMEOUT_S,
    REPLY_TIMEOUT_S,
    TIMEOUT,
    CandidateUnresponsive,
    Differ,
    Reply,
    Scenario,
    Session,
    encode_body,
)
from tests.differential.diff_mask import (
    mask_header_block,
    mask_json,
    mask_timestamp,
    needs_exact_bytes,
    pretty,
    try_json,
    unordered,
)
from tests.differential.diff_raw import Frame, RawConn, header_block, hpub, pub

pytestmark = pytest.mark.differential

NEXT = "$JS.API.CONSUMER.MSG.NEXT"
ACK_TOKENS = 9  # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>
ACK_TS_TOKEN = 7
ACK_TS_MASK = "<ack-ts>"
ACK_SUBJECT = re.compile(rb"\$JS\.ACK\.[^\s]+")
INBOX = "_CDIFF"
SID_BASE = 100
HEARTBEAT_STATUS = "100"
SILENT_READS_MAX = 3  # a candidate that answers nothing this often is not waited on any longer
POLL_INTERVAL_S = 0.05
POLL_TIMEOUT_S = 5.0
BEFORE_ALL = "2000-01-01T00:00:00Z"
SEC = 1_000_000_000
MS = 1_000_000

# The request bodies nats-py 2.16 sends (captured on the wire).
NATS_PY_PULL_DURABLE = {  # js.pull_subscribe(subject, durable=D) -> CONSUMER.CREATE.S.D.<subject>
    "deliver_policy": "all",
    "ack_policy": "explicit",
    "replay_policy": "instant",
    "ack_wait": 0,
    "idle_heartbeat": 0,
    "inactive_threshold": 0,
}
NATS_PY_PUSH_DURABLE = {  # js.subscribe(subject, durable=D, manual_ack=True) -> DURABLE.CREATE
    "deliver_policy": "all",
    "ack_policy": "explicit",
    "replay_policy": "instant",
    "flow_control": False,
    "ack_wait": 0,
    "idle_heartbeat": 0,
    "inactive_threshold": 0,
}
NATS_PY_ORDERED = {  # js.subscribe(subject, ordered_consumer=True) -> CONSUMER.CREATE.S
    "deliver_policy": "all",
    "ack_policy": "none",
    "ack_wait": 79_200_000_000_000,
    "max_deliver": 1,
    "replay_policy": "instant",
    "flow_control": True,
    "idle_heartbeat": 5 * SEC,
    "num_replicas": 1,
    "mem_storage": True,
    "inactive_threshold": 0,
}
NATS_PY_KV_WATCH = {  # kv.keys() / kv.watch(headers_only) -> CONSUMER.CREATE.KV_b
    "deliver_policy": "last_per_subject",
    "ack_policy": "none",
    "ack_wait": 79_200_000_000_000,
    "max_deliver": 1,
    "replay_policy": "instant",
    "flow_control": True,
    "idle_heartbeat": 5 * SEC,
    "headers_only": True,
    "inactive_threshold": 300 * SEC,
    "num_replicas": 1,
    "mem_storage": True,
}


def rfc3339_to_ns(value: str) -> int:
    """Nanoseconds since the epoch of a Go RFC3339Nano UTC time ('...T..:..:..[.f]Z')."""
    main, _, frac = value.rstrip("Z").partition(".")
    secs = calendar.timegm(time.strptime(main, "%Y-%m-%dT%H:%M:%S"))
    return secs * SEC + int((frac + "000000000")[:9])


def cleaned(scenario: Scenario) -> Scenario:
    """The scenario, then its streams deleted (not recorded): consumers left on the shared
    servers would keep sending (heartbeats, inactivity advisories) into later scenarios."""

    async def run(s: Session) -> None:
        try:
            await scenario(s)
        finally:
            names = await s.api("STREAM.NAMES", record=False)
            for name in names.get("streams") or []:
                if isinstance(name, str) and name.startswith(s.uid):
                    await s.api(f"STREAM.DELETE.{name}", record=False)

    return run


class Consumers:
    """A scenario's consumer helper around one Session: masked API replies, raw pulls/acks."""

    def __init__(self, s: Session) -> None:
        self.s = s
        self.aliases: dict[str, str] = {}
        self._conn: RawConn | None = None
        self._next_sid = 0
        self._silent_reads = 0
        self.last_sid = ""  # the sid of the latest request()
        self._stashed: dict[str, list[Frame]] = {}
        self.mask_pending = False  # mask the ack subject's pending token (timing-dependent)

    # -- masking ------------------------------------------------------------------------------
    def alias(self, name: str) -> str:
        """Register a server-chosen consumer name; returns its alias."""
        if name not in self.aliases:
            self.aliases[name] = f"<ephemeral{len(self.aliases) + 1}>"
        return self.aliases[name]

    def alias_text(self, text: str) -> str:
        for name, alias in self.aliases.items():
            text = text.replace(name, alias)
        return text

    def _masked(self, value: Any, key: str | None = None) -> Any:
        if key == "pause_remaining" and isinstance(value, int):
            return "<pause-remaining>" if value > 0 else value
        if key == "last_active":
            return mask_timestamp(value)
        if isinstance(value, dict):
            return {k: self._masked(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [self._masked(v) for v in value]
        if isinstance(value, str):
            return self.aliases.get(value, value)
        return value

    def mask_reply_subject(self, reply: str) -> str:
        tokens = reply.split(".")
        if len(tokens) == ACK_TOKENS and tokens[:2] == ["$JS", "ACK"]:
            tokens[3] = self.aliases.get(tokens[3], tokens[3])
            if tokens[ACK_TS_TOKEN].isdigit():
                tokens[ACK_TS_TOKEN] = ACK_TS_MASK
            if self.mask_pending:
                tokens[-1] = "<pending>"
            return ".".join(tokens)
        return self.alias_text(reply)

    def mask_header(self, header: bytes) -> bytes:
        """Nats-Time-Stamp masked, and any ack subject inside (a 503's Nats-Subject)."""
        return ACK_SUBJECT.sub(
            lambda m: self.mask_reply_subject(m.group(0).decode()).encode(),
            mask_header_block(header),
        )

    def frame_key(self, f: Frame) -> Any:
        if f.op in ("MSG", "HMSG"):
            header = None if f.header is None else self.mask_header(f.header)
            reply = self.mask_reply_subject(f.reply)
            return (f.op, self.alias_text(f.subject), f.sid, reply, header, f.payload)
        return (f.op, f.line)

    def frame_shown(self, f: Frame) -> str:
        if f.op not in ("MSG", "HMSG"):
            return f.show()
        head = f"{f.op} {f.subject} {f.sid} {self.mask_reply_subject(f.reply)}".rstrip()
        hdr = f" | {pretty(self.mask_header(f.header))!r}" if f.header is not None else ""
        return f"{head}{hdr} | {pretty(f.payload)}"

    # -- JSON API -------------------------------------------------------------------------------
    def record_reply(self, label: str, reply: Reply) -> None:
        label = self.alias_text(label)
        if reply.outcome != "msg":
            self.s.record(label, reply.outcome, reply.outcome)
            return
        # (mode, value, headers) as the harness records replies, so that its diff report
        # points at the differing JSON paths
        obj = try_json(reply.data)
        if obj is None or (needs_exact_bytes(obj) and mask_json(obj) == obj):
            self.s.record(label, ("bytes", reply.data, None), pretty(reply.data))
        else:
            masked = unordered(self._masked(mask_json(obj)))
            self.s.record(label, ("json", masked, None), self.alias_text(pretty(reply.data)))

    async def api(
        self,
        endpoint: str,
        body: bytes | str | dict[str, Any] | None = None,
        *,
        label: str | None = None,
        record: bool = True,
        timeout_s: float = REPLY_TIMEOUT_S,
    ) -> Reply:
        reply = await self.s.api(endpoint, body, record=False, timeout_s=timeout_s)
        if record:
            self.record_reply(
                label or f"$JS.API.{endpoint} {pretty(encode_body(body), 300)}", reply
            )
        return reply

    async def stream(self, suffix: str = "", *, subjects: str = ">", **extra: Any) -> str:
        """Create stream s.stream(suffix) on '<uid>.<subjects>' (reply not recorded)."""
        name = self.s.stream(suffix)
        reply = await self.s.create(
            {"name": name, "subjects": [self.s.subj(subjects)], **extra}, record=False
        )
        assert reply.get("config", "name") == name, reply.data
        return name

    async def fill(self, tails: str | list[str], prefix: str = "m") -> None:
        """Publish one message per subject tail (payload '<prefix><i>'), PubAcks not recorded."""
        for i, tail in enumerate(tails):
            reply = await self.s.publish(self.s.subj(tail), f"{prefix}{i}", record=False)
            if self.s.side == "oracle":
                assert reply.get("seq") is not None, reply.data

    async def create(
        self,
        stream: str,
        name: str | None,
        config: dict[str, Any],
        *,
        durable_subject: bool = False,
        filter_token: str | None = None,
        action: str | None = None,
        label: str | None = None,
        record: bool = True,
    ) -> Reply:
        """CONSUMER.CREATE.<stream>[.<name>[.<filter>]] or CONSUMER.DURABLE.CREATE.<s>.<name>.
        With name None (ephemeral) the server's name is aliased."""
        if durable_subject:
            endpoint = f"CONSUMER.DURABLE.CREATE.{stream}.{name}"
        elif name is None:
            endpoint = f"CONSUMER.CREATE.{stream}"
        else:
            endpoint = f"CONSUMER.CREATE.{stream}.{name}"
            if filter_token is not None:
                endpoint += f".{filter_token}"
        body: dict[str, Any] = {"stream_name": stream, "config": config}
        if action is not None:
            body["action"] = action
        reply = await self.s.api(endpoint, body, record=False)
        created = reply.get("name")
        if name is None and isinstance(created, str) and reply.get("error") is None:
            self.alias(created)
        if record:
            self.record_reply(
                label or f"$JS.API.{endpoint} {pretty(encode_body(body), 300)}", reply
            )
        return reply

    async def info(self, stream: str, consumer: str, *, label: str | None = None) -> Reply:
        return await self.api(f"CONSUMER.INFO.{stream}.{consumer}", label=label)

    async def wait_info(
        self,
        endpoint: str,
        ready: Callable[[Reply], bool],
        *,
        label: str | None = None,
        timeout_s: float = POLL_TIMEOUT_S,
        state_only: bool = False,
    ) -> Reply:
        """Poll endpoint until ready(reply) (or the deadline), then record the last reply
        (only its ``state`` when state_only)."""
        deadline = time.monotonic() + timeout_s
        while True:
            reply = await self.s.api(endpoint, record=False)
            if ready(reply) or time.monotonic() > deadline:
                break
            await asyncio.sleep(POLL_INTERVAL_S)
        label = label or f"$JS.API.{endpoint} (polled)"
        if state_only:
            state = reply.get("state")
            self.s.record(label, unordered(mask_json(state)), pretty(reply.data))
        else:
            self.record_reply(label, reply)
        return reply

    async def stream_state(self, stream: str, messages: int, *, label: str | None = None) -> Reply:
        """STREAM.INFO polled until it holds `messages`; its state is recorded."""
        return await self.wait_info(
            f"STREAM.INFO.{stream}",
            lambda r: r.get("state", "messages") == messages,
            label=label or f"STREAM.INFO.{stream} state (waiting for {messages} messages)",
            state_only=True,
        )

    async def consumer_state(
        self, stream: str, consumer: str, ready: Callable[[dict[str, Any]], bool]
    ) -> Reply:
        """CONSUMER.INFO polled until ready(info) holds, then recorded."""
        return await self.wait_info(
            f"CONSUMER.INFO.{stream}.{consumer}",
            lambda r: r.json is not None and ready(r.json),
        )

    async def settle(self, stream: str, consumer: str, pending: int) -> None:
        """Wait (unrecorded) until CONSUMER.INFO shows num_pending == pending. nats-server
        counts a newly stored message for existing consumers asynchronously (after the
        PubAck), and a no_wait pull that comes first is answered 404 No Messages."""
        deadline = time.monotonic() + POLL_TIMEOUT_S
        while True:
            reply = await self.s.api(f"CONSUMER.INFO.{stream}.{consumer}", record=False)
            if reply.get("num_pending") == pending:
                return
            if time.monotonic() > deadline:
                # a wrong expectation is a bug in the scenario; a candidate just goes on
                assert self.s.side != "oracle", f"{consumer}: num_pending {reply.data!r}"
                return
            await asyncio.sleep(POLL_INTERVAL_S)

    # -- raw requests -------------------------------------------------------------------------
    async def conn(self) -> RawConn:
        if self._conn is None:
            self._conn = await self.s.raw()
        return self._conn

    async def subscribe(self, subject: str, queue: str = "") -> str:
        """A new subscription on the raw connection; returns its sid."""
        conn = await self.conn()
        self._next_sid += 1
        sid = str(SID_BASE + self._next_sid)
        group = f" {queue}" if queue else ""
        await conn.send(f"SUB {subject}{group} {sid}\r\nPING\r\n".encode())
        await self._until_pong(conn)
        return sid

    def _stash(self, f: Frame) -> None:
        """Keep a frame for the read() of its sid (non-message frames under '')."""
        self._stashed.setdefault(f.sid if f.op in ("MSG", "HMSG") else "", []).append(f)

    async def _until_pong(self, conn: RawConn) -> None:
        """Read up to the next PONG: server PINGs answered, everything else stashed."""
        while (f := await conn.read_frame(REPLY_TIMEOUT_S)) is not None:
            if f.op == "PONG":
                return
            if f.op == "PING":
                await conn.send(b"PONG\r\n")
                continue
            self._stash(f)

    async def read(
        self,
        sid: str,
        *,
        msgs: int | None = None,
        stop_status: Callable[[str], bool] = lambda status: not status.startswith("100"),
        wait_s: float = REPLY_TIMEOUT_S,
        label: str,
        collapse: bool = False,
    ) -> list[Frame]:
        """The frames of subscription sid until `msgs` messages arrived or a status for which
        stop_status holds (by default any but a heartbeat), or wait_s passed (recorded as a
        timeout); then a PING/PONG flush, so that whatever the server sent for sid right after
        is recorded too. Frames of other sids are kept for their own read(); frames that are
        not messages (-ERR...) are recorded by whichever read sees them. msgs=0: flush only.
        collapse: consecutive equal frames are recorded once."""
        conn = await self.conn()
        frames: list[Frame] = []
        timed_out = False
        count = 0
        deadline = time.monotonic() + wait_s
        queue = self._stashed.pop(sid, []) + self._stashed.pop("", [])
        while msgs != 0:
            if queue:
                f: Frame | None = queue.pop(0)
            else:
                remaining = deadline - time.monotonic()
                f = await conn.read_frame(remaining) if remaining > 0 else None
            if f is None:
                timed_out = True
                break
            if f.op == "PING":
                await conn.send(b"PONG\r\n")
                continue
            if f.op in ("MSG", "HMSG") and f.sid != sid:
                self._stash(f)
                continue
            frames.append(f)
            if f.op not in ("MSG", "HMSG"):
                continue
            if f.status:
                if stop_status(f.status):
                    break
                continue
            count += 1
            if msgs is not None and count >= msgs:
                break
        self._stashed.setdefault(sid, [])[:0] = queue  # not consumed: back in front
        await conn.send(b"PING\r\n")
        await self._until_pong(conn)
        frames += self._stashed.pop(sid, []) + self._stashed.pop("", [])
        self._record_frames(label, frames, timed_out=timed_out, collapse=collapse)
        if timed_out and not frames and self.s.side != "oracle":
            self._silent_reads += 1
            if self._silent_reads >= SILENT_READS_MAX:
                raise CandidateUnresponsive(f"{self._silent_reads} raw reads got nothing")
        return frames

    def _record_frames(
        self, label: str, frames: list[Frame], *, timed_out: bool, collapse: bool
    ) -> None:
        keys: list[Any] = []
        shown: list[str] = []
        for f in frames:
            key = self.frame_key(f)
            if collapse and keys and keys[-1] == key:
                continue
            keys.append(key)
            shown.append(self.frame_shown(f))
        if timed_out:
            keys.append(TIMEOUT)
            shown.append(TIMEOUT)
        self.s.record(self.alias_text(label), tuple(keys), "\n      ".join(shown) or "<nothing>")

    async def request(
        self,
        subject: str,
        body: bytes | str | dict[str, Any] | None,
        *,
        msgs: int | None = None,
        wait_s: float = REPLY_TIMEOUT_S,
        label: str | None = None,
        collapse: bool = False,
    ) -> list[Frame]:
        """PUB subject with a fresh inbox (own sid) as reply; read as in read()."""
        self._next_sid += 1
        sid = str(SID_BASE + self._next_sid)
        inbox = f"{INBOX}.{self._next_sid}"
        self.last_sid = sid
        payload = encode_body(body)
        conn = await self.conn()
        await conn.send(f"SUB {inbox} {sid}\r\n".encode() + pub(subject, payload, inbox))
        return await self.read(
            sid,
            msgs=msgs,
            wait_s=wait_s,
            label=label or f"{subject} {pretty(payload, 200)}",
            collapse=collapse,
        )

    async def pull(
        self,
        stream: str,
        consumer: str,
        body: bytes | str | dict[str, Any] | None,
        *,
        msgs: int | None = None,
        wait_s: float = REPLY_TIMEOUT_S,
        collapse: bool = False,
    ) -> list[Frame]:
        """A pull request; ends at its first non-heartbeat status or after `msgs` messages."""
        label = f"NEXT {stream}.{consumer} {pretty(encode_body(body), 200)}"
        return await self.request(
            f"{NEXT}.{stream}.{consumer}",
            body,
            msgs=msgs,
            wait_s=wait_s,
            label=label,
            collapse=collapse,
        )

    async def ack(self, frame: Frame, body: bytes = b"+ACK", *, msgs: int = 1) -> list[Frame]:
        """An ack sent as a request (reply awaited: an empty message for +ACK/-NAK/+TERM/+WPI,
        the next message for +NXT)."""
        label = f"ACK {body!r} -> {self.mask_reply_subject(frame.reply)}"
        return await self.request(frame.reply, body, msgs=msgs, label=label)

    async def ack_quiet(self, frame: Frame, body: bytes = b"+ACK") -> None:
        """An ack published without reply subject (what nats-py's msg.ack() sends)."""
        conn = await self.conn()
        await conn.send(pub(frame.reply, body) + b"PING\r\n")
        await self._until_pong(conn)

    async def publish_raw(self, subject: str, payload: bytes, headers: bytes | None = None) -> None:
        """Publish without reply over the raw connection (flushed)."""
        conn = await self.conn()
        data = pub(subject, payload) if headers is None else hpub(subject, headers, payload)
        await conn.send(data + b"PING\r\n")
        await self._until_pong(conn)

    async def check_ack_ts(self, stream: str, frame: Frame) -> None:
        """Record whether the ack reply's timestamp token is the stored message's time (ns)."""
        tokens = frame.reply.split(".")
        ok = len(tokens) == ACK_TOKENS
        if ok:
            got = await self.s.api(
                f"STREAM.MSG.GET.{stream}", {"seq": int(tokens[5])}, record=False
            )
            stored = got.get("message", "time")
            ok = isinstance(stored, str) and rfc3339_to_ns(stored) == int(tokens[ACK_TS_TOKEN])
        self.s.record(f"ack ts token == stored time ({self.mask_reply_subject(frame.reply)})", ok)


def data_frames(frames: list[Frame]) -> list[Frame]:
    """The delivered messages among frames (status messages and others left out)."""
    return [f for f in frames if f.op in ("MSG", "HMSG") and not f.status]


# =============================================================================================
# The JSON API
# =============================================================================================


async def test_create_pull_durable_defaults_and_idempotence(diff: Differ) -> None:
    """The create reply (defaults filled in), the same config again, INFO, the stream's count."""

    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        await c.fill(["a", "b", "a"])
        await c.create(st, "C1", {"durable_name": "C1", "ack_policy": "explicit"})
        await c.create(st, "C1", {"durable_name": "C1", "ack_policy": "explicit"})
        await c.create(st, "C1", {"durable_name": "C1"})  # a different config: an update
        await c.info(st, "C1")
        await c.create(st, "D1", {"durable_name": "D1"}, durable_subject=True)
        await c.create(st, "D1", {"durable_name": "D1"}, durable_subject=True)
        await c.create(st, "N1", {"name": "N1"})  # named, not durable: inactive_threshold
        await c.create(st, "N2", {})  # the subject names it
        await c.create(st, "N3", {"name": "OTHER"})  # the subject wins over config.name
        await c.create(st, "M1", {"durable_name": "M1", "mem_storage": True})
        await c.create(st, "DS", {"durable_name": "DS", "description": "x", "metadata": {"k": "v"}})
        await c.wait_info(f"STREAM.INFO.{st}", lambda r: True, state_only=True)

    await diff.run(cleaned(scenario))


async def test_create_nats_py_request_bodies(diff: Differ) -> None:
    """The exact create requests nats-py sends for pull, push, ordered and KV-watch consumers."""

    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream(subjects="o.>")
        await c.fill(["o.a", "o.b"])
        pull = {"name": "PD", "durable_name": "PD", **NATS_PY_PULL_DURABLE}
        a = s.subj("o.a")
        await c.create(st, "PD", {**pull, "filter_subject": a}, filter_token=a)
        await c.create(st, "PD", {**pull, "filter_subject": a}, filter_token=a)
        await c.create(st, "PN", {"name": "PN", "durable_name": "PN", **NATS_PY_PULL_DURABLE})
        push = {"durable_name": "PU", **NATS_PY_PUSH_DURABLE, "filter_subject": a}
        await c.create(st, "PU", {**push, "deliver_subject": f"{INBOX}.pu"}, durable_subject=True)
        sid = await c.subscribe(f"{INBOX}.ord")
        ordered = {**NATS_PY_ORDERED, "filter_subject": s.subj("o.>")}
        await c.create(st, None, {**ordered, "deliver_subject": f"{INBOX}.ord"})
        await c.read(sid, msgs=2, label="ordered consumer deliveries")
        kv = await c.stream("KV", subjects="kv.>", max_msgs_per_subject=1, allow_rollup_hdrs=True)
        await c.fill(["kv.x", "kv.y", "kv.x"])
        sid = await c.subscribe(f"{INBOX}.kvw")
        watch = {**NATS_PY_KV_WATCH, "filter_subject": s.subj("kv.>")}
        await c.create(kv, None, {**watch, "deliver_subject": f"{INBOX}.kvw"})
        await c.read(sid, msgs=2, label="kv watch (headers only) deliveries")

    await diff.run(cleaned(scenario))


async def test_create_with_filter_token(diff: Differ) -> None:
    """CONSUMER.CREATE.<stream>.<name>.<filter>: the body must carry the same filter."""

    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        await c.fill(["a", "b", "c.x", "a"])
        a, b, star = s.subj("a"), s.subj("b"), s.subj("*")
        await c.create(st, "F1", {"durable_name": "F1", "filter_subject": a}, filter_token=a)
        await c.create(st, "F2", {"durable_name": "F2", "filter_subject": b}, filter_token=a)
        await c.create(st, "F3", {"durable_name": "F3"}, filter_token=a)
        await c.create(st, "F4", {"name": "F4", "filter_subject": star}, filter_token=star)
        gt = s.subj(">")
        await c.create(st, "F5", {"name": "F5", "filter_subject": gt}, filter_token=gt)
        await c.create(st, "F6", {"name": "F6", "filter_subjects": [a]}, filter_token=a)
        await c.create(st, "F7", {"name": "F7", "filter_subjects": [a, b]})
        await c.create(st, "F8", {"name": "F8", "filter_subject": s.subj("zzz")})
        await c.create(st, "F9", {"name": "F9", "filter_subject": "elsewhere.x"})
        await c.create(st, "F10", {"name": "F10", "filter_subjects": [a, s.subj(">")]})
        await c.create(st, "F11", {"name": "F11", "filter_subjects": [a, a]})
        await c.create(st, "F12", {"name": "F12", "filter_subject": ""})
        await c.create(st, "F13", {"name": "F13", "filter_subjects": []})

    await diff.run(cleaned(scenario))


async def test_create_errors(diff: Differ) -> None:
    """Every create error reply (compared byte for byte)."""

    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        await c.fill(["a"])
        a, b = s.subj("a"), s.subj("b")
        nope = s.stream("NOPE")
        cc = f"CONSUMER.CREATE.{st}"
        await c.create(nope, "C1", {"durable_name": "C1"})
        await c.create(nope, "C1", {"durable_name": "C1"}, durable_subject=True)
        await c.create(nope, None, {})
        await c.create(st, "C1", {"durable_name": "C2"})
        await c.create(st, "C1", {"name": "C1", "durable_name": "C2"})
        await c.create(st, None, {"durable_name": "D9"})
        await c.create(st, "D3", {"ack_policy": "explicit"}, durable_subject=True)
        await c.create(st, "D4", {"name": "D4"}, durable_subject=True)
        await c.create(st, "D5", {"durable_name": "D1"}, durable_subject=True)
        await c.api(f"{cc}.C1", {"stream_name": s.stream("OTHER"), "config": {"name": "C1"}})
        await c.api(f"{cc}.C1", {"config": {"name": "C1"}})
        await c.api(f"{cc}.C1", {"stream_name": st})
        await c.api(f"{cc}.C1", b"")
        await c.api(f"{cc}.C1", b"{x")
        await c.api(f"{cc}.C1", b"[]")
        await c.api(f"{cc}.C1", {"stream_name": st, "config": {"name": "C1", "bogus": 1}})
        await c.create(st, "C*", {"name": "C*"})
        await c.create(st, "C>", {"name": "C>"})
        await c.create(st, None, {"name": "a.b"})
        await c.create(st, None, {"durable_name": "a*"})
        await c.create(st, "C1", {"name": "C1", "filter_subject": a, "filter_subjects": [b]})
        dp_cases: list[tuple[str, dict[str, Any]]] = [
            ("by_start_sequence", {}),
            ("all", {"opt_start_seq": 3}),
            ("last", {"opt_start_seq": 3}),
            ("new", {"opt_start_time": BEFORE_ALL}),
            ("by_start_time", {}),
            ("all", {"opt_start_time": BEFORE_ALL}),
            ("by_start_sequence", {"opt_start_seq": 1, "opt_start_time": BEFORE_ALL}),
            ("last_per_subject", {}),
            ("bogus", {}),
        ]
        for dp, extra in dp_cases:
            await c.create(st, "DP", {"durable_name": "DP", "deliver_policy": dp, **extra})
        await c.create(st, "AP", {"durable_name": "AP", "ack_policy": "bogus"})
        await c.create(st, "RP", {"durable_name": "RP", "replay_policy": "bogus"})
        await c.create(
            st, "FC", {"durable_name": "FC", "deliver_subject": "x.fc", "flow_control": True}
        )
        await c.create(
            st, "MW", {"durable_name": "MW", "deliver_subject": "x.mw", "max_waiting": 5}
        )
        await c.create(st, "HB", {"durable_name": "HB", "idle_heartbeat": SEC})
        await c.create(st, "DG", {"durable_name": "DG", "deliver_group": "g"})
        await c.create(st, "AN", {"durable_name": "AN", "ack_policy": "none", "max_ack_pending": 5})
        await c.create(st, "R3", {"durable_name": "R3", "num_replicas": 3})
        await c.create(st, "MD", {"durable_name": "MD", "max_deliver": 0})
        await c.create(st, "BO", {"durable_name": "BO", "backoff": [SEC], "max_deliver": 1})
        await c.create(st, "DS", {"durable_name": "DS", "deliver_subject": st + ".>"})
        await c.create(st, "AA", {"durable_name": "AA"}, action="create")
        await c.create(st, "AA", {"durable_name": "AA", "description": "d"}, action="create")
        await c.create(st, "AA", {"durable_name": "AA"}, action="create")
        await c.create(st, "NX", {"durable_name": "NX"}, action="update")
        await c.create(st, "AA", {"durable_name": "AA"}, action="bogus")
        await c.api(f"CONSUMER.NAMES.{st}")

    await diff.run(cleaned(scenario))


async def test_info_delete_names_list(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        await c.fill(["a", "b"])
        nope = s.stream("NOPE")
        for name in ["B2", "A1", "C3"]:
            await c.create(st, name, {"durable_name": name}, record=False)
        await c.api(f"CONSUMER.NAMES.{st}")
        await c.api(f"CONSUMER.NAMES.{st}", {"offset": 1})
        await c.api(f"CONSUMER.NAMES.{st}", {"offset": 10})
        await c.api(f"CONSUMER.NAMES.{st}", b"{x")
        await c.api(f"CONSUMER.LIST.{st}")
        await c.api(f"CONSUMER.LIST.{st}", {"offset": 2})
        await c.api(f"CONSUMER.NAMES.{nope}")
        await c.api(f"CONSUMER.LIST.{nope}")
        await c.info(st, "A1")
        await c.info(st, "ZZ")
        await c.info(nope, "A1")
        await c.api(f"CONSUMER.INFO.{st}.A1", {"x": 1})
        await c.api(f"CONSUMER.DELETE.{st}.B2")
        await c.api(f"CONSUMER.DELETE.{st}.B2")
        await c.api(f"CONSUMER.DELETE.{nope}.B2")
        await c.info(st, "B2")
        await c.api(f"CONSUMER.NAMES.{st}")
        await c.wait_info(f"STREAM.INFO.{st}", lambda r: True, state_only=True)
        await c.create(st, "B2", {"durable_name": "B2"})  # recreated from scratch
        await c.api(f"STREAM.DELETE.{st}", record=False)
        await c.info(st, "A1")
        await c.api(f"CONSUMER.NAMES.{st}")

    await diff.run(cleaned(scenario))


async def test_names_and_list_when_empty(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        await c.api(f"CONSUMER.NAMES.{st}")
        await c.api(f"CONSUMER.LIST.{st}")

    await diff.run(cleaned(scenario))


async def test_no_reply_consumer_subjects(diff: Differ) -> None:
    """Consumer API subjects that nats-server does not answer at all."""

    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        await c.create(st, "C1", {"durable_name": "C1"}, record=False)
        endpoints = [
            f"CONSUMER.UPDATE.{st}.C1",
            f"CONSUMER.INFO.{st}",
            f"CONSUMER.INFO.{st}.C1.x",
            f"CONSUMER.DELETE.{st}",
            f"CONSUMER.DURABLE.CREATE.{st}",
            f"CONSUMER.DURABLE.CREATE.{st}.C1.x",
            "CONSUMER.NAMES",
            "CONSUMER.LIST",
        ]
        replies = await asyncio.gather(
            *(
                s.api(
                    e,
                    {"stream_name": st, "config": {"durable_name": "C1"}},
                    record=False,
                    timeout_s=NO_REPLY_TIMEOUT_S,
                )
                for e in endpoints
            )
        )
        for endpoint, reply in zip(endpoints, replies, strict=True):
            c.record_reply(f"$JS.API.{endpoint}", reply)

    transcript = await diff.run(cleaned(scenario))
    assert all(step.key == TIMEOUT for step in transcript), [s.shown for s in transcript]


async def test_ephemeral_pull_consumer(diff: Differ) -> None:
    """CONSUMER.CREATE.<stream> with no name: a server-chosen name (aliased), a pull on it."""

    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        await c.fill(["a", "b"])
        r1 = await c.create(st, None, {})
        r2 = await c.create(st, None, {"ack_policy": "explicit", "inactive_threshold": 10 * SEC})
        await c.create(st, None, {"ack_policy": "explicit", "filter_subject": s.subj("b")})
        name = r2.get("name")
        s.record("ephemeral names are 8 characters", [len(str(r.get("name"))) for r in (r1, r2)])
        frames = await c.pull(st, str(name), {"batch": 5, "no_wait": True})
        await c.ack(data_frames(frames)[0])
        await c.info(st, str(name))
        await c.api(f"CONSUMER.DELETE.{st}.{r1.get('name')}")
        await c.info(st, str(r1.get("name")))

    await diff.run(cleaned(scenario))


async def test_update_allowed_fields(diff: Differ) -> None:
    """A create with a different config updates the consumer when only mutable fields change."""

    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        await c.fill(["a", "b", "a"])
        base = {"durable_name": "UP", "ack_policy": "explicit", "filter_subject": s.subj("a")}
        await c.create(st, "UP", base, record=False)
        changes: list[dict[str, Any]] = [
            {"description": "d"},
            {"ack_wait": 5 * SEC},
            {"max_deliver": 5},
            {"max_ack_pending": 10},
            {"filter_subject": s.subj("b")},
            {"filter_subject": None, "filter_subjects": [s.subj("a"), s.subj("b")]},
            {"metadata": {"k": "v"}},
            {"inactive_threshold": 60 * SEC},
            {"headers_only": True},
            {"max_batch": 3},
            {"max_expires": 10 * SEC},
            {"max_bytes": 1000},
            {"sample_freq": "50%"},
            {"backoff": [SEC, 2 * SEC]},
            {"backoff": [SEC, 2 * SEC], "max_deliver": 5},
        ]
        for change in changes:
            config = {k: v for k, v in {**base, **change}.items() if v is not None}
            await c.create(st, "UP", config, action="update")
        await c.create(st, "UP", {**base, "description": "plain create updates"})
        await c.info(st, "UP")

    await diff.run(cleaned(scenario))


async def test_update_fixed_fields(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        await c.fill(["a", "b", "a"])
        base = {"durable_name": "UP", "ack_policy": "explicit", "filter_subject": s.subj("a")}
        await c.create(st, "UP", base, record=False)
        push = {"durable_name": "PU", "deliver_subject": f"{INBOX}.pu"}
        await c.create(st, "PU", push, record=False)
        seq = {"durable_name": "SQ", "deliver_policy": "by_start_sequence", "opt_start_seq": 2}
        await c.create(st, "SQ", seq, record=False)
        changes: list[dict[str, Any]] = [
            {"deliver_policy": "last"},
            {"ack_policy": "all"},
            {"ack_policy": "none"},
            {"replay_policy": "original"},
            {"max_waiting": 5},
            {"deliver_subject": "x.y"},
            {"mem_storage": True},
            {"num_replicas": 3},
            {"durable_name": "UP", "name": "OTHER"},
            {"deliver_group": "g"},
        ]
        for change in changes:
            await c.create(st, "UP", {**base, **change})
        await c.create(st, "PU", {**push, "deliver_subject": None})
        await c.create(st, "PU", {**push, "deliver_subject": f"{INBOX}.other"})
        await c.create(st, "PU", {**push, "idle_heartbeat": SEC})
        await c.create(st, "SQ", {**seq, "opt_start_seq": 3})
        await c.info(st, "UP")

    await diff.run(cleaned(scenario))


# =============================================================================================
# Pull requests
# =============================================================================================


async def test_pull_batches_and_ack_reply_subjects(diff: Differ) -> None:
    """Batches that complete (no status), a partial no_wait batch (messages then 404), an empty
    no_wait (404 alone); headers delivered verbatim; INFO after each."""

    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        await c.fill(["a", "b", "c.d"])
        await c.publish_raw(s.subj("h"), b"with header", header_block([("Foo", "bar")]))
        await c.publish_raw(s.subj("e"), b"", header_block([("A", "1"), ("B", "2")]))
        await s.wait_messages(st, 5)
        await c.create(st, "C", {"durable_name": "C", "ack_policy": "explicit"})
        await c.pull(st, "C", {"batch": 2}, msgs=2)
        await c.info(st, "C")
        await c.pull(st, "C", {"batch": 2, "no_wait": True}, msgs=2)
        await c.pull(st, "C", {"batch": 5, "no_wait": True})
        await c.pull(st, "C", {"batch": 5, "no_wait": True})
        await c.pull(st, "C", {"batch": 1, "no_wait": True})
        await c.info(st, "C")

    await diff.run(cleaned(scenario))


async def test_pull_expires_and_no_wait_forms(diff: Differ) -> None:
    """expires reached: 408 with Nats-Pending-Messages/Bytes; no_wait with expires: 408 when
    empty, messages then 404 when not; no_wait alone: 404."""

    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        await c.create(st, "C", {"durable_name": "C", "ack_policy": "explicit"}, record=False)
        await c.pull(st, "C", {"batch": 3, "expires": 300 * MS}, wait_s=3)
        await c.pull(st, "C", {"batch": 3, "expires": 300 * MS, "no_wait": True}, wait_s=3)
        await c.pull(st, "C", {"batch": 3, "no_wait": True})
        await c.pull(st, "C", {"batch": 1, "expires": 1000, "no_wait": True}, wait_s=3)
        await c.fill(["a"])
        await c.pull(st, "C", {"batch": 3, "expires": 300 * MS}, wait_s=3)
        await c.fill(["a", "b"])
        await c.settle(st, "C", 2)
        await c.pull(st, "C", {"batch": 3, "expires": 300 * MS, "no_wait": True}, wait_s=3)
        await c.fill(["a"])
        await c.pull(st, "C", {"batch": 1, "expires": 300 * MS}, msgs=1, wait_s=3)
        await c.pull(st, "C", {"batch": 2, "expires": -1, "no_wait": True}, wait_s=3)
        await c.info(st, "C")

    await diff.run(cleaned(scenario))


async def test_pull_waiting_request_gets_later_message(diff: Differ) -> None:
    """A waiting request (num_waiting) is served by a later publish; then it expires (408)."""

    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        await c.create(st, "C", {"durable_name": "C", "ack_policy": "explicit"}, record=False)
        conn = await c.conn()
        sid = await c.subscribe(f"{INBOX}.w")
        await conn.send(pub(f"{NEXT}.{st}.C", b'{"batch":2,"expires":1500000000}', f"{INBOX}.w"))
        await c.consumer_state(st, "C", lambda i: i.get("num_waiting") == 1)
        await c.fill(["a"])
        await c.read(sid, msgs=1, label="waiting request served")
        await c.consumer_state(st, "C", lambda i: i.get("num_ack_pending") == 1)
        await c.read(sid, wait_s=4, label="then expires")
        await c.consumer_state(st, "C", lambda i: i.get("num_waiting") == 0)

    await diff.run(cleaned(scenario))


async def test_pull_plain_number_and_empty_bodies(diff: Differ) -> None:
    """Body '1' (a batch size, no expiry) and an empty body (batch 1) wait for a message."""

    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        await c.create(st, "C", {"durable_name": "C", "ack_policy": "explicit"}, record=False)
        # the pending token counts what was stored but not delivered at that instant: with
        # three publishes racing two waiting requests it depends on timing, on either server
        c.mask_pending = True
        await c.fill(["a"])
        await c.pull(st, "C", "1", msgs=1)
        await c.pull(st, "C", "2", msgs=0)  # nothing stored: stays waiting
        sid_two = c.last_sid
        await c.pull(st, "C", b"", msgs=0)
        sid_empty = c.last_sid
        await c.consumer_state(st, "C", lambda i: i.get("num_waiting") == 2)
        await c.fill(["b", "c", "d"])
        await c.read(sid_two, msgs=2, label="'2' request served")
        await c.read(sid_empty, msgs=1, label="empty-body request served")
        await c.consumer_state(st, "C", lambda i: i.get("num_waiting") == 0)

    await diff.run(cleaned(scenario))


async def test_pull_request_limits(diff: Differ) -> None:
    """409 for max_waiting, max_batch, max_expires, max_bytes; 400 for bad requests."""

    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        await c.fill(["a", "b"])
        limits = {
            "durable_name": "MB",
            "ack_policy": "explicit",
            "max_batch": 2,
            "max_bytes": 100,
            "max_expires": SEC,
        }
        await c.create(st, "MB", limits)
        await c.pull(st, "MB", {"batch": 3, "no_wait": True})
        await c.pull(st, "MB", {"batch": 1, "max_bytes": 200, "no_wait": True})
        await c.pull(st, "MB", {"batch": 1, "expires": 2 * SEC})
        await c.pull(st, "MB", {"batch": 1, "no_wait": True, "max_bytes": 5})
        await c.pull(st, "MB", {"batch": 2, "no_wait": True, "max_bytes": 60})
        await c.create(st, "BR", {"durable_name": "BR", "ack_policy": "explicit"}, record=False)
        await c.pull(st, "BR", {"batch": 1, "idle_heartbeat": 500 * MS})
        await c.pull(st, "BR", b"{x")
        await c.pull(st, "BR", {"batch": 0, "no_wait": True}, msgs=1)  # served as batch 1
        await c.pull(st, "BR", {"batch": -1, "no_wait": True}, msgs=1)
        await c.pull(st, "BR", {"batch": 1, "no_wait": True, "foo": 1}, msgs=1)
        await c.info(st, "MB")

    await diff.run(cleaned(scenario))


async def test_pull_max_bytes_ends_batch(diff: Differ) -> None:
    """A batch with max_bytes: messages while they fit, then 409 Message Size Exceeds MaxBytes
    with the pending counts (message size = subject + reply + headers + payload)."""

    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        await c.fill(["a", "a", "a"])
        await c.create(st, "C", {"durable_name": "C", "ack_policy": "explicit"}, record=False)
        frames = await c.pull(st, "C", {"batch": 1, "no_wait": True}, msgs=1)
        size = sum(len(f.subject) + len(f.reply) + len(f.payload) for f in data_frames(frames))
        s.record("first message size", size)
        await c.pull(
            st, "C", {"batch": 5, "max_bytes": size + size // 2, "expires": 500 * MS}, wait_s=3
        )
        await c.pull(st, "C", {"batch": 5, "max_bytes": 2 * size, "no_wait": True})

    await diff.run(cleaned(scenario))


async def test_pull_max_waiting_exceeded(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        mw = {"durable_name": "MW", "ack_policy": "explicit", "max_waiting": 1}
        await c.create(st, "MW", mw)
        conn = await c.conn()
        sid = await c.subscribe(f"{INBOX}.first")
        await conn.send(
            pub(f"{NEXT}.{st}.MW", b'{"batch":1,"expires":1000000000}', f"{INBOX}.first")
        )
        await c.consumer_state(st, "MW", lambda i: i.get("num_waiting") == 1)
        await c.pull(st, "MW", {"batch": 1, "expires": SEC})
        await c.pull(st, "MW", {"batch": 1, "no_wait": True})
        await c.read(sid, wait_s=4, label="first request expires")

    await diff.run(cleaned(scenario))


async def test_pull_request_nobody_hears_is_dropped(diff: Differ) -> None:
    """A waiting pull request whose reply subject has no subscriber (never had, or lost it
    while waiting: nats-py's fetch after unsubscribe) is dropped: num_waiting does not count
    it and a later message stays pending instead of being delivered to nobody. A wildcard
    subscription is interest. (nats.py's test_pull_subscribe_limits.)"""

    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        await c.create(st, "C", {"durable_name": "C", "ack_policy": "explicit"}, record=False)
        conn = await c.conn()
        waiting = b'{"batch":1,"expires":10000000000}'  # outlives the polls
        sid = await c.subscribe(f"{INBOX}.gone")
        await conn.send(pub(f"{NEXT}.{st}.C", waiting, f"{INBOX}.gone"))
        await c.consumer_state(st, "C", lambda i: i.get("num_waiting") == 1)
        await conn.send(f"UNSUB {sid}\r\n".encode())
        await c.consumer_state(st, "C", lambda i: i.get("num_waiting") == 0)
        await c.fill(["a"])
        await c.settle(st, "C", 1)
        await c.consumer_state(st, "C", lambda i: i.get("num_ack_pending") == 0)

        await conn.send(pub(f"{NEXT}.{st}.C", waiting, f"{INBOX}.nobody"))
        await c.fill(["b"], prefix="n")
        await c.settle(st, "C", 2)
        await c.consumer_state(st, "C", lambda i: i.get("num_ack_pending") == 0)

        wild = await c.subscribe(f"{INBOX}.w.*")
        await conn.send(pub(f"{NEXT}.{st}.C", b'{"batch":2}', f"{INBOX}.w.x"))
        await c.read(wild, msgs=2, label="wildcard interest served")
        await c.consumer_state(st, "C", lambda i: i.get("num_ack_pending") == 2)

    await diff.run(cleaned(scenario))


async def test_pull_idle_heartbeat(diff: Differ) -> None:
    """idle_heartbeat in a pull request: '100 Idle Heartbeat' with the last sequences, then 408
    (consecutive heartbeats recorded once)."""

    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        await c.fill(["a", "b"])
        await c.create(st, "HB", {"durable_name": "HB", "ack_policy": "explicit"}, record=False)
        await c.pull(st, "HB", {"batch": 1, "no_wait": True}, msgs=1)
        body = {"batch": 3, "expires": 1200 * MS, "idle_heartbeat": 500 * MS}
        await c.pull(st, "HB", body, wait_s=4, collapse=True)

    await diff.run(cleaned(scenario))


async def test_pull_consumer_or_stream_deleted_409(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        conn = await c.conn()
        for name in ("C1", "C2"):
            await c.create(st, name, {"durable_name": name}, record=False)
        sid1 = await c.subscribe(f"{INBOX}.c1")
        await conn.send(pub(f"{NEXT}.{st}.C1", b'{"batch":1,"expires":5000000000}', f"{INBOX}.c1"))
        sid2 = await c.subscribe(f"{INBOX}.c2")
        await conn.send(pub(f"{NEXT}.{st}.C2", b'{"batch":1}', f"{INBOX}.c2"))
        await c.consumer_state(st, "C1", lambda i: i.get("num_waiting") == 1)
        await c.consumer_state(st, "C2", lambda i: i.get("num_waiting") == 1)
        await c.api(f"CONSUMER.DELETE.{st}.C1")
        await c.read(sid1, label="pending request, consumer deleted")
        await c.api(f"STREAM.DELETE.{st}")
        await c.read(sid2, label="pending request, stream deleted")

    await diff.run(cleaned(scenario))


async def test_pull_wrong_targets(diff: Differ) -> None:
    """A pull to a push consumer (409), to no consumer / no stream (503 no responders)."""

    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        await c.fill(["a"])
        await c.create(st, "PU", {"durable_name": "PU", "deliver_subject": f"{INBOX}.nobody"})
        await c.pull(st, "PU", {"batch": 1, "no_wait": True})
        await c.pull(st, "NOPE", {"batch": 1, "no_wait": True})
        await c.pull(s.stream("NOPE"), "NOPE", {"batch": 1, "no_wait": True})

    await diff.run(cleaned(scenario))


# =============================================================================================
# Acks
# =============================================================================================


async def test_ack_kinds_and_info(diff: Differ) -> None:
    """+ACK, empty ack, -NAK (immediate redelivery), +TERM, +WPI, each as a request (empty
    reply), and the INFO numbers they leave."""

    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        await c.fill(["a"] * 6)
        await c.create(st, "C", {"durable_name": "C", "ack_policy": "explicit"}, record=False)
        got = data_frames(await c.pull(st, "C", {"batch": 6, "no_wait": True}, msgs=6))
        await c.ack(got[0], b"+ACK")
        await c.ack(got[1], b"")
        await c.info(st, "C")
        await c.ack(got[2], b"-NAK")
        await c.ack(got[3], b"+TERM")
        await c.ack(got[4], b"+WPI")
        await c.ack(got[4], b"+TERM because")
        await c.ack(got[5], b"+ACK")
        await c.ack(got[5], b"+ACK")  # a second ack: still an empty reply
        await c.info(st, "C")
        again = data_frames(await c.pull(st, "C", {"batch": 5, "no_wait": True}))
        await c.info(st, "C")
        await c.ack(again[0], b"+ACK")
        await c.info(st, "C")
        await c.ack(got[0], b"bogus")
        await c.info(st, "C")

    await diff.run(cleaned(scenario))


async def test_ack_without_reply_subject(diff: Differ) -> None:
    """What nats-py's msg.ack() sends: a publish without reply (nothing comes back)."""

    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        await c.fill(["a", "b", "c"])
        await c.create(st, "C", {"durable_name": "C", "ack_policy": "explicit"}, record=False)
        got = data_frames(await c.pull(st, "C", {"batch": 3, "no_wait": True}, msgs=3))
        await c.ack_quiet(got[1])
        await c.consumer_state(st, "C", lambda i: i.get("num_ack_pending") == 2)
        await c.ack_quiet(got[0])
        await c.consumer_state(st, "C", lambda i: i.get("ack_floor", {}).get("stream_seq") == 2)
        await c.ack_quiet(got[2], b"-NAK")
        # the nak and a pull right behind it may be handled in either order: wait for it
        await c.pull(st, "C", {"batch": 1, "expires": 3 * SEC}, msgs=1, wait_s=4)
        await c.pull(st, "C", {"batch": 3, "no_wait": True})

    await diff.run(cleaned(scenario))


async def test_ack_wait_redelivery(diff: Differ) -> None:
    """Unacked past ack_wait (1 s): redelivered with delivered count 2 and a new consumer
    sequence; num_redelivered counts it."""

    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        await c.fill(["a", "b"])
        cfg = {"durable_name": "C", "ack_policy": "explicit", "ack_wait": SEC}
        await c.create(st, "C", cfg)
        first = data_frames(await c.pull(st, "C", {"batch": 2, "no_wait": True}, msgs=2))
        await c.ack(first[1])
        await c.pull(st, "C", {"batch": 1, "expires": 8 * SEC}, msgs=1, wait_s=9)
        await c.consumer_state(st, "C", lambda i: i.get("num_redelivered") == 1)
        again = data_frames(
            await c.pull(st, "C", {"batch": 1, "expires": 8 * SEC}, msgs=1, wait_s=9)
        )
        await c.ack(again[0])
        await c.info(st, "C")

    await diff.run(cleaned(scenario))


async def test_max_deliver_and_nak_delay(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        await c.fill(["a", "b"])
        cfg = {"durable_name": "C", "ack_policy": "explicit", "max_deliver": 2}
        await c.create(st, "C", cfg)
        one = data_frames(await c.pull(st, "C", {"batch": 1, "no_wait": True}, msgs=1))
        await c.ack(one[0], b"-NAK")
        two = data_frames(await c.pull(st, "C", {"batch": 1, "no_wait": True}, msgs=1))
        await c.ack(two[0], b"-NAK")
        rest = data_frames(await c.pull(st, "C", {"batch": 3, "no_wait": True}))
        await c.info(st, "C")
        await c.ack(rest[0], b'-NAK {"delay": 300000000}')
        await c.pull(st, "C", {"batch": 1, "no_wait": True})
        await c.pull(st, "C", {"batch": 1, "expires": 3 * SEC}, msgs=1, wait_s=4)
        await c.info(st, "C")

    await diff.run(cleaned(scenario))


async def test_ack_next(diff: Differ) -> None:
    """+NXT acks and asks for the next message, delivered to the ack's reply subject."""

    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        await c.fill(["a", "b", "c", "d"])
        await c.create(st, "C", {"durable_name": "C", "ack_policy": "explicit"}, record=False)
        one = data_frames(await c.pull(st, "C", {"batch": 1, "no_wait": True}, msgs=1))
        two = data_frames(await c.ack(one[0], b"+NXT"))
        await c.ack(two[0], b'+NXT {"batch":2}', msgs=2)
        await c.info(st, "C")

    await diff.run(cleaned(scenario))


async def test_ack_policies(diff: Differ) -> None:
    """ack none: floor follows delivery; ack all: one ack covers the earlier ones; explicit."""

    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        await c.fill(["a"] * 5)
        for name, policy in (("NO", "none"), ("AL", "all"), ("EX", "explicit")):
            await c.create(st, name, {"durable_name": name, "ack_policy": policy})
            got = data_frames(await c.pull(st, name, {"batch": 4, "no_wait": True}, msgs=4))
            await c.info(st, name)
            await c.ack(got[2])
            await c.info(st, name)
            await c.ack(got[0])
            await c.info(st, name)
            await c.ack(got[3])
            await c.info(st, name)

    await diff.run(cleaned(scenario))


async def test_ack_reply_ts_is_message_time(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        await c.fill(["a", "b"])
        await c.create(st, "C", {"durable_name": "C", "ack_policy": "explicit"}, record=False)
        for f in data_frames(await c.pull(st, "C", {"batch": 2, "no_wait": True}, msgs=2)):
            await c.check_ack_ts(st, f)

    await diff.run(cleaned(scenario))


# =============================================================================================
# Deliver policies and filters
# =============================================================================================


async def test_deliver_policies(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        await c.fill(["a", "b", "a", "c.x", "b", "c.y"])
        star = s.subj("*")
        # (name, config, how many of the two late messages (a, c.z) it matches)
        cases: list[tuple[str, dict[str, Any], int]] = [
            ("ALL", {"deliver_policy": "all"}, 2),
            ("LAST", {"deliver_policy": "last"}, 2),
            ("NEW", {"deliver_policy": "new"}, 2),
            ("SEQ", {"deliver_policy": "by_start_sequence", "opt_start_seq": 4}, 2),
            ("SEQBIG", {"deliver_policy": "by_start_sequence", "opt_start_seq": 100}, 0),
            ("TIME", {"deliver_policy": "by_start_time", "opt_start_time": BEFORE_ALL}, 2),
            ("LPS", {"deliver_policy": "last_per_subject", "filter_subject": star}, 1),
            ("LPSALL", {"deliver_policy": "last_per_subject", "filter_subject": s.subj(">")}, 2),
            ("LASTF", {"deliver_policy": "last", "filter_subject": s.subj("a")}, 1),
            (
                "SEQF",
                {
                    "deliver_policy": "by_start_sequence",
                    "opt_start_seq": 2,
                    "filter_subject": s.subj("a"),
                },
                1,
            ),
            ("MULTI", {"filter_subjects": [s.subj("a"), s.subj("c.*")]}, 2),
            (
                "LPSM",
                {
                    "deliver_policy": "last_per_subject",
                    "filter_subjects": [s.subj("a"), s.subj("c.>")],
                },
                2,
            ),
        ]
        for name, cfg, _ in cases:
            await c.create(st, name, {"durable_name": name, "ack_policy": "explicit", **cfg})
            await c.pull(st, name, {"batch": 10, "no_wait": True})
        await c.fill(["a", "c.z"], prefix="late")
        for name, _, late in cases:
            await c.settle(st, name, late)
            await c.pull(st, name, {"batch": 10, "no_wait": True})
            await c.info(st, name)

    await diff.run(cleaned(scenario))


async def test_deliver_by_start_time_of_a_message(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        await c.fill(["a", "b", "c"])
        third = await s.api(f"STREAM.MSG.GET.{st}", {"seq": 2}, record=False)
        start = third.get("message", "time")
        cfg = {"durable_name": "T", "deliver_policy": "by_start_time", "opt_start_time": start}
        reply = await c.create(st, "T", cfg, record=False)
        s.record("opt_start_time echoed", reply.get("config", "opt_start_time") == start)
        s.record("num_pending", reply.get("num_pending"))
        await c.pull(st, "T", {"batch": 5, "no_wait": True})

    await diff.run(cleaned(scenario))


# =============================================================================================
# Push consumers
# =============================================================================================


async def test_push_delivery_and_acks(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        await c.fill(["a", "b"])
        await c.publish_raw(s.subj("h"), b"hdr", header_block([("Foo", "bar")]))
        await s.wait_messages(st, 3)
        sid = await c.subscribe(f"{INBOX}.push")
        cfg = {"durable_name": "PU", "ack_policy": "explicit", "deliver_subject": f"{INBOX}.push"}
        await c.create(st, "PU", cfg)
        got = data_frames(await c.read(sid, msgs=3, label="push backlog"))
        await c.fill(["c"], prefix="live")
        got += data_frames(await c.read(sid, msgs=1, label="push live"))
        await c.ack(got[0])
        await c.ack(got[3])
        await c.info(st, "PU")
        await c.ack(got[1], b"-NAK")
        await c.read(sid, msgs=1, label="push redelivery after nak")
        await c.info(st, "PU")

    await diff.run(cleaned(scenario))


async def test_push_without_interest_waits(diff: Differ) -> None:
    """Nothing is delivered until a (literal) subscription to the deliver subject exists."""

    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        await c.fill(["a", "b"])
        cfg = {"durable_name": "PU", "deliver_subject": f"{INBOX}.later"}
        await c.create(st, "PU", cfg)
        await c.info(st, "PU")
        sid = await c.subscribe(f"{INBOX}.later")
        await c.read(sid, msgs=2, label="delivered once subscribed")
        await c.consumer_state(st, "PU", lambda i: i.get("delivered", {}).get("stream_seq") == 2)

    await diff.run(cleaned(scenario))


async def test_push_idle_heartbeat_and_headers_only(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        await c.fill(["a"])
        await c.publish_raw(s.subj("h"), b"12345", header_block([("Foo", "bar")]))
        await s.wait_messages(st, 2)
        sid = await c.subscribe(f"{INBOX}.hb")
        cfg = {
            "durable_name": "HB",
            "deliver_subject": f"{INBOX}.hb",
            "idle_heartbeat": 500 * MS,
            "flow_control": True,
            "headers_only": True,
            "ack_policy": "none",
        }
        await c.create(st, "HB", cfg)
        await c.read(sid, msgs=2, label="headers-only deliveries")
        await c.read(
            sid, stop_status=lambda st: st.startswith("100"), wait_s=3, label="first idle heartbeat"
        )

    await diff.run(cleaned(scenario))


async def test_push_queue_group(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        await c.fill(["a", "b"])
        sid = await c.subscribe(f"{INBOX}.q", queue="grp")
        cfg = {"durable_name": "QG", "deliver_subject": f"{INBOX}.q", "deliver_group": "grp"}
        await c.create(st, "QG", cfg)
        await c.read(sid, msgs=2, label="queue member deliveries")
        await c.create(st, "QG", {**cfg, "deliver_group": "other"})

    await diff.run(cleaned(scenario))


# =============================================================================================
# Interest and workqueue retention
# =============================================================================================


async def test_workqueue_retention(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream(retention="workqueue")
        await c.fill(["a", "b", "a", "b"])
        a, b = s.subj("a"), s.subj("b")
        await c.create(
            st, "W1", {"durable_name": "W1", "ack_policy": "explicit", "filter_subject": a}
        )
        await c.create(
            st, "W2", {"durable_name": "W2", "ack_policy": "explicit", "filter_subject": a}
        )
        await c.create(st, "W3", {"durable_name": "W3", "ack_policy": "explicit"})
        await c.create(st, "W4", {"durable_name": "W4", "ack_policy": "none", "filter_subject": b})
        await c.create(st, "W5", {"durable_name": "W5", "ack_policy": "all", "filter_subject": b})
        await c.create(
            st,
            "W6",
            {
                "durable_name": "W6",
                "ack_policy": "explicit",
                "filter_subject": b,
                "deliver_policy": "last",
            },
        )
        await c.create(
            st,
            "W7",
            {"durable_name": "W7", "ack_policy": "explicit", "filter_subjects": [s.subj(">")]},
        )
        got = data_frames(await c.pull(st, "W1", {"batch": 5, "no_wait": True}))
        await c.ack(got[0])
        await c.stream_state(st, 3)
        await c.info(st, "W1")
        await c.ack(got[1])
        await c.stream_state(st, 2)
        await c.create(
            st, "WB", {"durable_name": "WB", "ack_policy": "explicit", "filter_subject": b}
        )
        got = data_frames(await c.pull(st, "WB", {"batch": 5, "no_wait": True}))
        await c.ack(got[1], b"-NAK")
        await c.ack(got[0], b"+TERM")
        await c.stream_state(st, 1)
        await c.info(st, "WB")

    await diff.run(cleaned(scenario))


async def test_workqueue_unfiltered_then_filtered(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream(retention="workqueue")
        await c.create(st, "ALL", {"durable_name": "ALL", "ack_policy": "explicit"})
        await c.create(
            st, "F", {"durable_name": "F", "ack_policy": "explicit", "filter_subject": s.subj("a")}
        )
        await c.api(f"CONSUMER.DELETE.{st}.ALL")
        await c.create(
            st, "F", {"durable_name": "F", "ack_policy": "explicit", "filter_subject": s.subj("a")}
        )
        await c.create(
            st, "G", {"durable_name": "G", "ack_policy": "explicit", "filter_subject": s.subj("*")}
        )
        push = {
            "durable_name": "P",
            "ack_policy": "explicit",
            "filter_subject": s.subj("p"),
            "deliver_subject": f"{INBOX}.p",
        }
        await c.create(st, "P", push)

    await diff.run(cleaned(scenario))


async def test_interest_retention(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream(retention="interest")
        await c.fill(["a"], prefix="nobody")
        await c.stream_state(st, 0)
        for name in ("I1", "I2"):
            await c.create(st, name, {"durable_name": name, "ack_policy": "explicit"})
        await c.fill(["a", "b"])
        await c.stream_state(st, 2)
        await c.settle(st, "I1", 2)
        await c.settle(st, "I2", 2)
        one = data_frames(await c.pull(st, "I1", {"batch": 5, "no_wait": True}))
        for f in one:
            await c.ack(f)
        await c.stream_state(st, 2, label="acked by one of two consumers")
        two = data_frames(await c.pull(st, "I2", {"batch": 5, "no_wait": True}))
        await c.ack(two[0])
        await c.stream_state(st, 1, label="first message acked by both")
        await c.api(f"CONSUMER.DELETE.{st}.I2")
        await c.stream_state(st, 0, label="consumer with the last interest deleted")
        await c.create(st, "NA", {"durable_name": "NA", "ack_policy": "none"})
        await c.fill(["c"], prefix="late")
        await c.settle(st, "NA", 1)
        await c.pull(st, "NA", {"batch": 1, "no_wait": True}, msgs=1)
        await c.stream_state(st, 1, label="ack none still counts I1's interest")

    await diff.run(cleaned(scenario))


async def test_interest_after_a_filter_change(diff: Differ) -> None:
    """An interest stream drops what an updated consumer no longer sees and nobody else needs
    (nats-server's cleanupNoInterestMessages after a filter change)."""

    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream(retention="interest")
        config = {"durable_name": "F", "ack_policy": "explicit"}
        await c.create(st, "F", config)
        await c.fill(["a.1", "b.1", "a.2"])
        await c.stream_state(st, 3, label="all owed to F")
        narrowed = {**config, "filter_subject": s.subj("a.>")}
        await c.create(st, "F", narrowed)
        await c.stream_state(st, 2, label="b.1 lost its only interest")
        await c.info(st, "F")

    await diff.run(cleaned(scenario))


async def test_pause_and_resume(diff: Differ) -> None:
    """CONSUMER.PAUSE: the reply, the config's pause_until and required level, INFO's paused and
    pause_remaining, a no_wait pull answered 404 while paused, delivery after the resume."""

    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        await c.fill(["a", "b"])
        await c.create(st, "C", {"durable_name": "C", "ack_policy": "explicit"})
        await c.api(f"CONSUMER.PAUSE.{st}.C", {"pause_until": "2100-01-01T00:00:00Z"})
        await c.info(st, "C")
        await c.pull(st, "C", {"batch": 1, "no_wait": True})
        await c.api(f"CONSUMER.PAUSE.{st}.NOPE", {"pause_until": "2100-01-01T00:00:00Z"})
        await c.api(f"CONSUMER.PAUSE.{st}.C")
        await c.info(st, "C")
        await c.pull(st, "C", {"batch": 1, "no_wait": True}, msgs=1)

    await diff.run(cleaned(scenario))


async def test_rate_limited_push_consumer_config(diff: Differ) -> None:
    """rate_limit_bps is a push setting: accepted and reported there, refused on pull (10086)."""

    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        await c.create(
            st, "P", {"durable_name": "P", "deliver_subject": "_CDIFF.rate", "rate_limit_bps": 8000}
        )
        await c.create(st, "Q", {"durable_name": "Q", "rate_limit_bps": 8000})

    await diff.run(cleaned(scenario))


async def test_leader_stepdown_needs_a_cluster(diff: Differ) -> None:
    """A single server answers stream and consumer leader stepdown with 10010, known or not."""

    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        await c.create(st, "C", {"durable_name": "C"}, record=False)
        await c.api(f"STREAM.LEADER.STEPDOWN.{st}")
        await c.api(f"STREAM.LEADER.STEPDOWN.{st}NOPE")
        await c.api(f"CONSUMER.LEADER.STEPDOWN.{st}.C")
        await c.api(f"CONSUMER.LEADER.STEPDOWN.{st}.NOPE")

    await diff.run(cleaned(scenario))


async def test_reset_to_a_seq_and_back_to_the_ack_floor(diff: Differ) -> None:
    """CONSUMER.RESET: the reply (the consumer's info and ``reset_seq``), what is delivered
    after it (consumer seqs start over), and the deliver policies' refusals."""

    async def scenario(s: Session) -> None:
        c = Consumers(s)
        st = await c.stream()
        await c.fill(["a", "b", "a", "b", "a"])
        await c.create(st, "C", {"durable_name": "C", "ack_policy": "explicit"})
        frames = await c.pull(st, "C", {"batch": 3, "no_wait": True})
        await c.ack(data_frames(frames)[0])
        await c.api(f"CONSUMER.RESET.{st}.C", {"seq": 4})
        await c.pull(st, "C", {"batch": 5, "no_wait": True})
        await c.info(st, "C")
        await c.api(f"CONSUMER.RESET.{st}.C")  # no body: the ack floor's next
        await c.pull(st, "C", {"batch": 2, "no_wait": True})
        await c.info(st, "C")
        await c.api(f"CONSUMER.RESET.{st}.C", {"seq": 99})  # past the end: waits there
        await c.pull(st, "C", {"batch": 1, "no_wait": True})
        await c.info(st, "C")
        await c.create(
            st,
            "S",
            {"durable_name": "S", "deliver_policy": "by_start_sequence", "opt_start_seq": 3},
        )
        await c.api(f"CONSUMER.RESET.{st}.S", {"seq": 2})
        await c.api(f"CONSUMER.RESET.{st}.S", {"seq": 4})
        await c.create(st, "L", {"durable_name": "L", "deliver_policy": "last"})
        await c.api(f"CONSUMER.RESET.{st}.L", {"seq": 1})
        await c.api(f"CONSUMER.RESET.{st}.L")
        await c.api(f"CONSUMER.RESET.{st}.C", b"{bad")

    await diff.run(cleaned(scenario))
