"""Many streams at once: pipelined publish spread over several R3 streams, nats-server beside
jetraft, 3-node clusters on 127.0.0.1.

The cluster benchmark drives one stream; a deployment has many, and each jetraft stream is its
own Raft group, with its own ticks, journal and fsyncs. This run creates ``--streams`` R3 file
streams through node 1 (their leaders spread over the nodes, so most publishes are forwarded
over the routes to their stream's leader), publishes round-robin over them with the load
generator's pipelined phase (window ``--window``), and reports each cluster's rate and the three
nodes' CPU per message, and jetraft's ratio to nats-server.

Run it with ``python -m bench.multi_stream`` from the project root (``--jetraft-only`` to skip
nats-server). About 40 s.

Must never: leave a node running (the clusters are those of :mod:`bench.cluster_bench`, stopped
by pid), or report a phase whose PubAcks failed their checks.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from bench.batch_bench import BatchClient
from bench.cluster_bench import (
    CLUSTER_READY_TIMEOUT_S,
    CONNECT_TIMEOUT_S,
    ClusterPlan,
    ClusterProcs,
    cluster_plans,
    create_stream,
    stream_config,
    wait_healthz,
)
from bench.cpu import pids_meter
from bench.loadgen import DEFAULT_WINDOW, InboxRouter, LoadConfig, LoadGenerator, PhaseResult
from bench.report import JETRAFT, format_ratio
from cluster.ops.process import HOST

DEFAULT_STREAMS = 8
DEFAULT_MSGS = 100_000
WARMUP_MSGS = 5_000
# the preferred leaders take over within seconds of creation: measure after that
SETTLE_S = 3.0


async def _publish_over_streams(
    procs: ClusterProcs, streams: int, msgs: int, window: int
) -> PhaseResult:
    client = await BatchClient.connect(HOST, procs.nodes[0].port, CONNECT_TIMEOUT_S)
    try:
        router = InboxRouter(client)
        deadline = time.monotonic() + CLUSTER_READY_TIMEOUT_S
        for number in range(streams):
            await create_stream(
                router, stream_config(f"MULTI{number}", [f"multi{number}.>"]), deadline
            )
        meter = pids_meter([node.pid for node in procs.nodes])
        gen = LoadGenerator(router, LoadConfig(msgs=0, window=window), meter)
        # the generator cycles over its subjects: spread them over the streams
        gen.subjects = [f"multi{i % streams}.m".encode() for i in range(len(gen.subjects))]
        await asyncio.sleep(SETTLE_S)
        warmup = min(WARMUP_MSGS, msgs)
        await gen.pipelined_phase("warm-up", warmup, gen.send_publish, gen.check_ack)
        return await gen.pipelined_phase("publish", msgs, gen.send_publish, gen.check_ack)
    finally:
        client.close()


def run_one(plan: ClusterPlan, streams: int, msgs: int, window: int) -> PhaseResult:
    server, make_procs = plan
    with tempfile.TemporaryDirectory(prefix="multistream-") as tmp:
        procs: ClusterProcs = make_procs(Path(tmp))
        procs.start()
        try:
            if server == JETRAFT:
                wait_healthz(procs, time.monotonic() + CLUSTER_READY_TIMEOUT_S)
            return asyncio.run(_publish_over_streams(procs, streams, msgs, window))
        finally:
            procs.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--streams", type=int, default=DEFAULT_STREAMS)
    parser.add_argument("--msgs", type=int, default=DEFAULT_MSGS)
    parser.add_argument("--window", type=int, default=DEFAULT_WINDOW)
    parser.add_argument("--jetraft-only", action="store_true")
    args = parser.parse_args(argv)
    results: dict[str, PhaseResult] = {}
    for plan in cluster_plans(nats=not args.jetraft_only):
        server = plan[0]
        result = results[server] = run_one(plan, args.streams, args.msgs, args.window)
        cpu = result.cpu_us_per_op
        print(
            f"{server}: {args.streams} R3 streams, {result.rate_per_s:,.0f} msgs/s, "
            f"server CPU {'-' if cpu is None else f'{cpu:.1f}'} µs/msg",
            flush=True,
        )
    nats = next((r for name, r in results.items() if name != JETRAFT), None)
    mine = results.get(JETRAFT)
    if nats is not None and mine is not None:
        print(f"jetraft / nats-server: {format_ratio(mine.rate_per_s, nats.rate_per_s)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
