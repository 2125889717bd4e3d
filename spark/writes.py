"""Lost and phantom writes, atomic batches and TTL, from the history and the replicas' logs.

Over the ``history`` and ``log`` frames of ``spark/load.py`` (many runs, told apart by
``run``); each check is a pure DataFrame -> DataFrame transform, ``analyze_writes`` collects
their counts and examples. Semantics (each a deliberate choice):

* **Writes**: a ``publish`` is identified by its ``id``, a batch message by its id in the
  batch's ``ids``; its outcome is its completion's type (``ok``, ``fail`` (the server said no),
  ``info`` (unknown)); an acknowledged write is an ``ok`` with its ``seq`` (a batch's ``seqs``
  in ``ids`` order). Ids are unique per run (the workloads make them so).
* **Stored / removed**: a node's ``store`` rows store a message at ``seq``; ``expire``,
  ``delete`` (also ``reason: limit``) and ``purge`` rows (one seq, or a range ``through``)
  remove one. Rows with ``reason: transfer`` (a state transfer rewrote the replica) count for
  the final state but neither as a store (batches, duplicates) nor as an explanation.
* **Lost**: an acknowledged write that is in no node's final state (stored and not removed on
  that node) and whose seq no node logged a removal for. Only runs with logs are judged.
  ``ack_mismatch``: a node stored another id at an acknowledged seq.
* **Phantom**: a stored message (any node) whose id no operation of the history published
  (``never_published``), whose publish definitely failed (``failed``: a ``fail``, or an
  abandoned batch), or which has no id at all (``no_id``). ``duplicate``: one id stored at two
  seqs (publishes are never retried, so the server made the copy). Counter streams
  (``allow_msg_counter`` in their ``open`` rows) store totals, never ids: their messages are
  the counters stage's (``spark/counters.py``), not writes.
* **Batches** (per node, stores of one batch id): stored whole (as many messages as the batch
  invoke's ``ids``, none of an abandoned batch) and contiguous (consecutive seqs holding the ids
  in ``ids`` order). Otherwise ``partial`` / ``non_contiguous``.
* **Premature expiry**: an ``expire`` row removes a message before its deadline. The expire
  entry's own time (``ExpireEntry.ts_ns``, the leader's clock the engine compares against) must
  be >= the deadline: stored ``ts_ns`` + the TTL the client asked for (``value.ttl``, parsed as
  ``engine/ttl.py`` does) or + the stream's ``max_age``, whichever is first (a subject delete
  marker: + ``subject_delete_marker_ttl``); a message with neither has no deadline, so any
  expiry of it is premature.
* **Served after expiry**: a ``direct_get``/``msg_get`` that returned seq s although, before
  the read was invoked, the serving node (``served_by``; for ``msg_get`` and unnamed servers:
  every node of the stream) had applied the expire of s in its current incarnation (since its
  last ``open`` row). Node ``applied_ns`` and history ``time_ns`` are both wall clocks of the
  one machine; runs with the ``clock`` nemesis skew node clocks, so they are skipped here.

Must never: read files or sockets (load.py reads), or count a write as lost that a logged
removal explains.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from jepsen_like.contract import (
    BATCH,
    CLOCK_NEMESIS,
    DIRECT_GET,
    ENTRY,
    EXPIRE,
    FAIL,
    INVOKE,
    MARKER,
    OK,
    OPEN,
    PUBLISH,
    READ_FS,
    REASON_TRANSFER,
    REMOVAL_OPS,
    SEQ_OPS,
    STORE,
    WRITE_FS,
)
from spark.load import collect_findings

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

NS_PER_S: Final = 1_000_000_000
NS_PER_MS: Final = 1_000_000
MAX_EXAMPLES: Final = 20  # findings listed in full in report.json (the counts are exact)
# engine/entries.py's encoding: u8 version | u8 type | i64 ts_ns (every entry kind) | ...
ENTRY_TYPE_EXPIRE: Final = 4
ENTRY_TS_OFFSET: Final = 3  # 1-based, for Spark's substring on the decoded bytes
ENTRY_TS_BYTES: Final = 8


# --- writes and their outcomes ----------------------------------------------------------------


def write_outcomes(history: DataFrame) -> DataFrame:
    """``run, stream, id, f, batch, subject, ttl, outcome, seq, ack_index, ack_ns, abandoned,
    pos`` per written id (``outcome`` null while pending; ``seq`` only when acknowledged;
    ``pos``: the id's 0-based place in its batch)."""
    from pyspark.sql import functions as F

    ops = history.filter(F.col("f").isin(*WRITE_FS))
    single = ops.filter(F.col("f") == PUBLISH).select(
        "run",
        "stream",
        "id",
        "f",
        F.lit(None).cast("string").alias("batch"),
        "subject",
        "ttl",
        "type",
        "seq",
        "index",
        "time_ns",
        F.coalesce(F.col("abandoned"), F.lit(False)).alias("abandoned"),
        F.lit(0).alias("pos"),
    )
    batched = ops.filter(F.col("f") == BATCH).select(
        "run",
        "stream",
        F.posexplode("ids").alias("pos", "id"),
        "f",
        "batch",
        "subject",
        F.lit(None).cast("string").alias("ttl"),
        "type",
        "seqs",
        "index",
        "time_ns",
        F.coalesce(F.col("abandoned"), F.lit(False)).alias("abandoned"),
    )
    batched = batched.select(
        "run",
        "stream",
        "id",
        "f",
        "batch",
        "subject",
        "ttl",
        "type",
        # try_: an ack with fewer seqs than ids (a partial batch) leaves the rest unacknowledged
        # (null), as the checker does, instead of failing the query
        F.when(F.col("type") == OK, F.try_element_at("seqs", F.col("pos") + 1)).alias("seq"),
        "index",
        "time_ns",
        "abandoned",
        "pos",
    )
    done = F.col("type") != INVOKE
    return (
        single.unionByName(batched)
        .groupBy("run", "stream", "id", "f", "batch", "subject", "ttl", "pos")
        .agg(
            F.max(F.when(done, F.col("type"))).alias("outcome"),
            F.max(F.when(F.col("type") == OK, F.col("seq"))).alias("seq"),
            F.max(F.when(F.col("type") == OK, F.col("index"))).alias("ack_index"),
            F.max(F.when(F.col("type") == OK, F.col("time_ns"))).alias("ack_ns"),
            F.max("abandoned").alias("abandoned"),
        )
    )


def acked_writes(outcomes: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return outcomes.filter((F.col("outcome") == OK) & F.col("seq").isNotNull())


# --- what the logs say ------------------------------------------------------------------------


def stores(log: DataFrame, *, transfers: bool = False) -> DataFrame:
    """``run, node, stream, seq, id, batch, ts_ns, index, op`` of stored messages and markers
    (deduplicated: a restarted node logs its re-applied entries again)."""
    from pyspark.sql import functions as F

    rows = log.filter(F.col("op").isin(*SEQ_OPS))
    if not transfers:
        rows = rows.filter(F.coalesce(F.col("reason"), F.lit("")) != REASON_TRANSFER)
    return rows.select("run", "node", "stream", "seq", "id", "batch", "ts_ns", "op").distinct()


def removals(log: DataFrame, *, transfers: bool = False) -> DataFrame:
    """``run, node, stream, seq, through, op`` of removals (``seq`` null for a range purge
    through ``through``); transfer removals only with ``transfers``."""
    from pyspark.sql import functions as F

    rows = log.filter(F.col("op").isin(*REMOVAL_OPS))
    if not transfers:
        rows = rows.filter(F.coalesce(F.col("reason"), F.lit("")) != REASON_TRANSFER)
    return rows.select("run", "node", "stream", "seq", "through", "op").distinct()


def _without_removed(rows: DataFrame, removed: DataFrame, *, per_node: bool) -> DataFrame:
    """``rows`` (``run, stream, seq`` and, ``per_node``, ``node``) whose seq ``removed`` (a
    ``removals`` frame) does not remove: single removals by an equi-join on the seq, range
    purges (few) by their ``through``."""
    from pyspark.sql import functions as F

    keys = ["run", "stream", *(["node"] if per_node else [])]
    single = removed.filter(F.col("seq").isNotNull()).select(*keys, "seq").distinct()
    kept = rows.join(single, [*keys, "seq"], "left_anti")
    ranges = removed.filter(F.col("seq").isNull() & F.col("through").isNotNull())
    ranges = ranges.groupBy(*keys).agg(F.max("through").alias("_through"))
    return (
        kept.join(ranges, keys, "left")
        .filter(F.col("_through").isNull() | (F.col("seq") > F.col("_through")))
        .drop("_through")
    )


def final_state(log: DataFrame) -> DataFrame:
    """``run, node, stream, seq, id``: what each node holds at the end of its log."""
    stored = stores(log, transfers=True).select("run", "node", "stream", "seq", "id")
    return _without_removed(stored, removals(log, transfers=True), per_node=True)


def lost_writes(outcomes: DataFrame, log: DataFrame) -> DataFrame:
    """Acknowledged writes in no node's final state and with no logged removal of their seq:
    ``run, stream, id, f, batch, seq, ack_index, stored_on`` (nodes that ever stored it)."""
    from pyspark.sql import functions as F

    acked = acked_writes(outcomes).join(log.select("run").distinct(), "run", "left_semi")
    final = final_state(log).select("run", "stream", "seq", "id").distinct()
    removed = removals(log).select("run", "stream", "seq", "through").distinct()
    missing = acked.join(final, ["run", "stream", "seq", "id"], "left_anti")
    unexplained = _without_removed(missing, removed, per_node=False)
    ever = (
        stores(log, transfers=True)
        .groupBy("run", "stream", "seq", "id")
        .agg(F.sort_array(F.collect_set("node")).alias("stored_on"))
    )
    return unexplained.join(ever, ["run", "stream", "seq", "id"], "left").select(
        "run",
        "stream",
        "id",
        "f",
        "batch",
        "seq",
        "ack_index",
        F.coalesce(F.col("stored_on"), F.array().cast("array<string>")).alias("stored_on"),
    )


def ack_mismatches(outcomes: DataFrame, log: DataFrame) -> DataFrame:
    """A node stored a different id at an acknowledged seq: ``run, node, stream, seq, id,
    stored_id``."""
    from pyspark.sql import functions as F

    acked = acked_writes(outcomes).select("run", "stream", "seq", "id")
    stored = stores(log).filter(F.col("op") == STORE)
    s = stored.select("run", "node", "stream", "seq", F.col("id").alias("stored_id"))
    joined = acked.join(s, ["run", "stream", "seq"])
    return joined.filter(~F.col("id").eqNullSafe(F.col("stored_id"))).select(
        "run", "node", "stream", "seq", "id", "stored_id"
    )


def phantom_writes(outcomes: DataFrame, log: DataFrame) -> DataFrame:
    """Stored messages nobody (successfully) published: ``run, stream, seq, id, kind, nodes``
    with ``kind`` ``never_published``, ``failed`` or ``no_id``."""
    from pyspark.sql import functions as F

    stored = (
        stores(log)
        .filter(F.col("op") == STORE)
        .join(counter_streams(log), ["run", "stream"], "left_anti")
        .groupBy("run", "stream", "seq", "id")
        .agg(F.sort_array(F.collect_set("node")).alias("nodes"))
    )
    known = outcomes.groupBy("run", "id").agg(
        F.max((F.coalesce(F.col("outcome"), F.lit("")) == FAIL) | F.col("abandoned")).alias(
            "failed"
        )
    )
    joined = stored.join(known, ["run", "id"], "left")
    kind = (
        F.when(F.col("id").isNull(), F.lit("no_id"))
        .when(F.col("failed").isNull(), F.lit("never_published"))
        .when(F.col("failed"), F.lit("failed"))
    )
    return (
        joined.withColumn("kind", kind)
        .filter(F.col("kind").isNotNull())
        .select("run", "stream", "seq", "id", "kind", "nodes")
    )


def duplicates(log: DataFrame) -> DataFrame:
    """One id stored at several seqs: ``run, stream, id, seqs``."""
    from pyspark.sql import functions as F

    return (
        stores(log)
        .filter((F.col("op") == STORE) & F.col("id").isNotNull())
        .groupBy("run", "stream", "id")
        .agg(F.sort_array(F.collect_set("seq")).alias("seqs"))
        .filter(F.size("seqs") > 1)
    )


# --- batches ----------------------------------------------------------------------------------


def batch_anomalies(history: DataFrame, log: DataFrame) -> DataFrame:
    """Per node, batches not stored whole and contiguous: ``run, node, stream, batch, kind,
    expected, stored, seqs, ids`` (``kind`` ``partial``, ``abandoned_stored`` or
    ``non_contiguous``; ``expected`` the invoke's id count)."""
    from pyspark.sql import functions as F

    invokes = (
        history.filter((F.col("f") == BATCH) & (F.col("type") == INVOKE))
        .groupBy("run", "batch")
        .agg(F.first("ids").alias("want_ids"), F.max("abandon").alias("abandon"))
    )
    abandoned = (
        history.filter(F.col("f") == BATCH)
        .groupBy("run", "batch")
        .agg(F.max(F.coalesce(F.col("abandoned"), F.lit(False))).alias("was_abandoned"))
    )
    stored = (
        stores(log)
        .filter((F.col("op") == STORE) & F.col("batch").isNotNull())
        .groupBy("run", "node", "stream", "batch")
        .agg(
            F.sort_array(F.collect_set(F.struct("seq", "id"))).alias("msgs"),
        )
        .select(
            "run",
            "node",
            "stream",
            "batch",
            F.col("msgs.seq").alias("seqs"),
            F.col("msgs.id").alias("ids"),
        )
    )
    joined = stored.join(invokes, ["run", "batch"], "left").join(
        abandoned, ["run", "batch"], "left"
    )
    n = F.size("seqs")
    expected = F.size("want_ids")
    contiguous = (F.array_max("seqs") - F.array_min("seqs") + 1 == n) & F.coalesce(
        F.col("ids") == F.col("want_ids"), F.lit(False)
    )
    kind = (
        F.when(
            F.coalesce(F.col("was_abandoned") | F.col("abandon"), F.lit(False)), "abandoned_stored"
        )
        .when(F.col("want_ids").isNull() | (n != expected), "partial")
        .when(~contiguous, "non_contiguous")
    )
    return (
        joined.withColumn("kind", kind)
        .filter(F.col("kind").isNotNull())
        .select(
            "run",
            "node",
            "stream",
            "batch",
            "kind",
            F.coalesce(expected, F.lit(0)).alias("expected"),
            n.alias("stored"),
            "seqs",
            "ids",
        )
    )


# --- TTL --------------------------------------------------------------------------------------


def entry_ts_ns(entry_b64: Column) -> Column:
    """The ``ts_ns`` an encoded entry carries (every kind has it first; engine/entries.py)."""
    from pyspark.sql import functions as F

    raw = F.unbase64(entry_b64)
    return F.conv(F.hex(F.substring(raw, ENTRY_TS_OFFSET, ENTRY_TS_BYTES)), 16, 10).cast("long")


def entry_type(entry_b64: Column) -> Column:
    from pyspark.sql import functions as F

    return F.conv(F.hex(F.substring(F.unbase64(entry_b64), 2, 1)), 16, 10).cast("int")


def ttl_seconds(texts: list[str]) -> dict[str, int]:
    """``value.ttl`` texts -> seconds as the server parses ``Nats-TTL`` (-1 never, 0 none)."""
    from engine.ttl import parse_message_ttl

    out: dict[str, int] = {}
    for text in texts:
        seconds, ok = parse_message_ttl(text)
        out[text] = seconds if ok else 0
    return out


def stream_limits(log: DataFrame) -> DataFrame:
    """``run, stream, max_age_ns, marker_ttl_s`` from the streams' ``open`` rows (the smallest
    positive value seen: a deadline is never later than that)."""
    from pyspark.sql import functions as F

    opens = log.filter(F.col("op") == OPEN)
    age = F.get_json_object("config", "$.max_age").cast("long")
    marker = F.get_json_object("config", "$.subject_delete_marker_ttl").cast("long")
    return opens.groupBy("run", "stream").agg(
        F.min(F.when(age > 0, age)).alias("max_age_ns"),
        F.min(F.when(marker > 0, F.floor(marker / NS_PER_S))).alias("marker_ttl_s"),
    )


def counter_streams(log: DataFrame) -> DataFrame:
    """``run, stream`` of the counter streams (``allow_msg_counter`` in an ``open`` row)."""
    from pyspark.sql import functions as F

    opens = log.filter(F.col("op") == OPEN)
    counter = F.get_json_object("config", "$.allow_msg_counter") == "true"
    return opens.filter(counter).select("run", "stream").distinct()


def premature_expiries(outcomes: DataFrame, log: DataFrame) -> DataFrame:
    """Expired before the deadline: ``run, stream, seq, id, index, ts_ns, expire_ns,
    deadline_ns, early_ms, nodes`` (``deadline_ns`` null: the message had no deadline)."""
    from pyspark.sql import functions as F

    texts = [r["ttl"] for r in outcomes.select("ttl").distinct().collect() if r["ttl"] is not None]
    parsed = ttl_seconds(texts)
    ttl_map = F.create_map(*[F.lit(x) for kv in parsed.items() for x in kv]) if parsed else None
    entries = log.filter(F.col("op") == ENTRY).select(
        "run",
        "node",
        "stream",
        "index",
        entry_type(F.col("entry")).alias("etype"),
        entry_ts_ns(F.col("entry")).alias("expire_ns"),
    )
    expired = (
        log.filter(F.col("op") == EXPIRE)
        .select("run", "node", "stream", "index", "seq", "id", "ts_ns")
        .join(entries.distinct(), ["run", "node", "stream", "index"], "left")
        .groupBy("run", "stream", "seq", "id", "index", "ts_ns", "expire_ns", "etype")
        .agg(F.sort_array(F.collect_set("node")).alias("nodes"))
    )
    ttls = outcomes.select("run", "id", "ttl").filter(F.col("ttl").isNotNull()).distinct()
    markers = stores(log, transfers=True).filter(F.col("op") == MARKER)
    markers = markers.select("run", "stream", "seq", F.lit(True).alias("marker")).distinct()
    joined = (
        expired.join(ttls, ["run", "id"], "left")
        .join(stream_limits(log), ["run", "stream"], "left")
        .join(markers, ["run", "stream", "seq"], "left")
    )
    ttl_s = ttl_map[F.col("ttl")] if ttl_map is not None else F.lit(None).cast("long")
    by_ttl = F.when(ttl_s > 0, F.col("ts_ns") + ttl_s * NS_PER_S)
    by_age = F.when(F.coalesce(ttl_s, F.lit(0)) != -1, F.col("ts_ns") + F.col("max_age_ns"))
    by_marker = F.when(
        F.coalesce(F.col("marker"), F.lit(False)),
        F.col("ts_ns") + F.col("marker_ttl_s") * NS_PER_S,
    )
    deadline = F.least(by_ttl, by_age, by_marker)
    out = joined.withColumn("deadline_ns", deadline)
    # an expire row whose entry row is missing (older runs log none) cannot be judged
    judged = F.col("expire_ns").isNotNull() & (F.col("etype") == ENTRY_TYPE_EXPIRE)
    premature = F.col("deadline_ns").isNull() | (F.col("expire_ns") < F.col("deadline_ns"))
    return out.filter(judged & premature).select(
        "run",
        "stream",
        "seq",
        "id",
        "index",
        "ts_ns",
        "expire_ns",
        "deadline_ns",
        ((F.col("deadline_ns") - F.col("expire_ns")) / NS_PER_MS).alias("early_ms"),
        "nodes",
    )


def read_ops(history: DataFrame) -> DataFrame:
    """Completed ``ok`` reads that returned a message, with their invoke time:
    ``run, f, process, stream, seq, id, served_by, invoke_index, invoke_ns, index``."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ops = history.filter(F.col("f").isin(*READ_FS))
    w = Window.partitionBy("run", "process").orderBy("index")
    paired = ops.select(
        "*",
        F.lag("index").over(w).alias("invoke_index"),
        F.lag("time_ns").over(w).alias("invoke_ns"),
        F.lag("type").over(w).alias("prev_type"),
    )
    return paired.filter(
        (F.col("type") == OK)
        & (F.col("prev_type") == INVOKE)
        & F.col("seq").isNotNull()
        & ~F.coalesce(F.col("not_found"), F.lit(False))
    ).select(
        "run",
        "f",
        "process",
        "stream",
        "seq",
        "id",
        "served_by",
        "invoke_index",
        "invoke_ns",
        "index",
    )


def served_after_expiry(history: DataFrame, log: DataFrame, skip_runs: list[str]) -> DataFrame:
    """Reads that returned a message its serving node(s) had already expired when the read was
    invoked: ``run, f, stream, seq, id, served_by, invoke_index, expired_on``."""
    from pyspark.sql import functions as F

    reads = read_ops(history)
    if skip_runs:
        reads = reads.filter(~F.col("run").isin(*skip_runs))
    opens = log.filter(F.col("op") == OPEN).select(
        "run", "node", "stream", F.col("applied_ns").alias("open_ns")
    )
    expires = log.filter(F.col("op") == EXPIRE).select(
        "run", "node", "stream", "seq", F.col("applied_ns").alias("expired_ns")
    )
    nodes = log.groupBy("run", "stream").agg(F.countDistinct("node").alias("stream_nodes"))
    # per read and node: the node's incarnation at the read (its last open before the invoke)
    # and whether that incarnation had applied the expire of the returned seq by then
    cand = reads.join(opens, ["run", "stream"]).filter(F.col("open_ns") <= F.col("invoke_ns"))
    cand = cand.groupBy(
        "run", "f", "stream", "seq", "id", "served_by", "invoke_index", "invoke_ns", "node"
    ).agg(F.max("open_ns").alias("since_ns"))
    hit = cand.join(expires, ["run", "node", "stream", "seq"]).filter(
        (F.col("expired_ns") >= F.col("since_ns")) & (F.col("expired_ns") <= F.col("invoke_ns"))
    )
    per_read = (
        hit.groupBy("run", "f", "stream", "seq", "id", "served_by", "invoke_index")
        .agg(F.sort_array(F.collect_set("node")).alias("expired_on"))
        .join(nodes, ["run", "stream"])
    )
    named = (F.col("f") == DIRECT_GET) & F.col("served_by").isNotNull()
    violation = F.when(named, F.array_contains("expired_on", F.col("served_by"))).otherwise(
        F.size("expired_on") >= F.col("stream_nodes")
    )
    return per_read.filter(violation).select(
        "run", "f", "stream", "seq", "id", "served_by", "invoke_index", "expired_on"
    )


# --- results ----------------------------------------------------------------------------------


def clock_skewed_runs(meta: DataFrame) -> list[str]:
    from pyspark.sql import functions as F

    rows = meta.filter(F.array_contains("nemeses", CLOCK_NEMESIS)).select("run").collect()
    return sorted(r["run"] for r in rows)


def analyze_writes(
    history: DataFrame,
    log: DataFrame,
    meta: DataFrame,
    *,
    max_examples: int = MAX_EXAMPLES,
) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """All the checks of this module; returns (results for report.json, frames).

    results: ``writes`` (acknowledged / failed / unknown / pending counts), ``lost``,
    ``ack_mismatch``, ``phantom``, ``duplicate``, ``batches``, ``premature_expiry``,
    ``served_after_expiry`` (each ``{"count", "examples"}``; the last also ``skipped_runs``),
    ``findings`` (their total: 0 on a correct run). frames: ``write_outcomes`` (per run and
    f: counts by outcome)."""
    from pyspark.sql import functions as F

    outcomes = write_outcomes(history).cache()
    try:
        counts = (
            outcomes.groupBy("run", "f", F.coalesce("outcome", F.lit("pending")).alias("outcome"))
            .count()
            .orderBy("run", "f", "outcome")
            .collect()
        )
        by_outcome: dict[str, int] = {}
        for r in counts:
            by_outcome[r["outcome"]] = by_outcome.get(r["outcome"], 0) + int(r["count"])
        skipped = clock_skewed_runs(meta)
        checks = collect_findings(
            {
                "lost": (lost_writes(outcomes, log), ["run", "stream", "seq"]),
                "ack_mismatch": (ack_mismatches(outcomes, log), ["run", "stream", "seq", "node"]),
                "phantom": (phantom_writes(outcomes, log), ["run", "stream", "seq"]),
                "duplicate": (duplicates(log), ["run", "stream", "id"]),
                "batches": (batch_anomalies(history, log), ["run", "stream", "batch", "node"]),
                "premature_expiry": (premature_expiries(outcomes, log), ["run", "stream", "seq"]),
                "served_after_expiry": (
                    served_after_expiry(history, log, skipped),
                    ["run", "invoke_index"],
                ),
            },
            max_examples,
        )
    finally:
        outcomes.unpersist()
    checks["served_after_expiry"]["skipped_runs"] = skipped
    results: dict[str, Any] = {
        "writes": {"by_outcome": dict(sorted(by_outcome.items()))},
        **checks,
        "findings": sum(int(c["count"]) for c in checks.values()),
    }
    frames = {"write_outcomes": [r.asDict() for r in counts]}
    return results, frames
