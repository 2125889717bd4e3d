"""Run one scenario against the reference server and the candidate, compare the transcripts.

Owns: the per-server Session a scenario talks through (nats-py for the JSON API, raw sockets
for byte-exact protocol and Direct Get checks), the Transcript of everything each server
answered, and the comparison that fails with both replies shown side by side.
Must never: let a scenario branch on which server it talks to, or compare unmasked values that
legitimately differ between servers (see diff_mask).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import traceback
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import nats
import nats.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from tests.differential.diff_mask import comparable_json_reply, mask_header_block, pretty, try_json
from tests.differential.diff_raw import (
    CRLF,
    DEFAULT_CONNECT,
    Frame,
    RawConn,
    connect_line,
    header_block,
    hpub,
    pub,
)

DIFF_AGAINST_ENV = "JETRAFT_DIFF_AGAINST"  # "jetraft" (default) or "nats"
DUMP_ENV = "JETRAFT_DIFF_DUMP"  # set to 1 to print the oracle's transcript (use with -s)

REPLY_TIMEOUT_S = 2.0
NO_REPLY_TIMEOUT_S = 0.5
MAX_DIFFS_SHOWN = 8
LABEL_HEADERS_CHARS = 160
# A candidate that leaves this many expected replies in a row unanswered is not waited on
# any longer: the scenario is aborted (and fails) instead of timing out step by step.
CANDIDATE_TIMEOUTS_IN_A_ROW_MAX = 3
DG_INBOX = "_DIFF.dg"
DG_SID = "1"

TIMEOUT = "<timeout>"
NO_RESPONDERS = "<no responders>"


@dataclass
class Step:
    """One observation: what was asked, the comparable answer, and a readable rendering."""

    label: str
    key: Any
    shown: str


class CandidateUnresponsive(Exception):
    """The candidate stopped answering; the rest of the scenario is skipped."""


@dataclass
class Transcript:
    side: str
    steps: list[Step] = field(default_factory=list)

    def add(self, label: str, key: Any, shown: str | None = None) -> None:
        self.steps.append(Step(label, key, repr(key) if shown is None else shown))

    def __iter__(self) -> Iterator[Step]:
        return iter(self.steps)

    def keys(self, label: str) -> list[Any]:
        """The comparable answers recorded under label (for extra assertions in tests)."""
        return [s.key for s in self.steps if s.label == label]

    def key(self, label: str) -> Any:
        found = self.keys(label)
        assert len(found) == 1, f"{len(found)} steps labelled {label!r} in {self.side}"
        return found[0]


@dataclass
class Reply:
    """A request's outcome: a message, a timeout, or a no-responders status."""

    outcome: str  # "msg", TIMEOUT or NO_RESPONDERS
    data: bytes = b""
    headers: dict[str, str] | None = None

    @property
    def json(self) -> Any:
        return try_json(self.data)

    def get(self, *path: str | int) -> Any:
        """A value inside the JSON reply (None if missing); for scenario logic."""
        value: Any = self.json
        for p in path:
            if isinstance(value, dict) and isinstance(p, str):
                value = value.get(p)
            elif isinstance(value, list) and isinstance(p, int) and p < len(value):
                value = value[p]
            else:
                return None
        return value


def encode_body(body: bytes | str | dict[str, Any] | None) -> bytes:
    if body is None:
        return b""
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    return json.dumps(body, separators=(",", ":")).encode()


class Session:
    """A scenario's view of one server. Every answer is recorded in the transcript."""

    def __init__(self, side: str, port: int, uid: str) -> None:
        self.side = side
        self.port = port
        self.uid = uid
        self.url = f"nats://127.0.0.1:{port}"
        self.transcript = Transcript(side)
        self._nc: NatsClient | None = None
        self._dg: RawConn | None = None
        self._dg_next = 0
        self._raws: list[RawConn] = []
        self._timeouts_in_a_row = 0

    # -- naming ---------------------------------------------------------------------------
    def stream(self, suffix: str = "") -> str:
        """A stream name unique to this test (identical on both servers)."""
        return f"{self.uid}{suffix}"

    def subj(self, tail: str = "") -> str:
        """A subject unique to this test: '<uid>' or '<uid>.<tail>'."""
        base = self.uid.lower()
        return f"{base}.{tail}" if tail else base

    def _note_wait(self, *, timed_out: bool, timeout_s: float) -> None:
        """Count expected replies that never came; abort a candidate that stopped answering."""
        if not timed_out or timeout_s < REPLY_TIMEOUT_S:
            self._timeouts_in_a_row = 0
            return
        self._timeouts_in_a_row += 1
        if self.side != "oracle" and self._timeouts_in_a_row >= CANDIDATE_TIMEOUTS_IN_A_ROW_MAX:
            raise CandidateUnresponsive(f"{self._timeouts_in_a_row} replies in a row timed out")

    # -- recording ------------------------------------------------------------------------
    def record(self, label: str, value: Any, shown: str | None = None) -> None:
        """Record a value computed by the scenario itself (e.g. a derived count)."""
        self.transcript.add(label, value, shown)

    # -- nats-py: JSON API and publishes --------------------------------------------------
    async def nc(self) -> NatsClient:
        if self._nc is None:
            self._nc = await nats.connect(
                self.url, allow_reconnect=False, max_reconnect_attempts=0, name="differential"
            )
        return self._nc

    async def request(
        self,
        subject: str,
        body: bytes | str | dict[str, Any] | None = None,
        *,
        headers: dict[str, str] | None = None,
        timeout_s: float = REPLY_TIMEOUT_S,
        label: str | None = None,
        record: bool = True,
    ) -> Reply:
        """A nats-py request; the reply is recorded (JSON masked, PubAcks/errors exact)
        unless record is False (for setup steps whose answers are checked elsewhere)."""
        payload = encode_body(body)
        nc = await self.nc()
        try:
            msg: Msg = await nc.request(subject, payload, timeout=timeout_s, headers=headers)
            reply = Reply("msg", msg.data, dict(msg.headers) if msg.headers else None)
        except nats.errors.NoRespondersError:
            reply = Reply(NO_RESPONDERS)
        except nats.errors.TimeoutError:
            reply = Reply(TIMEOUT)
        if record:
            if label is None:
                hdr = f" {str(headers)[:LABEL_HEADERS_CHARS]}" if headers else ""
                label = f"{subject} {pretty(payload, 200)}{hdr}"
            self.record_reply(label, reply)
        self._note_wait(timed_out=reply.outcome == TIMEOUT, timeout_s=timeout_s)
        return reply

    async def api_unanswered(self, requests: Sequence[tuple[str, Any]]) -> None:
        """Send each (endpoint, body) to $JS.API at once, each waiting the no-reply timeout, and
        record the outcomes in request order: for the subjects that get no answer."""
        replies = await asyncio.gather(
            *(
                self.api(endpoint, body, timeout_s=NO_REPLY_TIMEOUT_S, record=False)
                for endpoint, body in requests
            )
        )
        for (endpoint, body), reply in zip(requests, replies, strict=True):
            self.record_reply(f"$JS.API.{endpoint} {body!r}", reply)

    def record_reply(self, label: str, reply: Reply) -> None:
        """Record a reply obtained with record=False (e.g. from concurrent requests)."""
        if reply.outcome != "msg":
            self.transcript.add(label, reply.outcome, reply.outcome)
            return
        mode, value = comparable_json_reply(reply.data)
        hdrs = tuple(sorted(reply.headers.items())) if reply.headers else None
        shown = pretty(reply.data) + (f"  headers={reply.headers}" if reply.headers else "")
        self.transcript.add(label, (mode, value, hdrs), shown)

    async def api(
        self,
        endpoint: str,
        body: bytes | str | dict[str, Any] | None = None,
        *,
        headers: dict[str, str] | None = None,
        timeout_s: float = REPLY_TIMEOUT_S,
        label: str | None = None,
        record: bool = True,
    ) -> Reply:
        """A request to $JS.API.<endpoint>."""
        return await self.request(
            f"$JS.API.{endpoint}",
            body,
            headers=headers,
            timeout_s=timeout_s,
            label=label,
            record=record,
        )

    async def create(
        self, config: dict[str, Any], *, label: str | None = None, record: bool = True
    ) -> Reply:
        """STREAM.CREATE with config (its name picks the subject)."""
        return await self.api(f"STREAM.CREATE.{config['name']}", config, label=label, record=record)

    async def wait_messages(self, stream: str, count: int, timeout_s: float = 10.0) -> None:
        """Poll STREAM.INFO (unrecorded) until the stream holds count messages."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            info = await self.api(f"STREAM.INFO.{stream}", record=False)
            if info.get("state", "messages") == count:
                return
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"{stream} has {info.get('state', 'messages')} messages")
            await asyncio.sleep(0.02)

    async def publish(
        self,
        subject: str,
        payload: bytes | str = b"",
        *,
        headers: dict[str, str] | None = None,
        timeout_s: float = REPLY_TIMEOUT_S,
        label: str | None = None,
        record: bool = True,
    ) -> Reply:
        """A publish that waits for the PubAck (compared byte for byte)."""
        data = payload.encode() if isinstance(payload, str) else payload
        if label is None:
            hdr = f" {str(headers)[:LABEL_HEADERS_CHARS]}" if headers else ""
            label = f"PUB {subject} {pretty(data, 80)}{hdr}"
        return await self.request(
            subject, data, headers=headers, timeout_s=timeout_s, label=label, record=record
        )

    async def publish_quiet(self, subject: str, payload: bytes | str = b"") -> None:
        """A publish without reply subject, flushed; nothing to record."""
        nc = await self.nc()
        await nc.publish(subject, payload.encode() if isinstance(payload, str) else payload)
        await nc.flush()

    # -- raw protocol ---------------------------------------------------------------------
    async def raw(
        self,
        connect: dict[str, Any] | None = DEFAULT_CONNECT,
        *,
        label: str | None = None,
        record_info: bool = False,
    ) -> RawConn:
        """A raw connection. With connect options, CONNECT is sent and two PINGs flush the
        handshake (+OK, PONG, the async INFO); the handshake frames are recorded under label
        (INFO bodies only when record_info). connect=None leaves the connection pre-CONNECT,
        with only the server's INFO read."""
        conn = await RawConn.open(self.port)
        self._raws.append(conn)
        first = await conn.read_frame()
        frames = [first] if first is not None else []
        if connect is not None:
            await conn.send(connect_line(connect) + b"PING\r\n")
            frames += await conn.read_until_pong()
            await conn.send(b"PING\r\n")
            frames += await conn.read_until_pong()
        if label is not None:
            self.record_frames(label, frames, conn, full_info=record_info)
        return conn

    def record_frames(
        self,
        label: str,
        frames: list[Frame],
        conn: RawConn | None,
        *,
        full_info: bool = True,
        sid_aliases: dict[str, str] | None = None,
    ) -> None:
        """Record frames; sid_aliases renames sids whose choice is random (queue members)."""
        if sid_aliases:
            frames = [
                dataclasses.replace(f, sid=sid_aliases.get(f.sid, f.sid), line=b"")
                if f.op in ("MSG", "HMSG")
                else f
                for f in frames
            ]
        state = None if conn is None else ("closed" if conn.closed else "open")
        key = (tuple(f.key(full_info=full_info) for f in frames), state)
        shown = "\n      ".join([f.show() for f in frames] + [f"[connection {state}]"])
        self.transcript.add(label, key, shown)

    async def exchange(
        self,
        conn: RawConn,
        label: str,
        data: bytes,
        *,
        expect_close: bool = False,
        timeout_s: float = REPLY_TIMEOUT_S,
        sid_aliases: dict[str, str] | None = None,
    ) -> list[Frame]:
        """Send data and record what comes back.

        Normally a PING is appended and frames are read up to its PONG, which also proves the
        connection is still open. With expect_close no PING is sent (a server that closes
        with unread input may reset the connection); frames are read until the server closes
        or stays silent for timeout_s, and the transcript says which.
        """
        if expect_close:
            await conn.send(data)
            frames = await conn.read_until_idle_or_close(timeout_s)
        else:
            await conn.send(data + b"PING\r\n")
            frames = await conn.read_until_pong(timeout_s=timeout_s)
        self.record_frames(label, frames, conn, sid_aliases=sid_aliases)
        if not expect_close:
            no_pong = not conn.closed and not any(f.op == "PONG" for f in frames)
            self._note_wait(timed_out=no_pong, timeout_s=timeout_s)
        return frames

    # -- Direct Get over a raw connection --------------------------------------------------
    async def _dg_conn(self) -> RawConn:
        if self._dg is None:
            conn = await self.raw()
            await conn.send(f"SUB {DG_INBOX}.> {DG_SID}\r\nPING\r\n".encode())
            await conn.read_until_pong()
            self._dg = conn
        return self._dg

    async def raw_request(
        self,
        subject: str,
        body: bytes | str | dict[str, Any] | None = None,
        *,
        headers: dict[str, str] | list[tuple[str, str]] | None = None,
        multi: bool = False,
        timeout_s: float = REPLY_TIMEOUT_S,
        label: str | None = None,
    ) -> list[Frame]:
        """A request over the raw connection; every reply frame is recorded byte-exact.

        A single request ends at its first reply; a multi request (batch, multi_last) ends at
        the first status message (EOB or an error status), or when timeout_s passes quietly.
        """
        conn = await self._dg_conn()
        self._dg_next += 1
        reply_to = f"{DG_INBOX}.{self._dg_next}"
        payload = encode_body(body)
        if headers is None:
            await conn.send(pub(subject, payload, reply_to))
        else:
            await conn.send(hpub(subject, header_block(headers), payload, reply_to))
        frames: list[Frame] = []
        while (frame := await conn.read_frame(timeout_s)) is not None:
            if frame.op in ("MSG", "HMSG") and frame.subject != reply_to:
                continue  # a late reply to an earlier request that timed out
            frames.append(frame)
            if not multi or frame.status or frame.op not in ("MSG", "HMSG"):
                break
        if label is None:
            hdr = f" {str(headers)[:LABEL_HEADERS_CHARS]}" if headers else ""
            label = f"{subject} {pretty(payload, 200)}{hdr}"
        # The reply subject numbering is identical on both sides, but keep it out of the key.
        key = tuple(_without_reply_number(f) for f in frames) or (TIMEOUT,)
        shown = "\n      ".join(f.show() for f in frames) or TIMEOUT
        self.transcript.add(label, key, shown)
        self._note_wait(timed_out=not frames, timeout_s=timeout_s)
        return frames

    async def direct_get(
        self,
        stream: str,
        body: bytes | str | dict[str, Any] | None = None,
        *,
        subject_tail: str | None = None,
        headers: dict[str, str] | list[tuple[str, str]] | None = None,
        multi: bool = False,
        timeout_s: float = REPLY_TIMEOUT_S,
        label: str | None = None,
    ) -> list[Frame]:
        """$JS.API.DIRECT.GET.<stream>[.<subject_tail>] over the raw connection."""
        subject = f"$JS.API.DIRECT.GET.{stream}" + (f".{subject_tail}" if subject_tail else "")
        return await self.raw_request(
            subject, body, headers=headers, multi=multi, timeout_s=timeout_s, label=label
        )

    async def close(self) -> None:
        if self._nc is not None and not self._nc.is_closed:
            try:
                await asyncio.wait_for(self._nc.close(), REPLY_TIMEOUT_S)
            except Exception:  # a broken candidate must not hide the real diff
                pass
        for conn in self._raws:
            await conn.close()


def _without_reply_number(frame: Frame) -> Any:
    key = frame.key()
    if frame.op in ("MSG", "HMSG"):
        return (key[0], DG_INBOX, *key[2:])
    return key


Scenario = Callable[[Session], Awaitable[None]]


async def run_side(side: str, port: int, uid: str, scenario: Scenario) -> Transcript:
    """Run scenario against one server. A candidate's failure becomes a transcript step."""
    session = Session(side, port, uid)
    try:
        await scenario(session)
    except Exception as exc:
        if side == "oracle":
            raise  # a scenario that breaks on the reference server is a bug in the test
        tb = traceback.format_exc(limit=3)
        session.transcript.add("<scenario aborted>", f"{type(exc).__name__}: {exc}", tb)
    finally:
        await session.close()
    return session.transcript


def diff_report(oracle: Transcript, other: Transcript) -> str | None:
    """None when the transcripts match; else a readable account of the differences."""
    lines: list[str] = []
    shown = 0
    n = max(len(oracle.steps), len(other.steps))
    for i in range(n):
        a = oracle.steps[i] if i < len(oracle.steps) else None
        b = other.steps[i] if i < len(other.steps) else None
        if a is not None and b is not None and a.label == b.label and a.key == b.key:
            continue
        shown += 1
        if shown > MAX_DIFFS_SHOWN:
            continue
        label = a.label if a is not None else b.label if b is not None else "?"
        lines.append(f"step {i}: {label}")
        if b is not None and a is not None and a.label != b.label:
            lines.append(f"  ({other.side} step label: {b.label})")
        lines.append(f"  {oracle.side:>9}: {a.shown if a is not None else '<no step>'}")
        lines.append(f"  {other.side:>9}: {b.shown if b is not None else '<no step>'}")
        if a is not None and b is not None:
            lines += _explain(a.key, b.key, a.shown == b.shown, oracle.side, other.side)
    if shown == 0:
        return None
    if shown > MAX_DIFFS_SHOWN:
        lines.append(f"... and {shown - MAX_DIFFS_SHOWN} more differing steps")
    header = f"{shown} of {n} steps differ between {oracle.side} and {other.side}:"
    return "\n".join([header, *lines])


def _explain(a: Any, b: Any, same_text: bool, side_a: str, side_b: str) -> list[str]:
    """Extra lines pointing at what differs inside two JSON replies (or the masked keys)."""
    if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b) == 3:
        if a[0] == b[0] == "json" and a[2] == b[2]:
            paths = json_diff(json.loads(a[1]), json.loads(b[1]))
            return [f"  differs at {p}: {va} != {vb}" for p, va, vb in paths[:MAX_DIFFS_SHOWN]]
    if same_text:
        return [f"  {side_a:>9} key: {a!r}", f"  {side_b:>9} key: {b!r}"]
    return []


def json_diff(a: Any, b: Any, path: str = "") -> list[tuple[str, str, str]]:
    """(path, oracle value, other value) for each place where two masked JSON values differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[tuple[str, str, str]] = []
        for k in [*a, *(k for k in b if k not in a)]:
            sub = f"{path}.{k}" if path else k
            if k not in a or k not in b:
                va = json.dumps(a[k]) if k in a else "<missing>"
                vb = json.dumps(b[k]) if k in b else "<missing>"
                out.append((sub, va, vb))
            else:
                out += json_diff(a[k], b[k], sub)
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in json_diff(x, y, f"{path}[{i}]")
        ]
    if a != b or type(a) is not type(b):
        return [(path or "<root>", json.dumps(a), json.dumps(b))]
    return []


async def compare(
    scenario: Scenario, *, oracle_port: int, other_port: int, other_side: str, uid: str
) -> Transcript:
    """Run scenario on both servers at once; fail with a readable diff; return the oracle's."""
    oracle, other = await asyncio.gather(
        run_side("oracle", oracle_port, uid, scenario),
        run_side(other_side, other_port, uid, scenario),
    )
    report = diff_report(oracle, other)
    if report is not None:
        raise AssertionError(report)
    return oracle


@dataclass
class Differ:
    """Runs scenarios against a pair of servers; uid keeps names unique per test."""

    oracle_port: int
    candidate_port: int
    candidate_side: str
    uid: str

    async def run(self, scenario: Scenario) -> Transcript:
        """Run on both servers concurrently; AssertionError with both replies if they differ.

        Returns the oracle's transcript (equal to the candidate's) for extra assertions."""
        transcript = await compare(
            scenario,
            oracle_port=self.oracle_port,
            other_port=self.candidate_port,
            other_side=self.candidate_side,
            uid=self.uid,
        )
        if os.environ.get(DUMP_ENV):
            for step in transcript:
                print(f"{step.label}\n      {step.shown}")
        return transcript


__all__ = [
    "CRLF",
    "NO_REPLY_TIMEOUT_S",
    "NO_RESPONDERS",
    "TIMEOUT",
    "Differ",
    "Reply",
    "Scenario",
    "Session",
    "Transcript",
    "compare",
    "header_block",
    "mask_header_block",
]


# --- waiting for a stream state (expiry, schedules): poll, then record ----------------------

STATE_WAIT_S = 8.0  # far above the ~0.5 s nats-server needs past a deadline
STATE_POLL_INTERVAL_S = 0.02


async def info(s: Session, stream: str, label: str) -> dict[str, Any]:
    reply = await s.api(f"STREAM.INFO.{stream}", label=f"INFO {label}")
    state: dict[str, Any] = reply.get("state") or {}
    return state


async def wait_state(
    s: Session, stream: str, label: str, done: Callable[[dict[str, Any]], bool]
) -> None:
    """Poll STREAM.INFO (unrecorded) until done(state) or STATE_WAIT_S; then record it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + STATE_WAIT_S
    while True:
        reply = await s.api(f"STREAM.INFO.{stream}", record=False)
        state = reply.get("state") or {}
        if done(state) or loop.time() > deadline:
            break
        await asyncio.sleep(STATE_POLL_INTERVAL_S)
    await info(s, stream, label)


def state_is(messages: int, last_seq: int) -> Callable[[dict[str, Any]], bool]:
    return lambda st: st.get("messages") == messages and st.get("last_seq") == last_seq
