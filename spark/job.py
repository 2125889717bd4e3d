"""The analysis job: run directories in, ``report.json`` and ``report.html`` out.

Stages, each announced on one progress line with its row counts and elapsed time: **loading**
(``spark/load.py``), **agreement** (replay and cross-node digests, ``spark/agreement.py``),
**writes** (lost / phantom writes, batches, TTL, ``spark/writes.py``), **staleness**
(read-after-write divergence, ``spark/staleness.py``), **consumers** (per-consumer deliveries,
redeliveries and delivery lag, ``spark/consumers.py``), **counters** (counter totals against
the acknowledged increments, ``spark/counters.py``), **report** (``spark/report.py``). The
results dict has one section per stage (``agreement``, ``writes``, ``staleness``,
``consumers``, ``counters``) plus ``runs``, ``input`` (row counts, dropped torn lines),
``spark`` (master, version), ``timings_s`` and ``verdict`` (``findings`` per check; 0
everywhere on a correct run).

Exit codes, as ``jetraft chaos``: 0 no finding, 1 findings, 2 the analysis could not run (bad
input: the message names the file and line).

Must never: write anywhere but the output directory, or hide a finding from the exit code.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from spark.load import Loaded

# the writes stage's findings (spark/writes.py), as report.json and the verdict name them
WRITE_CHECKS: Final = (
    "lost",
    "ack_mismatch",
    "phantom",
    "duplicate",
    "batches",
    "premature_expiry",
    "served_after_expiry",
)

EXIT_OK: Final = 0
EXIT_FINDINGS: Final = 1
EXIT_ERROR: Final = 2
ANALYSIS_DIR: Final = "analysis"


@dataclass
class Progress:
    """One line per stage on ``echo``: the stage, what it found, its time and the total."""

    echo: Callable[[str], None] = field(default=lambda line: print(line, flush=True))
    started: float = field(default_factory=time.monotonic)
    timings: dict[str, float] = field(default_factory=dict)
    _stage_started: float = 0.0

    def begin(self, stage: str) -> None:
        self._stage_started = time.monotonic()
        self.echo(f"[{self._elapsed():7.1f}s] {stage}...")

    def end(self, stage: str, detail: str) -> None:
        took = time.monotonic() - self._stage_started
        self.timings[stage] = round(took, 3)
        self.echo(f"[{self._elapsed():7.1f}s] {stage}: {detail} ({took:.1f}s)")

    def _elapsed(self) -> float:
        return time.monotonic() - self.started


def default_out_dir(runs: Sequence[Path]) -> Path:
    """``RUN/analysis`` for one run; ``<their common parent>/analysis`` for several."""
    resolved = [p.resolve() for p in runs]
    if len(resolved) == 1:
        return resolved[0] / ANALYSIS_DIR
    parents = [p.parent for p in resolved]
    common = parents[0]
    while not all(p == common or common in p.parents for p in parents):
        common = common.parent
    return common / ANALYSIS_DIR


def _row_counts(loaded: Loaded) -> dict[str, int]:
    from pyspark.sql import functions as F

    parts: list[DataFrame] = [
        frame.groupBy().count().withColumn("kind", F.lit(kind))
        for kind, frame in (
            ("history", loaded.history),
            ("log", loaded.log),
            ("leaders", loaded.leaders),
        )
    ]
    union = parts[0].unionByName(parts[1]).unionByName(parts[2])
    return {r["kind"]: int(r["count"]) for r in union.collect()}


def analyze(
    spark: SparkSession,
    run_dirs: Sequence[Path],
    out_dir: Path,
    progress: Progress | None = None,
) -> tuple[dict[str, Any], Path, Path]:
    """The whole job on ``spark``; returns (results, report.json path, report.html path).
    Raises ``spark.load.LoadError`` for bad input."""
    from spark import report, staleness
    from spark.agreement import analyze_agreement
    from spark.consumers import analyze_consumers
    from spark.counters import analyze_counters
    from spark.load import load_runs
    from spark.writes import analyze_writes

    progress = progress or Progress()
    progress.begin("loading")
    loaded = load_runs(spark, run_dirs)
    try:
        rows = _row_counts(loaded)
        torn = len(loaded.dropped)
        progress.end(
            "loading",
            f"{len(loaded.runs)} run(s): {rows.get('history', 0)} history ops, "
            f"{rows.get('log', 0)} log rows, {rows.get('leaders', 0)} leader samples"
            + (f", {torn} torn line(s) dropped" if torn else ""),
        )

        progress.begin("agreement")
        agreement, agreement_frames = analyze_agreement(loaded.log)
        rp = agreement["replay"]
        stopped = rp["errors"]["count"]
        progress.end(
            "agreement",
            f"{rp['rows']} log rows replayed ({rp['seeded']} after a re-seed), "
            f"{rp['matched']} digests matched, {rp['findings']} mismatched, "
            f"{agreement['split_brain']['diverging_indexes']} diverging indexes"
            + (f", {stopped} replay(s) stopped early" if stopped else ""),
        )

        progress.begin("writes")
        writes, writes_frames = analyze_writes(loaded.history, loaded.log, loaded.meta)
        outcomes = writes["writes"]["by_outcome"]
        progress.end(
            "writes",
            f"{outcomes.get('ok', 0)} acknowledged writes; lost {writes['lost']['count']}, "
            f"phantom {writes['phantom']['count']}, bad batches {writes['batches']['count']}, "
            f"premature expiries {writes['premature_expiry']['count']}",
        )

        progress.begin("staleness")
        stale, stale_frames = staleness.analyze_staleness(
            loaded.history, loaded.leaders, loaded.log
        )
        by_kind = stale.get("by_kind", {})
        dg, mg = by_kind.get("direct_get", {}), by_kind.get("msg_get", {})
        progress.end(
            "staleness",
            f"{stale.get('reads', {}).get('judged', 0)} reads judged; Direct Get stale "
            f"{dg.get('stale', 0)}/{dg.get('reads', 0)}, MSG.GET stale (violations) "
            f"{mg.get('stale', 0)}/{mg.get('reads', 0)}",
        )

        progress.begin("consumers")
        consumers, consumer_frames = analyze_consumers(loaded.history)
        redelivered = sum(c["redeliveries"] for c in consumers["by_consumer"])
        progress.end(
            "consumers",
            f"{consumers['count']} consumer(s), {redelivered} redeliveries",
        )

        progress.begin("counters")
        counters, counter_frames = analyze_counters(loaded.history)
        incs = counters["increments"]
        progress.end(
            "counters",
            f"{incs['total']} increments ({incs['ok']} acknowledged, {incs['info']} "
            f"indeterminate, {incs['fail']} failed), {len(counters['subjects'])} subject(s); "
            f"wrong final totals {counters['final_total']['count']}, wrong acknowledged totals "
            f"{counters['acked_total']['count']}",
        )

        results: dict[str, Any] = {
            "runs": [r.asDict() for r in loaded.meta.orderBy("run").collect()],
            "input": {"rows": rows, "dropped_lines": loaded.dropped},
            "spark": {"master": spark.sparkContext.master, "version": spark.version},
            "verdict": verdict(agreement, writes, stale, counters),
            "agreement": agreement,
            "writes": writes,
            "staleness": stale,
            "consumers": consumers,
            "counters": counters,
            "timings_s": progress.timings,
        }
        frames: dict[str, Any] = {
            **agreement_frames,
            **writes_frames,
            **stale_frames,
            **consumer_frames,
            **counter_frames,
        }

        progress.begin("report")
        json_path, html_path = report.write_report(out_dir, results, frames)
        progress.end("report", f"{json_path} and {html_path.name}")
    finally:
        loaded.unpersist()
    return results, json_path, html_path


def verdict(
    agreement: dict[str, Any],
    writes: dict[str, Any],
    stale: dict[str, Any],
    counters: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Every finding count by check; ``valid`` when all are 0 (``counters`` None: a job
    without the counters stage, which then counts 0)."""
    counts = {
        "replay_mismatch": int(agreement["replay"]["findings"]),
        "split_brain": int(agreement["split_brain"]["diverging_indexes"]),
        "entry_divergence": int(agreement["entry_divergence"]["count"]),
        "lone_entry": int(agreement["lone_entries"]["count"]),
        **{key: int(writes[key]["count"]) for key in WRITE_CHECKS},
        "stale_msg_get": int(stale.get("msg_get_violations", {}).get("count", 0)),
        "counter": int(counters["findings"]) if counters is not None else 0,
    }
    total = sum(counts.values())
    return {"valid": total == 0, "findings": total, "by_check": counts}


def run_job(
    run_dirs: Sequence[Path],
    *,
    master: str | None,
    out_dir: Path | None = None,
    spark_progress: bool = True,
    echo: Callable[[str], None] | None = None,
) -> int:
    """Build the session (``master`` None: the one spark-submit was given), analyse, stop the
    session; the exit code (see the module doc). A session that already runs is used and left
    running."""
    from pyspark.sql import SparkSession

    from spark.load import LoadError
    from spark.session import build_session

    say = echo or (lambda line: print(line, flush=True))
    out = out_dir or default_out_dir(run_dirs)
    progress = Progress(echo=say)
    # a session that already runs (spark-submit's, a test's) is used and left running
    existing = SparkSession.getActiveSession()
    progress.begin("starting Spark")
    spark = existing or build_session(master, progress=spark_progress)
    progress.end("starting Spark", f"{spark.sparkContext.master}, Spark {spark.version}")
    try:
        results, _json, _html = analyze(spark, run_dirs, out, progress)
    except LoadError as exc:
        print(f"jetraft analyze: {exc}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        if existing is None:
            spark.stop()
    v = results["verdict"]
    if v["valid"]:
        say("verdict: no findings")
        return EXIT_OK
    found = ", ".join(f"{k} {n}" for k, n in v["by_check"].items() if n)
    say(f"verdict: {v['findings']} finding(s): {found}")
    return EXIT_FINDINGS
