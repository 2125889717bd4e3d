"""The side-by-side benchmark: the same load generator against nats-server, then jetraft.

Owns: starting each server on free 127.0.0.1 ports with its own temporary store directory (one
server at a time, the other stopped), running :mod:`bench.loadgen` against it, and printing one
table of both servers' numbers with the ratio jetraft/nats-server, also written as markdown to
``bench/results.md``. Run it with ``python -m bench.runner`` from the project root.

Must never: leave a server process running (every one is stopped by pid, even on error or
Ctrl-C), touch a store directory it did not create, or report a number from a phase whose
replies failed their checks.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

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
from cluster.ops.process import HOST, NATS_SERVER_BIN
from cluster.ops.servers import ServerProc, ServerStartError, jetraft_proc, nats_server_proc

RESULTS_PATH = Path(__file__).resolve().parent / "results.md"
NATS = "nats-server"
JETRAFT = "jetraft"
SERVER_READY_TIMEOUT_S = 30.0
MISSING = "-"


@dataclass
class ServerRun:
    """One server's outcome: results by phase name, or the error that stopped the run."""

    server: str
    results: dict[str, PhaseResult] = field(default_factory=dict)
    error: str | None = None


def run_against(
    server: str, make_proc: Callable[[Path], ServerProc], config: LoadConfig
) -> ServerRun:
    """Start one server in a fresh temp dir, run the load, and always stop the server."""
    run = ServerRun(server)
    with tempfile.TemporaryDirectory(prefix=f"bench-{server}-") as tmp:
        proc = make_proc(Path(tmp))
        try:
            proc.start(SERVER_READY_TIMEOUT_S)
            print(f"{server}: pid {proc.pid} on {proc.url}", flush=True)
            results = run_event_loop(run_load(HOST, proc.port, config))
            run.results = {result.name: result for result in results}
        except Exception as err:
            run.error = f"{type(err).__name__}: {err}"
            if not isinstance(err, ServerStartError):
                run.error += f"\n--- {server} log tail ---\n{proc.log_tail()}"
        finally:
            proc.stop()
    return run


def format_ratio(jetraft: float | None, nats: float | None) -> str:
    if jetraft is None or nats is None or nats == 0:
        return MISSING
    return f"{jetraft / nats:.2f}"


def format_rate(result: PhaseResult | None) -> str:
    return MISSING if result is None else f"{result.rate_per_s:,.0f}"


def format_latency(result: PhaseResult | None) -> str:
    if result is None or result.p50_us is None or result.p99_us is None:
        return MISSING
    return f"{result.p50_us:,.0f} / {result.p99_us:,.0f}"


def table_rows(nats: ServerRun | None, jetraft: ServerRun | None) -> list[list[str]]:
    """Rows of (phase, metric, nats-server, jetraft, jetraft/nats-server)."""
    rows = []
    for phase in PHASES:
        n = nats.results.get(phase) if nats else None
        j = jetraft.results.get(phase) if jetraft else None
        unit = "msgs/s" if "publish" in phase else "req/s"
        rows.append(
            [
                phase,
                unit,
                format_rate(n),
                format_rate(j),
                format_ratio(j.rate_per_s if j else None, n.rate_per_s if n else None),
            ]
        )
        if (n and n.p50_us is not None) or (j and j.p50_us is not None):
            rows.append(
                [
                    phase,
                    "latency p50 / p99 (µs)",
                    format_latency(n),
                    format_latency(j),
                    format_ratio(j.p50_us if j else None, n.p50_us if n else None),
                ]
            )
    return rows


HEADER = ["phase", "metric", NATS, JETRAFT, "jetraft/nats-server"]


def markdown_table(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * 2 + "---:|" * 3]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def text_table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [HEADER, *rows]) for i in range(len(HEADER))]
    out = []
    for row in [HEADER, *rows]:
        cells = [row[0].ljust(widths[0]), row[1].ljust(widths[1])]
        cells += [row[i].rjust(widths[i]) for i in range(2, len(HEADER))]
        out.append("  ".join(cells))
    return "\n".join(out)


def nats_version() -> str:
    try:
        done = subprocess.run(
            [str(NATS_SERVER_BIN), "--version"], capture_output=True, text=True, timeout=10
        )
    except OSError:
        return "unknown"
    return done.stdout.strip() or "unknown"


def report(config: LoadConfig, rows: list[list[str]], errors: list[str]) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# jetraft vs nats-server — benchmark results",
        "",
        f"Run {now} with `python -m bench.runner`: {config.msgs} operations per phase, "
        f"{config.payload_bytes}-byte payloads, pipeline window {config.window}, "
        f"seed {config.seed}; file storage, allow_direct on, one connection, one server at a "
        f"time on 127.0.0.1. Machine: {os.cpu_count()} CPUs, {platform.machine()}, "
        f"Python {platform.python_version()}; {nats_version()}.",
        "",
        markdown_table(rows),
        "",
        "Rates are operations per second; latencies are the round trip seen by the load "
        "generator, in microseconds. The ratio for a latency row is the ratio of p50 "
        "(above 1 means jetraft is slower); for a rate row, above 1 means jetraft is faster.",
    ]
    if errors:
        lines += ["", "Errors:", ""] + [f"* {error.splitlines()[0]}" for error in errors]
    return "\n".join(lines) + "\n"


def _nats_proc(tmp: Path, sync_always: bool) -> ServerProc:
    """nats-server as deployed by default (fsync every 2 min), or fsyncing every write."""
    if not sync_always:
        return nats_server_proc(tmp, name="bench-nats")
    conf = tmp / "sync-always.conf"
    conf.write_text("jetstream { sync_interval: always }\n")
    return nats_server_proc(tmp, name="bench-nats", extra_args=("-c", str(conf)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="jetraft vs nats-server, same load generator")
    parser.add_argument("--msgs", type=int, default=None, help="operations per phase")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_MSGS} per phase")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--window", type=int, default=DEFAULT_WINDOW)
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--jetraft-only", action="store_true")
    only.add_argument("--nats-only", action="store_true")
    parser.add_argument("--output", type=Path, default=RESULTS_PATH, help="markdown file")
    parser.add_argument(
        "--nats-sync-always",
        action="store_true",
        help="run nats-server with jetstream.sync_interval=always, the durability jetraft gives",
    )
    args = parser.parse_args(argv)
    msgs = args.msgs if args.msgs is not None else (QUICK_MSGS if args.quick else DEFAULT_MSGS)
    config = LoadConfig(msgs=msgs, seed=args.seed, window=args.window)

    nats = jetraft = None
    if not args.jetraft_only:
        nats = run_against(NATS, lambda tmp: _nats_proc(tmp, args.nats_sync_always), config)
    if not args.nats_only:
        jetraft = run_against(JETRAFT, lambda tmp: jetraft_proc(tmp, name="bench-jr"), config)
    runs = [run for run in (nats, jetraft) if run is not None]
    errors = [f"{run.server}: {run.error}" for run in runs if run.error is not None]

    rows = table_rows(nats, jetraft)
    print()
    print(text_table(rows))
    for error in errors:
        print(f"\nERROR {error}", file=sys.stderr)
    args.output.write_text(report(config, rows, errors))
    print(f"\nwritten to {args.output}")
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
