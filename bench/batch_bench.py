"""Atomic batch publish (ADR-50) side by side: nats-server, then jetraft, the same load.

Each run starts one server on free 127.0.0.1 ports with its own temporary store directory,
creates a file-storage stream with ``allow_atomic``, and sends atomic batches of 100 and of 1000
messages: every message of a batch without a reply subject, the last one with
``Nats-Batch-Commit: 1`` and a reply subject, whose PubAck (checked: stream, seq, batch, count)
ends the batch. ``--window`` batches (distinct ids) are kept in flight. The batches' bytes are
built before the clock starts, so the client measures the server. Prints msgs/s and batches/s for
both servers and the ratio jetraft/nats-server (above 1 means jetraft is faster). Run it with
``python -m bench.batch_bench`` from the project root.

Must never: leave a server process running (each is stopped by pid, even on error), or report a
number from a run whose PubAcks failed their checks.
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from bench.cpu import CpuMeter, read_meter, spent_since
from bench.loadgen import PhaseResult, run_event_loop
from bench.rawclient import RawClient
from bench.report import JETRAFT, NATS
from cluster.ops.process import HOST, NATS_SERVER_BIN
from cluster.ops.servers import ServerProc, jetraft_proc, nats_server_proc

STREAM = "BATCHBENCH"
SUBJECT_PREFIX = "bench.batch"
BATCH_SIZES = (100, 1000)
PHASE_BATCH_SIZE = 1000  # the size the other benchmarks measure
DEFAULT_MSGS_PER_SIZE = 50_000  # messages sent per batch size
QUICK_MSGS_PER_SIZE = 5_000
DEFAULT_PAYLOAD_BYTES = 128
DEFAULT_WINDOW = 1
WINDOW_MAX = 50  # open atomic batches per stream (nats-server's default limit)
SUBJECTS_PER_BATCH = 10
SERVER_READY_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 10.0
ACK_TIMEOUT_S = 30.0
API_TIMEOUT_S = 10.0


class BenchError(RuntimeError):
    """A reply failed its check or a server misbehaved; the run's numbers are void."""


def phase_name(size: int) -> str:
    return f"atomic batch {size}"


BATCH_PHASE = phase_name(PHASE_BATCH_SIZE)


@dataclass
class SizeResult:
    batch_size: int
    batches: int
    elapsed_s: float
    server_cpu_s: float | None = None

    def as_phase(self) -> PhaseResult:
        """The result as one phase of the load generator's, counted in messages."""
        return PhaseResult(
            phase_name(self.batch_size),
            self.batches * self.batch_size,
            self.elapsed_s,
            server_cpu_s=self.server_cpu_s,
        )

    @property
    def msgs_per_s(self) -> float:
        return self.batches * self.batch_size / self.elapsed_s

    @property
    def batches_per_s(self) -> float:
        return self.batches / self.elapsed_s


@dataclass
class ServerRun:
    server: str
    results: dict[int, SizeResult] = field(default_factory=dict)
    error: str | None = None


class BatchClient(RawClient):
    """RawClient plus raw bytes writes (pre-built HPUB frames) and a reply inbox."""

    def write_raw(self, data: bytes) -> None:
        self._write(data)


def build_batch(batch_id: str, size: int, payload: bytes, reply: bytes) -> bytes:
    """Every HPUB frame of one batch, the last with the commit header and the reply subject."""
    frames = []
    for seq in range(1, size + 1):
        subject = f"{SUBJECT_PREFIX}.{seq % SUBJECTS_PER_BATCH}".encode()
        header = f"NATS/1.0\r\nNats-Batch-Id: {batch_id}\r\nNats-Batch-Sequence: {seq}\r\n"
        if seq == size:
            header += "Nats-Batch-Commit: 1\r\n"
        hdr = (header + "\r\n").encode()
        sizes = f"{len(hdr)} {len(hdr) + len(payload)}".encode()
        if seq == size:
            line = b"HPUB " + subject + b" " + reply + b" " + sizes + b"\r\n"
        else:
            line = b"HPUB " + subject + b" " + sizes + b"\r\n"
        frames.append(line + hdr + payload + b"\r\n")
    return b"".join(frames)


class BatchLoad:
    """Sends pre-built batches, keeping ``window`` in flight, and checks every PubAck; with a
    ``cpu_meter`` each result also has the server's CPU seconds over the timed sends."""

    def __init__(self, client: BatchClient, window: int, cpu_meter: CpuMeter | None = None) -> None:
        self.client = client
        self.window = window
        self.cpu_meter = cpu_meter
        self.inbox = b"_INBOX." + secrets.token_hex(8).encode() + b"."
        self._waiters: dict[bytes, asyncio.Future[bytes]] = {}
        client.subscribe(self.inbox + b"*", self._on_reply)

    def _on_reply(
        self, subject: bytes, _reply: bytes | None, _hdr: bytes | None, data: bytes
    ) -> None:
        future = self._waiters.pop(subject, None)
        if future is not None and not future.done():
            future.set_result(data)

    async def api(self, subject: str, body: dict[str, object] | None) -> dict[str, object]:
        reply = self.inbox + b"api"
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._waiters[reply] = future
        payload = b"" if body is None else json.dumps(body).encode()
        self.client.publish(subject.encode(), payload, reply)
        data = await self.client.wait(future, API_TIMEOUT_S)
        answer: dict[str, object] = json.loads(data)
        if "error" in answer:
            raise BenchError(f"{subject}: {answer['error']}")
        return answer

    async def run(self, size: int, count: int, payload: bytes, tag: str) -> SizeResult:
        """``count`` batches of ``size`` messages; returns the elapsed time."""
        frames: list[tuple[str, bytes, bytes]] = []
        for n in range(count):
            batch_id = f"{tag}-{size}-{n}"
            reply = self.inbox + f"{tag}{n}".encode()
            frames.append((batch_id, reply, build_batch(batch_id, size, payload, reply)))
        info = await self.api(f"$JS.API.STREAM.INFO.{STREAM}", None)
        state = info["state"]
        assert isinstance(state, dict)
        last_seq = int(state["last_seq"])
        loop = asyncio.get_running_loop()
        pending: list[tuple[str, asyncio.Future[bytes]]] = []
        cpu_before = read_meter(self.cpu_meter)
        started = time.perf_counter()
        next_batch = 0
        expected_seq = last_seq
        while next_batch < count or pending:
            while next_batch < count and len(pending) < self.window:
                batch_id, reply, data = frames[next_batch]
                future: asyncio.Future[bytes] = loop.create_future()
                self._waiters[reply] = future
                self.client.write_raw(data)
                pending.append((batch_id, future))
                next_batch += 1
            batch_id, future = pending.pop(0)
            ack = json.loads(await self.client.wait(future, ACK_TIMEOUT_S))
            expected_seq += size
            if self.window == 1:
                want = {"stream": STREAM, "seq": expected_seq, "batch": batch_id, "count": size}
                if ack != want:
                    raise BenchError(f"bad PubAck {ack}, expected {want}")
            elif "error" in ack or ack.get("count") != size or ack.get("batch") != batch_id:
                raise BenchError(f"bad PubAck {ack} for {batch_id}")
        elapsed = time.perf_counter() - started
        cpu_s = spent_since(self.cpu_meter, cpu_before)
        info = await self.api(f"$JS.API.STREAM.INFO.{STREAM}", None)
        state = info["state"]
        assert isinstance(state, dict)
        if int(state["last_seq"]) != last_seq + size * count:
            raise BenchError(f"stream last_seq {state['last_seq']} after {count} batches")
        return SizeResult(size, count, elapsed, cpu_s)


async def run_load(
    port: int,
    msgs_per_size: int,
    payload_bytes: int,
    window: int,
    sizes: Sequence[int] = BATCH_SIZES,
    cpu_meter: CpuMeter | None = None,
) -> dict[int, SizeResult]:
    """Create the stream, warm up with a few small batches, then send ``msgs_per_size``
    messages in batches of each of ``sizes``."""
    client = cast(BatchClient, await BatchClient.connect(HOST, port, CONNECT_TIMEOUT_S))
    try:
        load = BatchLoad(client, window, cpu_meter)
        await client.flush(CONNECT_TIMEOUT_S)
        config = {
            "name": STREAM,
            "subjects": [f"{SUBJECT_PREFIX}.>"],
            "storage": "file",
            "allow_atomic": True,
        }
        await load.api(f"$JS.API.STREAM.CREATE.{STREAM}", config)
        payload = b"x" * payload_bytes
        await load.run(BATCH_SIZES[0], 5, payload, "warmup")
        results = {}
        for size in sizes:
            count = max(1, msgs_per_size // size)
            results[size] = await load.run(size, count, payload, "run")
        return results
    finally:
        client.close()


def run_against(
    server: str,
    make_proc: Callable[[Path], ServerProc],
    msgs_per_size: int,
    payload_bytes: int,
    window: int,
) -> ServerRun:
    run = ServerRun(server)
    with tempfile.TemporaryDirectory(prefix=f"batchbench-{server}-") as tmp:
        proc = make_proc(Path(tmp))
        try:
            proc.start(SERVER_READY_TIMEOUT_S)
            print(f"{server}: pid {proc.pid} on {proc.url}", flush=True)
            run.results = run_event_loop(run_load(proc.port, msgs_per_size, payload_bytes, window))
        except Exception as err:
            run.error = f"{type(err).__name__}: {err}\n--- {server} log tail ---\n{proc.log_tail()}"
        finally:
            proc.stop()
    return run


def _rate(run: ServerRun, size: int, per_batch: bool) -> float | None:
    result = run.results.get(size)
    if result is None:
        return None
    return result.batches_per_s if per_batch else result.msgs_per_s


def format_table(nats: ServerRun, jetraft: ServerRun) -> str:
    lines = [
        f"{'batch size':>10} {'metric':<10} {NATS:>12} {JETRAFT:>12} {'jetraft/nats':>13}",
    ]
    for size in BATCH_SIZES:
        for metric, per_batch in (("msgs/s", False), ("batches/s", True)):
            a, b = _rate(nats, size, per_batch), _rate(jetraft, size, per_batch)
            ratio = f"{b / a:.2f}" if a and b else "-"
            shown_a = f"{a:,.1f}" if a is not None else "-"
            shown_b = f"{b:,.1f}" if b is not None else "-"
            lines.append(f"{size:>10} {metric:<10} {shown_a:>12} {shown_b:>12} {ratio:>13}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--msgs", type=int, default=None, help="messages per batch size")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_MSGS_PER_SIZE} per size")
    parser.add_argument("--payload", type=int, default=DEFAULT_PAYLOAD_BYTES, help="bytes")
    parser.add_argument("--window", type=int, default=DEFAULT_WINDOW, help="batches in flight")
    args = parser.parse_args(argv)
    if not 1 <= args.window <= WINDOW_MAX:
        parser.error(f"--window must be 1..{WINDOW_MAX}")
    msgs = args.msgs or (QUICK_MSGS_PER_SIZE if args.quick else DEFAULT_MSGS_PER_SIZE)
    if not NATS_SERVER_BIN.exists():
        print(f"no nats-server at {NATS_SERVER_BIN}", file=sys.stderr)
        return 2
    print(
        f"atomic batches, {msgs} messages per batch size, {args.payload}-byte payloads, "
        f"window {args.window}, file storage; {platform.machine()}, Python "
        f"{platform.python_version()}",
        flush=True,
    )
    nats = run_against(NATS, nats_server_proc, msgs, args.payload, args.window)
    jetraft = run_against(JETRAFT, jetraft_proc, msgs, args.payload, args.window)
    print(format_table(nats, jetraft))
    failed = False
    for run in (nats, jetraft):
        if run.error is not None:
            failed = True
            print(f"\n{run.server} failed: {run.error}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
