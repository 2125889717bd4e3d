"""``jetraft chaos``: registered with the ``jetraft`` command through the ``jetraft.commands``
entry point (cluster/ never imports this package)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from jepsen_like.runner import EXIT_ERROR, ChaosOptions, run_chaos

MAX_PORT = 65535


def register(sub: Any) -> None:
    p = sub.add_parser(
        "chaos",
        help="Jepsen-style chaos run: a fresh cluster, clients, faults, checkers, a verdict",
    )
    p.add_argument("--nodes", type=int, default=3, choices=(3, 5))
    p.add_argument("--time", type=float, default=60.0, help="seconds of client load and faults")
    p.add_argument(
        "--workload", default="queue", help="queue, batch, ttl, kv, consumer, counter or mix"
    )
    p.add_argument(
        "--nemesis",
        default="kill,partition",
        help="comma-separated: kill, pause, partition, delay, clock, power, corrupt",
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", required=True, help="the run directory to create")
    p.add_argument("--system", default="jetraft", choices=("jetraft", "nats"))
    p.add_argument("--processes", type=int, default=0, help="client processes (default 2/node)")
    p.add_argument(
        "--ports",
        type=_port_range,
        help="LOW-HIGH: listen only on these ports (nodes and link proxies; 3 nodes need 15)",
    )
    p.set_defaults(func=main)


def _port_range(text: str) -> range:
    low, sep, high = text.partition("-")
    if not sep or not low.isdigit() or not high.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: give LOW-HIGH, e.g. 20000-20099")
    first, last = int(low), int(high)
    if not 1 <= first <= last <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"{text!r}: ports run from 1 to {MAX_PORT}")
    return range(first, last + 1)


def main(args: argparse.Namespace) -> int:
    opts = ChaosOptions(
        nodes=args.nodes,
        time_s=args.time,
        workload=args.workload,
        nemeses=[n.strip() for n in args.nemesis.split(",") if n.strip()],
        seed=args.seed,
        out=Path(args.out),
        system=args.system,
        processes=args.processes,
        ports=args.ports,
    )
    try:
        opts.validate()
        return asyncio.run(run_chaos(opts))
    except ValueError as exc:
        print(f"jetraft chaos: {exc}", file=sys.stderr)
        return EXIT_ERROR
