"""Workloads of the chaos harness: client processes that drive a cluster over the NATS protocol
and record every operation in the history.

A workload is given its connection targets as plain data (``{node name: client URL}``), so it
runs against jetraft and nats-server alike. ``setup`` creates its streams (``num_replicas`` =
the cluster size, at most ``MAX_REPLICAS``); ``run`` starts ``processes`` logical processes,
process ``p`` pinned to node ``sorted(names)[p % n]`` through its own nats-py connection (never
reconnecting elsewhere: when its node dies the process reconnects to the same URL, invoking
nothing meanwhile); ``final_reads`` reads back from a client on each node: every sequence of
every stream through MSG.GET (``read_all``), and each counter subject's last message. Streams are
JQUEUE, JBATCH, JTTL, JKV, JCONS and JCOUNTER (subjects ``jq.>``, ``jb.>``, ``jt.>``, ``jkv.>``,
``jc.>``, ``jn.>``), each name suffixed by the workload's ``tag`` if it has one. Operations and
their values (the run directory contract):

* ``publish``: invoke ``{"stream", "id", "subject"}`` (+ ``"ttl"``, + ``"expected_last_subject
  _seq"`` for compare-and-set writes); ``ok`` adds ``"seq"``.
* ``batch`` (atomic batch): invoke ``{"stream", "batch", "ids", "subject", "abandon"}``; ``ok``
  adds ``"seq"`` (the commit's), ``"count"`` and ``"seqs"`` (``seq - count + 1 .. seq``, in
  ``ids`` order); an abandoned batch (the commit is never sent, on purpose) completes ``fail``
  with ``"abandoned": true`` — the server must never store any of it.
* ``direct_get`` / ``msg_get``: invoke ``{"stream", "request": {"seq": s} | {"last_by_subj":
  subject}}``; ``ok`` adds ``"seq", "id", "subject"`` or ``"not_found": true``, and
  ``"served_by"``: for ``msg_get`` the node the client is connected to (the request enters the
  cluster there; the stream leader answers it), for ``direct_get`` the replica that answered
  (jetraft names it in a ``Jetraft-Served-By`` reply header when the request carries that
  header; null on nats-server).
* ``read_all``: invoke ``{"stream"}``; ``ok`` adds ``"first_seq", "last_seq", "messages":
  [{"seq", "id", "subject"}], "missing": [seq], "unknown": [seq], "served_by"`` (``missing``:
  MSG.GET said "no message found"; ``unknown``: no answer after ``FINAL_READ_ATTEMPTS``).
* ``increment`` (a counter stream, ADR-49): invoke ``{"stream", "subject", "id", "incr",
  "attempt"}``, sent as ``Nats-Incr: incr`` and ``Nats-Msg-Id: id`` with an empty payload; ``ok``
  adds ``"seq"`` and ``"val"`` (the PubAck's total, a decimal string) or ``"duplicate": true``.
* ``counter_read`` (final reads): invoke ``{"stream", "subject"}``; ``ok`` adds ``"seq", "val"``
  or ``"not_found": true``, and ``"served_by"``.

Outcomes: a reply is ``ok``; an explicit error reply (JetStream error JSON, a non-404 status,
"no responders") is ``fail`` — the server says it did not do it; anything else (timeout, closed
connection) is ``info``. Publishes are never retried and carry no ``Nats-Msg-Id``, so a stored
duplicate is the server's doing. Payloads are JSON objects with a unique ``id``. The one
exception is a counter increment: it carries its own ``Nats-Msg-Id``, and an attempt whose
outcome is unknown is tried again with that same id (a new ``increment`` op, ``attempt`` + 1),
at most ``COUNTER_ATTEMPTS`` times, within ``COUNTER_RETRY_S`` of the first (far inside the
stream's duplicate window) and never after the run's stop; the server must apply it once.

Determinism: every process draws its own ``random.Random`` from the run's rng, and each step
draws a fixed number of values before any I/O, so the same seed gives every process the same
sequence of intended operations and pauses; what happens to them is up to the system. Rates
are bounded (a pause of ``MIN_OP_GAP_S``..``MAX_OP_GAP_S`` after each step) so a 2-core machine
running the cluster copes.

Must never: import cluster/, engine/ or protocol/ (the harness is a black box user), retry a
write other than a counter increment (always with its own msg id), or record an outcome it did
not observe.
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any, ClassVar, Final

import nats
import nats.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from jepsen_like.contract import (
    ABANDONED,
    BATCH,
    CONSUME,
    COUNTER_READ,
    DIRECT_GET,
    FAIL,
    INCREMENT,
    INFO,
    MSG_GET,
    OK,
    PUBLISH,
    READ_ALL,
)
from jepsen_like.history import CompletionType, History

OP_TIMEOUT_S: Final = 2.0  # one request (publish, batch commit, read) before it counts as info
MIN_OP_GAP_S: Final = 0.02  # at most 50 steps per second per process...
MAX_OP_GAP_S: Final = 0.06  # ...about 25 on average (a compare-and-set step is 2 operations)
CONNECT_TIMEOUT_S: Final = 2
RECONNECT_WAIT_S: Final = 0.25  # between attempts to reach a process's (dead) node
API_TIMEOUT_S: Final = 2.0  # stream create / info during setup and final reads
SETUP_TIMEOUT_S: Final = 60.0
SETUP_RETRY_S: Final = 0.25
MAX_REPLICAS: Final = 5
FINAL_READ_CONCURRENCY: Final = 16  # MSG.GETs in flight per read_all
FINAL_READ_ATTEMPTS: Final = 5  # per sequence, before it is recorded as unknown
FINAL_READ_RETRY_S: Final = 0.2
FINAL_PROCESS_BASE: Final = 10_000  # read_all process ids: this + the node's position
RECENT_ACKS: Final = 32  # acked sequences a process remembers to read back

API_PREFIX: Final = "$JS.API"
# jetraft names the replica that answered a Direct Get when asked with this header (nats-server
# ignores it and names nobody: served_by is then null)
SERVED_BY_HEADER: Final = "Jetraft-Served-By"
SERVED_BY_ASK: Final = {SERVED_BY_HEADER: "1"}
NO_MESSAGE_FOUND: Final = 10037
STATUS_NOT_FOUND: Final = "404"


# --- outcomes ---------------------------------------------------------------------------------


class ErrorReply(Exception):
    """The server answered with an error: the operation certainly did not take effect."""

    def __init__(self, error: Any) -> None:
        super().__init__(str(error))
        self.error = error


class Abandoned(Exception):
    """A batch the workload abandoned on purpose (its commit was never sent)."""

    def __init__(self, sent: int) -> None:
        super().__init__(f"abandoned after {sent} messages")
        self.sent = sent


def _describe(exc: BaseException) -> str:
    if isinstance(exc, (asyncio.TimeoutError, nats.errors.TimeoutError)):
        return "timeout"
    return f"{type(exc).__name__}: {exc}"[:200]


def _json(msg: Msg) -> dict[str, Any]:
    try:
        body = json.loads(msg.data)
    except ValueError as exc:
        raise ErrorReply(f"reply is not JSON: {msg.data[:100]!r}") from exc
    if not isinstance(body, dict):
        raise ErrorReply(f"reply is not a JSON object: {msg.data[:100]!r}")
    return body


def _payload_str(data: bytes | None, key: str) -> str | None:
    """The string at ``key`` of a JSON-object payload, else None."""
    try:
        body = json.loads(data or b"")
    except ValueError:
        return None
    value = body.get(key) if isinstance(body, dict) else None
    return value if isinstance(value, str) else None


def payload_id(data: bytes | None) -> str | None:
    """The ``id`` of a JSON-object payload, else None (subject delete markers have none)."""
    return _payload_str(data, "id")


def counter_value(data: bytes | None) -> str | None:
    """The total a counter message's payload ``{"val": "<total>"}`` holds, else None."""
    return _payload_str(data, "val")


def _pub_ack(msg: Msg) -> dict[str, Any]:
    body = _json(msg)
    if "error" in body:
        raise ErrorReply(body["error"])
    seq = body.get("seq")
    if not isinstance(seq, int):
        raise ErrorReply(f"pub ack without a seq: {body}")
    return body


def _direct_result(msg: Msg) -> dict[str, Any]:
    headers = msg.headers or {}
    status = headers.get("Status")
    if status == STATUS_NOT_FOUND:
        return {"not_found": True}
    if status:
        raise ErrorReply({"status": status, "description": headers.get("Description")})
    seq = headers.get("Nats-Sequence")
    return {
        "seq": int(seq) if seq is not None and seq.isdigit() else None,
        "id": payload_id(msg.data),
        "subject": headers.get("Nats-Subject"),
    }


def _msg_get_message(msg: Msg) -> tuple[dict[str, Any], bytes | None] | None:
    """A MSG.GET reply's message and its decoded payload; None for "no message found"."""
    body = _json(msg)
    error = body.get("error")
    if error is not None:
        if isinstance(error, dict) and error.get("err_code") == NO_MESSAGE_FOUND:
            return None
        raise ErrorReply(error)
    message = body.get("message") or {}
    return message, base64.b64decode(message["data"]) if message.get("data") else None


def _msg_get_result(msg: Msg) -> dict[str, Any]:
    found = _msg_get_message(msg)
    if found is None:
        return {"not_found": True}
    message, data = found
    return {"seq": message.get("seq"), "id": payload_id(data), "subject": message.get("subject")}


def _counter_result(msg: Msg) -> dict[str, Any]:
    found = _msg_get_message(msg)
    if found is None:
        return {"not_found": True}
    message, data = found
    out = {"seq": message.get("seq"), "val": counter_value(data)}
    if out["val"] is None:
        out["payload"] = repr(data)[:100]  # not a counter value: the checker says so
    return out


async def _quiet_error_cb(exc: Exception) -> None:
    """nats-py logs every connection error by default; the history already records outcomes."""


async def connect(url: str) -> NATS:
    """A connection to ``url`` only, that never reconnects on its own (so it never drifts to
    another node from the server's ``connect_urls``)."""
    return await nats.connect(
        servers=[url],
        connect_timeout=CONNECT_TIMEOUT_S,
        allow_reconnect=False,
        max_reconnect_attempts=0,
        error_cb=_quiet_error_cb,
    )


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        pass


# --- one logical process ----------------------------------------------------------------------


class Client:
    """A logical process: one connection to one node, one operation outstanding at a time."""

    def __init__(
        self,
        process: int,
        node: str,
        url: str,
        history: History,
        rng: random.Random,
        op_timeout_s: float = OP_TIMEOUT_S,
        stop: asyncio.Event | None = None,
    ) -> None:
        self.process = process
        self.node = node
        self.url = url
        self.history = history
        self.rng = rng
        self.op_timeout_s = op_timeout_s
        self.stop = stop  # the run's stop: set, no new attempt begins
        self.nc: NATS | None = None
        self._connecting = asyncio.Lock()
        self._counters: dict[str, int] = {}
        self.acked: dict[str, deque[int]] = {}  # stream -> recently acked seqs

    @property
    def connected(self) -> bool:
        return self.nc is not None and self.nc.is_connected

    @property
    def stopping(self) -> bool:
        return self.stop is not None and self.stop.is_set()

    async def ensure_connected(self) -> bool:
        """Connected to this process's node (connecting now if not): True, else False."""
        async with self._connecting:  # read_all's workers may all notice a drop at once
            if self.connected:
                return True
            await self.close()
            try:
                self.nc = await connect(self.url)
            except Exception:
                self.nc = None
                return False
            return True

    async def close(self) -> None:
        nc, self.nc = self.nc, None
        if nc is not None and not nc.is_closed:
            try:
                await nc.close()
            except Exception:
                pass

    def next_id(self, prefix: str) -> str:
        k = self._counters.get(prefix, 0)
        self._counters[prefix] = k + 1
        return f"{prefix}-{self.process}-{k}"

    def remember(self, stream: str, seq: int) -> None:
        self.acked.setdefault(stream, deque(maxlen=RECENT_ACKS)).append(seq)

    def recent(self, stream: str, pick: float) -> int:
        """An acked seq of ``stream`` chosen by ``pick`` in [0, 1) (1 before any ack)."""
        seqs = self.acked.get(stream)
        return seqs[int(pick * len(seqs))] if seqs else 1

    async def request(
        self, subject: str, payload: bytes, headers: dict[str, str] | None = None
    ) -> Msg:
        if self.nc is None:
            raise nats.errors.ConnectionClosedError
        reply: Msg = await self.nc.request(
            subject, payload, timeout=self.op_timeout_s, headers=headers
        )
        return reply

    async def send(self, subject: str, payload: bytes, headers: dict[str, str]) -> None:
        if self.nc is None:
            raise nats.errors.ConnectionClosedError
        await self.nc.publish(subject, payload, headers=headers)

    async def op(
        self, f: str, value: dict[str, Any], action: Callable[[], Awaitable[dict[str, Any]]]
    ) -> tuple[CompletionType, dict[str, Any]]:
        """Invoke ``f``, run ``action`` and record its outcome (see the module docstring)."""
        index = self.history.invoke(self.process, self.node, f, value)
        kind: CompletionType
        try:
            result = await action()
            kind, out = OK, {**value, **result}
        except asyncio.CancelledError:
            self.history.complete(index, INFO, {**value, "error": "cancelled"})
            raise
        except ErrorReply as exc:
            kind, out = FAIL, {**value, "error": exc.error}
        except Abandoned as exc:
            kind, out = FAIL, {**value, ABANDONED: True, "sent": exc.sent}
        except nats.errors.NoRespondersError:
            kind, out = FAIL, {**value, "error": "no responders"}
        except Exception as exc:
            kind, out = INFO, {**value, "error": _describe(exc)}
        self.history.complete(index, kind, out)
        return kind, out

    # --- the operations ---------------------------------------------------------------------
    async def publish(
        self,
        stream: str,
        subject: str,
        msg_id: str,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> tuple[CompletionType, dict[str, Any]]:
        value = {"stream": stream, "id": msg_id, "subject": subject, **(extra or {})}
        payload = json.dumps({"id": msg_id, "process": self.process}).encode()

        async def action() -> dict[str, Any]:
            ack = _pub_ack(await self.request(subject, payload, headers))
            return {"seq": ack["seq"]}

        kind, out = await self.op(PUBLISH, value, action)
        if kind == OK:
            self.remember(stream, out["seq"])
        return kind, out

    async def increment(
        self, stream: str, subject: str, msg_id: str, incr: int, attempt: int
    ) -> tuple[CompletionType, dict[str, Any]]:
        """One attempt at a counter increment (``attempt`` > 1: a retry, same ``msg_id``)."""
        value = {"stream": stream, "subject": subject, "id": msg_id, "incr": incr}
        headers = {"Nats-Incr": str(incr), "Nats-Msg-Id": msg_id}

        async def action() -> dict[str, Any]:
            ack = _pub_ack(await self.request(subject, b"", headers))
            if ack.get("duplicate"):
                return {"seq": ack["seq"], "duplicate": True}
            return {"seq": ack["seq"], "val": ack.get("val")}

        return await self.op(INCREMENT, {**value, "attempt": attempt}, action)

    async def direct_get(
        self, stream: str, request: dict[str, Any]
    ) -> tuple[CompletionType, dict[str, Any]]:
        value = {"stream": stream, "request": request}
        body = json.dumps(request).encode()

        async def action() -> dict[str, Any]:
            msg = await self.request(f"{API_PREFIX}.DIRECT.GET.{stream}", body, SERVED_BY_ASK)
            served_by = (msg.headers or {}).get(SERVED_BY_HEADER)
            return {**_direct_result(msg), "served_by": served_by}

        return await self.op(DIRECT_GET, value, action)

    async def msg_get(
        self, stream: str, request: dict[str, Any]
    ) -> tuple[CompletionType, dict[str, Any]]:
        value = {"stream": stream, "request": request}
        body = json.dumps(request).encode()

        async def action() -> dict[str, Any]:
            msg = await self.request(f"{API_PREFIX}.STREAM.MSG.GET.{stream}", body)
            return {**_msg_get_result(msg), "served_by": self.node}

        return await self.op(MSG_GET, value, action)

    async def consume(
        self, stream: str, consumer: str, batch: int, expires_s: float, no_wait: bool = False
    ) -> tuple[CompletionType, dict[str, Any]]:
        """One pull request to a durable consumer, then a confirmed ack of every message it
        brought (the acks stop at the first that fails: the rest stay unconfirmed)."""
        value = {"stream": stream, "consumer": consumer}

        async def action() -> dict[str, Any]:
            msgs = await self._pull(stream, consumer, batch, expires_s, no_wait)
            acked: list[int] = []
            try:
                for seq, _id, _n, _c, reply in msgs:
                    await self.request(reply, b"+ACK")
                    acked.append(seq)
            except Exception:
                pass  # unconfirmed acks: those messages may come again, which is allowed
            rows = [[seq, msg_id, n, cseq] for seq, msg_id, n, cseq, _r in msgs]
            return {"msgs": rows, "acked": acked}

        return await self.op(CONSUME, value, action)

    async def _pull(
        self, stream: str, consumer: str, batch: int, expires_s: float, no_wait: bool
    ) -> list[tuple[int, str | None, int, int, str]]:
        """(seq, id, deliveries, consumer seq, ack subject) of what one pull request brought."""
        if self.nc is None:
            raise nats.errors.ConnectionClosedError
        inbox = self.nc.new_inbox()
        sub = await self.nc.subscribe(inbox)
        out: list[tuple[int, str | None, int, int, str]] = []
        try:
            body = {"batch": batch, "expires": int(expires_s * 1e9), "no_wait": no_wait}
            await self.nc.publish(
                f"{API_PREFIX}.CONSUMER.MSG.NEXT.{stream}.{consumer}",
                json.dumps(body).encode(),
                reply=inbox,
            )
            while len(out) < batch:
                msg = await sub.next_msg(timeout=expires_s + self.op_timeout_s)
                status = (msg.headers or {}).get("Status")
                if status is not None:
                    if status in ("404", "408"):
                        break
                    raise ErrorReply(f"pull: {status} {(msg.headers or {}).get('Description')}")
                tokens = msg.reply.split(".")
                deliveries, seq, cseq = int(tokens[-5]), int(tokens[-4]), int(tokens[-3])
                out.append((seq, payload_id(msg.data), deliveries, cseq, msg.reply))
        finally:
            await sub.unsubscribe()
        return out


# --- workloads --------------------------------------------------------------------------------


def _api_body(reply: Msg) -> dict[str, Any]:
    return _json(reply)


async def _api(nc: NATS, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    payload = b"" if body is None else json.dumps(body).encode()
    return _api_body(await nc.request(f"{API_PREFIX}.{subject}", payload, timeout=API_TIMEOUT_S))


class SetupError(RuntimeError):
    """A workload's streams could not be created or got no leader within SETUP_TIMEOUT_S."""


class Workload(ABC):
    """What every workload has: its streams, its step (one intended operation of a process),
    and the generic setup / run / final reads."""

    name: ClassVar[str]
    id_prefix: ClassVar[str]
    min_gap_s: ClassVar[float] = MIN_OP_GAP_S
    max_gap_s: ClassVar[float] = MAX_OP_GAP_S

    def __init__(
        self, replicas: int | None = None, op_timeout_s: float = OP_TIMEOUT_S, tag: str = ""
    ) -> None:
        if not tag.isalnum() and tag:
            raise ValueError(f"a workload tag is letters and digits, not {tag!r}")
        self.replicas = replicas
        self.op_timeout_s = op_timeout_s
        self.tag = tag

    @property
    @abstractmethod
    def streams(self) -> tuple[str, ...]:
        """The streams this workload uses."""

    @abstractmethod
    def stream_configs(self, replicas: int) -> list[dict[str, Any]]:
        """STREAM.CREATE bodies for this workload's streams."""

    @abstractmethod
    async def step(self, client: Client) -> None:
        """One intended operation of ``client`` (draws a fixed number of rng values first)."""

    def gap_s(self, rng: random.Random) -> float:
        return rng.uniform(self.min_gap_s, self.max_gap_s)

    # --- setup --------------------------------------------------------------------------------
    async def setup(self, urls: Mapping[str, str], timeout_s: float = SETUP_TIMEOUT_S) -> None:
        """Create the streams (through whichever node answers) and wait until every node sees
        each one with a leader."""
        if not urls:
            raise SetupError("no nodes")
        replicas = self.replicas or min(len(urls), MAX_REPLICAS)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        names = sorted(urls)
        for config in self.stream_configs(replicas):
            create = partial(_api_via_any, names, urls, f"STREAM.CREATE.{config['name']}", config)
            await _until(deadline, create, config)
            for name in names:
                has_leader = partial(_has_leader, urls[name], config["name"], len(urls) > 1)
                await _until(deadline, has_leader, config)

    # --- run ----------------------------------------------------------------------------------
    async def run(
        self,
        urls: Mapping[str, str],
        history: History,
        rng: random.Random,
        stop: asyncio.Event,
        processes: int,
    ) -> None:
        """Run ``processes`` processes until ``stop`` is set; every operation they invoked is
        completed when this returns (at most ``op_timeout_s`` after ``stop``)."""
        names = sorted(urls)
        seeds = [rng.getrandbits(64) for _ in range(processes)]
        clients = [
            Client(
                p,
                names[p % len(names)],
                urls[names[p % len(names)]],
                history,
                random.Random(seeds[p]),
                self.op_timeout_s,
                stop,
            )
            for p in range(processes)
        ]
        # a TaskGroup: should one process fail, the others are cancelled, which completes
        # their outstanding operations as info
        async with asyncio.TaskGroup() as group:
            for c in clients:
                group.create_task(self._process(c, stop))

    async def _process(self, client: Client, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():
                if not await client.ensure_connected():
                    await _sleep_or_stop(stop, RECONNECT_WAIT_S)
                    continue
                await self.step(client)
                await _sleep_or_stop(stop, self.gap_s(client.rng))
        finally:
            await client.close()

    # --- final reads --------------------------------------------------------------------------
    async def final_reads(self, urls: Mapping[str, str], history: History) -> None:
        """``read_back`` from a client on each node, one node at a time."""
        for i, name in enumerate(sorted(urls)):
            client = Client(FINAL_PROCESS_BASE + i, name, urls[name], history, random.Random(0))
            try:
                await client.ensure_connected()
                await self.read_back(client)
            finally:
                await client.close()

    async def read_back(self, client: Client) -> None:
        """The final reads through one node's ``client``: ``read_all`` of every stream."""
        for stream in self.streams:
            await read_all(client, stream)


async def _until(
    deadline: float, attempt: Callable[[], Awaitable[str | None]], config: dict[str, Any]
) -> None:
    """Repeat ``attempt`` (None = done, else why not) until done or the deadline passes."""
    loop = asyncio.get_running_loop()
    why: str | None = "not tried"
    while loop.time() < deadline:
        try:
            why = await attempt()
        except Exception as exc:
            why = _describe(exc)
        if why is None:
            return
        await asyncio.sleep(SETUP_RETRY_S)
    raise SetupError(f"stream {config['name']}: {why}")


async def _api_via_any(
    names: Sequence[str], urls: Mapping[str, str], subject: str, body: dict[str, Any]
) -> str | None:
    """``$JS.API.<subject>`` through the first node that answers without an error."""
    why: str | None = "no node answered"
    for name in names:
        try:
            nc = await connect(urls[name])
        except Exception as exc:
            why = f"{name}: {_describe(exc)}"
            continue
        try:
            answer = await _api(nc, subject, body)
        except Exception as exc:
            why = f"{name}: {_describe(exc)}"
            continue
        finally:
            await nc.close()
        if "error" not in answer:
            return None
        why = f"{name}: {answer['error']}"
    return why


async def _has_leader(url: str, stream: str, clustered: bool) -> str | None:
    nc = await connect(url)
    try:
        info = await _api(nc, f"STREAM.INFO.{stream}")
    finally:
        await nc.close()
    if "error" in info:
        return str(info["error"])
    if clustered and not (info.get("cluster") or {}).get("leader"):
        return "no leader yet"
    return None


async def read_all(client: Client, stream: str) -> tuple[CompletionType, dict[str, Any]]:
    """Record one ``read_all`` op: MSG.GET of every seq first_seq..last_seq of ``stream``."""

    async def action() -> dict[str, Any]:
        state = await _stream_state(client, stream)
        first = max(int(state.get("first_seq") or 1), 1)
        last = int(state.get("last_seq") or 0)
        found: dict[int, dict[str, Any]] = {}
        missing: list[int] = []
        unknown: list[int] = []
        todo = iter(range(first, last + 1))
        lost = asyncio.Event()  # the node went away: every seq not read yet is unknown

        async def worker() -> None:
            for seq in todo:
                result = None if lost.is_set() else await _read_seq(client, stream, seq, lost)
                if result is None:
                    unknown.append(seq)
                elif result.get("not_found"):
                    missing.append(seq)
                else:
                    found[seq] = {"seq": seq, "id": result["id"], "subject": result["subject"]}

        await asyncio.gather(*(worker() for _ in range(FINAL_READ_CONCURRENCY)))
        return {
            "first_seq": first,
            "last_seq": last,
            "messages": [found[s] for s in sorted(found)],
            "missing": sorted(missing),
            "unknown": sorted(unknown),
            "served_by": client.node,
        }

    return await client.op(READ_ALL, {"stream": stream}, action)


async def _stream_state(client: Client, stream: str) -> dict[str, Any]:
    why = ""
    for _ in range(FINAL_READ_ATTEMPTS):
        try:
            info = _json(await client.request(f"{API_PREFIX}.STREAM.INFO.{stream}", b""))
            if "error" not in info:
                state: dict[str, Any] = info.get("state") or {}
                return state
            why = str(info["error"])
        except Exception as exc:
            why = _describe(exc)
        await asyncio.sleep(FINAL_READ_RETRY_S)
    raise ErrorReply(f"STREAM.INFO {stream}: {why}")


async def _read_seq(
    client: Client, stream: str, seq: int, lost: asyncio.Event
) -> dict[str, Any] | None:
    """MSG.GET of ``seq``: the result, or None after FINAL_READ_ATTEMPTS failures or once the
    connection is gone for good (``lost`` is then set)."""
    return await _final_msg_get(client, stream, {"seq": seq}, _msg_get_result, lost)


async def _final_msg_get(
    client: Client,
    stream: str,
    request: dict[str, Any],
    parse: Callable[[Msg], dict[str, Any]],
    lost: asyncio.Event,
) -> dict[str, Any] | None:
    """A final read's MSG.GET of ``request``, ``parse``d: None after FINAL_READ_ATTEMPTS
    failures or once the connection is gone for good (``lost`` is then set)."""
    body = json.dumps(request).encode()
    for _ in range(FINAL_READ_ATTEMPTS):
        try:
            return parse(await client.request(f"{API_PREFIX}.STREAM.MSG.GET.{stream}", body))
        except Exception:
            if lost.is_set() or not await client.ensure_connected():
                lost.set()
                return None
            await asyncio.sleep(FINAL_READ_RETRY_S)
    return None


async def counter_read(
    client: Client, stream: str, subject: str
) -> tuple[CompletionType, dict[str, Any]]:
    """Record one ``counter_read`` op: MSG.GET of ``subject``'s last message (its total)."""

    async def action() -> dict[str, Any]:
        request = {"last_by_subj": subject}
        result = await _final_msg_get(client, stream, request, _counter_result, asyncio.Event())
        if result is None:
            raise TimeoutError(f"no answer after {FINAL_READ_ATTEMPTS} attempts")
        return {**result, "served_by": client.node}

    return await client.op(COUNTER_READ, {"stream": stream, "subject": subject}, action)


# --- the workloads ----------------------------------------------------------------------------

QUEUE_STREAM: Final = "JQUEUE"
BATCH_STREAM: Final = "JBATCH"
TTL_STREAM: Final = "JTTL"
KV_STREAM: Final = "JKV"
CONSUMER_STREAM: Final = "JCONS"
CONSUMER_NAME: Final = "C"
CONSUMER_ACK_WAIT_NS: Final = 2_000_000_000
CONSUME_BATCH: Final = 5
CONSUME_EXPIRES_S: Final = 0.5
DRAIN_TIMEOUT_S: Final = 30.0
DRAIN_EMPTY_PULLS: Final = 3  # empty pulls in a row, past ack_wait, that end a drain

MAX_BATCH_MSGS: Final = 8
ABANDON_PROBABILITY: Final = 0.03  # few enough that abandoned batches (held by the server
# until its batch timeout) stay under the 50-in-flight-batches-per-stream limit
BATCH_MIN_GAP_S: Final = 0.05
BATCH_MAX_GAP_S: Final = 0.15
TTLS: Final = ("1s", "2s")
TTL_SUBJECTS: Final = 16  # per process: few enough that a subject's last message expires
MARKER_TTL_NS: Final = 1_000_000_000
KV_KEYS: Final = 5
COUNTER_STREAM: Final = "JCOUNTER"
COUNTER_SUBJECTS: Final = 3  # shared by every process: increments of one subject interleave
COUNTER_INCR_RANGE: Final = (-5, 10)  # increments drawn uniformly from this range, inclusive
COUNTER_DUPLICATE_WINDOW_NS: Final = 120_000_000_000
COUNTER_ATTEMPTS: Final = 4  # per increment: the first and up to three retries...
COUNTER_RETRY_S: Final = 20.0  # ...begun within this of the first (well inside the window)


class _OneStream(Workload):
    """A workload on one stream, ``base_stream + tag``, with subjects ``base_root + tag + .>``."""

    base_stream: ClassVar[str]
    base_root: ClassVar[str]

    @property
    def stream(self) -> str:
        return f"{self.base_stream}{self.tag.upper()}"

    @property
    def root(self) -> str:
        return f"{self.base_root}{self.tag.lower()}"

    @property
    def streams(self) -> tuple[str, ...]:
        return (self.stream,)

    def config(self, replicas: int) -> dict[str, Any]:
        return {
            "name": self.stream,
            "subjects": [f"{self.root}.>"],
            "num_replicas": replicas,
            "storage": "file",
            "allow_direct": True,
        }


class QueueWorkload(_OneStream):
    """Publishes of unique ids: the classic "no acknowledged write is lost" workload."""

    name = "queue"
    id_prefix = "q"
    base_stream = QUEUE_STREAM
    base_root = "jq"

    def stream_configs(self, replicas: int) -> list[dict[str, Any]]:
        return [self.config(replicas)]

    async def step(self, client: Client) -> None:
        subject = f"{self.root}.p{client.process}"
        await client.publish(self.stream, subject, client.next_id(self.id_prefix))


class BatchWorkload(_OneStream):
    """Atomic batches of 1..MAX_BATCH_MSGS messages; a few abandoned before their commit."""

    name = "batch"
    id_prefix = "b"
    base_stream = BATCH_STREAM
    base_root = "jb"
    min_gap_s = BATCH_MIN_GAP_S
    max_gap_s = BATCH_MAX_GAP_S

    def stream_configs(self, replicas: int) -> list[dict[str, Any]]:
        return [{**self.config(replicas), "allow_atomic": True}]

    async def step(self, client: Client) -> None:
        rng = client.rng
        size = rng.randint(1, MAX_BATCH_MSGS)
        abandon = rng.random() < ABANDON_PROBABILITY
        cut = rng.randint(1, size)  # messages sent before giving up, when abandoning
        batch = client.next_id(self.id_prefix)
        ids = [f"{batch}.{i}" for i in range(1, size + 1)]
        subject = f"{self.root}.p{client.process}"
        value = {
            "stream": self.stream,
            "batch": batch,
            "ids": ids,
            "subject": subject,
            "abandon": abandon,
        }

        async def action() -> dict[str, Any]:
            for i, msg_id in enumerate(ids, start=1):
                headers = {"Nats-Batch-Id": batch, "Nats-Batch-Sequence": str(i)}
                payload = json.dumps({"id": msg_id, "process": client.process}).encode()
                if abandon and i == cut:
                    await client.send(subject, payload, headers)
                    raise Abandoned(cut)
                if i < size:
                    await client.send(subject, payload, headers)
                    continue
                headers["Nats-Batch-Commit"] = "1"
                ack = _pub_ack(await client.request(subject, payload, headers))
                seq, count = int(ack["seq"]), int(ack.get("count", 0))
                return {"seq": seq, "count": count, "seqs": list(range(seq - count + 1, seq + 1))}
            raise AssertionError("unreachable: the last message commits or abandons")

        kind, out = await client.op(BATCH, value, action)
        if kind == OK and out["seqs"]:
            client.remember(self.stream, out["seqs"][-1])


class TtlWorkload(_OneStream):
    """Messages with short per-message TTLs (and subject delete markers when a subject's last
    message expires), some without; Direct Get and MSG.GET reads of recently acked seqs."""

    name = "ttl"
    id_prefix = "t"
    base_stream = TTL_STREAM
    base_root = "jt"

    def stream_configs(self, replicas: int) -> list[dict[str, Any]]:
        return [
            {
                **self.config(replicas),
                "allow_msg_ttl": True,
                "subject_delete_marker_ttl": MARKER_TTL_NS,
            }
        ]

    async def step(self, client: Client) -> None:
        rng = client.rng
        roll, ttl, pick = rng.random(), TTLS[rng.randrange(len(TTLS))], rng.random()
        subject = f"{self.root}.p{client.process}.{rng.randrange(TTL_SUBJECTS)}"
        if roll < 0.6:
            msg_id = client.next_id(self.id_prefix)
            headers = {"Nats-TTL": ttl}
            await client.publish(self.stream, subject, msg_id, headers, extra={"ttl": ttl})
        elif roll < 0.7:
            await client.publish(self.stream, subject, client.next_id(self.id_prefix))
        elif roll < 0.85:
            await client.direct_get(self.stream, {"seq": client.recent(self.stream, pick)})
        else:
            await client.msg_get(self.stream, {"seq": client.recent(self.stream, pick)})


class KvWorkload(_OneStream):
    """Last value per key: compare-and-set writes (``Nats-Expected-Last-Subject-Sequence`` from
    a MSG.GET just before), plain writes, Direct Get and MSG.GET by key and by seq."""

    name = "kv"
    id_prefix = "kv"
    base_stream = KV_STREAM
    base_root = "jkv"

    def stream_configs(self, replicas: int) -> list[dict[str, Any]]:
        return [self.config(replicas)]

    async def step(self, client: Client) -> None:
        rng = client.rng
        roll, key, pick = rng.random(), rng.randrange(KV_KEYS), rng.random()
        stream, subject = self.stream, f"{self.root}.k{key}"
        if roll < 0.30:
            kind, read = await client.msg_get(stream, {"last_by_subj": subject})
            if kind != OK:
                return
            expected = 0 if read.get("not_found") else int(read["seq"])
            await client.publish(
                stream,
                subject,
                client.next_id(self.id_prefix),
                headers={"Nats-Expected-Last-Subject-Sequence": str(expected)},
                extra={"expected_last_subject_seq": expected},
            )
        elif roll < 0.45:
            await client.publish(stream, subject, client.next_id(self.id_prefix))
        elif roll < 0.65:
            await client.direct_get(stream, {"last_by_subj": subject})
        elif roll < 0.75:
            await client.direct_get(stream, {"seq": client.recent(stream, pick)})
        elif roll < 0.90:
            await client.msg_get(stream, {"last_by_subj": subject})
        else:
            await client.msg_get(stream, {"seq": client.recent(stream, pick)})


class ConsumerWorkload(_OneStream):
    """Publishes next to pulls from one durable consumer with explicit, confirmed acks; the
    final reads also drain the consumer, so every acked publish must have been delivered."""

    name = "consumer"
    id_prefix = "c"
    base_stream = CONSUMER_STREAM
    base_root = "jc"

    def stream_configs(self, replicas: int) -> list[dict[str, Any]]:
        return [self.config(replicas)]

    async def setup(self, urls: Mapping[str, str], timeout_s: float = SETUP_TIMEOUT_S) -> None:
        await super().setup(urls, timeout_s)
        body = {
            "stream_name": self.stream,
            "config": {
                "durable_name": CONSUMER_NAME,
                "ack_policy": "explicit",
                "ack_wait": CONSUMER_ACK_WAIT_NS,
            },
        }
        names = sorted(urls)
        deadline = asyncio.get_running_loop().time() + timeout_s
        create = partial(
            _api_via_any, names, urls, f"CONSUMER.CREATE.{self.stream}.{CONSUMER_NAME}", body
        )
        await _until(deadline, create, {"name": f"{self.stream} consumer"})

    async def step(self, client: Client) -> None:
        if client.rng.random() < 0.5:
            await client.publish(
                self.stream, f"{self.root}.p{client.process}", client.next_id(self.id_prefix)
            )
        else:
            await client.consume(self.stream, CONSUMER_NAME, CONSUME_BATCH, CONSUME_EXPIRES_S)

    async def final_reads(self, urls: Mapping[str, str], history: History) -> None:
        await super().final_reads(urls, history)
        await self.drain(urls, history)

    async def drain(self, urls: Mapping[str, str], history: History) -> None:
        """Pull until the consumer has nothing left: several empty pulls in a row, the last
        ones after an ack wait (so unacked messages had their chance to come back)."""
        name = sorted(urls)[0]
        client = Client(FINAL_PROCESS_BASE + len(urls), name, urls[name], history, random.Random(0))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DRAIN_TIMEOUT_S
        empty_since: float | None = None
        try:
            while loop.time() < deadline:
                if not await client.ensure_connected():
                    await asyncio.sleep(RECONNECT_WAIT_S)
                    continue
                kind, out = await client.consume(
                    self.stream, CONSUMER_NAME, 10 * CONSUME_BATCH, CONSUME_EXPIRES_S
                )
                if kind == OK and not out["msgs"]:
                    empty_since = empty_since or loop.time()
                    if loop.time() - empty_since > CONSUMER_ACK_WAIT_NS / 1e9:
                        return
                else:
                    empty_since = None
        finally:
            await client.close()


class CounterWorkload(_OneStream):
    """Increments of a few shared counter subjects (ADR-49), each with its own msg id and
    retried with it while its outcome is unknown; the final reads read each subject's total,
    which must be the acked increments' sum plus some of the indeterminate ones."""

    name = "counter"
    id_prefix = "n"
    base_stream = COUNTER_STREAM
    base_root = "jn"

    @property
    def subjects(self) -> tuple[str, ...]:
        return tuple(f"{self.root}.c{i}" for i in range(COUNTER_SUBJECTS))

    def stream_configs(self, replicas: int) -> list[dict[str, Any]]:
        return [
            {
                **self.config(replicas),
                "allow_msg_counter": True,
                "retention": "limits",
                "duplicate_window": COUNTER_DUPLICATE_WINDOW_NS,
            }
        ]

    async def step(self, client: Client) -> None:
        rng = client.rng
        subject = self.subjects[rng.randrange(COUNTER_SUBJECTS)]
        incr = rng.randint(*COUNTER_INCR_RANGE)
        msg_id = client.next_id(self.id_prefix)
        give_up = asyncio.get_running_loop().time() + COUNTER_RETRY_S
        for attempt in range(1, COUNTER_ATTEMPTS + 1):
            if attempt > 1 and not await _ready_to_retry(client, give_up):
                return
            kind, _out = await client.increment(self.stream, subject, msg_id, incr, attempt)
            if kind != INFO:
                return

    async def read_back(self, client: Client) -> None:
        for subject in self.subjects:
            await counter_read(client, self.stream, subject)


async def _ready_to_retry(client: Client, give_up: float) -> bool:
    """Connected again (waiting for the node to come back), before ``give_up`` and the run's
    stop: True; else False."""
    loop = asyncio.get_running_loop()
    while not client.stopping and loop.time() < give_up:
        if await client.ensure_connected():
            return True
        await asyncio.sleep(RECONNECT_WAIT_S)
    return False


class MixWorkload(Workload):
    """Every step is a step of one of the other workloads, chosen by the process's rng."""

    name = "mix"
    id_prefix = "m"

    def __init__(
        self, replicas: int | None = None, op_timeout_s: float = OP_TIMEOUT_S, tag: str = ""
    ) -> None:
        super().__init__(replicas, op_timeout_s, tag)
        self.parts: tuple[Workload, ...] = (
            QueueWorkload(replicas, op_timeout_s, tag),
            BatchWorkload(replicas, op_timeout_s, tag),
            TtlWorkload(replicas, op_timeout_s, tag),
            KvWorkload(replicas, op_timeout_s, tag),
            CounterWorkload(replicas, op_timeout_s, tag),
        )

    @property
    def streams(self) -> tuple[str, ...]:
        return tuple(s for part in self.parts for s in part.streams)

    def stream_configs(self, replicas: int) -> list[dict[str, Any]]:
        return [c for part in self.parts for c in part.stream_configs(replicas)]

    async def step(self, client: Client) -> None:
        await self.parts[client.rng.randrange(len(self.parts))].step(client)

    async def read_back(self, client: Client) -> None:
        for part in self.parts:
            await part.read_back(client)


WORKLOADS: Final[dict[str, type[Workload]]] = {
    cls.name: cls
    for cls in (
        QueueWorkload,
        BatchWorkload,
        TtlWorkload,
        KvWorkload,
        ConsumerWorkload,
        CounterWorkload,
        MixWorkload,
    )
}


def make_workload(
    name: str, replicas: int | None = None, op_timeout_s: float = OP_TIMEOUT_S, tag: str = ""
) -> Workload:
    """The workload called ``name`` (one of ``WORKLOADS``); ``tag`` suffixes its stream and
    subject names (so several runs can share a cluster)."""
    try:
        cls = WORKLOADS[name]
    except KeyError:
        raise ValueError(f"unknown workload {name!r}; choose from {sorted(WORKLOADS)}") from None
    return cls(replicas, op_timeout_s, tag)
