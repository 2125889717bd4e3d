"""The side-by-side single-server (R1) benchmark: the same load generator against nats-server,
then jetraft.

Owns: starting each server on free 127.0.0.1 ports with its own temporary store directory (one
server at a time, the others stopped), running :mod:`bench.loadgen` (and, with
``--batch-msgs``, atomic batches of 1000 from :mod:`bench.batch_bench`) against it with its
CPU use read from /proc, and printing one table of every server's numbers with jetraft's ratio
to each nats-server and the R1 floors. ``--nats-sync-always`` adds a nats-server that fsyncs
every write; ``--output FILE`` writes the table as markdown (``make bench``, i.e.
:mod:`bench.suite`, writes the combined ``bench/results.md``). Run it with
``python -m bench.runner`` from the project root.

Must never: leave a server process running (every one is stopped by pid, even on error or
Ctrl-C), touch a store directory it did not create, or report a number from a phase whose
replies failed their checks.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import tempfile
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

from bench import floors
from bench.batch_bench import BATCH_PHASE, PHASE_BATCH_SIZE
from bench.batch_bench import run_load as run_batches
from bench.cpu import pids_meter
from bench.loadgen import (
    DEFAULT_MSGS,
    DEFAULT_SEED,
    DEFAULT_WINDOW,
    PHASES,
    QUICK_MSGS,
    LoadConfig,
    PhaseResult,
    run_event_loop,
    run_load,
)
from bench.report import (
    ServerRun,
    markdown_table,
    nats_version,
    plans_in_order,
    table,
    text_table,
)
from cluster.ops.process import HOST
from cluster.ops.servers import ServerProc, ServerStartError, jetraft_proc, nats_server_proc

SERVER_READY_TIMEOUT_S = 30.0
BATCH_WINDOW = 1  # one atomic batch in flight, as batch_bench by default
SYNC_ALWAYS_CONF = "jetstream { sync_interval: always }\n"

# what runs against one started server: its results by phase
Load = Callable[[ServerProc], Coroutine[Any, Any, list[PhaseResult]]]
Plan = tuple[str, Callable[[Path], ServerProc]]


def nats_sync_always_args(tmp: Path) -> tuple[str, ...]:
    """nats-server options for fsyncing every write before acknowledging (jetraft's
    durability); the config file is written into ``tmp``."""
    conf = tmp / "sync-always.conf"
    conf.write_text(SYNC_ALWAYS_CONF)
    return ("-c", str(conf))


def nats_proc(tmp: Path, sync_always: bool) -> ServerProc:
    """nats-server as deployed by default (fsync every 2 min), or fsyncing every write."""
    extra = nats_sync_always_args(tmp) if sync_always else ()
    return nats_server_proc(tmp, name="bench-nats", extra_args=extra)


def server_plans(
    *, nats: bool = True, sync_always: bool = False, jetraft: bool = True
) -> list[Plan]:
    """The servers to run, in order: nats-server, nats-server sync always, jetraft."""
    return plans_in_order(
        lambda tmp, always: nats_proc(tmp, sync_always=always),
        lambda tmp: jetraft_proc(tmp, name="bench-jr"),
        nats=nats,
        sync_always=sync_always,
        jetraft=jetraft,
    )


def r1_load(config: LoadConfig, batch_msgs: int = 0) -> Load:
    """The load generator's phases, then (``batch_msgs`` > 0) that many messages in atomic
    batches of 1000; the server's CPU is read from /proc over each phase."""

    async def load(proc: ServerProc) -> list[PhaseResult]:
        meter = pids_meter([proc.pid])
        results = await run_load(HOST, proc.port, config, meter)
        if batch_msgs > 0:
            # run_load deleted its stream, whose subjects would overlap the batch stream's
            sizes = await run_batches(
                proc.port,
                batch_msgs,
                config.payload_bytes,
                BATCH_WINDOW,
                (PHASE_BATCH_SIZE,),
                meter,
            )
            results.append(sizes[PHASE_BATCH_SIZE].as_phase())
        return results

    return load


def r1_phases(batch_msgs: int) -> list[str]:
    return [*PHASES, BATCH_PHASE] if batch_msgs > 0 else list(PHASES)


def run_against(server: str, make_proc: Callable[[Path], ServerProc], load: Load) -> ServerRun:
    """Start one server in a fresh temp dir, run the load, and always stop the server."""
    run = ServerRun(server)
    with tempfile.TemporaryDirectory(prefix=f"bench-{server.replace(' ', '-')}-") as tmp:
        proc = make_proc(Path(tmp))
        try:
            proc.start(SERVER_READY_TIMEOUT_S)
            print(f"{server}: pid {proc.pid} on {proc.url}", flush=True)
            results = run_event_loop(load(proc))
            run.results = {result.name: result for result in results}
        except Exception as err:
            run.error = f"{type(err).__name__}: {err}"
            if not isinstance(err, ServerStartError):
                run.error += f"\n--- {server} log tail ---\n{proc.log_tail()}"
        finally:
            proc.stop()
    return run


def run_all(plans: Sequence[Plan], load: Load) -> list[ServerRun]:
    """One server after the other, never two at once."""
    return [run_against(server, make_proc, load) for server, make_proc in plans]


def describe(config: LoadConfig, batch_msgs: int) -> str:
    """How the R1 numbers were measured, for the markdown report."""
    batches = (
        f" then {batch_msgs} messages in atomic batches of {PHASE_BATCH_SIZE}, one in flight"
        if batch_msgs > 0
        else ""
    )
    pipelined = config.msgs if config.pipelined_msgs is None else config.pipelined_msgs
    return (
        f"{config.msgs} operations per sync phase, {pipelined} per pipelined phase{batches}; "
        f"{config.payload_bytes}-byte payloads, "
        f"pipeline window {config.window}, seed {config.seed}; file storage, allow_direct on, "
        "one connection, one server at a time on 127.0.0.1"
    )


def machine() -> str:
    return (
        f"Machine: {os.cpu_count()} CPUs, {platform.machine()}, "
        f"Python {platform.python_version()}; {nats_version()}."
    )


TABLE_NOTE = (
    "Rates are operations per second; latencies are the round trip seen by the load "
    "generator, in microseconds; server CPU is user+system time of the server process(es) from "
    "/proc over the phase, per operation. The ratio for a latency or CPU row is jetraft's value "
    "over the other's (above 1 means jetraft is slower or costlier); for a rate row, above 1 "
    "means jetraft is faster."
)


def report(
    config: LoadConfig, batch_msgs: int, runs: Sequence[ServerRun], errors: list[str]
) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    header, rows = table(runs, r1_phases(batch_msgs))
    lines = [
        "# jetraft vs nats-server — single-server benchmark",
        "",
        f"Run {now} with `python -m bench.runner`: {describe(config, batch_msgs)}. {machine()}",
        "",
        markdown_table(header, rows),
        "",
        TABLE_NOTE,
    ]
    if errors:
        lines += ["", "Errors:", ""] + [f"* {error.splitlines()[0]}" for error in errors]
    return "\n".join(lines) + "\n"


def floor_table(topology: str, runs: Sequence[ServerRun]) -> tuple[list[str], list[list[str]]]:
    """The topology's floors, as far as these runs measured them: header and rows."""
    results = {run.server: run.results for run in runs}
    found = floors.verdicts(floors.for_topology(topology), {topology: results})
    return floors.SUMMARY_HEADER, floors.summary_rows(found)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="jetraft vs nats-server, same load generator")
    parser.add_argument("--msgs", type=int, default=None, help="operations per phase")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_MSGS} per phase")
    parser.add_argument(
        "--pipelined-msgs", type=int, default=None, help="operations per pipelined phase"
    )
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--window", type=int, default=DEFAULT_WINDOW)
    parser.add_argument(
        "--batch-msgs",
        type=int,
        default=0,
        help=f"also send this many messages in atomic batches of {PHASE_BATCH_SIZE}",
    )
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--jetraft-only", action="store_true")
    only.add_argument("--nats-only", action="store_true")
    parser.add_argument("--output", type=Path, default=None, help="write the markdown here")
    parser.add_argument(
        "--nats-sync-always",
        action="store_true",
        help="also run nats-server with jetstream.sync_interval=always (jetraft's durability)",
    )
    args = parser.parse_args(argv)
    msgs = args.msgs if args.msgs is not None else (QUICK_MSGS if args.quick else DEFAULT_MSGS)
    config = LoadConfig(
        msgs=msgs, pipelined_msgs=args.pipelined_msgs, seed=args.seed, window=args.window
    )

    plans = server_plans(
        nats=not args.jetraft_only, sync_always=args.nats_sync_always, jetraft=not args.nats_only
    )
    runs = run_all(plans, r1_load(config, args.batch_msgs))
    errors = [f"{run.server}: {run.error}" for run in runs if run.error is not None]

    header, rows = table(runs, r1_phases(args.batch_msgs))
    print()
    print(text_table(header, rows))
    print()
    print(text_table(*floor_table(floors.R1, runs)))
    for error in errors:
        print(f"\nERROR {error}", file=sys.stderr)
    if args.output is not None:
        args.output.write_text(report(config, args.batch_msgs, runs, errors))
        print(f"\nwritten to {args.output}")
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
