"""The load generator's ceiling: its pipelined phases against a responder that does no work.

Owns: a core nats-server (no JetStream) on free 127.0.0.1 ports, ``--responders`` null responder
processes in one queue group on it (each answers a publish with a fixed PubAck body and a Direct
Get with the requested sequence and the payload, no store behind either), and the same
:mod:`bench.loadgen` pipelined publish and pipelined Direct Get, with the same checks, against
them. What it measures is the most the load generator can show of any server on this machine:
when a server's measured rate comes near it, the rate says more about the load generator than
about the server. Run it with ``python -m bench.ceiling`` (``respond`` is the responder
process's own entry point).

Must never: leave a process running (nats-server and every responder are stopped by pid, even on
error or Ctrl-C), or report a rate from a phase whose replies failed their checks.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.loadgen import (
    DEFAULT_SEED,
    DEFAULT_STREAM,
    DEFAULT_WINDOW,
    PIPELINED_DIRECT_GET,
    PIPELINED_PUBLISH,
    SUBJECT_PREFIX,
    InboxRouter,
    LoadConfig,
    LoadGenerator,
    PhaseResult,
    ReplyCheck,
    run_event_loop,
    seeded_payload,
)
from bench.rawclient import ProtocolFailure, RawClient
from bench.report import JETRAFT, ServerRun, format_rate
from cluster.ops.probes import http_get_json
from cluster.ops.process import (
    HOST,
    NATS_SERVER_BIN,
    PROJECT_ROOT,
    Spawned,
    log_tail,
    spawn,
    stop_popens,
    wait_until,
)
from cluster.ops.servers import ServerProc, server_proc

CEILING = "load generator ceiling"
DEFAULT_OPS = 200_000
QUICK_OPS = 20_000
DEFAULT_RESPONDERS = 2
WARMUP_WINDOWS = 2
# a ceiling is a maximum: the fastest of a few tries, so that a moment of other work on a shared
# machine does not pass for the load generator's limit
TRIES = 2
QUEUE_GROUP = b"null"
PUBACK_BODY = b'{"stream":"' + DEFAULT_STREAM.encode() + b'","seq":1}'
DIRECT_HDR_HEAD = b"NATS/1.0\r\nNats-Stream: " + DEFAULT_STREAM.encode() + b"\r\nNats-Sequence: "
SUBSCRIPTIONS_PER_RESPONDER = 2
SERVER_READY_TIMEOUT_S = 30.0
RESPONDERS_READY_TIMEOUT_S = 20.0
CONNECT_TIMEOUT_S = 10.0
# a server within this factor of the ceiling may be capped by the load generator
CAP_MARGIN = 1.5


# ------------------------------------------------------------------------------- the responder


class NullResponder:
    """Answers every request at once from fixed bytes; only the sequence asked for is echoed."""

    def __init__(self, client: RawClient, payload: bytes) -> None:
        self.client = client
        self.payload = payload
        client.subscribe(SUBJECT_PREFIX.encode() + b".>", self.ack, QUEUE_GROUP)
        direct = b"$JS.API.DIRECT.GET." + DEFAULT_STREAM.encode()
        client.subscribe(direct, self.direct_get, QUEUE_GROUP)

    def ack(self, _subject: bytes, reply: bytes | None, _hdr: bytes | None, _data: bytes) -> None:
        if reply is not None:
            self.client.publish(reply, PUBACK_BODY)

    def direct_get(
        self, _subject: bytes, reply: bytes | None, _hdr: bytes | None, data: bytes
    ) -> None:
        if reply is None:
            return
        # the load generator asks with b'{"seq":N}'
        seq = data.partition(b":")[2].rstrip(b"}")
        self.client.hpublish(reply, DIRECT_HDR_HEAD + seq + b"\r\n\r\n", self.payload)


async def respond(port: int, payload: bytes) -> None:
    """Serve until the connection is lost (the server stopped) or the process is signalled."""
    client = await RawClient.connect(HOST, port, CONNECT_TIMEOUT_S)
    NullResponder(client, payload)
    await client.flush(CONNECT_TIMEOUT_S)
    lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    client.watch(lost)  # failed with the connection's failure, and nothing else completes it
    try:
        await lost
    except ProtocolFailure:
        return


# ------------------------------------------------------------------------------- the ceiling


@dataclass(frozen=True)
class CeilingConfig:
    ops: int = DEFAULT_OPS
    responders: int = DEFAULT_RESPONDERS
    window: int = DEFAULT_WINDOW
    seed: int = DEFAULT_SEED


def load_config(config: CeilingConfig) -> LoadConfig:
    return LoadConfig(msgs=config.ops, window=config.window, seed=config.seed)


async def _fastest_try(
    gen: LoadGenerator, phase: str, ops: int, send: Callable[[int], None], check: ReplyCheck
) -> PhaseResult:
    tries = [await gen.pipelined_phase(phase, ops, send, check) for _ in range(TRIES)]
    return max(tries, key=lambda result: result.rate_per_s)


async def ceiling_load(port: int, config: CeilingConfig) -> list[PhaseResult]:
    """A warm-up, then ``config.ops`` pipelined publishes and Direct Gets (the fastest of
    ``TRIES`` each), every reply checked as against a server."""
    client = await RawClient.connect(HOST, port, CONNECT_TIMEOUT_S)
    try:
        router = InboxRouter(client)
        await client.flush(CONNECT_TIMEOUT_S)
        gen = LoadGenerator(router, load_config(config))
        warmup = WARMUP_WINDOWS * config.window
        await gen.pipelined_phase(PIPELINED_PUBLISH, warmup, gen.send_publish, gen.check_ack)
        publish = await _fastest_try(
            gen, PIPELINED_PUBLISH, config.ops, gen.send_publish, gen.check_ack
        )
        # there is no stream: any sequence will do, the responder echoes it
        seqs = gen.random_seqs(config.ops, 1, config.ops)
        direct = await _fastest_try(
            gen, PIPELINED_DIRECT_GET, config.ops, gen.direct_sender(seqs), gen.direct_check(seqs)
        )
        return [publish, direct]
    finally:
        client.close()


def responders_subscribed(proc: ServerProc) -> int:
    """How many connections hold both responder subscriptions, from nats-server's /connz."""
    _, body = http_get_json(f"http://{HOST}:{proc.http_port}/connz")
    connections = body.get("connections") if isinstance(body, dict) else None
    if not isinstance(connections, list):
        return 0
    return sum(
        1
        for conn in connections
        if isinstance(conn, dict) and conn.get("subscriptions", 0) >= SUBSCRIPTIONS_PER_RESPONDER
    )


def start_responders(proc: ServerProc, config: CeilingConfig, tmp: Path) -> list[Spawned]:
    _, payload = seeded_payload(load_config(config))
    argv = [sys.executable, "-m", "bench.ceiling", "respond", "--port", str(proc.port)]
    argv += ["--payload-hex", payload.hex()]
    return [
        spawn(argv, log_path=tmp / f"responder-{n}.log", cwd=PROJECT_ROOT, die_with_parent=True)
        for n in range(config.responders)
    ]


def wait_responders(proc: ServerProc, responders: Sequence[Spawned], count: int) -> None:
    def ready() -> bool:
        for spawned in responders:
            if spawned.popen.poll() is not None:
                raise RuntimeError(f"responder pid {spawned.pid} exited: {spawned.tail()}")
        return responders_subscribed(proc) >= count

    if not wait_until(ready, RESPONDERS_READY_TIMEOUT_S):
        raise RuntimeError(f"{count} responders not subscribed in {RESPONDERS_READY_TIMEOUT_S} s")


def run_ceiling(config: CeilingConfig) -> ServerRun:
    """Core nats-server plus the responders, the pipelined phases, and every process stopped."""
    run = ServerRun(CEILING)
    with tempfile.TemporaryDirectory(prefix="bench-ceiling-") as tmp:
        # no -js: core NATS only, the responders stand in for JetStream
        proc = server_proc([str(NATS_SERVER_BIN)], Path(tmp), "bench-null", ())
        responders: list[Spawned] = []
        try:
            proc.start(SERVER_READY_TIMEOUT_S)
            responders = start_responders(proc, config, Path(tmp))
            pids = ", ".join(str(spawned.pid) for spawned in responders)
            print(f"{CEILING}: nats-server pid {proc.pid}, responder pids {pids}", flush=True)
            wait_responders(proc, responders, config.responders)
            results = run_event_loop(ceiling_load(proc.port, config))
            run.results = {result.name: result for result in results}
        except Exception as err:
            run.error = f"{type(err).__name__}: {err}\n{log_tail(proc.log_path)}"
        finally:
            try:
                stop_popens([spawned.popen for spawned in responders])
            finally:
                proc.stop()
    return run


# (where it ran, e.g. "R1", and the run)
LabelledRun = tuple[str, ServerRun]


def _fastest(phase: str, runs: Sequence[LabelledRun]) -> tuple[PhaseResult, str] | None:
    measured = [
        (run.results[phase], f"{run.server}, {label}")
        for label, run in runs
        if phase in run.results
    ]
    return max(measured, key=lambda pair: pair[0].rate_per_s) if measured else None


def _headroom(ceiling: PhaseResult, result: PhaseResult) -> float:
    return ceiling.rate_per_s / result.rate_per_s if result.rate_per_s else float("inf")


def _busy(result: PhaseResult) -> str:
    busy = result.client_busy
    return "" if busy is None else f" (load generator busy {busy:.0%} of a core)"


def cap_note(phase: str, ceiling: ServerRun, runs: Sequence[LabelledRun]) -> str:
    """The ceiling of ``phase`` against the fastest server and the fastest jetraft measured, and
    whether it leaves the margin that shows the load generator did not limit them. How busy the
    load generator was tells its limit from the responders' and the machine's."""
    top = ceiling.results.get(phase)
    fastest = _fastest(phase, runs)
    if top is None or fastest is None:
        return f"{phase}: ceiling not measured"
    result, where = fastest
    factor = _headroom(top, result)
    note = (
        f"{phase}: ceiling {format_rate(top)}/s{_busy(top)} is {factor:.1f}x the fastest server, "
        f"{where} at {format_rate(result)}/s{_busy(result)}: "
    )
    if factor >= CAP_MARGIN:
        return note + "the load generator is not the cap"
    note += (
        f"BELOW {CAP_MARGIN}x, the load generator may cap that server, so a ratio against it "
        "flatters jetraft (compare the CPU per operation)"
    )
    mine = _fastest(phase, [(label, run) for label, run in runs if run.server == JETRAFT])
    if mine is not None:
        note += f"; jetraft's fastest ({mine[1]}) is {_headroom(top, mine[0]):.1f}x below it"
    return note


def cap_notes(ceiling: ServerRun, runs: Sequence[LabelledRun]) -> list[str]:
    return [cap_note(phase, ceiling, runs) for phase in (PIPELINED_PUBLISH, PIPELINED_DIRECT_GET)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    commands = parser.add_subparsers(dest="command")
    responder = commands.add_parser("respond", help="run one null responder (internal)")
    responder.add_argument("--port", type=int, required=True)
    responder.add_argument("--payload-hex", required=True)
    parser.add_argument("--ops", type=int, default=None, help="operations per phase")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_OPS} per phase")
    parser.add_argument("--responders", type=int, default=DEFAULT_RESPONDERS)
    parser.add_argument("--window", type=int, default=DEFAULT_WINDOW)
    args = parser.parse_args(argv)
    if args.command == "respond":
        run_event_loop(respond(args.port, bytes.fromhex(args.payload_hex)))
        return 0
    ops = args.ops if args.ops is not None else (QUICK_OPS if args.quick else DEFAULT_OPS)
    run = run_ceiling(CeilingConfig(ops=ops, responders=args.responders, window=args.window))
    for result in run.results.values():
        print(f"{CEILING}, {result.name}: {format_rate(result)}/s")
    if run.error is not None:
        print(f"ERROR {run.error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
