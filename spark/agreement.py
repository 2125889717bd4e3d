"""Replica agreement: replay every node's log through the engine, inside Spark, and compare.

Two checks over the ``log`` frame of ``spark/load.py``:

* **Replay** (``replay``): each (run, node, stream) log, in file order, is replayed through
  ``engine/``'s own state machine in a Python worker — ``Stream(config, MemoryStore(),
  created_ns)`` from the ``open`` row, then ``stream.apply(index, decode_entry(entry))`` for each
  ``entry`` row — and the replayed digest is compared with the digest the node reported at that
  index. Replayed != reported means the node's state is not what its own log produces (a
  non-deterministic apply, state corrupted outside the log, or a log row that lies).
* **Cross-node digests** (``digest_divergence``): at every (run, stream, index) that two or more
  nodes (or one node twice, across restarts) reported a digest for, the digests must be equal;
  an index where they differ is a split-brain finding, and the first such index per stream is
  reported with each node's digest. The entries themselves are compared the same way
  (``entry_divergence``: two different entries at one index is a forked Raft log), and an
  entry one node applied where another node's log skips the index (``lone_entries``) is a
  fork the digests may not show.

Restarts and state transfers (the choice made, per the run-directory contract): an ``open`` row
at index 0 starts a fresh replay (the node rebuilt its state from its Raft log). An ``open`` row
above index 0 (a restart that kept its state — which may be older than what the node had
applied and logged before it was killed, when the last applies were not yet synced) or a
``transfer`` row at index i (a state transfer: the node's entries before i are not in its log)
continues the replay when the replay is at i; otherwise the replay is **re-seeded**: the stream
is rebuilt from the node's last index-0 ``open`` row and the entries the nodes logged through i
(``canonical_entries``: the entry at each index, from whichever node logged it; the smallest if
nodes disagree, which ``entry_divergence`` reports), the node's reported digest at i is checked
against that state, and the node's own entries continue from there. If no node logged an entry
some index needs, the replay of that node stops (``replayed`` null, ``error`` says why) until
its next index-0 ``open``; its reported digests still take part in the cross-node comparison.

Must never: read files or sockets (load.py reads), or judge a node by anything but its own rows
and the engine's ``apply``.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import groupby
from typing import TYPE_CHECKING, Any, Final

from jepsen_like.contract import ENTRY, OPEN, REPLAY_OPS, TRANSFER
from spark.load import collect_findings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

SEED_OP: Final = "seed"
# sort key of a row within its line: seeds (sub = their index) come before the row they serve
ROW_SUB: Final = 1 << 62
MAX_EXAMPLES: Final = 20  # findings listed in full in report.json (the counts are exact)
ERROR_TEXT_MAX: Final = 300

REPLAY_SCHEMA: Final = (
    "run STRING, node STRING, stream STRING, line BIGINT, op STRING, index BIGINT, "
    "reported STRING, replayed STRING, seeded BOOLEAN, error STRING"
)


# --- the replay (plain Python, runs in Spark's Python workers) -------------------------------


@dataclass
class _State:
    stream: Any = None  # engine.stream.Stream while the replay tracks the node
    base: tuple[str, int] | None = None  # (config JSON, created_ns) of the last index-0 open
    seeded: bool = False
    seed_line: int | None = None  # the resume row the seeds being applied serve
    skip_seeds: bool = False


def _fresh(config_json: str, created_ns: int) -> Any:
    from engine.memstore import MemoryStore
    from engine.stream import Stream
    from protocol.models import StreamConfig

    return Stream(StreamConfig.model_validate_json(config_json), MemoryStore(), created_ns)


def _apply(stream: Any, index: int, entry_b64: str) -> None:
    from engine.entries import decode_entry

    stream.apply(index, decode_entry(base64.b64decode(entry_b64, validate=True)))


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:ERROR_TEXT_MAX]


def replay_node(
    rows: Iterable[Mapping[str, Any]],
) -> Iterator[tuple[str, int, int, str, str | None, bool, str | None]]:
    """Replay one (run, node, stream) log; ``rows`` in file order (``line``, then ``sub``), with
    ``op, line, index, digest, entry, config, created_ns`` and, for seed rows, ``target`` (the
    index of the row they serve). Yields ``(op, line, index, reported, replayed, seeded,
    error)`` for every open, entry and transfer row."""
    st = _State()
    for row in rows:
        op = row["op"]
        if op == SEED_OP:
            _seed(st, row)
            continue
        line, index, reported = int(row["line"]), int(row["index"]), str(row["digest"])
        error: str | None = None
        if op == OPEN and index == 0:
            try:
                st.stream = _fresh(row["config"], int(row["created_ns"]))
                st.base = (row["config"], int(row["created_ns"]))
                st.seeded = False
            except Exception as exc:  # a config the engine rejects: the node is not replayable
                st.stream, error = None, f"open: {_describe(exc)}"
        elif op in (OPEN, TRANSFER):
            if st.stream is not None and st.stream.applied_index != index:
                error = (
                    f"{op} at index {index}: the logs hold entries only through "
                    f"{st.stream.applied_index}"
                )
                st.stream = None
            elif st.stream is None and error is None:
                error = f"{op} at index {index}: no replayable state to continue from"
        elif op == ENTRY and st.stream is not None:
            try:
                _apply(st.stream, index, row["entry"])
            except Exception as exc:  # bad bytes or an out-of-order index: stop this replay
                st.stream, error = None, f"entry: {_describe(exc)}"
        st.seed_line = None
        replayed = st.stream.digest().hex() if st.stream is not None else None
        yield op, line, index, reported, replayed, st.seeded, error


def _seed(st: _State, row: Mapping[str, Any]) -> None:
    line = int(row["line"])
    if st.seed_line != line:  # the first seed for a resume row: decide whether it is needed
        st.seed_line = line
        target = int(row["target"])
        st.skip_seeds = st.stream is not None and st.stream.applied_index == target
        if not st.skip_seeds:
            st.stream = _fresh(*st.base) if st.base is not None else None
            st.seeded = True
    if st.skip_seeds or st.stream is None:
        return
    try:
        _apply(st.stream, int(row["index"]), row["entry"])
    except Exception:  # the resume row then reports that the replay could not get there
        st.stream = None


def _replay_partition(rows: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
    """A partition sorted by (run, node, stream, line, sub): one replay per group."""
    for (run, node, stream), group in groupby(rows, key=lambda r: (r.run, r.node, r.stream)):
        for op, line, index, reported, replayed, seeded, error in replay_node(
            r.asDict() for r in group
        ):
            yield run, node, stream, line, op, index, reported, replayed, seeded, error


# --- DataFrame transforms ---------------------------------------------------------------------


def canonical_entries(log: DataFrame) -> DataFrame:
    """``run, stream, index, entry``: the entry at each index by majority of the node logs —
    when nodes disagree (``entry_divergence``, ``lone_entries`` report it) the entry most nodes
    applied (a committed entry is on a majority; the greatest text on a tie), and no entry at
    all where more node logs skip the index than applied that entry."""
    from pyspark.sql import functions as F

    votes = (
        log.filter(F.col("op") == ENTRY)
        .groupBy("run", "stream", "index", "entry")
        .agg(F.countDistinct("node").alias("n"))
    )
    skipped = (
        entry_skips(log).groupBy("run", "stream", "index").agg(F.max("against").alias("against"))
    )
    best = votes.groupBy("run", "stream", "index").agg(F.max(F.struct("n", "entry")).alias("best"))
    return (
        best.join(skipped, ["run", "stream", "index"], "left")
        .filter(F.col("best.n") > F.coalesce(F.col("against"), F.lit(0)))
        .select("run", "stream", "index", F.col("best.entry").alias("entry"))
    )


def seed_rows(log: DataFrame) -> DataFrame:
    """For every resume row (a ``transfer``, or an ``open`` above index 0), the canonical entries
    through its index, as rows ``op = seed`` sorted just before it."""
    from pyspark.sql import functions as F

    resume = log.filter(
        (F.col("op") == TRANSFER) | ((F.col("op") == OPEN) & (F.col("index") > 0))
    ).select("run", "node", "stream", "line", F.col("index").alias("target"))
    canon = canonical_entries(log).select(
        F.col("run").alias("c_run"),
        F.col("stream").alias("c_stream"),
        F.col("index").alias("c_index"),
        F.col("entry").alias("c_entry"),
    )
    joined = resume.join(
        canon,
        (F.col("run") == F.col("c_run"))
        & (F.col("stream") == F.col("c_stream"))
        & (F.col("c_index") <= F.col("target")),
    )
    return joined.select(
        "run",
        "node",
        "stream",
        "line",
        F.col("c_index").alias("sub"),
        F.lit(SEED_OP).alias("op"),
        F.col("c_index").alias("index"),
        F.lit(None).cast("string").alias("digest"),
        F.col("c_entry").alias("entry"),
        F.lit(None).cast("string").alias("config"),
        F.lit(None).cast("long").alias("created_ns"),
        "target",
    )


def replay(log: DataFrame) -> DataFrame:
    """Every open, entry and transfer row replayed: ``run, node, stream, line, op, index,
    reported, replayed, seeded, error`` (``replayed`` null where the replay cannot follow)."""
    from pyspark.sql import functions as F

    rows = log.filter(F.col("op").isin(*REPLAY_OPS)).select(
        "run",
        "node",
        "stream",
        "line",
        F.lit(ROW_SUB).alias("sub"),
        "op",
        "index",
        "digest",
        "entry",
        "config",
        "created_ns",
        F.lit(None).cast("long").alias("target"),
    )
    keys = ["run", "node", "stream"]
    ordered = (
        rows.unionByName(seed_rows(log))
        .repartition(*keys)
        .sortWithinPartitions(*keys, "line", "sub")
    )
    replayed = ordered.rdd.mapPartitions(_replay_partition)
    return log.sparkSession.createDataFrame(replayed, REPLAY_SCHEMA)


def replay_mismatches(replayed: DataFrame) -> DataFrame:
    """Rows whose replayed digest differs from the one the node reported: a finding."""
    from pyspark.sql import functions as F

    return replayed.filter(F.col("replayed").isNotNull() & (F.col("replayed") != F.col("reported")))


def replay_errors(replayed: DataFrame) -> DataFrame:
    """Rows where the replay had to stop (undecodable entry, a rejected config, an index no
    node logged the entries up to): not a finding about the server, but the replay's reach."""
    from pyspark.sql import functions as F

    return replayed.filter(F.col("error").isNotNull())


def reported_digests(log: DataFrame) -> DataFrame:
    """``run, stream, index, node, digest``: each digest a node reported (deduplicated)."""
    from pyspark.sql import functions as F

    return (
        log.filter(F.col("op").isin(*REPLAY_OPS))
        .select("run", "stream", "index", "node", "digest")
        .distinct()
    )


def digest_divergence(log: DataFrame) -> DataFrame:
    """``run, stream, index, nodes, digests`` for every index where the reported digests differ
    (``digests``: sorted ``{node, digest}`` structs; a node may appear twice across restarts)."""
    from pyspark.sql import functions as F

    return (
        reported_digests(log)
        .groupBy("run", "stream", "index")
        .agg(
            F.countDistinct("digest").alias("_n"),
            F.countDistinct("node").alias("nodes"),
            F.sort_array(F.collect_list(F.struct("node", "digest"))).alias("digests"),
        )
        .filter(F.col("_n") > 1)
        .drop("_n")
    )


def entry_divergence(log: DataFrame) -> DataFrame:
    """``run, stream, index, nodes``: indexes at which nodes logged different entries."""
    from pyspark.sql import functions as F

    return (
        log.filter(F.col("op") == ENTRY)
        .groupBy("run", "stream", "index")
        .agg(
            F.countDistinct("entry").alias("_n"),
            F.sort_array(F.collect_set("node")).alias("nodes"),
        )
        .filter(F.col("_n") > 1)
        .drop("_n")
    )


def entry_skips(log: DataFrame) -> DataFrame:
    """``run, stream, index, node, against`` for every entry row: how many node logs skip the
    index (apply no engine entry there).

    Two consecutive replay rows of a node at indexes a < b, the second an ``entry`` (not a
    restart's ``open`` or a ``transfer``, which jump), say the node applied no engine entry in
    between: the Raft entries there were internal (a new leader's no-op, a barrier). A node
    that applied an engine entry at such an index had a different Raft log there."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    rows = log.filter(F.col("op").isin(*REPLAY_OPS)).select(
        "run", "node", "stream", "line", "op", "index"
    )
    order = Window.partitionBy("run", "node", "stream").orderBy("line")
    gaps = (
        rows.withColumn("prev", F.lag("index").over(order))
        .filter((F.col("op") == ENTRY) & (F.col("prev") + 1 < F.col("index")))
        .select("run", "stream", "prev", "index")
    )
    # a sweep over each stream's indexes: +1 where a gap opens (after prev), -1 where it closes
    # (at index); at one position closes sort before entries, entries before opens
    none = F.lit(None).cast("string").alias("node")
    events = (
        gaps.select("run", "stream", F.col("prev").alias("pos"), F.lit(2).alias("k"), none)
        .withColumn("delta", F.lit(1))
        .unionByName(
            gaps.select(
                "run", "stream", F.col("index").alias("pos"), F.lit(0).alias("k"), none
            ).withColumn("delta", F.lit(-1))
        )
        .unionByName(
            rows.filter(F.col("op") == ENTRY)
            .select("run", "stream", F.col("index").alias("pos"), F.lit(1).alias("k"), "node")
            .distinct()
            .withColumn("delta", F.lit(0))
        )
    )
    sweep = (
        Window.partitionBy("run", "stream")
        .orderBy("pos", "k")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    return (
        events.withColumn("against", F.sum("delta").over(sweep))
        .filter(F.col("k") == 1)
        .select("run", "stream", F.col("pos").alias("index"), "node", "against")
    )


def lone_entries(log: DataFrame) -> DataFrame:
    """Indexes where some nodes applied an engine entry and other nodes' logs skip the index:
    ``run, stream, index, nodes`` (that applied one), ``skipped_by`` (how many skip it) — a
    fork the digests cannot show when no two nodes report a digest at one index."""
    from pyspark.sql import functions as F

    return (
        entry_skips(log)
        .filter(F.col("against") > 0)
        .groupBy("run", "stream", "index")
        .agg(
            F.sort_array(F.collect_set("node")).alias("nodes"),
            F.max("against").alias("skipped_by"),
        )
    )


def agreement_summary(log: DataFrame, diverging: DataFrame) -> DataFrame:
    """Per (run, stream): ``nodes`` (that logged it), ``indexes`` (with a reported digest),
    ``compared`` (reported by >= 2 nodes), ``all_nodes`` (reported by every node of the stream),
    ``diverging`` and ``first_diverging_index``."""
    from pyspark.sql import functions as F

    per_index = (
        reported_digests(log)
        .groupBy("run", "stream", "index")
        .agg(F.countDistinct("node").alias("n"))
    )
    nodes = log.groupBy("run", "stream").agg(F.countDistinct("node").alias("nodes"))
    counts = (
        per_index.join(nodes, ["run", "stream"])
        .groupBy("run", "stream", "nodes")
        .agg(
            F.count(F.lit(1)).alias("indexes"),
            F.sum((F.col("n") >= 2).cast("long")).alias("compared"),
            F.sum((F.col("n") == F.col("nodes")).cast("long")).alias("all_nodes"),
        )
    )
    div = diverging.groupBy("run", "stream").agg(
        F.count(F.lit(1)).alias("diverging"), F.min("index").alias("first_diverging_index")
    )
    return (
        counts.join(div, ["run", "stream"], "left")
        .fillna(0, subset=["diverging"])
        .orderBy("run", "stream")
    )


# --- results ----------------------------------------------------------------------------------


def first_divergences(diverging: DataFrame) -> DataFrame:
    """The first diverging index of each (run, stream), with every node's digest there."""
    from pyspark.sql import functions as F

    first = diverging.groupBy("run", "stream").agg(F.min("index").alias("index"))
    return diverging.join(first, ["run", "stream", "index"], "left_semi")


def analyze_agreement(
    log: DataFrame, *, max_examples: int = MAX_EXAMPLES
) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """Run both checks; returns (results for report.json, frames for the report).

    results: ``replay`` (rows replayed: ``rows, matched, mismatched, unreplayable, seeded``;
    ``findings``/``examples``: the mismatches; ``errors``: where a replay had to stop),
    ``streams`` (per run and stream, ``agreement_summary``), ``split_brain``
    (``diverging_indexes``; ``first``: per run and stream the first diverging index with each
    node's digest), ``entry_divergence`` and ``lone_entries`` (``count``, ``examples``),
    ``findings`` (the total: 0 on a correct run).
    frames: ``replay_by_node`` (per run, node, stream: the replay counts).
    """
    from pyspark.sql import functions as F

    replayed = replay(log).cache()
    diverging = digest_divergence(log).cache()
    try:
        node_rows = [
            r.asDict()
            for r in replayed.groupBy("run", "node", "stream")
            .agg(
                F.count(F.lit(1)).alias("rows"),
                F.sum((F.col("replayed") == F.col("reported")).cast("long")).alias("matched"),
                F.sum((F.col("replayed") != F.col("reported")).cast("long")).alias("mismatched"),
                F.sum(F.col("replayed").isNull().cast("long")).alias("unreplayable"),
                F.sum(F.col("seeded").cast("long")).alias("seeded"),
            )
            .orderBy("run", "node", "stream")
            .collect()
        ]
        found = collect_findings(
            {
                "replay": (replay_mismatches(replayed), ["run", "node", "stream", "line"]),
                "replay_errors": (replay_errors(replayed), ["run", "node", "stream", "line"]),
                "split_brain": (diverging, ["run", "stream", "index"]),
                "split_brain_first": (first_divergences(diverging), ["run", "stream"]),
                "entry_divergence": (entry_divergence(log), ["run", "stream", "index"]),
                "lone_entries": (lone_entries(log), ["run", "stream", "index"]),
            },
            max_examples,
        )
        summary = [r.asDict() for r in agreement_summary(log, diverging).collect()]
    finally:
        replayed.unpersist()
        diverging.unpersist()

    def total(key: str) -> int:
        return sum(int(r[key] or 0) for r in node_rows)

    results: dict[str, Any] = {
        "replay": {
            "rows": total("rows"),
            "matched": total("matched"),
            "mismatched": total("mismatched"),
            "unreplayable": total("unreplayable"),
            "seeded": total("seeded"),
            "findings": found["replay"]["count"],
            "examples": found["replay"]["examples"],
            "errors": found["replay_errors"],
        },
        "streams": summary,
        "split_brain": {
            "diverging_indexes": found["split_brain"]["count"],
            "first": found["split_brain_first"]["examples"],
            "examples": found["split_brain"]["examples"],
        },
        "entry_divergence": found["entry_divergence"],
        "lone_entries": found["lone_entries"],
        "findings": (
            found["replay"]["count"]
            + found["split_brain"]["count"]
            + found["entry_divergence"]["count"]
            + found["lone_entries"]["count"]
        ),
    }
    return results, {"replay_by_node": node_rows}
