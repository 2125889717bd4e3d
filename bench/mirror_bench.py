"""The mirror benchmark (issue 5): nats-server, then jetraft, one single server at a time.

Two measurements per server, over one raw-protocol connection (:mod:`bench.rawclient`), with
every reply checked:

1. **Direct Get with 0, 1 and 2 mirrors.** An upstream stream ``DG`` (file storage,
   ``allow_direct``) is filled with ``--msgs`` messages over :data:`bench.loadgen.SUBJECT_COUNT`
   subjects (message ``s`` goes to subject ``(s - 1) % K`` and carries a payload derived from
   ``s``; each PubAck is checked for its sequence). Pipelined Direct Gets addressed to the
   upstream (``$JS.API.DIRECT.GET.DG``, by random sequence, then ``last_by_subj`` of a random
   subject) are timed with no mirror, then after creating ``DGM1``, then after ``DGM2``; each
   mirror is first waited for (STREAM.INFO ``mirror.lag`` 0 and ``last_seq`` equal to the
   upstream's) and warmed up until it answers some of the upstream's Direct Gets. Every answer
   must carry the right ``Nats-Sequence``, ``Nats-Subject`` and payload, and a ``Nats-Stream`` of
   a stream that may answer; the answers are counted by ``Nats-Stream``.
2. **Mirror catch-up.** A fresh upstream ``CU`` is filled with ``--catchup-msgs`` messages, then
   a mirror ``CUM`` is created and the time until its ``last_seq`` equals the upstream's is taken
   (STREAM.INFO polled every :data:`CATCH_UP_POLL_S`, so the time is known to that resolution);
   three of the mirror's messages are then read back with ``STREAM.MSG.GET`` and checked.

It reuses :mod:`bench.loadgen` (the inbox router, the pipelined phase and its checks' shape) and
the table helpers of :mod:`bench.runner` and :mod:`bench.cluster_bench`. The table shows
msgs/s per phase, both servers and the ratio jetraft/nats-server; below it, how the answers
split by ``Nats-Stream`` and the CPU each process used. Run it with
``python -m bench.mirror_bench [--quick] [--append-results]`` from the project root.

Must never: leave a server process running (each is stopped by pid in a ``finally``), run both
servers at once, touch a store directory it did not create, or report a number from a phase
whose replies failed their checks.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime
import json
import os
import platform
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.cpu import process_cpu_s
from bench.loadgen import (
    DEFAULT_PAYLOAD_BYTES,
    DEFAULT_SEED,
    DEFAULT_WINDOW,
    DIRECT_DATA_HDR_START,
    SUBJECT_COUNT,
    InboxRouter,
    LoadConfig,
    LoadGenerator,
    PhaseResult,
    ReplyCheck,
    run_event_loop,
    status_line,
)
from bench.rawclient import RawClient
from bench.report import format_rate, format_ratio, markdown_table, nats_version, text_table
from cluster.ops.process import HOST, NATS_SERVER_BIN
from cluster.ops.servers import ServerProc, ServerStartError, jetraft_proc, nats_server_proc
from protocol.headers import get_header

RESULTS_PATH = Path(__file__).resolve().parent / "results.md"
NATS = "nats-server"
JETRAFT = "jetraft"
CLIENT = "client"

UPSTREAM = "DG"
MIRRORS = ("DGM1", "DGM2")
CATCHUP_UPSTREAM = "CU"
CATCHUP_MIRROR = "CUM"

DEFAULT_MSGS = 20_000  # messages in DG
QUICK_MSGS = 2_000
DEFAULT_GETS = 30_000  # Direct Gets per measured phase
QUICK_GETS = 3_000
DEFAULT_CATCHUP_MSGS = 100_000
QUICK_CATCHUP_MSGS = 10_000
SEQ_BYTES = 8  # the payload of message s starts with s, big-endian

BY_SEQ = "by seq"
LAST_BY_SUBJ = "last_by_subj"
GET_KINDS = (BY_SEQ, LAST_BY_SUBJ)
MIRROR_COUNTS = tuple(range(len(MIRRORS) + 1))
CATCH_UP = "mirror catch-up"
FILL = "fill"
WARM_UP = "warm-up"
WARMUP_WINDOWS = 2  # each warm-up round sends this many windows of Direct Gets

SERVER_READY_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 10.0
CATCH_UP_POLL_S = 0.05
MIRROR_READY_DEADLINE_S = 120.0  # a mirror of DG reports lag 0 at DG's last_seq
MIRROR_SERVING_DEADLINE_S = 15.0  # a caught-up mirror answers some of DG's Direct Gets
CATCH_UP_DEADLINE_S = 600.0
MISSING = "-"
PERCENT = 100


class MirrorBenchError(RuntimeError):
    """A reply failed its check, an API call failed, or a mirror never caught up."""


def direct_phase(kind: str, mirrors: int) -> str:
    return f"direct get {kind}, {mirrors} mirror{'' if mirrors == 1 else 's'}"


def catch_up_phase(msgs: int) -> str:
    return f"{CATCH_UP}, {msgs:,} msgs"


@dataclass(frozen=True)
class MirrorBenchConfig:
    msgs: int = DEFAULT_MSGS
    gets: int = DEFAULT_GETS
    catchup_msgs: int = DEFAULT_CATCHUP_MSGS
    window: int = DEFAULT_WINDOW
    payload_bytes: int = DEFAULT_PAYLOAD_BYTES
    seed: int = DEFAULT_SEED

    def phases(self) -> list[str]:
        names = [direct_phase(kind, n) for n in MIRROR_COUNTS for kind in GET_KINDS]
        return [*names, catch_up_phase(self.catchup_msgs)]


@dataclass
class MirrorRun:
    """One server's outcome: results, answer splits and CPU by phase, notes, or the error."""

    server: str
    results: dict[str, PhaseResult] = field(default_factory=dict)
    served: dict[str, Counter[str]] = field(default_factory=dict)
    cpu: dict[str, dict[str, float]] = field(default_factory=dict)  # phase -> process -> %
    notes: list[str] = field(default_factory=list)
    load_avg: float | None = None
    error: str | None = None


# ------------------------------------------------------------------------------- messages


class Messages:
    """What the fill publishes: message ``s`` (1-based) on subject ``(s - 1) % K``, with a
    payload that starts with ``s``, so a reply can be checked against its sequence alone."""

    def __init__(self, gen: LoadGenerator, count: int) -> None:
        if count < SUBJECT_COUNT:
            raise ValueError(f"need at least {SUBJECT_COUNT} messages, one per subject")
        if len(gen.payload) < SEQ_BYTES:
            raise ValueError(f"payloads must have at least {SEQ_BYTES} bytes")
        self.count = count
        self.subjects = gen.subjects
        self._tail = gen.payload[SEQ_BYTES:]

    def payload(self, seq: int) -> bytes:
        return seq.to_bytes(SEQ_BYTES, "big") + self._tail

    def subject(self, seq: int) -> bytes:
        return self.subjects[(seq - 1) % SUBJECT_COUNT]

    def last_seq_of(self, subject_index: int) -> int:
        """The highest sequence whose subject is ``subject_index``."""
        return (
            subject_index + 1 + SUBJECT_COUNT * ((self.count - 1 - subject_index) // SUBJECT_COUNT)
        )


# ------------------------------------------------------------------------------- the load


class MirrorLoad:
    """Both measurements, in order, over one connection to one server."""

    def __init__(
        self, router: InboxRouter, config: MirrorBenchConfig, proc: ServerProc, run: MirrorRun
    ) -> None:
        self.router = router
        self.client = router.client
        self.config = config
        self.proc = proc
        self.run = run

    def generator(self, stream: str) -> LoadGenerator:
        load_config = LoadConfig(
            msgs=0,
            payload_bytes=self.config.payload_bytes,
            window=self.config.window,
            seed=self.config.seed,
            stream=stream,
        )
        return LoadGenerator(self.router, load_config)

    # ---------------------------------------------------------------- API helpers

    async def api(self, subject: str, body: dict[str, Any] | None) -> dict[str, Any]:
        answer = await self.router.api(subject, body)
        if "error" in answer:
            raise MirrorBenchError(f"{subject}: {answer['error']}")
        return answer

    async def info(self, stream: str) -> dict[str, Any]:
        return await self.api(f"$JS.API.STREAM.INFO.{stream}", None)

    async def create_mirror(self, name: str, upstream: str) -> None:
        config = {"name": name, "mirror": {"name": upstream}, "storage": "file"}
        await self.api(f"$JS.API.STREAM.CREATE.{name}", config)

    async def wait_mirrored(self, mirror: str, last_seq: int, deadline_s: float) -> float:
        """Poll until the mirror holds everything through ``last_seq`` and reports lag 0; the
        seconds that took."""
        started = time.perf_counter()
        while True:
            info = await self.info(mirror)
            lag = info.get("mirror", {}).get("lag")
            if int(info["state"]["last_seq"]) == last_seq and lag == 0:
                return time.perf_counter() - started
            if time.perf_counter() - started > deadline_s:
                raise MirrorBenchError(
                    f"{mirror} not caught up in {deadline_s:g}s: state {info['state']}, "
                    f"mirror {info.get('mirror')}"
                )
            await asyncio.sleep(CATCH_UP_POLL_S)

    # ---------------------------------------------------------------- fill

    async def fill(self, gen: LoadGenerator, messages: Messages) -> None:
        """Create ``gen``'s stream and publish every message, pipelined; each PubAck must name
        the stream and the sequence the message was meant to get."""
        await gen.create_stream()
        stream = gen.config.stream
        publish = self.client.publish
        reply_to = self.router.reply_to

        def send(token: int) -> None:
            seq = token + 1
            publish(messages.subject(seq), messages.payload(seq), reply_to(token))

        def check(token: int, hdr: bytes | None, data: bytes) -> str | None:
            if hdr is not None:
                return f"status reply {status_line(hdr)}"
            try:
                ack = json.loads(data)
            except ValueError:
                return f"bad PubAck {data[:200]!r}"
            if ack.get("stream") != stream or ack.get("seq") != token + 1:
                return f"PubAck {ack} for message {token + 1} of {stream}"
            return None

        await gen.pipelined_phase(f"{FILL} {stream}", messages.count, send, check)
        state = (await self.info(stream))["state"]
        if state["messages"] != messages.count or state["last_seq"] != messages.count:
            raise MirrorBenchError(f"{stream} holds {state}, {messages.count} acked")

    # ---------------------------------------------------------------- Direct Get

    def direct_check(
        self, messages: Messages, seqs: list[int], answering: frozenset[str], served: Counter[str]
    ) -> ReplyCheck:
        def check(token: int, hdr: bytes | None, data: bytes) -> str | None:
            if hdr is None or not hdr.startswith(DIRECT_DATA_HDR_START):
                return f"not a message: {status_line(hdr) if hdr else data[:200]!r}"
            seq = seqs[token]
            got_seq = get_header(hdr, "Nats-Sequence")
            if got_seq != str(seq):
                return f"expected seq {seq}, got Nats-Sequence {got_seq}"
            subject = get_header(hdr, "Nats-Subject")
            if subject is None or subject.encode() != messages.subject(seq):
                return f"seq {seq}: Nats-Subject {subject}, published on {messages.subject(seq)!r}"
            if data != messages.payload(seq):
                return f"seq {seq}: payload differs from what was published"
            stream = get_header(hdr, "Nats-Stream")
            if stream not in answering:
                return (
                    f"seq {seq}: answered by Nats-Stream {stream}, not one of {sorted(answering)}"
                )
            served[stream] += 1
            return None

        return check

    def direct_requests(
        self, gen: LoadGenerator, messages: Messages, kind: str, count: int
    ) -> tuple[Callable[[int], None], list[int]]:
        """A sender of ``count`` Direct Gets of ``kind`` and the sequence each must answer."""
        if kind == BY_SEQ:
            seqs = gen.random_seqs(count, 1, messages.count)
            return gen.direct_sender(seqs), seqs
        subject_indexes = gen.random_seqs(count, 0, SUBJECT_COUNT - 1)
        bodies = [b'{"last_by_subj":"' + messages.subjects[i] + b'"}' for i in subject_indexes]
        publish = self.client.publish
        subject = gen.direct_subject
        reply_to = self.router.reply_to

        def send(token: int) -> None:
            publish(subject, bodies[token], reply_to(token))

        return send, [messages.last_seq_of(i) for i in subject_indexes]

    async def direct_gets(
        self,
        gen: LoadGenerator,
        messages: Messages,
        name: str,
        kind: str,
        count: int,
        answering: frozenset[str],
    ) -> tuple[PhaseResult, Counter[str]]:
        send, seqs = self.direct_requests(gen, messages, kind, count)
        served: Counter[str] = Counter()
        check = self.direct_check(messages, seqs, answering, served)
        result = await gen.pipelined_phase(name, count, send, check)
        return result, served

    async def warm_up(
        self, gen: LoadGenerator, messages: Messages, answering: frozenset[str]
    ) -> None:
        """Direct Gets until every stream in ``answering`` has answered some (a mirror joins the
        upstream's queue group a moment after it reports lag 0), or note that it never did."""
        started = time.perf_counter()
        count = WARMUP_WINDOWS * self.config.window
        while True:
            _, served = await self.direct_gets(gen, messages, WARM_UP, BY_SEQ, count, answering)
            if set(served) == answering:
                return
            if time.perf_counter() - started > MIRROR_SERVING_DEADLINE_S:
                missing = sorted(answering - set(served))
                self.run.notes.append(
                    f"{', '.join(missing)} answered none of {count} Direct Gets to {UPSTREAM} "
                    f"{MIRROR_SERVING_DEADLINE_S:g}s after catching up (measured anyway)"
                )
                return

    def cpu_snapshot(self) -> tuple[float, dict[str, float]]:
        used = {CLIENT: time.process_time()}
        cpu = process_cpu_s(self.proc.pid) if self.proc.running else None
        if cpu is not None:
            used[self.run.server] = cpu
        return time.monotonic(), used

    def record_cpu(self, phase: str, before: tuple[float, dict[str, float]]) -> None:
        now, used = self.cpu_snapshot()
        elapsed = now - before[0]
        if elapsed > 0:
            self.run.cpu[phase] = {
                who: PERCENT * (cpu - before[1][who]) / elapsed
                for who, cpu in used.items()
                if who in before[1]
            }

    async def direct_get_phases(self) -> None:
        gen = self.generator(UPSTREAM)
        messages = Messages(gen, self.config.msgs)
        await self.fill(gen, messages)
        for mirrors in MIRROR_COUNTS:
            if mirrors:
                mirror = MIRRORS[mirrors - 1]
                await self.create_mirror(mirror, UPSTREAM)
                took = await self.wait_mirrored(mirror, messages.count, MIRROR_READY_DEADLINE_S)
                self.run.notes.append(
                    f"{mirror} caught up with {messages.count:,} messages in {took:.2f}s"
                )
            answering = frozenset((UPSTREAM, *MIRRORS[:mirrors]))
            await self.warm_up(gen, messages, answering)
            for kind in GET_KINDS:
                phase = direct_phase(kind, mirrors)
                before = self.cpu_snapshot()
                result, served = await self.direct_gets(
                    gen, messages, phase, kind, self.config.gets, answering
                )
                self.record_cpu(phase, before)
                self.run.results[phase] = result
                self.run.served[phase] = served
        # CU reuses DG's subjects; the mirrors would keep polling a deleted upstream
        for stream in (*reversed(MIRRORS), UPSTREAM):
            await self.api(f"$JS.API.STREAM.DELETE.{stream}", None)

    # ---------------------------------------------------------------- catch-up

    async def catch_up_phase(self) -> None:
        gen = self.generator(CATCHUP_UPSTREAM)
        messages = Messages(gen, self.config.catchup_msgs)
        await self.fill(gen, messages)
        phase = catch_up_phase(messages.count)
        before = self.cpu_snapshot()
        started = time.perf_counter()
        await self.create_mirror(CATCHUP_MIRROR, CATCHUP_UPSTREAM)
        while True:
            state = (await self.info(CATCHUP_MIRROR))["state"]
            if int(state["last_seq"]) == messages.count:
                break
            if time.perf_counter() - started > CATCH_UP_DEADLINE_S:
                raise MirrorBenchError(f"{CATCHUP_MIRROR} not caught up: {state}")
            await asyncio.sleep(CATCH_UP_POLL_S)
        elapsed = time.perf_counter() - started
        self.record_cpu(phase, before)
        if state["messages"] != messages.count or state["first_seq"] != 1:
            raise MirrorBenchError(f"{CATCHUP_MIRROR} holds {state}, upstream {messages.count}")
        for seq in sorted({1, (messages.count + 1) // 2, messages.count}):
            await self.check_stored(CATCHUP_MIRROR, messages, seq)
        self.run.results[phase] = PhaseResult(phase, messages.count, elapsed)
        self.run.notes.append(
            f"{CATCHUP_MIRROR} held all {messages.count:,} messages of {CATCHUP_UPSTREAM} "
            f"{elapsed:.2f}s after its create request (polled every {CATCH_UP_POLL_S:g}s)"
        )

    async def check_stored(self, stream: str, messages: Messages, seq: int) -> None:
        answer = await self.api(f"$JS.API.STREAM.MSG.GET.{stream}", {"seq": seq})
        msg = answer.get("message", {})
        data = base64.b64decode(msg.get("data", ""))
        if (
            msg.get("seq") != seq
            or msg.get("subject", "").encode() != messages.subject(seq)
            or data != messages.payload(seq)
        ):
            raise MirrorBenchError(f"{stream} seq {seq} is not what the upstream holds: {msg}")


async def run_mirror_load(proc: ServerProc, config: MirrorBenchConfig, run: MirrorRun) -> None:
    client = await RawClient.connect(HOST, proc.port, CONNECT_TIMEOUT_S)
    try:
        router = InboxRouter(client)
        await client.flush(CONNECT_TIMEOUT_S)
        load = MirrorLoad(router, config, proc, run)
        await load.direct_get_phases()
        await load.catch_up_phase()
    finally:
        client.close()


def run_against(
    server: str, make_proc: Callable[[Path], ServerProc], config: MirrorBenchConfig
) -> MirrorRun:
    """Start one server in a fresh temp dir, run both measurements, and always stop it."""
    run = MirrorRun(server, load_avg=os.getloadavg()[0])
    with tempfile.TemporaryDirectory(prefix=f"mirrorbench-{server}-") as tmp:
        proc = make_proc(Path(tmp))
        try:
            proc.start(SERVER_READY_TIMEOUT_S)
            print(f"{server}: pid {proc.pid} on {proc.url}", flush=True)
            run_event_loop(run_mirror_load(proc, config, run))
        except Exception as err:
            run.error = f"{type(err).__name__}: {err}"
            if not isinstance(err, ServerStartError):
                run.error += f"\n--- {server} log tail ---\n{proc.log_tail()}"
        finally:
            proc.stop()
    return run


# ------------------------------------------------------------------------------- reporting

HEADER = ["phase", "metric", NATS, JETRAFT, f"{JETRAFT}/{NATS}"]


def table_rows(config: MirrorBenchConfig, runs: Sequence[MirrorRun]) -> list[list[str]]:
    by_server = {run.server: run for run in runs}
    nats, jetraft = by_server.get(NATS), by_server.get(JETRAFT)
    rows = []
    for phase in config.phases():
        n = nats.results.get(phase) if nats else None
        j = jetraft.results.get(phase) if jetraft else None
        unit = "msgs/s"
        ratio = format_ratio(j.rate_per_s if j else None, n.rate_per_s if n else None)
        rows.append([phase, unit, format_rate(n), format_rate(j), ratio])
    return rows


def split_text(served: Counter[str] | None) -> str:
    total = sum(served.values()) if served else 0
    if not served or not total:
        return MISSING
    order = [UPSTREAM, *MIRRORS]
    names = sorted(served, key=lambda s: (order.index(s) if s in order else len(order), s))
    return " / ".join(f"{name} {PERCENT * served[name] / total:.0f}%" for name in names)


def split_notes(config: MirrorBenchConfig, runs: Sequence[MirrorRun]) -> list[str]:
    lines = []
    for phase in config.phases():
        if CATCH_UP in phase:
            continue
        parts = [f"{run.server} {split_text(run.served.get(phase))}" for run in runs]
        lines.append(f"{phase}: " + "; ".join(parts))
    return lines


def cpu_notes(runs: Sequence[MirrorRun]) -> list[str]:
    notes = []
    for run in runs:
        for phase, used in run.cpu.items():
            shown = ", ".join(f"{who} {percent:.0f}%" for who, percent in used.items())
            notes.append(f"{run.server}, {phase}: {shown}")
    return notes


def other_notes(runs: Sequence[MirrorRun]) -> list[str]:
    notes = []
    for run in runs:
        if run.load_avg is not None:
            notes.append(f"{run.server}: 1-minute load average {run.load_avg:.2f} at its start")
        notes += [f"{run.server}: {note}" for note in run.notes]
    return notes


def conditions(config: MirrorBenchConfig, command: str) -> str:
    return (
        f"`{command}`: DG holds {config.msgs:,} messages over {SUBJECT_COUNT} subjects, "
        f"{config.gets:,} pipelined Direct Gets per phase (window {config.window}, "
        f"{config.payload_bytes}-byte payloads, seed {config.seed}) addressed to "
        f"`$JS.API.DIRECT.GET.{UPSTREAM}`, each answer checked (sequence, subject, payload, "
        f"Nats-Stream); catch-up of a new mirror of {config.catchup_msgs:,} messages, timed from "
        f"its create request to STREAM.INFO showing the upstream's last_seq (polled every "
        f"{CATCH_UP_POLL_S:g} s). Single server, file storage, one client connection, one "
        f"server at a time on 127.0.0.1. Machine: {os.cpu_count()} CPUs ({platform.machine()}) "
        f"shared with other work, Python {platform.python_version()}; {nats_version()}."
    )


def report(
    config: MirrorBenchConfig, argv: Sequence[str], runs: Sequence[MirrorRun], errors: list[str]
) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    command = " ".join(["python -m bench.mirror_bench", *argv])
    lines = [
        "## Mirrors: Direct Get with 0, 1 and 2 mirrors, and mirror catch-up (single server)",
        "",
        f"Run {now} with {conditions(config, command)}",
        "",
        markdown_table(HEADER, table_rows(config, runs)),
        "",
        "Above 1 means jetraft is faster. Direct Gets answered, by `Nats-Stream`:",
        "",
        *(f"* {line}" for line in split_notes(config, runs)),
        "",
        f"CPU per process during each measured phase, in % of one core ({os.cpu_count()} cores "
        "shared by the server, the client and whatever else the machine runs):",
        "",
        *(f"* {line}" for line in cpu_notes(runs)),
        "",
        "Notes:",
        "",
        *(f"* {line}" for line in other_notes(runs)),
    ]
    if errors:
        lines += ["", "Errors:", ""] + [f"* {error.splitlines()[0]}" for error in errors]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK_MSGS} messages, {QUICK_GETS} gets, {QUICK_CATCHUP_MSGS} to catch up",
    )
    parser.add_argument("--msgs", type=int, default=None, help="messages in the upstream DG")
    parser.add_argument("--gets", type=int, default=None, help="Direct Gets per measured phase")
    parser.add_argument("--catchup-msgs", type=int, default=None, help="messages to catch up")
    parser.add_argument("--window", type=int, default=DEFAULT_WINDOW, help="requests in flight")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--jetraft-only", action="store_true")
    only.add_argument("--nats-only", action="store_true")
    parser.add_argument(
        "--append-results",
        type=Path,
        nargs="?",
        const=RESULTS_PATH,
        metavar="FILE",
        help=f"append the markdown section to FILE (default {RESULTS_PATH})",
    )
    args = parser.parse_args(argv)

    def pick(given: int | None, quick: int, default: int) -> int:
        return given if given is not None else (quick if args.quick else default)

    config = MirrorBenchConfig(
        msgs=pick(args.msgs, QUICK_MSGS, DEFAULT_MSGS),
        gets=pick(args.gets, QUICK_GETS, DEFAULT_GETS),
        catchup_msgs=pick(args.catchup_msgs, QUICK_CATCHUP_MSGS, DEFAULT_CATCHUP_MSGS),
        window=args.window,
        seed=args.seed,
    )
    if min(config.msgs, config.catchup_msgs) < SUBJECT_COUNT:
        parser.error(f"--msgs and --catchup-msgs must be at least {SUBJECT_COUNT}")
    if config.gets < 1 or config.window < 1:
        parser.error("--gets and --window must be at least 1")
    if not NATS_SERVER_BIN.exists() and not args.jetraft_only:
        print(f"no nats-server at {NATS_SERVER_BIN}", file=sys.stderr)
        return 2

    plans: list[tuple[str, Callable[[Path], ServerProc]]] = []
    if not args.jetraft_only:
        plans.append((NATS, lambda tmp: nats_server_proc(tmp, name="mirror-bench-nats")))
    if not args.nats_only:
        plans.append((JETRAFT, lambda tmp: jetraft_proc(tmp, name="mirror-bench-jr")))
    runs = [run_against(server, make, config) for server, make in plans]
    errors = [f"{run.server}: {run.error}" for run in runs if run.error is not None]

    print()
    print(text_table(HEADER, table_rows(config, runs)))
    print(f"\n{os.cpu_count()} cores shared with other work: rates move with the machine's load.")
    print("\nanswered by Nats-Stream:")
    for line in split_notes(config, runs):
        print(f"  {line}")
    print("\nCPU, % of one core:")
    for line in cpu_notes(runs):
        print(f"  {line}")
    for line in other_notes(runs):
        print(line)
    for error in errors:
        print(f"\nERROR {error}", file=sys.stderr)
    if args.append_results is not None:
        with args.append_results.open("a") as out:
            out.write("\n" + report(config, argv, runs, errors))
        print(f"\nappended to {args.append_results}")
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
