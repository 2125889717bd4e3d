"""``make bench``: every floor of jetraft against nats-server measured in one run, one report.

Owns: the order of the runs and their sizes, not how any of them is measured: the load
generator's ceiling (:mod:`bench.ceiling`); R1, one server each of nats-server, nats-server with
``sync_interval: always`` and jetraft, with the load generator's four phases and atomic batches
of 1000 (:mod:`bench.runner`); R3, the same three as 3-node clusters (:mod:`bench.cluster_bench`).
Then the floors of :mod:`bench.floors` judged on what was measured, printed first in the terminal
and at the top of the one combined ``bench/results.md``, with the total run time. ``--quick`` is
a smoke run of a few seconds per server.

Must never: run two servers at once or leave one running (every module it calls stops the
processes it started by pid, even on error or Ctrl-C), or judge a floor on a phase that failed.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench import cluster_bench, floors, runner
from bench.ceiling import (
    CEILING,
    DEFAULT_RESPONDERS,
    TRIES,
    CeilingConfig,
    cap_notes,
    run_ceiling,
)
from bench.cluster_bench import BenchConfig, ClusterRun, cluster_plans
from bench.loadgen import DEFAULT_MSGS, DEFAULT_SEED, DEFAULT_WINDOW, QUICK_MSGS, LoadConfig
from bench.report import ServerRun, markdown_table, table, text_table

RESULTS_PATH = Path(__file__).resolve().parent / "results.md"


@dataclass(frozen=True)
class SuiteConfig:
    r1_msgs: int  # per sync phase
    r1_pipelined_msgs: int
    batch_msgs: int  # in batches of 1000
    r3_seconds: float  # per phase, after a warm-up
    ceiling_ops: int  # per phase
    responders: int = DEFAULT_RESPONDERS
    window: int = DEFAULT_WINDOW
    seed: int = DEFAULT_SEED

    def load_config(self) -> LoadConfig:
        return LoadConfig(
            msgs=self.r1_msgs,
            pipelined_msgs=self.r1_pipelined_msgs,
            window=self.window,
            seed=self.seed,
        )

    def cluster_config(self) -> BenchConfig:
        return BenchConfig(seconds=self.r3_seconds, window=self.window, seed=self.seed)

    def ceiling_config(self) -> CeilingConfig:
        return CeilingConfig(
            ops=self.ceiling_ops, responders=self.responders, window=self.window, seed=self.seed
        )


# Sized for about 2 minutes on a 2-core machine: R3 is 5 phases of about 5 s per cluster; in R1
# the slowest phases are nats-server sync always's and jetraft's sync publishes (2,000-4,000 a
# second) and nats-server sync always's pipelined publishes (5,000-8,000 a second).
FULL = SuiteConfig(
    r1_msgs=DEFAULT_MSGS,
    r1_pipelined_msgs=50_000,
    batch_msgs=50_000,
    r3_seconds=cluster_bench.DEFAULT_SECONDS,
    ceiling_ops=200_000,
)
QUICK = SuiteConfig(
    r1_msgs=QUICK_MSGS,
    r1_pipelined_msgs=QUICK_MSGS,
    batch_msgs=5_000,
    r3_seconds=cluster_bench.QUICK_SECONDS,
    ceiling_ops=20_000,
)


@dataclass
class SuiteResults:
    ceiling: ServerRun
    r1: list[ServerRun]
    r3: list[ClusterRun]
    elapsed_s: float

    def verdicts(self) -> list[floors.Verdict]:
        by_topology = {
            floors.R1: {run.server: run.results for run in self.r1},
            floors.R3: {run.server: run.results for run in self.r3},
        }
        return floors.verdicts(floors.FLOORS, by_topology)

    def labelled_runs(self) -> list[tuple[str, ServerRun]]:
        return [(floors.R1, run) for run in self.r1] + [(floors.R3, run) for run in self.r3]

    def errors(self) -> list[str]:
        runs = [(CEILING, self.ceiling), *self.labelled_runs()]
        return [f"{label} {run.server}: {run.error}" for label, run in runs if run.error]


def run_suite(config: SuiteConfig) -> SuiteResults:
    """Everything in order, one server or cluster at a time."""
    started = time.monotonic()
    print(f"== {CEILING} ==", flush=True)
    ceiling = run_ceiling(config.ceiling_config())
    print("== R1: one server ==", flush=True)
    load = runner.r1_load(config.load_config(), config.batch_msgs)
    r1 = runner.run_all(runner.server_plans(sync_always=True), load)
    print("== R3: 3-node clusters ==", flush=True)
    cluster_config = config.cluster_config()
    r3 = [
        cluster_bench.run_against(server, make, cluster_config, None)
        for server, make in cluster_plans(sync_always=True)
    ]
    return SuiteResults(ceiling, r1, r3, time.monotonic() - started)


# ------------------------------------------------------------------------------- reporting

FLOORS_NOTE = (
    "A rate floor holds when jetraft's rate over nats-server's is at least the floor; a latency "
    "floor when jetraft's p50 over nats-server's is at most the floor. Server CPU per operation "
    "(user+system from /proc, the three nodes summed for R3) is steadier than a rate on a shared "
    "machine; its ratio above 1 means jetraft spends more."
)
DURABILITY_NOTE = (
    "Durability differs: nats-server by default acknowledges once the message is in the OS page "
    "cache (of a majority, in a cluster) and fsyncs every 2 minutes; jetraft acknowledges once "
    "it is fsynced (on a majority). The `nats-server sync always` runs use "
    "`jetstream { sync_interval: always }`, the durability jetraft gives."
)


def summary_table(results: SuiteResults) -> tuple[list[str], list[list[str]]]:
    return floors.SUMMARY_HEADER, floors.summary_rows(results.verdicts())


def ceiling_table(ceiling: ServerRun) -> tuple[list[str], list[list[str]]]:
    return table([ceiling], list(ceiling.results))


def terminal_report(config: SuiteConfig, results: SuiteResults, output: Path | None) -> str:
    """The summary first, then every table."""
    verdicts = results.verdicts()
    r3_notes = [*cluster_bench.run_notes(results.r3), *cluster_bench.cpu_notes(results.r3)]
    parts = [
        f"== summary: floors {floors.tally(verdicts)} ==",
        text_table(*summary_table(results)),
        "",
        *cap_notes(results.ceiling, results.labelled_runs()),
        "",
        "== R1: one server ==",
        text_table(*table(results.r1, runner.r1_phases(config.batch_msgs))),
        "",
        "== R3: 3-node clusters ==",
        text_table(*table(results.r3, cluster_bench.PHASES)),
        "",
        *r3_notes,
        "",
        f"== {CEILING} ==",
        text_table(*ceiling_table(results.ceiling)),
        "",
        f"written to {output}" if output is not None else "not written to a file (--quick)",
        f"total run time {results.elapsed_s:.0f} s",
    ]
    return "\n".join(parts)


def _bullets(lines: Sequence[str]) -> list[str]:
    return [f"* {line}" for line in lines]


def markdown_report(config: SuiteConfig, argv: Sequence[str], results: SuiteResults) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    command = " ".join(["python -m bench.suite", *argv])
    verdicts = results.verdicts()
    lines = [
        "# jetraft vs nats-server — benchmark results",
        "",
        f"Written by `make bench` (`{command}`), run {now}, {results.elapsed_s:.0f} s in all. "
        f"{runner.machine()}",
        "",
        "## Summary",
        "",
        f"Floors: {floors.tally(verdicts)}. {FLOORS_NOTE}",
        "",
        markdown_table(*summary_table(results)),
        "",
        "Load generator ceiling (the same pipelined phases against a responder that does no work):",
        "",
        *_bullets(cap_notes(results.ceiling, results.labelled_runs())),
        "",
        "## R1: one server",
        "",
        f"{runner.describe(config.load_config(), config.batch_msgs)}.",
        "",
        markdown_table(*table(results.r1, runner.r1_phases(config.batch_msgs))),
        "",
        runner.TABLE_NOTE,
        "",
        "## R3: 3-node clusters, R3 stream",
        "",
        f"{cluster_bench.describe(config.cluster_config())}; server CPU is the three nodes'.",
        "",
        markdown_table(*table(results.r3, cluster_bench.PHASES)),
        "",
        *cluster_bench.notes_markdown(results.r3),
        "",
        "## Load generator ceiling",
        "",
        f"{config.ceiling_ops} operations per phase after a warm-up (the fastest of {TRIES} "
        f"tries), pipeline window "
        f"{config.window}, against {config.responders} null responder processes (one queue "
        "group) on a nats-server without JetStream: each publish is answered with a fixed PubAck, "
        "each Direct Get with the sequence asked for and the payload; every reply is checked as "
        "against a server.",
        "",
        markdown_table(*ceiling_table(results.ceiling)),
        "",
        DURABILITY_NOTE,
    ]
    errors = results.errors()
    if errors:
        lines += ["", "## Errors", "", *_bullets([error.splitlines()[0] for error in errors])]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run of small sizes, written only to --output"
    )
    parser.add_argument(
        "--output", type=Path, default=None, help=f"the markdown report (default {RESULTS_PATH})"
    )
    args = parser.parse_args(argv)
    config = QUICK if args.quick else FULL
    # a smoke run's numbers must not replace the last full run's
    output = args.output if args.output is not None or args.quick else RESULTS_PATH
    results = run_suite(config)
    if output is not None:
        output.write_text(markdown_report(config, argv, results))
    print()
    print(terminal_report(config, results, output))
    for error in results.errors():
        print(f"\nERROR {error}", file=sys.stderr)
    return 1 if results.errors() else 0


if __name__ == "__main__":
    raise SystemExit(main())
