"""The cluster benchmark: a 3-node nats-server cluster, then a 3-node jetraft cluster, same load.

Owns: starting each cluster as three separate processes on free 127.0.0.1 ports (one cluster at a
time, the other stopped), each node with its own store directory; waiting until the cluster can
host a stream (jetraft: ``/healthz`` 200 on every node; both: ``$JS.API.INFO`` answered and a
``num_replicas: 3`` file stream created through node 1, retried until a deadline, and its leader
moved to node 1 with a stepdown naming it, for both servers alike); running the
phases of :mod:`bench.loadgen` (sync publish, pipelined publish, sync and pipelined Direct Get)
and of :mod:`bench.batch_bench` (atomic batches of 1000 messages) over one connection to node 1;
and printing a table of the clusters with jetraft's ratio to each nats-server and the R3 floors
of :mod:`bench.floors`.

Durations: each phase first runs a short warm-up of a fixed size, whose rate sets the phase's
operation count so that it lasts about ``--seconds``; the counts (not the clock) then bound the
measured run, and every reply is checked by the reused generators.

Run it with ``python -m bench.cluster_bench`` from the project root (``--quick`` for a short run,
``--nats-sync-always`` to add a nats-server cluster that fsyncs every write, ``--append-results``
to append the markdown section to ``bench/results.md``, ``--profile DIR`` to py-spy the jetraft
stream leader during pipelined publish). Each process's CPU use (from /proc) is reported per
phase, because the three nodes and the client share the machine's cores, and the three nodes'
CPU per operation next to each rate.

Must never: leave a node running (every process it starts is stopped by pid in a ``finally``,
py-spy included), run both clusters at once, touch a store directory it did not create, or report
a number from a phase whose replies failed their checks.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from bench import floors
from bench.batch_bench import BATCH_PHASE, BatchClient, BatchLoad
from bench.batch_bench import PHASE_BATCH_SIZE as BATCH_SIZE
from bench.batch_bench import STREAM as BATCH_STREAM
from bench.batch_bench import SUBJECT_PREFIX as BATCH_SUBJECT_PREFIX
from bench.cpu import pids_meter, process_cpu_s
from bench.loadgen import (
    DEFAULT_PAYLOAD_BYTES,
    DEFAULT_SEED,
    DEFAULT_STREAM,
    DEFAULT_WINDOW,
    PIPELINED_DIRECT_GET,
    PIPELINED_PUBLISH,
    SUBJECT_PREFIX,
    SYNC_DIRECT_GET,
    SYNC_PUBLISH,
    InboxRouter,
    LoadConfig,
    LoadGenerator,
    PhaseResult,
    run_event_loop,
)
from bench.report import (
    JETRAFT,
    NATS,
    NATS_SYNC,
    ServerRun,
    markdown_table,
    plans_in_order,
    table,
    text_table,
)
from bench.runner import floor_table, machine, nats_sync_always_args
from cluster.ops.probes import http_get_json
from cluster.ops.process import HOST, NATS_SERVER_BIN, distinct_free_ports
from cluster.ops.servers import ServerProc

RESULTS_PATH = Path(__file__).resolve().parent / "results.md"

NODES = 3
REPLICAS = 3
CLUSTER_NAME = "c"
PORTS_PER_NODE = 3  # client, monitor, cluster

DEFAULT_SECONDS = 5.0
QUICK_SECONDS = 1.5
SECONDS_MIN = 0.1
PHASES = (SYNC_PUBLISH, PIPELINED_PUBLISH, SYNC_DIRECT_GET, PIPELINED_DIRECT_GET, BATCH_PHASE)

# warm-ups: fixed sizes, large enough to fill the pipeline and warm the caches
WARMUP_SYNC_OPS = 200
WARMUP_PIPELINE_WINDOWS = 2
WARMUP_BATCHES = 2
OPS_MIN = 100
OPS_MAX = 2_000_000
BATCHES_MIN = 2
BATCHES_MAX = 2_000

NODE_READY_TIMEOUT_S = 30.0  # each node answers PING
CLUSTER_READY_TIMEOUT_S = 90.0  # healthz, $JS.API.INFO and a created stream
READY_POLL_INTERVAL_S = 0.25
READY_API_TIMEOUT_S = 2.0
STEPDOWN_SETTLE_S = 5.0  # a stream leader election, both servers: well under a second here
CONNECT_TIMEOUT_S = 10.0
API_TIMEOUT_S = 10.0
HTTP_OK = 200

PY_SPY_CANDIDATES = (Path("/tmp/tools/bin/py-spy"),)
PY_SPY_RATE_HZ = 100
PY_SPY_EXIT_TIMEOUT_S = 30.0
PROFILE_TOP_FRAMES = 15


class ClusterBenchError(RuntimeError):
    """The cluster did not come up, or an API call failed: the run's numbers are void."""


# ------------------------------------------------------------------------------- processes


@dataclass
class ClusterProcs:
    """Three not-yet-started nodes of one cluster; ``nodes[0]`` is node 1 (the clients' node)."""

    server: str
    nodes: list[ServerProc]

    def by_name(self, name: str) -> ServerProc | None:
        return next((node for node in self.nodes if node.name == name), None)

    def start(self) -> None:
        # every node listens for clients before the routes meet, so they can start one by one
        for node in self.nodes:
            node.start(NODE_READY_TIMEOUT_S)

    def stop(self) -> None:
        problems = []
        for node in reversed(self.nodes):
            try:
                node.stop()
            except Exception as err:  # one stuck node must not leave the others running
                problems.append(f"{node.name}: {err!r}")
        if problems:
            raise ClusterBenchError("could not stop " + "; ".join(problems))

    def log_tails(self) -> str:
        return "\n".join(f"--- {node.name} log tail ---\n{node.log_tail()}" for node in self.nodes)


def cluster_procs(
    server: str, command: Sequence[str], tmp: Path, prefix: str, extra_args: Sequence[str] = ()
) -> ClusterProcs:
    """``command`` with nats-server's cluster flags, once per node, all routes to all nodes."""
    ports = distinct_free_ports(NODES * PORTS_PER_NODE)
    planned = [ports[i * PORTS_PER_NODE : (i + 1) * PORTS_PER_NODE] for i in range(NODES)]
    routes = ",".join(f"nats://{HOST}:{cluster_port}" for _, _, cluster_port in planned)
    nodes = []
    for index, (port, http_port, cluster_port) in enumerate(planned, start=1):
        name = f"{prefix}{index}"
        store_dir = tmp / f"{name}-store"
        argv = [
            *command,
            "-a",
            HOST,
            "-p",
            str(port),
            "-m",
            str(http_port),
            "-sd",
            str(store_dir),
            "-n",
            name,
            "--cluster_name",
            CLUSTER_NAME,
            "--cluster",
            f"nats://{HOST}:{cluster_port}",
            "--routes",
            routes,
            *extra_args,
        ]
        nodes.append(
            ServerProc(
                argv,
                name=name,
                port=port,
                http_port=http_port,
                store_dir=store_dir,
                log_path=tmp / f"{name}.log",
            )
        )
    return ClusterProcs(server, nodes)


def nats_cluster(tmp: Path, sync_always: bool) -> ClusterProcs:
    """nats-server as deployed by default (fsync every 2 min), or fsyncing every write."""
    extra = nats_sync_always_args(tmp) if sync_always else ()
    server = NATS_SYNC if sync_always else NATS
    return cluster_procs(server, [str(NATS_SERVER_BIN), "-js"], tmp, "n", extra)


def jetraft_cluster(tmp: Path) -> ClusterProcs:
    return cluster_procs(JETRAFT, [sys.executable, "-m", "cluster.cli", "server", "-js"], tmp, "j")


ClusterPlan = tuple[str, Callable[[Path], ClusterProcs]]


def cluster_plans(
    *, nats: bool = True, sync_always: bool = False, jetraft: bool = True
) -> list[ClusterPlan]:
    """The clusters to run, in order: nats-server, nats-server sync always, jetraft."""
    return plans_in_order(
        lambda tmp, always: nats_cluster(tmp, sync_always=always),
        jetraft_cluster,
        nats=nats,
        sync_always=sync_always,
        jetraft=jetraft,
    )


def wait_healthz(procs: ClusterProcs, deadline: float) -> None:
    """Poll ``/healthz`` of every node until all say 200 (jetraft: a meta leader is known)."""
    waiting = list(procs.nodes)
    while waiting:
        waiting = [
            node
            for node in waiting
            if http_get_json(f"http://{HOST}:{node.http_port}/healthz")[0] != HTTP_OK
        ]
        for node in procs.nodes:
            if not node.running:
                raise ClusterBenchError(f"{node.name} exited while the cluster formed")
        if waiting and time.monotonic() > deadline:
            names = ", ".join(node.name for node in waiting)
            raise ClusterBenchError(f"/healthz not 200 on {names} before the deadline")
        if waiting:
            time.sleep(READY_POLL_INTERVAL_S)


def meta_leader(procs: ClusterProcs) -> str | None:
    """The JetStream meta leader from node 1's ``/jsz`` (``meta_cluster.leader`` on
    nats-server and jetraft alike)."""
    _, body = http_get_json(f"http://{HOST}:{procs.nodes[0].http_port}/jsz")
    block = body.get("meta_cluster") if isinstance(body, dict) else None
    if isinstance(block, dict) and block.get("leader"):
        return str(block["leader"])
    return None


CpuSnapshot = tuple[float, dict[str, float]]  # (monotonic time, CPU seconds by process)
CLIENT = "client"


def cpu_snapshot(procs: ClusterProcs) -> CpuSnapshot:
    used = {CLIENT: time.process_time()}
    for node in procs.nodes:
        cpu = process_cpu_s(node.pid) if node.running else None
        if cpu is not None:
            used[node.name] = cpu
    return time.monotonic(), used


def cpu_percent(before: CpuSnapshot, after: CpuSnapshot) -> dict[str, float]:
    """Each process's CPU use between two snapshots, in percent of one core."""
    elapsed = after[0] - before[0]
    if elapsed <= 0:
        return {}
    return {
        name: 100 * (used - before[1][name]) / elapsed
        for name, used in after[1].items()
        if name in before[1]
    }


# ------------------------------------------------------------------------------- profiling


@dataclass
class Profiler:
    """``py-spy record`` of one pid into collapsed stacks; always stopped by pid."""

    py_spy: Path
    out_path: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self, pid: int, duration_s: float) -> None:
        self.popen = subprocess.Popen(
            [
                str(self.py_spy),
                "record",
                "--pid",
                str(pid),
                "--duration",
                str(max(1, math.ceil(duration_s))),
                "--rate",
                str(PY_SPY_RATE_HZ),
                "--format",
                "raw",
                "--threads",
                "--nonblocking",
                "--output",
                str(self.out_path),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def stop(self) -> str:
        """SIGINT (py-spy then writes what it sampled) and wait; the error text, if any."""
        popen = self.popen
        if popen is None:
            return ""
        self.popen = None
        if popen.poll() is None:
            os.kill(popen.pid, signal.SIGINT)
        try:
            _, err = popen.communicate(timeout=PY_SPY_EXIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.kill(popen.pid, signal.SIGKILL)
            _, err = popen.communicate()
        return "" if popen.returncode == 0 else err.decode(errors="replace").strip()


def top_frames(
    collapsed: str, top: int
) -> tuple[int, list[tuple[str, int]], list[tuple[str, int]]]:
    """(samples, the frames most often on top of the stack, the frames most often anywhere in it)
    from py-spy's collapsed format: ``frame;frame;... count`` per line."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        total += count
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    return total, own.most_common(top), inclusive.most_common(top)


def format_profile(collapsed: str, top: int = PROFILE_TOP_FRAMES) -> str:
    total, own, inclusive = top_frames(collapsed, top)
    if total == 0:
        return "no samples"
    lines = [f"{total} samples; self (top of stack):"]
    lines += [f"  {100 * n / total:5.1f}%  {frame}" for frame, n in own]
    lines.append("inclusive (anywhere in the stack):")
    lines += [f"  {100 * n / total:5.1f}%  {frame}" for frame, n in inclusive]
    return "\n".join(lines)


# ------------------------------------------------------------------------------- the load


@dataclass
class ClusterRun(ServerRun):
    """One cluster's outcome: results by phase, who led what, or the error that stopped it."""

    leaders: dict[str, str] = field(default_factory=dict)
    meta_leader: str | None = None
    cpu: dict[str, dict[str, float]] = field(default_factory=dict)  # phase -> process -> %
    profile: str | None = None


@dataclass(frozen=True)
class BenchConfig:
    seconds: float = DEFAULT_SECONDS
    window: int = DEFAULT_WINDOW
    payload_bytes: int = DEFAULT_PAYLOAD_BYTES
    seed: int = DEFAULT_SEED
    py_spy: Path | None = None
    profile_dir: Path | None = None


def ops_for(rate_per_s: float, seconds: float, low: int, high: int) -> int:
    """How many operations last about ``seconds`` at ``rate_per_s``, within [low, high]."""
    return max(low, min(high, math.ceil(rate_per_s * seconds)))


async def _api(
    router: InboxRouter, subject: str, body: dict[str, Any] | None, timeout_s: float
) -> dict[str, Any]:
    """One JetStream API request; a status reply (503 no responders) raises ClusterBenchError."""
    payload = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
    hdr, data = await router.request(subject.encode(), payload, timeout_s)
    if hdr is not None and not data:
        status = hdr.split(b"\r\n", 1)[0].decode(errors="replace")
        raise ClusterBenchError(f"{subject}: status reply {status}")
    answer: dict[str, Any] = json.loads(data)
    return answer


def stream_config(name: str, subjects: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "subjects": subjects,
        "storage": "file",
        "num_replicas": REPLICAS,
        "allow_direct": True,
        "allow_atomic": True,
    }


async def create_stream(router: InboxRouter, config: dict[str, Any], deadline: float) -> None:
    """Retry ``$JS.API.INFO`` then ``STREAM.CREATE`` until they succeed (a meta leader exists and
    has placed the R3 stream) or the deadline passes. A create that timed out may have been
    applied; repeating it with the same config is answered with success by both servers."""
    last = "nothing tried"
    name = config["name"]
    steps = (("$JS.API.INFO", None), (f"$JS.API.STREAM.CREATE.{name}", config))
    for subject, body in steps:
        while True:
            try:
                answer = await _api(router, subject, body, READY_API_TIMEOUT_S)
                if "error" not in answer:
                    break
                last = f"{subject}: {answer['error']}"
            except (TimeoutError, ClusterBenchError) as err:
                last = f"{subject}: {type(err).__name__} {err}"
            if time.monotonic() > deadline:
                raise ClusterBenchError(f"the cluster could not host a stream: {last}")
            await asyncio.sleep(READY_POLL_INTERVAL_S)


async def lead_from(router: InboxRouter, name: str, server: str, deadline: float) -> dict[str, Any]:
    """Move ``name``'s leader to ``server`` (the client's node) with a stream leader stepdown
    naming it as ``placement.preferred``, and poll stream info until it leads there; that
    stream info is the answer.

    Both servers forward a client's publish to wherever the stream leader is: nats-server places
    it at random, jetraft on the first of the least loaded peers. Measured with the leader on
    another node, a server pays one more hop per message than with it on the client's node, and
    the R3 ratios moved by up to 0.2 with that placement alone; so both lead from node 1."""
    last = "nothing tried"
    settle_until = 0.0  # after a stepdown: give the election time before asking again
    while True:
        try:
            info = await stream_info(router, name)
            leader = info.get("cluster", {}).get("leader")
            if leader == server:
                return info
            if time.monotonic() >= settle_until:
                body = {"placement": {"preferred": server}}
                subject = f"$JS.API.STREAM.LEADER.STEPDOWN.{name}"
                answer = await _api(router, subject, body, READY_API_TIMEOUT_S)
                last = f"leader {leader}, stepdown answered {answer.get('error') or 'success'}"
                settle_until = time.monotonic() + STEPDOWN_SETTLE_S
        except (TimeoutError, ClusterBenchError) as err:
            last = f"{type(err).__name__} {err}"
        if time.monotonic() > deadline:
            raise ClusterBenchError(f"stream {name} could not be led from {server}: {last}")
        await asyncio.sleep(READY_POLL_INTERVAL_S)


async def stream_info(router: InboxRouter, name: str) -> dict[str, Any]:
    answer = await _api(router, f"$JS.API.STREAM.INFO.{name}", None, API_TIMEOUT_S)
    if "error" in answer:
        raise ClusterBenchError(f"stream info {name}: {answer['error']}")
    return answer


def leader_note(info: dict[str, Any]) -> str:
    cluster = info.get("cluster")
    if not isinstance(cluster, dict):
        return "no cluster info"
    replicas = cluster.get("replicas")
    names = [r.get("name", "?") for r in replicas] if isinstance(replicas, list) else []
    lagging = [
        f"{r.get('name')} lag {r.get('lag')}"
        for r in (replicas if isinstance(replicas, list) else [])
        if not r.get("current", False)
    ]
    note = f"leader {cluster.get('leader', 'none')}, replicas {', '.join(names) or 'none'}"
    return note + (f" (not current: {'; '.join(lagging)})" if lagging else "")


class ClusterLoad:
    """The phases, in order, over one connection to node 1, with the reused generators."""

    def __init__(
        self, client: BatchClient, config: BenchConfig, procs: ClusterProcs, run: ClusterRun
    ) -> None:
        self.client = client
        self.config = config
        self.procs = procs
        self.run = run
        self.router = InboxRouter(client)
        # every phase's server CPU is the three nodes' together
        meter = pids_meter([node.pid for node in procs.nodes])
        self.batches = BatchLoad(client, 1, meter)
        load_config = LoadConfig(
            msgs=0,
            payload_bytes=config.payload_bytes,
            window=config.window,
            seed=config.seed,
            stream=DEFAULT_STREAM,
        )
        self.gen = LoadGenerator(self.router, load_config, meter)
        self.acked = 0

    async def measure(
        self,
        phase: str,
        main: Callable[[int], Awaitable[PhaseResult]],
        warmup_count: int,
        low: int,
        high: int,
        ops_per_count: int = 1,
        profile: bool = False,
    ) -> None:
        """Warm up with a fixed count, then run (and record) the count that lasts about
        ``--seconds``; ``ops_per_count`` is how many operations one unit of count is."""
        warm = await main(warmup_count)
        count = ops_for(warm.rate_per_s / ops_per_count, self.config.seconds, low, high)
        profiler = self._start_profiler(self.config.seconds) if profile else None
        before = cpu_snapshot(self.procs)
        try:
            self.run.results[phase] = await main(count)
            self.run.cpu[phase] = cpu_percent(before, cpu_snapshot(self.procs))
        finally:
            if profiler is not None:
                self._finish_profile(profiler)

    async def publish_phases(self) -> None:
        gen = self.gen
        window = self.config.window

        async def sync(count: int) -> PhaseResult:
            self.acked += count
            return await gen.sync_phase(SYNC_PUBLISH, count, gen.send_publish, gen.check_ack)

        async def pipelined(count: int) -> PhaseResult:
            self.acked += count
            return await gen.pipelined_phase(
                PIPELINED_PUBLISH, count, gen.send_publish, gen.check_ack
            )

        await self.measure(SYNC_PUBLISH, sync, WARMUP_SYNC_OPS, OPS_MIN, OPS_MAX)
        await self.measure(
            PIPELINED_PUBLISH,
            pipelined,
            WARMUP_PIPELINE_WINDOWS * window,
            window,
            OPS_MAX,
            profile=True,
        )

    async def direct_get_phase(self) -> None:
        gen = self.gen
        state = (await stream_info(self.router, DEFAULT_STREAM))["state"]
        if state["messages"] != self.acked:
            raise ClusterBenchError(
                f"stream {DEFAULT_STREAM} holds {state['messages']} messages, {self.acked} acked"
            )
        first_seq, last_seq = int(state["first_seq"]), int(state["last_seq"])

        async def sync(count: int) -> PhaseResult:
            seqs = gen.random_seqs(count, first_seq, last_seq)
            return await gen.sync_phase(
                SYNC_DIRECT_GET, count, gen.direct_sender(seqs), gen.direct_check(seqs)
            )

        async def direct(count: int) -> PhaseResult:
            seqs = gen.random_seqs(count, first_seq, last_seq)
            return await gen.pipelined_phase(
                PIPELINED_DIRECT_GET, count, gen.direct_sender(seqs), gen.direct_check(seqs)
            )

        window = self.config.window
        await self.measure(SYNC_DIRECT_GET, sync, WARMUP_SYNC_OPS, OPS_MIN, OPS_MAX)
        await self.measure(
            PIPELINED_DIRECT_GET, direct, WARMUP_PIPELINE_WINDOWS * window, window, OPS_MAX
        )

    async def batch_phase(self) -> None:
        payload = self.gen.payload
        batches = self.batches
        runs = 0

        async def run_batches(count: int) -> PhaseResult:
            nonlocal runs
            runs += 1  # batch ids must differ from one run to the next
            result = await batches.run(BATCH_SIZE, count, payload, f"r{runs}")
            return result.as_phase()

        await self.measure(
            BATCH_PHASE, run_batches, WARMUP_BATCHES, BATCHES_MIN, BATCHES_MAX, BATCH_SIZE
        )

    def _start_profiler(self, seconds: float) -> Profiler | None:
        config = self.config
        if config.py_spy is None or config.profile_dir is None or self.procs.server != JETRAFT:
            return None
        leader = self.run.leaders.get(DEFAULT_STREAM, "")
        node = self.procs.by_name(leader)
        if node is None:
            self.run.profile = f"no profile: stream leader {leader!r} is not a node of ours"
            return None
        profiler = Profiler(config.py_spy, config.profile_dir / f"{self.procs.server}-{leader}.txt")
        profiler.start(node.pid, seconds)
        return profiler

    def _finish_profile(self, profiler: Profiler) -> None:
        problem = profiler.stop()
        try:
            collapsed = profiler.out_path.read_text()
        except OSError as err:
            self.run.profile = f"no profile: {problem or err}"
            return
        self.run.profile = f"py-spy of the stream leader ({profiler.out_path}):\n" + format_profile(
            collapsed
        )

    async def run_all(self) -> None:
        deadline = time.monotonic() + CLUSTER_READY_TIMEOUT_S
        await create_stream(
            self.router, stream_config(DEFAULT_STREAM, [f"{SUBJECT_PREFIX}.*"]), deadline
        )
        client_node = self.procs.nodes[0].name
        info = await lead_from(self.router, DEFAULT_STREAM, client_node, deadline)
        self.run.leaders[DEFAULT_STREAM] = str(info.get("cluster", {}).get("leader", ""))
        self.run.meta_leader = meta_leader(self.procs)
        await self.publish_phases()
        await self.direct_get_phase()
        self.run.leaders[DEFAULT_STREAM] = leader_note(
            await stream_info(self.router, DEFAULT_STREAM)
        )
        await _api(self.router, f"$JS.API.STREAM.DELETE.{DEFAULT_STREAM}", None, API_TIMEOUT_S)
        # bench.batch.> does not overlap bench.*, so the delete above is not needed for the create
        deadline = time.monotonic() + CLUSTER_READY_TIMEOUT_S
        await create_stream(
            self.router, stream_config(BATCH_STREAM, [f"{BATCH_SUBJECT_PREFIX}.>"]), deadline
        )
        await lead_from(self.router, BATCH_STREAM, client_node, deadline)
        await self.batch_phase()
        self.run.leaders[BATCH_STREAM] = leader_note(await stream_info(self.router, BATCH_STREAM))


async def run_load(procs: ClusterProcs, config: BenchConfig, run: ClusterRun) -> None:
    client = cast(
        BatchClient, await BatchClient.connect(HOST, procs.nodes[0].port, CONNECT_TIMEOUT_S)
    )
    try:
        load = ClusterLoad(client, config, procs, run)
        await client.flush(CONNECT_TIMEOUT_S)
        await load.run_all()
    finally:
        client.close()


def run_against(
    server: str,
    make_procs: Callable[[Path], ClusterProcs],
    config: BenchConfig,
    log_dir: Path | None,
) -> ClusterRun:
    """Start one cluster in a fresh temp dir, run the load, and always stop every node."""
    run = ClusterRun(server)
    with tempfile.TemporaryDirectory(prefix=f"clusterbench-{server.replace(' ', '-')}-") as tmp:
        procs = make_procs(Path(tmp))
        try:
            procs.start()
            pids = ", ".join(f"{node.name} pid {node.pid} port {node.port}" for node in procs.nodes)
            print(f"{server}: {pids}", flush=True)
            if server == JETRAFT:
                wait_healthz(procs, time.monotonic() + CLUSTER_READY_TIMEOUT_S)
            run_event_loop(run_load(procs, config, run))
        except Exception as err:
            run.error = f"{type(err).__name__}: {err}\n{procs.log_tails()}"
        finally:
            try:
                procs.stop()
            except ClusterBenchError as err:
                run.error = (run.error or "") + f"\n{err}"
            if log_dir is not None:
                log_dir.mkdir(parents=True, exist_ok=True)
                for node in procs.nodes:
                    if node.log_path.exists():
                        slug = server.replace(" ", "-")
                        shutil.copy(node.log_path, log_dir / f"{slug}-{node.log_path.name}")
    return run


# ------------------------------------------------------------------------------- reporting


def run_notes(runs: Sequence[ClusterRun]) -> list[str]:
    notes = []
    for run in runs:
        leaders = "; ".join(f"{stream}: {note}" for stream, note in run.leaders.items())
        notes.append(f"{run.server}: meta leader {run.meta_leader or 'unknown'}; {leaders}")
    return notes


def cpu_notes(runs: Sequence[ClusterRun]) -> list[str]:
    """Per phase, each process's CPU in % of one core (the machine's cores are shared by all)."""
    notes = []
    for run in runs:
        for phase, used in run.cpu.items():
            shown = ", ".join(f"{name} {percent:.0f}%" for name, percent in used.items())
            notes.append(f"{run.server}, {phase}: {shown}")
    return notes


DURABILITY_NOTE = (
    "Durability differs: nats-server by default acks once a majority has the message in its "
    "OS page cache and fsyncs lazily (`sync_interval` 2 min); jetraft acks once a majority has "
    "fsynced the Raft entry. `--nats-sync-always` adds a nats-server cluster with "
    "`jetstream { sync_interval: always }`."
)


def describe(config: BenchConfig) -> str:
    """How the R3 numbers were measured, for the markdown report."""
    return (
        f"about {config.seconds:g} s per phase after a warm-up, {config.payload_bytes}-byte "
        f"payloads, pipeline window {config.window}, batches of {BATCH_SIZE} one at a time; file "
        "storage, `num_replicas: 3`, allow_direct and allow_atomic on; one connection to node 1; "
        "one 3-process cluster at a time on 127.0.0.1"
    )


def notes_markdown(runs: Sequence[ClusterRun]) -> list[str]:
    """Leaders and per-process CPU, as markdown paragraphs and lists."""
    return [
        "Leaders (node 1 takes the client connection; it need not lead the stream):",
        "",
        *(f"* {line}" for line in run_notes(runs)),
        "",
        f"CPU per process during each measured phase, in % of one core ({os.cpu_count()} cores "
        "shared by the three nodes and the client):",
        "",
        *(f"* {line}" for line in cpu_notes(runs)),
    ]


def report(
    config: BenchConfig, argv: Sequence[str], runs: Sequence[ClusterRun], errors: list[str]
) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    header, rows = table(runs, PHASES)
    command = " ".join(["python -m bench.cluster_bench", *argv])
    lines = [
        "## 3-node clusters, R3 stream",
        "",
        f"Run {now} with `{command}`: {describe(config)}. {machine()}",
        "",
        markdown_table(header, rows),
        "",
        markdown_table(*floor_table(floors.R3, runs)),
        "",
        *notes_markdown(runs),
        "",
        DURABILITY_NOTE,
    ]
    if errors:
        lines += ["", "Errors:", ""] + [f"* {error.splitlines()[0]}" for error in errors]
    return "\n".join(lines) + "\n"


def find_py_spy() -> Path | None:
    found = shutil.which("py-spy")
    if found:
        return Path(found)
    return next((path for path in PY_SPY_CANDIDATES if path.exists()), None)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=None, help="about this long per phase")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_SECONDS:g} s per phase")
    parser.add_argument("--window", type=int, default=DEFAULT_WINDOW, help="publishes in flight")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--jetraft-only", action="store_true")
    only.add_argument("--nats-only", action="store_true")
    parser.add_argument(
        "--nats-sync-always",
        action="store_true",
        help="also run nats-server with jetstream.sync_interval=always (fsync every write)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="py-spy the jetraft stream leader during pipelined publish (perturbs that number)",
    )
    parser.add_argument("--log-dir", type=Path, help="copy every node's log here")
    parser.add_argument(
        "--append-results",
        type=Path,
        nargs="?",
        const=RESULTS_PATH,
        metavar="FILE",
        help=f"append the markdown section to FILE (default {RESULTS_PATH})",
    )
    args = parser.parse_args(argv)
    seconds = (
        args.seconds
        if args.seconds is not None
        else (QUICK_SECONDS if args.quick else DEFAULT_SECONDS)
    )
    if seconds < SECONDS_MIN:
        parser.error(f"--seconds must be at least {SECONDS_MIN}")
    if not NATS_SERVER_BIN.exists() and not args.jetraft_only:
        print(f"no nats-server at {NATS_SERVER_BIN}", file=sys.stderr)
        return 2
    py_spy = None
    if args.profile is not None:
        py_spy = find_py_spy()
        if py_spy is None:
            print("no py-spy found: running without a profile", file=sys.stderr)
        args.profile.mkdir(parents=True, exist_ok=True)
    config = BenchConfig(
        seconds=seconds,
        window=args.window,
        seed=args.seed,
        py_spy=py_spy,
        profile_dir=args.profile,
    )

    plans = cluster_plans(
        nats=not args.jetraft_only, sync_always=args.nats_sync_always, jetraft=not args.nats_only
    )
    runs = [run_against(server, make, config, args.log_dir) for server, make in plans]
    errors = [f"{run.server}: {run.error}" for run in runs if run.error is not None]

    header, rows = table(runs, PHASES)
    print()
    print(text_table(header, rows))
    print()
    print(text_table(*floor_table(floors.R3, runs)))
    print()
    for line in [*run_notes(runs), *cpu_notes(runs)]:
        print(line)
    for run in runs:
        if run.profile:
            print(f"\n{run.server} {run.profile}")
    for error in errors:
        print(f"\nERROR {error}", file=sys.stderr)
    markdown = report(config, argv, runs, errors)
    if args.append_results is not None:
        with args.append_results.open("a") as out:
            out.write("\n" + markdown)
        print(f"\nappended to {args.append_results}")
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
