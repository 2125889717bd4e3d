"""The load generator: four fixed phases of JetStream publish and Direct Get over the raw protocol.

Owns what is measured and how: (1) sync publish — publish with a reply, wait for the PubAck,
repeat; (2) pipelined publish — a window of outstanding publishes, one inbox wildcard
subscription; (3) sync Direct Get by random sequence; (4) pipelined Direct Get. Every reply is
checked (a PubAck without error, a Direct Get with the requested sequence and payload), counts are
fixed, the random sequences come from a fixed seed, and every wait has a timeout, so a run is
repeatable and always ends.

Must never: pick counts or sequences from the clock, skip a check to look faster, or leave a wait
without a timeout. It talks only to the address it is given (127.0.0.1 from the runner).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.cpu import CpuMeter, read_meter, spent_since
from bench.rawclient import RawClient
from protocol.headers import get_header

DEFAULT_MSGS = 20_000
QUICK_MSGS = 2_000
DEFAULT_PAYLOAD_BYTES = 128
DEFAULT_WINDOW = 1_000
DEFAULT_SEED = 20_251_122
DEFAULT_STREAM = "BENCH"
SUBJECT_PREFIX = "bench"
SUBJECT_COUNT = 16
OP_TIMEOUT_S = 10.0
STALL_TIMEOUT_S = 10.0
PHASE_DEADLINE_S = 600.0
CONNECT_TIMEOUT_S = 5.0
API_TIMEOUT_S = 10.0
NS_PER_US = 1_000.0
PERMILLE_MAX = 1_000
P50_PERMILLE = 500
P99_PERMILLE = 990
DIRECT_DATA_HDR_START = b"NATS/1.0\r\n"

SYNC_PUBLISH = "sync publish"
PIPELINED_PUBLISH = "pipelined publish"
SYNC_DIRECT_GET = "sync direct get"
PIPELINED_DIRECT_GET = "pipelined direct get"
PHASES = (SYNC_PUBLISH, PIPELINED_PUBLISH, SYNC_DIRECT_GET, PIPELINED_DIRECT_GET)

# check(token, header block or None, payload) -> None when good, else what was wrong
ReplyCheck = Callable[[int, bytes | None, bytes], str | None]


class LoadgenError(RuntimeError):
    """A reply was wrong, missing or late: the phase's numbers would mean nothing."""


@dataclass(frozen=True)
class LoadConfig:
    msgs: int = DEFAULT_MSGS
    # the pipelined phases' count, when not ``msgs``: they run many times faster than the sync
    # ones, so the same count would time only a fraction of a second
    pipelined_msgs: int | None = None
    payload_bytes: int = DEFAULT_PAYLOAD_BYTES
    window: int = DEFAULT_WINDOW
    seed: int = DEFAULT_SEED
    stream: str = DEFAULT_STREAM
    op_timeout_s: float = OP_TIMEOUT_S
    stall_timeout_s: float = STALL_TIMEOUT_S
    phase_deadline_s: float = PHASE_DEADLINE_S


@dataclass(frozen=True)
class PhaseResult:
    name: str
    ops: int
    elapsed_s: float
    p50_us: float | None = None
    p99_us: float | None = None
    server_cpu_s: float | None = None  # the server processes' CPU during the phase
    client_cpu_s: float | None = None  # the load generator's own CPU during the phase

    @property
    def rate_per_s(self) -> float:
        return self.ops / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def cpu_us_per_op(self) -> float | None:
        if self.server_cpu_s is None or self.ops == 0:
            return None
        return self.server_cpu_s * 1e6 / self.ops

    @property
    def client_busy(self) -> float | None:
        """The share of one core the load generator used: near 1, it was the limit."""
        if self.client_cpu_s is None or self.elapsed_s <= 0:
            return None
        return self.client_cpu_s / self.elapsed_s


def percentile(sorted_values: list[int], permille: int) -> int:
    """Nearest-rank percentile of an ascending list; ``permille`` 500 is p50, 990 is p99."""
    assert sorted_values, "percentile of nothing"
    assert 0 < permille <= PERMILLE_MAX
    rank = (permille * len(sorted_values) + PERMILLE_MAX - 1) // PERMILLE_MAX
    return sorted_values[rank - 1]


class InboxRouter:
    """One wildcard inbox subscription; replies are routed by the integer last token."""

    def __init__(self, client: RawClient) -> None:
        self.client = client
        self.prefix = b"_INBOX." + secrets.token_hex(8).encode() + b"."
        self._prefix_len = len(self.prefix)
        self._expected_token = -1
        self._future: asyncio.Future[tuple[bytes | None, bytes]] | None = None
        self.on_pipelined: Callable[[int, bytes | None, bytes], None] | None = None
        self._next_api_token = 1 << 40  # far from phase tokens
        client.subscribe(self.prefix + b"*", self._on_msg)

    def reply_to(self, token: int) -> bytes:
        return self.prefix + str(token).encode()

    def _on_msg(self, subject: bytes, _reply: bytes | None, hdr: bytes | None, data: bytes) -> None:
        try:
            token = int(subject[self._prefix_len :])
        except ValueError:
            return
        future = self._future
        if token == self._expected_token and future is not None:
            if not future.done():
                future.set_result((hdr, data))
            return
        handler = self.on_pipelined
        if handler is not None:
            handler(token, hdr, data)

    def expect(self, token: int) -> asyncio.Future[tuple[bytes | None, bytes]]:
        future: asyncio.Future[tuple[bytes | None, bytes]] = (
            asyncio.get_running_loop().create_future()
        )
        self._expected_token = token
        self._future = future
        return future

    async def request(
        self, subject: bytes, body: bytes, timeout_s: float
    ) -> tuple[bytes | None, bytes]:
        token = self._next_api_token
        self._next_api_token += 1
        future = self.expect(token)
        self.client.publish(subject, body, self.reply_to(token))
        result: tuple[bytes | None, bytes] = await self.client.wait(future, timeout_s)
        return result

    async def api(self, subject: str, body: dict[str, Any] | None) -> dict[str, Any]:
        payload = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
        hdr, data = await self.request(subject.encode(), payload, API_TIMEOUT_S)
        if hdr is not None and not data:
            raise LoadgenError(f"{subject}: status reply {status_line(hdr)}")
        answer: dict[str, Any] = json.loads(data)
        return answer


def status_line(hdr: bytes) -> str:
    return hdr.split(b"\r\n", 1)[0].decode(errors="replace")


class _Pipeline:
    """Keeps ``window`` requests outstanding; each good reply sends the next request."""

    def __init__(
        self,
        count: int,
        window: int,
        send: Callable[[int], None],
        check: ReplyCheck,
        done: asyncio.Future[None],
    ) -> None:
        self.count = count
        self.window = window
        self.send = send
        self.check = check
        self.done = done
        self.sent = 0
        self.received = 0
        self._replied = bytearray(count)

    def start(self) -> None:
        first = min(self.window, self.count)
        for token in range(first):
            self.send(token)
        self.sent = first
        if self.count == 0:
            self.done.set_result(None)

    def on_reply(self, token: int, hdr: bytes | None, data: bytes) -> None:
        if self.done.done():
            return
        if not 0 <= token < self.count or self._replied[token]:
            self.done.set_exception(LoadgenError(f"unexpected or repeated reply {token}"))
            return
        problem = self.check(token, hdr, data)
        if problem is not None:
            self.done.set_exception(LoadgenError(f"request {token}: {problem}"))
            return
        self._replied[token] = 1
        self.received += 1
        if self.sent < self.count:
            self.send(self.sent)
            self.sent += 1
        elif self.received == self.count:
            self.done.set_result(None)


def seeded_payload(config: LoadConfig) -> tuple[random.Random, bytes]:
    """The published payload and the random source the phases go on drawing from, both from
    ``config.seed`` (a responder standing in for a server needs the same payload)."""
    rng = random.Random(config.seed)
    return rng, rng.randbytes(config.payload_bytes)


class LoadGenerator:
    """Runs the phases over one connection against one server; with a ``cpu_meter`` each
    phase's result also has the server's CPU seconds over the phase."""

    def __init__(
        self, router: InboxRouter, config: LoadConfig, cpu_meter: CpuMeter | None = None
    ) -> None:
        self.router = router
        self.client = router.client
        self.config = config
        self.cpu_meter = cpu_meter
        rng, self.payload = seeded_payload(config)
        self.subjects = [f"{SUBJECT_PREFIX}.{i}".encode() for i in range(SUBJECT_COUNT)]
        self.direct_subject = f"$JS.API.DIRECT.GET.{config.stream}".encode()
        self._rng = rng

    # ---------------------------------------------------------------- setup and teardown

    async def create_stream(self) -> None:
        stream = self.config.stream
        await self.router.api(f"$JS.API.STREAM.DELETE.{stream}", None)  # a leftover from before
        config = {
            "name": stream,
            "subjects": [f"{SUBJECT_PREFIX}.>"],
            "storage": "file",
            "allow_direct": True,
        }
        answer = await self.router.api(f"$JS.API.STREAM.CREATE.{stream}", config)
        if "error" in answer:
            raise LoadgenError(f"stream create failed: {answer['error']}")

    async def stream_state(self) -> dict[str, Any]:
        answer = await self.router.api(f"$JS.API.STREAM.INFO.{self.config.stream}", None)
        if "error" in answer:
            raise LoadgenError(f"stream info failed: {answer['error']}")
        state: dict[str, Any] = answer["state"]
        return state

    async def delete_stream(self) -> None:
        await self.router.api(f"$JS.API.STREAM.DELETE.{self.config.stream}", None)

    # ---------------------------------------------------------------- checks

    def check_ack(self, _token: int, hdr: bytes | None, data: bytes) -> str | None:
        if hdr is not None:
            return f"status reply {status_line(hdr)}"
        if b'"error"' in data or b'"seq"' not in data:
            return f"bad PubAck {data[:200]!r}"
        return None

    def direct_check(self, seqs: list[int]) -> ReplyCheck:
        payload = self.payload

        def check(token: int, hdr: bytes | None, data: bytes) -> str | None:
            if hdr is None or not hdr.startswith(DIRECT_DATA_HDR_START):
                return f"not a message: {status_line(hdr) if hdr else data[:200]!r}"
            seq = get_header(hdr, "Nats-Sequence")
            if seq != str(seqs[token]):
                return f"asked for seq {seqs[token]}, got Nats-Sequence {seq}"
            if data != payload:
                return "payload differs from what was published"
            return None

        return check

    # ---------------------------------------------------------------- phases

    def send_publish(self, token: int) -> None:
        self.client.publish(
            self.subjects[token % SUBJECT_COUNT], self.payload, self.router.reply_to(token)
        )

    def direct_sender(self, seqs: list[int]) -> Callable[[int], None]:
        bodies = [b'{"seq":' + str(seq).encode() + b"}" for seq in seqs]
        publish = self.client.publish
        subject = self.direct_subject
        reply_to = self.router.reply_to

        def send(token: int) -> None:
            publish(subject, bodies[token], reply_to(token))

        return send

    async def sync_phase(
        self, name: str, count: int, send: Callable[[int], None], check: ReplyCheck
    ) -> PhaseResult:
        latencies_ns: list[int] = []
        wait = self.client.wait
        expect = self.router.expect
        timeout_s = self.config.op_timeout_s
        clock = time.perf_counter_ns
        cpu_before = read_meter(self.cpu_meter)
        client_before = time.process_time()
        started = clock()
        for token in range(count):
            future = expect(token)
            sent_ns = clock()
            send(token)
            hdr, data = await wait(future, timeout_s)
            latencies_ns.append(clock() - sent_ns)
            problem = check(token, hdr, data)
            if problem is not None:
                raise LoadgenError(f"{name}, request {token}: {problem}")
        elapsed_s = (clock() - started) / 1e9
        cpu_s = spent_since(self.cpu_meter, cpu_before)
        client_cpu_s = time.process_time() - client_before
        self.router.expect(-1)
        latencies_ns.sort()
        return PhaseResult(
            name,
            count,
            elapsed_s,
            percentile(latencies_ns, P50_PERMILLE) / NS_PER_US,
            percentile(latencies_ns, P99_PERMILLE) / NS_PER_US,
            cpu_s,
            client_cpu_s,
        )

    async def pipelined_phase(
        self, name: str, count: int, send: Callable[[int], None], check: ReplyCheck
    ) -> PhaseResult:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        pipeline = _Pipeline(count, self.config.window, send, check, done)
        self.router.on_pipelined = pipeline.on_reply
        cpu_before = read_meter(self.cpu_meter)
        client_before = time.process_time()
        started = time.perf_counter()
        deadline = started + self.config.phase_deadline_s
        self.client.watch(done)
        try:
            pipeline.start()
            while True:
                before = pipeline.received
                finished, _ = await asyncio.wait({done}, timeout=self.config.stall_timeout_s)
                if finished:
                    done.result()
                    break
                if pipeline.received == before or time.perf_counter() > deadline:
                    raise LoadgenError(f"{name}: stalled at {pipeline.received}/{count} replies")
            elapsed_s = time.perf_counter() - started
            cpu_s = spent_since(self.cpu_meter, cpu_before)
            client_cpu_s = time.process_time() - client_before
        finally:
            self.client.unwatch(done)
            self.router.on_pipelined = None
        return PhaseResult(name, count, elapsed_s, server_cpu_s=cpu_s, client_cpu_s=client_cpu_s)

    def random_seqs(self, count: int, first_seq: int, last_seq: int) -> list[int]:
        return [self._rng.randint(first_seq, last_seq) for _ in range(count)]

    async def run(self) -> list[PhaseResult]:
        msgs = self.config.msgs
        pipelined = msgs if self.config.pipelined_msgs is None else self.config.pipelined_msgs
        await self.create_stream()
        results = [
            await self.sync_phase(SYNC_PUBLISH, msgs, self.send_publish, self.check_ack),
            await self.pipelined_phase(
                PIPELINED_PUBLISH, pipelined, self.send_publish, self.check_ack
            ),
        ]
        state = await self.stream_state()
        acked = msgs + pipelined
        if state["messages"] != acked:
            raise LoadgenError(f"stream holds {state['messages']} messages, {acked} acked")
        first_seq, last_seq = int(state["first_seq"]), int(state["last_seq"])
        seqs = self.random_seqs(msgs, first_seq, last_seq)
        results.append(
            await self.sync_phase(
                SYNC_DIRECT_GET, msgs, self.direct_sender(seqs), self.direct_check(seqs)
            )
        )
        seqs = self.random_seqs(pipelined, first_seq, last_seq)
        results.append(
            await self.pipelined_phase(
                PIPELINED_DIRECT_GET, pipelined, self.direct_sender(seqs), self.direct_check(seqs)
            )
        )
        await self.delete_stream()
        return results


async def run_load(
    host: str, port: int, config: LoadConfig, cpu_meter: CpuMeter | None = None
) -> list[PhaseResult]:
    """Connect to ``host:port``, run every phase in order, and close the connection."""
    client = await RawClient.connect(host, port, CONNECT_TIMEOUT_S)
    try:
        router = InboxRouter(client)
        await client.flush(CONNECT_TIMEOUT_S)
        return await LoadGenerator(router, config, cpu_meter).run()
    finally:
        client.close()


def format_results(results: list[PhaseResult]) -> str:
    lines = []
    for result in results:
        line = f"{result.name:<22} {result.ops:>7} ops {result.rate_per_s:>10,.0f}/s"
        if result.p50_us is not None and result.p99_us is not None:
            line += f"  p50 {result.p50_us:,.0f} us  p99 {result.p99_us:,.0f} us"
        lines.append(line)
    return "\n".join(lines)


def run_event_loop(coro: Any) -> Any:
    """Run ``coro`` on uvloop when it is installed (it is a project dependency)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=4222)
    parser.add_argument("--msgs", type=int, default=None, help="operations per phase")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_MSGS} per phase")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--window", type=int, default=DEFAULT_WINDOW)
    args = parser.parse_args(argv)
    msgs = args.msgs if args.msgs is not None else (QUICK_MSGS if args.quick else DEFAULT_MSGS)
    config = LoadConfig(msgs=msgs, seed=args.seed, window=args.window)
    results: list[PhaseResult] = run_event_loop(run_load(args.host, args.port, config))
    print(format_results(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
