"""Consumers side by side: nats-server, then jetraft, the same load.

Each run starts one server on free 127.0.0.1 ports with its own temporary store directory,
fills a file-storage stream with ``--msgs`` messages (pipelined publishes, not timed), then times
two ways of reading all of them back:

* **pull fetch + ack**: a durable pull consumer with explicit acks; pull requests of 100
  messages (``{"batch":100,"expires":...}``), every message acked (``+ACK`` without a reply) as
  it arrives, the next request sent when a batch is complete;
* **ordered push**: an ephemeral push consumer as ordered consumers create it (ack none,
  max_deliver 1, flow control and idle heartbeats), flow-control requests answered.

Every delivered message is checked (stream sequence in order, no gap, no repeat). Prints msgs/s
for both servers and the ratio jetraft/nats-server. Run it with ``python -m bench.consumer_bench``
from the project root.

Must never: leave a server process running (each is stopped by pid, even on error), or report a
number from a run whose deliveries failed their checks.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import secrets
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.loadgen import run_event_loop
from bench.rawclient import RawClient
from cluster.ops.process import HOST, NATS_SERVER_BIN
from cluster.ops.servers import ServerProc, jetraft_proc, nats_server_proc

NATS = "nats-server"
JETRAFT = "jetraft"
STREAM = "CBENCH"
SUBJECT = "bench.cons"
FETCH_BATCH = 100
DEFAULT_MSGS = 20_000
QUICK_MSGS = 2_000
PAYLOAD_BYTES = 128
PUBLISH_WINDOW = 1000
SERVER_READY_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 10.0
API_TIMEOUT_S = 10.0
PHASE_TIMEOUT_S = 300.0
FETCH_EXPIRES_NS = 5_000_000_000
HEARTBEAT_NS = 5_000_000_000
PHASES = ("pull fetch 100 + ack", "ordered push")
_STATUS = b"NATS/1.0 "


class BenchError(RuntimeError):
    """A delivery failed its check or a server misbehaved; the run's numbers are void."""


@dataclass
class ServerRun:
    server: str
    rates: dict[str, float] = field(default_factory=dict)
    error: str | None = None


class Reader:
    """One connection: the JSON API, publishing the fill, and the two read phases."""

    def __init__(self, client: RawClient) -> None:
        self.client = client
        self.inbox = b"_INBOX." + secrets.token_hex(8).encode() + b"."
        self._waiters: dict[bytes, asyncio.Future[bytes]] = {}
        client.subscribe(self.inbox + b"*", self._on_reply)

    def _on_reply(self, subject: bytes, _r: bytes | None, _h: bytes | None, data: bytes) -> None:
        future = self._waiters.pop(subject, None)
        if future is not None and not future.done():
            future.set_result(data)

    async def api(self, subject: str, body: dict[str, object] | None) -> dict[str, object]:
        reply = self.inbox + secrets.token_hex(4).encode()
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._waiters[reply] = future
        payload = b"" if body is None else json.dumps(body).encode()
        self.client.publish(subject.encode(), payload, reply)
        answer: dict[str, object] = json.loads(await self.client.wait(future, API_TIMEOUT_S))
        if "error" in answer:
            raise BenchError(f"{subject}: {answer['error']}")
        return answer

    async def fill(self, msgs: int) -> None:
        """Publish ``msgs`` messages with PubAcks, ``PUBLISH_WINDOW`` in flight."""
        acks = self.inbox + b"acks"
        done = asyncio.get_running_loop().create_future()
        got = 0

        def on_ack(_s: bytes, _r: bytes | None, _h: bytes | None, data: bytes) -> None:
            nonlocal got
            if b'"error"' in data:
                done.set_exception(BenchError(f"publish failed: {data!r}"))
                return
            got += 1
            if got == msgs and not done.done():
                done.set_result(None)

        self.client.subscribe(acks, on_ack)
        payload = b"x" * PAYLOAD_BYTES
        sent = 0
        while sent < msgs:
            while sent < msgs and sent - got < PUBLISH_WINDOW:
                self.client.publish(SUBJECT.encode(), payload, acks)
                sent += 1
            await self.client.flush(API_TIMEOUT_S)
        await self.client.wait(done, PHASE_TIMEOUT_S)

    async def pull_phase(self, msgs: int) -> float:
        await self.api(
            f"$JS.API.CONSUMER.CREATE.{STREAM}.PULL",
            {
                "stream_name": STREAM,
                "config": {"durable_name": "PULL", "ack_policy": "explicit"},
            },
        )
        inbox = self.inbox + b"pull"
        state = _Order(msgs)
        batch_done: asyncio.Future[None] | None = None
        in_batch = 0
        client = self.client

        def on_msg(_s: bytes, reply: bytes | None, hdr: bytes | None, _data: bytes) -> None:
            nonlocal in_batch
            if hdr is not None and hdr.startswith(_STATUS) and reply is None:
                return  # a 408 at the end of a request that completed is not expected
            if reply is None:
                raise BenchError("a pull delivery without an ack subject")
            state.saw(reply)
            client.publish(reply, b"+ACK")
            in_batch += 1
            if (in_batch == FETCH_BATCH or state.complete) and batch_done is not None:
                if not batch_done.done():
                    batch_done.set_result(None)

        client.subscribe(inbox, on_msg)
        request = json.dumps({"batch": FETCH_BATCH, "expires": FETCH_EXPIRES_NS}).encode()
        started = time.perf_counter()
        while not state.complete:
            batch_done = asyncio.get_running_loop().create_future()
            in_batch = 0
            client.publish(f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.PULL".encode(), request, inbox)
            await client.wait(batch_done, PHASE_TIMEOUT_S)
        await client.flush(API_TIMEOUT_S)
        return time.perf_counter() - started

    async def ordered_phase(self, msgs: int) -> float:
        deliver = self.inbox + b"ordered"
        state = _Order(msgs)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        client = self.client

        def on_msg(_s: bytes, reply: bytes | None, hdr: bytes | None, _data: bytes) -> None:
            if hdr is not None and hdr.startswith(_STATUS):
                if reply is not None:  # a flow control request: answer it
                    client.publish(reply, b"")
                return
            if reply is None:
                raise BenchError("a push delivery without an ack subject")
            state.saw(reply)
            if state.complete and not done.done():
                done.set_result(None)

        client.subscribe(deliver, on_msg)
        await client.flush(API_TIMEOUT_S)
        started = time.perf_counter()
        await self.api(
            f"$JS.API.CONSUMER.CREATE.{STREAM}",
            {
                "stream_name": STREAM,
                "config": {
                    "deliver_subject": deliver.decode(),
                    "ack_policy": "none",
                    "max_deliver": 1,
                    "flow_control": True,
                    "idle_heartbeat": HEARTBEAT_NS,
                    "mem_storage": True,
                    "num_replicas": 1,
                },
            },
        )
        await client.wait(done, PHASE_TIMEOUT_S)
        return time.perf_counter() - started


class _Order:
    """Checks that deliveries come in stream order, each once: seq 1, 2, ... ``total``."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.last = 0

    @property
    def complete(self) -> bool:
        return self.last == self.total

    def saw(self, ack_subject: bytes) -> None:
        tokens = ack_subject.split(b".")
        seq = int(tokens[-4])
        if seq != self.last + 1:
            raise BenchError(f"delivered seq {seq} after {self.last}")
        self.last = seq


async def run_load(port: int, msgs: int) -> dict[str, float]:
    client = await RawClient.connect(HOST, port, CONNECT_TIMEOUT_S)
    try:
        reader = Reader(client)
        await client.flush(CONNECT_TIMEOUT_S)
        config: dict[str, object] = {"name": STREAM, "subjects": [SUBJECT], "storage": "file"}
        await reader.api(f"$JS.API.STREAM.CREATE.{STREAM}", config)
        await reader.fill(msgs)
        pull_s = await reader.pull_phase(msgs)
        ordered_s = await reader.ordered_phase(msgs)
        return {PHASES[0]: msgs / pull_s, PHASES[1]: msgs / ordered_s}
    finally:
        client.close()


def run_against(server: str, make_proc: Callable[[Path], ServerProc], msgs: int) -> ServerRun:
    run = ServerRun(server)
    with tempfile.TemporaryDirectory(prefix=f"consumerbench-{server}-") as tmp:
        proc = make_proc(Path(tmp))
        try:
            proc.start(SERVER_READY_TIMEOUT_S)
            print(f"{server}: pid {proc.pid} on {proc.url}", flush=True)
            run.rates = run_event_loop(run_load(proc.port, msgs))
        except Exception as err:
            run.error = f"{type(err).__name__}: {err}\n--- {server} log tail ---\n{proc.log_tail()}"
        finally:
            proc.stop()
    return run


def format_table(nats: ServerRun, jetraft: ServerRun) -> str:
    lines = [f"{'phase':<22} {'metric':<7} {NATS:>12} {JETRAFT:>12} {'jetraft/nats':>13}"]
    for phase in PHASES:
        a, b = nats.rates.get(phase), jetraft.rates.get(phase)
        ratio = f"{b / a:.2f}" if a and b else "-"
        shown_a = f"{a:,.0f}" if a is not None else "-"
        shown_b = f"{b:,.0f}" if b is not None else "-"
        lines.append(f"{phase:<22} {'msgs/s':<7} {shown_a:>12} {shown_b:>12} {ratio:>13}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--msgs", type=int, default=DEFAULT_MSGS, help="messages in the stream")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_MSGS} messages")
    args = parser.parse_args(argv)
    msgs = QUICK_MSGS if args.quick else args.msgs
    print(
        f"consumer bench: {msgs} messages of {PAYLOAD_BYTES} B, python {platform.python_version()}"
    )
    nats = run_against(NATS, lambda d: nats_server_proc(d, name="nats"), msgs)
    jet = run_against(JETRAFT, lambda d: jetraft_proc(d, name="jetraft"), msgs)
    print()
    print(format_table(nats, jet))
    failed = False
    for run in (nats, jet):
        if run.error is not None:
            failed = True
            print(f"\n{run.server} failed: {run.error}", file=sys.stderr)
    if not NATS_SERVER_BIN.exists():
        print(f"(no nats-server binary at {NATS_SERVER_BIN})", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
