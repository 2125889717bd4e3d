"""What the side-by-side benchmarks print: server names, number formats and the comparison table.

Owns: the names of the servers compared (nats-server as deployed, nats-server fsyncing every
write, jetraft), one run's outcome (:class:`ServerRun`), the table of every run's rate, latency
and server CPU per operation with jetraft's ratio to each other run, its text and markdown
renderings, and the nats-server version line.

Must never: measure anything, or start a process other than ``nats-server --version``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from bench.loadgen import PhaseResult
from cluster.ops.process import NATS_SERVER_BIN

NATS = "nats-server"
NATS_SYNC = "nats-server sync always"
JETRAFT = "jetraft"
MISSING = "-"
LATENCY_METRIC = "latency p50 / p99 (µs)"
CPU_METRIC = "server CPU µs/op"


@dataclass
class ServerRun:
    """One server's (or cluster's) outcome: results by phase, or the error that stopped it."""

    server: str
    results: dict[str, PhaseResult] = field(default_factory=dict)
    error: str | None = None


P = TypeVar("P")


def plans_in_order(
    make_nats: Callable[[Path, bool], P],
    make_jetraft: Callable[[Path], P],
    *,
    nats: bool,
    sync_always: bool,
    jetraft: bool,
) -> list[tuple[str, Callable[[Path], P]]]:
    """What to run, in order: nats-server, nats-server sync always, jetraft (``make_nats`` takes
    whether to fsync every write)."""
    plans: list[tuple[str, Callable[[Path], P]]] = []
    if nats:
        plans.append((NATS, lambda tmp: make_nats(tmp, False)))
        if sync_always:
            plans.append((NATS_SYNC, lambda tmp: make_nats(tmp, True)))
    if jetraft:
        plans.append((JETRAFT, make_jetraft))
    return plans


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


def format_cpu(result: PhaseResult | None) -> str:
    us = None if result is None else result.cpu_us_per_op
    return MISSING if us is None else f"{us:,.1f}"


def rate_unit(phase: str) -> str:
    return "req/s" if "get" in phase else "msgs/s"


def _rate(result: PhaseResult | None) -> float | None:
    return None if result is None else result.rate_per_s


def _p50(result: PhaseResult | None) -> float | None:
    return None if result is None else result.p50_us


def _cpu(result: PhaseResult | None) -> float | None:
    return None if result is None else result.cpu_us_per_op


def _row(
    phase: str,
    metric: str,
    runs: Sequence[ServerRun],
    shown: Callable[[PhaseResult | None], str],
    value: Callable[[PhaseResult | None], float | None],
) -> list[str]:
    """One metric of one phase: each run's value, then jetraft's ratio to every other run."""
    results = [run.results.get(phase) for run in runs]
    row = [phase, metric, *(shown(result) for result in results)]
    jetraft = next((run for run in runs if run.server == JETRAFT), None)
    if jetraft is not None:
        mine = value(jetraft.results.get(phase))
        row += [
            format_ratio(mine, value(run.results.get(phase)))
            for run in runs
            if run.server != JETRAFT
        ]
    return row


def table(runs: Sequence[ServerRun], phases: Sequence[str]) -> tuple[list[str], list[list[str]]]:
    """Header and rows: phase, metric, each run, then jetraft over each other run. A phase has
    a rate row, and a latency row and a CPU row where some run measured them."""
    header = ["phase", "metric", *(run.server for run in runs)]
    if any(run.server == JETRAFT for run in runs):
        header += [f"{JETRAFT}/{run.server}" for run in runs if run.server != JETRAFT]
    rows = []
    for phase in phases:
        results = [run.results.get(phase) for run in runs]
        rows.append(_row(phase, rate_unit(phase), runs, format_rate, _rate))
        if any(_p50(result) is not None for result in results):
            rows.append(_row(phase, LATENCY_METRIC, runs, format_latency, _p50))
        if any(_cpu(result) is not None for result in results):
            rows.append(_row(phase, CPU_METRIC, runs, format_cpu, _cpu))
    return header, rows


def text_table(header: list[str], rows: list[list[str]]) -> str:
    """Aligned columns: the first two left-aligned (names), the rest right-aligned (numbers)."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    out = []
    for row in [header, *rows]:
        cells = [row[0].ljust(widths[0]), row[1].ljust(widths[1])]
        cells += [row[i].rjust(widths[i]) for i in range(2, len(header))]
        out.append("  ".join(cells))
    return "\n".join(out)


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|---|---|" + "---:|" * (len(header) - 2)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def nats_version() -> str:
    try:
        done = subprocess.run(
            [str(NATS_SERVER_BIN), "--version"], capture_output=True, text=True, timeout=10
        )
    except OSError:
        return "unknown"
    return done.stdout.strip() or "unknown"
