"""Read-after-write divergence: was each Direct Get / MSG.GET read stale, and by how much.

Inputs are the DataFrames of ``spark/load.py`` (one or many runs, told apart by ``run``):

* history: ``run, index, time_ns, process, node, type, f, value`` (``value`` the op's JSON
  object, as a JSON string or a struct; load.py's extracted value columns are used if there);
* leaders: ``run, time_ns, stream, leader``;
* log (optional): the replicas' ``nodes/*/log.jsonl`` rows, ``run, node, stream, index, op,
  seq, applied_ns`` (+ ``through`` for range purges).

The transforms (``pair_ops``, ``reads``, ``acked_writes``, ``removals``, ``fault_windows``,
``with_role``, ``with_fault``, ``judge``, ``apply_lag``, the timelines) are DataFrame ->
DataFrame functions; ``judge_runs`` chains them into one row per read, ``summarize`` turns
that into the numbers of ``report.json`` and the small frames the report plots (lists of
dicts), and ``analyze_staleness`` does both. Two of them look at the driver first: the fault
windows (one per nemesis start) and range purges (one per purge) are collected to build the
joins, so they stay one small broadcast each.

What counts as stale (the semantics; each is a deliberate choice):

* Order is the history's ``index``: the harness records ops in the real-time order it observed
  them, so a write whose ``ok`` has a smaller index than a read's ``invoke`` was acknowledged
  before the read began. Only reads that completed ``ok`` are judged (a failed or timed-out
  read returned nothing to judge; they are counted as skipped).
* Acknowledged writes are ``publish`` ``ok`` (its ``seq``) and ``batch`` ``ok`` (each of
  ``seqs``, on the batch's ``subject``). A write whose outcome is unknown (``info``) or ``fail``
  never makes a read stale: the reader cannot have been owed it. A read that returns a newer
  message than any acknowledged one (an ``info`` write that was applied, a delete marker) is
  fresh.
* ``last_by_subj`` read of subject S: the write it owes is L, the acknowledged write to S with
  the highest ``seq`` among those acknowledged before the read's invoke. The read is stale when
  it returned a lower seq than L (or ``not_found``). Lag in sequences = ``L.seq`` minus the
  returned seq; for ``not_found`` there is no returned seq, and the replica lacked every write
  to S, so the lag counts from the first acknowledged write to S: ``L.seq - first.seq + 1``.
* ``seq`` read of s: stale when it returned ``not_found`` although a write with seq s was
  acknowledged before the invoke (then L is that write). A replica lacking s (replicas apply in
  log order) lacked every later seq too, so lag in sequences = the stream's highest
  acknowledged seq before the invoke minus s, plus one. A ``seq`` read that returned a message
  is fresh (whether it is the right message is writes.py's question, not staleness).
* Lag in ms = read invoke time minus L's acknowledgement time: a replica that had not applied L
  by then was at least that far behind the leader's acknowledgement (a lower bound on its
  apply lag, measured on the harness clock only).
* Removals (``expire``, ``delete`` of any reason, ``purge``, and a range purge's ``through``)
  logged by any node: if L's seq was removed no later than the read completed (earliest
  ``applied_ns`` over nodes <= the read's completion time; same machine, so comparable clocks
  unless a clock nemesis skews a node), the read is not judged stale but counted as
  ``explained_by_removal``. Conservative by design: if L was removed, an older unremoved write
  the read also missed is not looked for (no false stale reads, rare missed ones). Without log
  rows nothing is explained.
* Role: ``leader`` when the serving node (``served_by``) was the stream's leader in the
  ``leaders.jsonl`` sample nearest before the read's invoke time (samples are ~0.5 s apart, so
  around an election the role is approximate), ``follower`` otherwise, ``unknown`` when there
  is no sample, the sample has no leader, or the server did not name the serving node
  (nats-server). For ``msg_get``, ``served_by`` is the client's node (the leader answers
  through it).
* Fault period: a nemesis ``<x>-start`` op (process ``nemesis``) opens a window at its invoke
  index, the next ``<x>-stop`` closes it at its completion index (no stop: the end of the
  history; overlapping windows of one fault are merged). A read whose invoke falls in
  windows is labelled with their names joined by ``+`` (``kill``, ``kill+partition``), else
  ``none``. Effects that outlast a stop (recovery) count as ``none``.
* MSG.GET goes through the leader, so a stale ``msg_get`` is a violation (must be 0 on a
  correct run); Direct Get may be served by any replica, its staleness is expected and measured.

Apply lag (plotted next to staleness): for every (stream, index) a node applied, that node's
first ``applied_ns`` for it minus the earliest ``applied_ns`` of that index over all nodes.

Must never: read sockets or files (load.py does that), import cluster/ or any of jepsen_like/
but its contract (the run-directory names, jepsen_like/contract.py), or collect raw rows to the
driver (only aggregates, bounded examples, fault windows and purges).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from typing import Any, Final

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from jepsen_like.contract import (
    BATCH,
    DIRECT_GET,
    INVOKE,
    MSG_GET,
    NEMESIS_PROCESS,
    OK,
    OPEN,
    PUBLISH,
    READ_FS,
    REMOVAL_OPS,
    TRANSFER,
    WRITE_FS,
)

NO_FAULT: Final = "none"
UNKNOWN: Final = "unknown"
NS_PER_MS: Final = 1_000_000
NS_PER_S: Final = 1_000_000_000
PERCENTILES: Final = (0.5, 0.99)
MAX_VIOLATION_EXAMPLES: Final = 20  # stale MSG.GETs listed in report.json (the count is exact)
MAX_STALE_EXAMPLES: Final = 20  # Direct Get stale reads listed as examples
MAX_INLINE_PURGES: Final = 200  # range purges matched by one predicate; more: a join
TIMELINE_BUCKETS: Final = 200  # points per run in the over-time plots, at most
MIN_TIMELINE_BUCKET_NS: Final = 100 * NS_PER_MS
LAG_MS_BIN: Final = 10.0  # histogram bin width of lag in ms (counts are binned in Spark)

HISTORY_COLUMNS: Final = ("run", "index", "time_ns", "process", "node", "type", "f", "value")
LEADERS_COLUMNS: Final = ("run", "time_ns", "stream", "leader")
LOG_COLUMNS: Final = ("run", "node", "stream", "index", "op", "seq", "applied_ns")

# the parts of an op's value that staleness reads (workloads.py docstring has the full shapes)
VALUE_SCHEMA: Final = T.StructType(
    [
        T.StructField("stream", T.StringType()),
        T.StructField("id", T.StringType()),
        T.StructField("subject", T.StringType()),
        T.StructField("seq", T.LongType()),
        T.StructField("seqs", T.ArrayType(T.LongType())),
        T.StructField("ids", T.ArrayType(T.StringType())),
        T.StructField(
            "request",
            T.StructType(
                [
                    T.StructField("seq", T.LongType()),
                    T.StructField("last_by_subj", T.StringType()),
                ]
            ),
        ),
        T.StructField("not_found", T.BooleanType()),
        T.StructField("served_by", T.StringType()),
    ]
)


class StalenessInputError(ValueError):
    """A frame lacks a column the analysis needs (a loader/contract mismatch)."""


def _require(df: DataFrame, columns: Iterable[str], what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise StalenessInputError(f"{what} frame lacks columns {missing} (has {df.columns})")


# load.py pulls these out of ``value`` already: reusing them spares a JSON parse per op
_EXTRACTED: Final = (
    "stream",
    "id",
    "subject",
    "seq",
    "seqs",
    "ids",
    "req_seq",
    "req_last_by_subj",
    "not_found",
    "served_by",
)


def _parsed_value(df: DataFrame) -> Column:
    """``value`` as VALUE_SCHEMA: from load.py's extracted columns when present, else parsed
    from the JSON text (or from a struct, through its JSON)."""
    if all(c in df.columns for c in _EXTRACTED):
        request = F.struct(
            F.col("req_seq").cast("long").alias("seq"),
            F.col("req_last_by_subj").alias("last_by_subj"),
        )
        fields = [
            F.col(f.name).cast(f.dataType).alias(f.name)
            for f in VALUE_SCHEMA.fields
            if f.name != "request"
        ]
        return F.struct(*fields, request.alias("request"))
    dtype = df.schema["value"].dataType
    text = F.col("value") if isinstance(dtype, T.StringType) else F.to_json(F.col("value"))
    return F.from_json(text, VALUE_SCHEMA)


def pair_ops(history: DataFrame, fs: Sequence[str] | None = None) -> DataFrame:
    """Each invoke of an op in ``fs`` (None: every op) with its completion: the process's
    next op (a process runs one op at a time). Columns: run, process, client_node, f,
    invoke_index, invoke_ns, invoke_value, outcome (ok|fail|info|none), complete_index,
    complete_ns, value (parsed completion value, else the invoke's)."""
    _require(history, HISTORY_COLUMNS, "history")
    chosen = history if fs is None else history.filter(F.col("f").isin(list(fs)))
    ops = chosen.select(
        "run",
        F.col("process").cast("string").alias("process"),
        "node",
        "index",
        "time_ns",
        "type",
        "f",
        _parsed_value(history).alias("v"),
    )
    by_process = Window.partitionBy("run", "process").orderBy("index")
    nxt = {c: F.lead(c).over(by_process) for c in ("type", "index", "time_ns", "v")}
    completed = nxt["type"].isNotNull() & (nxt["type"] != INVOKE)
    paired = ops.select(
        "*",
        F.when(completed, nxt["type"]).otherwise(F.lit("none")).alias("outcome"),
        F.when(completed, nxt["index"]).alias("complete_index"),
        F.when(completed, nxt["time_ns"]).alias("complete_ns"),
        F.when(completed, nxt["v"]).alias("cv"),
    ).filter(F.col("type") == INVOKE)
    return paired.select(
        "run",
        "process",
        F.col("node").alias("client_node"),
        "f",
        F.col("index").alias("invoke_index"),
        F.col("time_ns").alias("invoke_ns"),
        F.col("v").alias("invoke_value"),
        "outcome",
        "complete_index",
        "complete_ns",
        F.coalesce(F.col("cv"), F.col("v")).alias("value"),
    )


def reads(history: DataFrame) -> DataFrame:
    """Every direct_get/msg_get with its answer. Columns: run, stream, kind, process,
    client_node, invoke_index, invoke_ns, outcome, complete_index, complete_ns, mode
    (seq|last_by_subj), req_seq, req_subject, ret_seq, ret_id, not_found, served_by."""
    ops = pair_ops(history, READ_FS)
    request = F.col("invoke_value.request")
    ok = F.col("outcome") == OK
    return ops.select(
        "run",
        F.col("invoke_value.stream").alias("stream"),
        F.col("f").alias("kind"),
        "process",
        "client_node",
        "invoke_index",
        "invoke_ns",
        "outcome",
        "complete_index",
        "complete_ns",
        F.when(request.last_by_subj.isNotNull(), F.lit("last_by_subj"))
        .otherwise(F.lit("seq"))
        .alias("mode"),
        request.seq.alias("req_seq"),
        request.last_by_subj.alias("req_subject"),
        F.when(ok, F.col("value.seq")).alias("ret_seq"),
        F.when(ok, F.col("value.id")).alias("ret_id"),
        (ok & F.coalesce(F.col("value.not_found"), F.lit(False))).alias("not_found"),
        F.when(ok, F.col("value.served_by")).alias("served_by"),
    )


def acked_writes(history: DataFrame) -> DataFrame:
    """Acknowledged writes, one row per stored message: run, stream, subject, seq, id,
    ack_index, ack_ns. Only ``ok`` completions (info/fail writes are not owed to anyone)."""
    _require(history, HISTORY_COLUMNS, "history")
    ok = history.filter((F.col("type") == OK) & F.col("f").isin(list(WRITE_FS))).select(
        "run",
        "f",
        F.col("index").alias("ack_index"),
        F.col("time_ns").alias("ack_ns"),
        _parsed_value(history).alias("v"),
    )
    published = ok.filter((F.col("f") == PUBLISH) & F.col("v.seq").isNotNull()).select(
        "run",
        F.col("v.stream").alias("stream"),
        F.col("v.subject").alias("subject"),
        F.col("v.seq").alias("seq"),
        F.col("v.id").alias("id"),
        "ack_index",
        "ack_ns",
    )
    batched = (
        ok.filter((F.col("f") == BATCH) & F.col("v.seqs").isNotNull())
        .select(
            "run",
            "ack_index",
            "ack_ns",
            F.col("v.stream").alias("stream"),
            F.col("v.subject").alias("subject"),
            F.explode(F.arrays_zip(F.col("v.seqs").alias("seq"), F.col("v.ids").alias("id"))).alias(
                "m"
            ),
        )
        .select(
            "run",
            "stream",
            "subject",
            F.col("m.seq").alias("seq"),
            F.col("m.id").alias("id"),
            "ack_index",
            "ack_ns",
        )
    )
    return published.unionByName(batched)


def removals(log: DataFrame) -> DataFrame:
    """When each message was first removed anywhere: run, stream, seq, through, removed_ns.
    A row removes ``seq`` (through null), or is a range purge of every seq <= ``through``."""
    _require(log, LOG_COLUMNS, "log")
    through = F.col("through") if "through" in log.columns else F.lit(None)
    rows = log.filter(F.col("op").isin(list(REMOVAL_OPS))).select(
        "run",
        "stream",
        F.col("seq").cast("long").alias("seq"),
        F.when(F.col("seq").isNull(), through.cast("long")).alias("through"),
        F.col("applied_ns").cast("long").alias("applied_ns"),
    )
    rows = rows.filter(F.col("seq").isNotNull() | F.col("through").isNotNull())
    return rows.groupBy("run", "stream", "seq", "through").agg(
        F.min("applied_ns").alias("removed_ns")
    )


def fault_windows(history: DataFrame) -> DataFrame:
    """Nemesis fault windows: run, fault, start_index, end_index, start_ns, end_ns. The k-th
    ``<x>-start`` pairs with the k-th ``<x>-stop``; an unstopped fault lasts to the end."""
    _require(history, HISTORY_COLUMNS, "history")
    nemesis = history.filter(
        (F.col("process").cast("string") == NEMESIS_PROCESS)
        & F.col("f").rlike(r"^.+-(start|stop)$")
    )
    ops = pair_ops(nemesis).select(
        "run",
        F.regexp_extract("f", r"^(.+)-(start|stop)$", 1).alias("fault"),
        F.regexp_extract("f", r"^(.+)-(start|stop)$", 2).alias("phase"),
        "invoke_index",
        "invoke_ns",
        F.coalesce("complete_index", "invoke_index").alias("done_index"),
        F.coalesce("complete_ns", "invoke_ns").alias("done_ns"),
    )
    nth = Window.partitionBy("run", "fault").orderBy("invoke_index")
    starts = (
        ops.filter(F.col("phase") == "start")
        .withColumn("k", F.row_number().over(nth))
        .select(
            "run",
            "fault",
            "k",
            F.col("invoke_index").alias("start_index"),
            F.col("invoke_ns").alias("start_ns"),
        )
    )
    stops = (
        ops.filter(F.col("phase") == "stop")
        .withColumn("k", F.row_number().over(nth))
        .select(
            "run", "fault", "k", F.col("done_index").alias("e_i"), F.col("done_ns").alias("e_t")
        )
    )
    ends = history.groupBy("run").agg(
        F.max("index").alias("last_index"), F.max("time_ns").alias("last_ns")
    )
    return (
        starts.join(stops, ["run", "fault", "k"], "left")
        .join(ends, "run", "left")
        .select(
            "run",
            "fault",
            "start_index",
            F.coalesce("e_i", "last_index").alias("end_index"),
            "start_ns",
            F.coalesce("e_t", "last_ns").alias("end_ns"),
        )
    )


def with_role(rs: DataFrame, leaders: DataFrame) -> DataFrame:
    """Adds ``leader`` (the nearest sample at or before invoke_ns) and ``role``."""
    _require(leaders, LEADERS_COLUMNS, "leaders")
    samples = leaders.select(
        "run",
        "stream",
        F.col("time_ns").alias("_t"),
        F.lit(0).alias("_o"),  # a sample at the same ns as an invoke is before it
        F.struct(F.col("leader").alias("leader")).alias("_sample"),
    )
    tagged = rs.select("*", F.col("invoke_ns").alias("_t"), F.lit(1).alias("_o"))
    merged = tagged.unionByName(samples, allowMissingColumns=True)
    before = (
        Window.partitionBy("run", "stream")
        .orderBy("_t", "_o")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    nearest = F.last("_sample", ignorenulls=True).over(before)
    out = merged.withColumn("leader", nearest.leader).filter(F.col("_o") == 1)
    role = (
        F.when(F.col("served_by").isNull() | F.col("leader").isNull(), F.lit(UNKNOWN))
        .when(F.col("served_by") == F.col("leader"), F.lit("leader"))
        .otherwise(F.lit("follower"))
    )
    return out.withColumn("role", role).drop("_t", "_o", "_sample")


def merge_windows(windows: Iterable[Any]) -> list[tuple[str, str, int, int]]:
    """(run, fault, start_index, end_index) rows, overlapping windows of one fault in one run
    merged (a start before the previous stop would otherwise count a read twice), sorted."""
    spans: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for w in windows:
        spans.setdefault((w["run"], w["fault"]), []).append((w["start_index"], w["end_index"]))
    out: list[tuple[str, str, int, int]] = []
    for (run, fault), pairs in sorted(spans.items()):
        pairs.sort()
        cur_start, cur_end = pairs[0]
        for start, end in pairs[1:]:
            if start <= cur_end:
                cur_end = max(cur_end, end)
            else:
                out.append((run, fault, cur_start, cur_end))
                cur_start, cur_end = start, end
        out.append((run, fault, cur_start, cur_end))
    return out


def with_fault(rs: DataFrame, windows: DataFrame) -> DataFrame:
    """Adds ``fault``: the names of the windows holding invoke_index joined by ``+``, else
    ``none``. The windows (one per nemesis start: few) are collected once and broadcast; one
    join per fault kind, each matching at most one window per read."""
    merged = merge_windows(windows.collect())
    kinds = sorted({fault for _, fault, _, _ in merged})
    if not kinds:
        return rs.withColumn("fault", F.lit(NO_FAULT))
    table = rs.sparkSession.createDataFrame(
        merged, "_wr STRING, _wf STRING, _ws BIGINT, _we BIGINT"
    )
    out = rs
    flags = []
    for i, kind in enumerate(kinds):
        flag = f"_in{i}"
        w = table.filter(F.col("_wf") == kind).drop("_wf")
        cond = (out["run"] == w["_wr"]) & out["invoke_index"].between(w["_ws"], w["_we"])
        out = out.join(F.broadcast(w), cond, "left")
        out = out.withColumn(flag, F.col("_ws").isNotNull()).drop("_wr", "_ws", "_we")
        flags.append(F.when(F.col(flag), F.lit(kind)))
    label = F.concat_ws("+", *flags)
    out = out.withColumn("fault", F.when(label == "", F.lit(NO_FAULT)).otherwise(label))
    return out.drop(*[f"_in{i}" for i in range(len(kinds))])


def _latest_before(rs: DataFrame, writes: DataFrame, keys: Sequence[str], prefix: str) -> DataFrame:
    """For each read, the highest-seq write over ``keys`` acknowledged before its invoke
    (``<prefix>_seq, <prefix>_ack_ns``) and the lowest such seq (``<prefix>_min_seq``): an
    as-of join done as one sort, writes and reads merged in history-index order."""
    w = writes.select(
        *keys,
        F.col("ack_index").alias("_k"),
        F.struct(F.col("seq").alias("seq"), F.col("ack_ns").alias("ack_ns")).alias("_w"),
        F.col("seq").alias("_s"),
    )
    r = rs.select("*", F.col("invoke_index").alias("_k"))
    merged = r.unionByName(w, allowMissingColumns=True)
    before = (
        Window.partitionBy(*keys)
        .orderBy("_k")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    top = F.max("_w").over(before)  # structs order by their first field: seq
    return (
        merged.withColumn(f"{prefix}_seq", top.seq)
        .withColumn(f"{prefix}_ack_ns", top.ack_ns)
        .withColumn(f"{prefix}_min_seq", F.min("_s").over(before))
        .filter(F.col("_w").isNull())
        .drop("_k", "_w", "_s")
    )


def _removed_by(rs: DataFrame, removed: DataFrame) -> DataFrame:
    """Adds ``explained``: the owed write (expected_seq) was removed somewhere no later than
    the read completed."""
    point = removed.filter(F.col("seq").isNotNull()).select(
        F.col("run").alias("_rr"),
        F.col("stream").alias("_rs"),
        F.col("seq").alias("_rq"),
        F.col("removed_ns").alias("_pt"),
    )
    cond = (
        (rs["run"] == point["_rr"])
        & (rs["stream"] == point["_rs"])
        & (rs["expected_seq"] == point["_rq"])
    )
    out = rs.join(point, cond, "left").drop("_rr", "_rs", "_rq")
    # range purges are rare (an operator's purge): inline them as one predicate when few,
    # else a broadcast join keeping the earliest purge covering each read's owed seq
    ranges = removed.filter(F.col("seq").isNull()).limit(MAX_INLINE_PURGES + 1).collect()
    if len(ranges) <= MAX_INLINE_PURGES:
        by_range: Column = F.lit(False)
        for r in ranges:
            by_range = by_range | (
                (F.col("run") == r["run"])
                & (F.col("stream") == r["stream"])
                & (F.col("expected_seq") <= r["through"])
                & (F.col("complete_ns") >= r["removed_ns"])
            )
        out = out.withColumn("_ft", F.when(by_range, F.lit(1)))
    else:
        out = _covered_by_range(out, removed)
    by_point = F.col("_pt").isNotNull() & (F.col("_pt") <= F.col("complete_ns"))
    explained = F.col("expected_seq").isNotNull() & (by_point | F.col("_ft").isNotNull())
    return out.withColumn("explained", explained).drop("_pt", "_ft")


def _covered_by_range(out: DataFrame, removed: DataFrame) -> DataFrame:
    ranges = removed.filter(F.col("seq").isNull()).select(
        F.col("run").alias("_rr"),
        F.col("stream").alias("_rs"),
        F.col("through").alias("_th"),
        F.col("removed_ns").alias("_ft"),
    )
    keys = out.select("run", "invoke_index", "stream", "expected_seq", "complete_ns")
    cond = (
        (keys["run"] == ranges["_rr"])
        & (keys["stream"] == ranges["_rs"])
        & (keys["expected_seq"] <= ranges["_th"])
        & (ranges["_ft"] <= keys["complete_ns"])
    )
    covered = (
        keys.join(F.broadcast(ranges), cond, "inner")
        .groupBy("run", "invoke_index")
        .agg(F.min("_ft").alias("_ft"))
    )
    return out.join(covered, ["run", "invoke_index"], "left")


def judge(rs: DataFrame, writes: DataFrame, removed: DataFrame | None = None) -> DataFrame:
    """Judges every read: adds expected_seq, expected_ack_ns, stale, explained_by_removal,
    lag_seqs, lag_ms (the module docstring defines them). A read that did not complete ``ok``
    is kept (its outcome tells why) but is never stale."""
    keyed = writes.select("run", "stream", "subject", "seq", "ack_index", "ack_ns")

    subj = _latest_before(
        rs.filter(F.col("mode") == "last_by_subj").withColumn("subject", F.col("req_subject")),
        keyed,
        ["run", "stream", "subject"],
        "l",
    ).drop("subject")
    returned = F.coalesce(F.col("ret_seq"), F.lit(0))
    subj = subj.select(
        "*",
        F.col("l_seq").alias("expected_seq"),
        F.col("l_ack_ns").alias("expected_ack_ns"),
        (F.col("l_seq").isNotNull() & (F.col("not_found") | (F.col("l_seq") > returned))).alias(
            "_owed"
        ),
        F.when(F.col("not_found"), F.col("l_seq") - F.col("l_min_seq") + 1)
        .otherwise(F.col("l_seq") - returned)
        .alias("_lag_seqs"),
    ).drop("l_seq", "l_ack_ns", "l_min_seq")

    by_seq = rs.filter(F.col("mode") == "seq")
    tail = _latest_before(by_seq, keyed, ["run", "stream"], "t")
    first_ack = keyed.groupBy("run", "stream", "seq").agg(
        F.min(F.struct("ack_index", "ack_ns")).alias("_a")
    )
    at = first_ack.select(
        F.col("run").alias("_ar"),
        F.col("stream").alias("_as"),
        F.col("seq").alias("_aq"),
        F.col("_a.ack_index").alias("_ai"),
        F.col("_a.ack_ns").alias("_an"),
    )
    cond = (
        (tail["run"] == at["_ar"])
        & (tail["stream"] == at["_as"])
        & (tail["req_seq"] == at["_aq"])
        & (at["_ai"] < tail["invoke_index"])
    )
    seqd = (
        tail.join(at, cond, "left")
        .select(
            *tail.columns,
            F.when(F.col("_ai").isNotNull(), F.col("req_seq")).alias("expected_seq"),
            F.col("_an").alias("expected_ack_ns"),
            (F.col("_ai").isNotNull() & F.col("not_found")).alias("_owed"),
            (F.col("t_seq") - F.col("req_seq") + 1).alias("_lag_seqs"),
        )
        .drop("t_seq", "t_ack_ns", "t_min_seq")
    )

    judged = subj.unionByName(seqd)
    if removed is not None:
        judged = _removed_by(judged, removed)
    else:
        judged = judged.withColumn("explained", F.lit(False))
    owed = F.col("_owed") & (F.col("outcome") == OK)
    stale = owed & ~F.col("explained")
    return judged.select(
        *[c for c in judged.columns if c not in ("_owed", "_lag_seqs", "explained")],
        stale.alias("stale"),
        (owed & F.col("explained")).alias("explained_by_removal"),
        F.when(stale, F.col("_lag_seqs")).cast("long").alias("lag_seqs"),
        F.when(stale, (F.col("invoke_ns") - F.col("expected_ack_ns")) / NS_PER_MS).alias("lag_ms"),
    )


def apply_lag(log: DataFrame) -> DataFrame:
    """Per (run, stream, node, index): applied_ns (the node's first application) and lag_ms
    behind the first node that applied that index."""
    _require(log, LOG_COLUMNS, "log")
    applied = (
        log.filter(F.col("index").isNotNull() & ~F.col("op").isin(OPEN, TRANSFER))
        .groupBy("run", "stream", "node", "index")
        .agg(F.min("applied_ns").alias("applied_ns"))
    )
    first = Window.partitionBy("run", "stream", "index")
    return applied.withColumn("first_ns", F.min("applied_ns").over(first)).withColumn(
        "lag_ms", (F.col("applied_ns") - F.col("first_ns")) / NS_PER_MS
    )


# --- aggregation to numbers ---------------------------------------------------------------

# the breakdowns of report.json, all computed by one grouping-sets aggregation
BREAKDOWNS: Final[dict[str, tuple[str, ...]]] = {
    "by_kind": ("kind",),
    "by_node": ("kind", "served_by"),
    "by_role": ("kind", "role"),
    "by_fault": ("kind", "fault"),
    "groups": ("kind", "served_by", "role", "fault"),
    "by_run": ("run", "kind"),
}
_GROUP_COLUMNS: Final = ("run", "kind", "served_by", "role", "fault")
_EXAMPLE_COLUMNS: Final = (
    "run",
    "stream",
    "kind",
    "mode",
    "process",
    "client_node",
    "served_by",
    "role",
    "fault",
    "invoke_index",
    "invoke_ns",
    "req_seq",
    "req_subject",
    "ret_seq",
    "not_found",
    "expected_seq",
    "lag_seqs",
    "lag_ms",
)


def _num(value: Any) -> Any:
    """JSON-friendly numbers: NaN to None, floats rounded to the microsecond of a ms."""
    if isinstance(value, float):
        return None if math.isnan(value) else round(value, 3)
    return value


def summary_aggs() -> list[Column]:
    """reads, stale, explained_by_removal and lag p50/p99/max (seqs and ms) of a group of
    judged ``ok`` reads."""
    aggs = [
        F.count(F.lit(1)).alias("reads"),
        F.sum(F.col("stale").cast("long")).alias("stale"),
        F.sum(F.col("explained_by_removal").cast("long")).alias("explained_by_removal"),
    ]
    for col in ("lag_seqs", "lag_ms"):
        for p in PERCENTILES:
            aggs.append(F.percentile(col, p).alias(f"{col}_p{round(p * 100)}"))
        aggs.append(F.max(col).alias(f"{col}_max"))
    return aggs


def _summary(row: dict[str, Any]) -> dict[str, Any]:
    reads_n = int(row.get("reads") or 0)
    stale_n = int(row.get("stale") or 0)
    out: dict[str, Any] = {
        "reads": reads_n,
        "stale": stale_n,
        "stale_rate": round(stale_n / reads_n, 6) if reads_n else 0.0,
        "explained_by_removal": int(row.get("explained_by_removal") or 0),
    }
    for col in ("lag_seqs", "lag_ms"):
        stats = {
            f"p{round(p * 100)}": _num(row.get(f"{col}_p{round(p * 100)}")) for p in PERCENTILES
        }
        out[col] = {**stats, "max": _num(row.get(f"{col}_max"))}
    return out


def breakdowns(judged: DataFrame) -> dict[str, list[dict[str, Any]]]:
    """Every BREAKDOWNS entry: one row per group with its _summary, sorted by the keys."""
    ok = judged.filter(F.col("outcome") == OK).select(
        "run",
        "kind",
        F.coalesce(F.col("served_by"), F.lit(UNKNOWN)).alias("served_by"),
        "role",
        "fault",
        "stale",
        "explained_by_removal",
        "lag_seqs",
        "lag_ms",
    )
    sets = [[F.col(c) for c in keys] for keys in BREAKDOWNS.values()]
    gid = F.grouping_id(*_GROUP_COLUMNS).alias("_gid")
    rows = ok.groupingSets(sets, *_GROUP_COLUMNS).agg(*summary_aggs(), gid).collect()
    # grouping_id has a 1 bit for every column NOT grouped, first column = highest bit
    width = len(_GROUP_COLUMNS)
    by_gid = {
        sum(1 << (width - 1 - i) for i, c in enumerate(_GROUP_COLUMNS) if c not in keys): name
        for name, keys in BREAKDOWNS.items()
    }
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in BREAKDOWNS}
    for r in rows:
        row = r.asDict()
        name = by_gid[row["_gid"]]
        keys = BREAKDOWNS[name]
        out[name].append({**{k: row[k] for k in keys}, **_summary(row)})
    for name, keys in BREAKDOWNS.items():
        out[name].sort(key=lambda g: tuple(str(g[k]) for k in keys))
    return out


def staleness_timeline(judged: DataFrame, history: DataFrame) -> DataFrame:
    """``ok`` reads and stale reads per (run, kind, time bucket); t_s = bucket start in seconds
    from the run's first history op. At most about TIMELINE_BUCKETS buckets per run; unordered."""
    ok = judged.filter(F.col("outcome") == OK)
    b = F.floor((F.col("invoke_ns") - F.col("_t0")) / F.col("_bucket"))
    return (
        ok.join(F.broadcast(_buckets(history)), "run")
        .groupBy("run", "kind", b.alias("_b"), "_bucket")
        .agg(F.count(F.lit(1)).alias("reads"), F.sum(F.col("stale").cast("long")).alias("stale"))
        .select(
            "run",
            "kind",
            (F.col("_b") * F.col("_bucket") / NS_PER_S).alias("t_s"),
            "reads",
            "stale",
        )
    )


def _buckets(history: DataFrame) -> DataFrame:
    """Per run: _t0 and _t1 (first and last op times) and _bucket (timeline bucket width, ns:
    about 1/TIMELINE_BUCKETS of the run rounded up to 1, 2 or 5 x 10^k, so that plotted bins
    are round lengths of time)."""
    spans = history.groupBy("run").agg(F.min("time_ns").alias("_t0"), F.max("time_ns").alias("_t1"))
    raw = F.greatest(
        F.lit(MIN_TIMELINE_BUCKET_NS), F.ceil((F.col("_t1") - F.col("_t0")) / TIMELINE_BUCKETS)
    ).cast("double")
    power = F.pow(F.lit(10.0), F.floor(F.log10(raw)))
    mantissa = raw / power
    step = F.when(mantissa <= 1, 1).when(mantissa <= 2, 2).when(mantissa <= 5, 5).otherwise(10)
    width = F.ceil(step * power).cast("long")
    return spans.select("run", "_t0", "_t1", width.alias("_bucket"))


def apply_lag_timeline(lags: DataFrame, history: DataFrame) -> DataFrame:
    """Apply lag per (run, node, time bucket): mean_ms and max_ms, t_s as in the staleness
    timeline (an index's first application time against the run's first history op);
    unordered."""
    b = F.floor((F.col("first_ns") - F.col("_t0")) / F.col("_bucket"))
    return (
        lags.join(F.broadcast(_buckets(history)), "run")
        .groupBy("run", "node", b.alias("_b"), "_bucket")
        .agg(F.avg("lag_ms").alias("mean_ms"), F.max("lag_ms").alias("max_ms"))
        .select(
            "run",
            "node",
            (F.col("_b") * F.col("_bucket") / NS_PER_S).alias("t_s"),
            "mean_ms",
            "max_ms",
        )
    )


def _sort_key(value: Any) -> tuple[int, Any]:
    return (0, 0) if value is None else (1, value)  # nulls first, as Spark's ascending order


def collect_frames(
    frames: dict[str, tuple[DataFrame, Sequence[str]]],
) -> dict[str, list[dict[str, Any]]]:
    """Small aggregated frames to the driver in ONE Spark job (each a job of its own costs a
    few hundred ms of planning and scheduling however few its rows): ``{name: (frame, order)}``
    -> ``{name: rows as dicts, sorted by the ``order`` columns ascending, nulls first}``."""
    parts = [
        df.select(
            F.lit(name).alias("_frame"),
            F.to_json(
                F.struct(*[F.col(c) for c in df.columns]), {"ignoreNullFields": "false"}
            ).alias("_row"),
        )
        for name, (df, _order) in frames.items()
    ]
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in frames}
    if not parts:
        return out
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part)
    for r in union.collect():
        out[r["_frame"]].append({k: _num(v) for k, v in json.loads(r["_row"]).items()})
    for name, (_df, order) in frames.items():
        out[name].sort(key=lambda row: tuple(_sort_key(row[c]) for c in order))
    return out


def judge_runs(history: DataFrame, leaders: DataFrame, log: DataFrame | None = None) -> DataFrame:
    """The whole per-read chain: reads -> role -> fault period -> judged (every read, one
    row each; ``outcome`` != ok rows are not judged)."""
    placed = with_fault(with_role(reads(history), leaders), fault_windows(history))
    return judge(placed, acked_writes(history), removals(log) if log is not None else None)


def analyze_staleness(
    history: DataFrame,
    leaders: DataFrame,
    log: DataFrame | None = None,
    *,
    max_examples: int = MAX_VIOLATION_EXAMPLES,
) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """Judges every read of the runs in ``history``; returns (results, frames).

    results: ``reads`` (judged / skipped by outcome), the BREAKDOWNS (``by_kind`` keyed by
    kind, the others lists of groups with reads, stale, stale_rate, explained_by_removal,
    lag_seqs and lag_ms {p50, p99, max}), ``msg_get_violations`` (count + examples),
    ``direct_get_stale_examples`` (the largest lags), ``apply_lag`` (per node; with ``log``).
    frames: ``staleness_timeline``, ``fault_windows`` (with the nemesis start's ``mode`` and
    target ``nodes`` when load.py extracted them), ``run_spans`` (per run: ``t0_ns``, the first
    op's time every ``t_s`` counts from, ``end_s`` and the timeline's ``bucket_s``),
    ``lag_seqs_counts``, ``lag_ms_counts``, ``apply_lag_timeline`` (lists of dicts, aggregates
    only)."""
    history = history.cache()
    judged = judge_runs(history, leaders, log).cache()
    try:
        return summarize(judged, history, log, max_examples=max_examples)
    finally:
        judged.unpersist()
        history.unpersist()


def summarize(
    judged: DataFrame,
    history: DataFrame,
    log: DataFrame | None = None,
    *,
    max_examples: int = MAX_VIOLATION_EXAMPLES,
) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """results and frames (see analyze_staleness) from a judged frame."""
    outcomes = {r["outcome"]: r["count"] for r in judged.groupBy("outcome").count().collect()}
    groups = breakdowns(judged)
    by_kind = {g.pop("kind"): g for g in groups.pop("by_kind")}
    for kind in READ_FS:
        by_kind.setdefault(kind, _summary({}))
    order = ("run", "invoke_index")
    violations = judged.filter((F.col("kind") == MSG_GET) & F.col("stale"))
    stale_direct = judged.filter((F.col("kind") == DIRECT_GET) & F.col("stale"))
    worst = stale_direct.orderBy(F.desc("lag_ms"), *order).limit(MAX_STALE_EXAMPLES)
    results: dict[str, Any] = {
        "reads": {
            "judged": outcomes.get(OK, 0),
            "skipped": {k: v for k, v in sorted(outcomes.items()) if k != OK},
            "log_rows_used": log is not None,
        },
        "by_kind": dict(sorted(by_kind.items())),
        **groups,
        "msg_get_violations": {
            "count": by_kind[MSG_GET]["stale"],
            "examples": _examples(violations.orderBy(*order).limit(max_examples)),
        },
        "direct_get_stale_examples": _examples(worst),
    }
    lags = apply_lag(log).cache() if log is not None else None
    try:
        if lags is not None:
            results["apply_lag"] = _apply_lag_results(lags)
        return results, _frames(judged, history, lags)
    finally:
        if lags is not None:
            lags.unpersist()


def _examples(df: DataFrame) -> list[dict[str, Any]]:
    return [{k: _num(r[k]) for k in _EXAMPLE_COLUMNS} for r in df.collect()]


def _frames(
    judged: DataFrame, history: DataFrame, lags: DataFrame | None
) -> dict[str, list[dict[str, Any]]]:
    spans = _buckets(history)
    win = (
        fault_windows(history)
        .join(spans.select("run", "_t0"), "run")
        .select(
            "run",
            "fault",
            "start_index",
            "end_index",
            ((F.col("start_ns") - F.col("_t0")) / NS_PER_S).alias("start_s"),
            ((F.col("end_ns") - F.col("_t0")) / NS_PER_S).alias("end_s"),
        )
    )
    if {"mode", "nemesis_nodes"} <= set(history.columns):  # load.py's, for the targets
        starts = history.filter(F.col("process").cast("string") == NEMESIS_PROCESS).select(
            "run",
            F.col("index").alias("start_index"),
            "mode",
            F.col("nemesis_nodes").alias("nodes"),
        )
        win = win.join(starts, ["run", "start_index"], "left")
    stale = judged.filter(F.col("stale"))
    served = F.coalesce(F.col("served_by"), F.lit(UNKNOWN)).alias("served_by")
    ms_bin = (F.floor(F.col("lag_ms") / LAG_MS_BIN) * LAG_MS_BIN).alias("lag_ms")
    parts: dict[str, tuple[DataFrame, Sequence[str]]] = {
        "staleness_timeline": (staleness_timeline(judged, history), ("run", "kind", "t_s")),
        "fault_windows": (win, ("run", "start_index")),
        "run_spans": (
            spans.select(
                "run",
                F.col("_t0").alias("t0_ns"),
                ((F.col("_t1") - F.col("_t0")) / NS_PER_S).alias("end_s"),
                (F.col("_bucket") / NS_PER_S).alias("bucket_s"),
            ),
            ("run",),
        ),
        "lag_seqs_counts": (
            stale.groupBy("kind", served, "lag_seqs").count(),
            ("kind", "served_by", "lag_seqs"),
        ),
        "lag_ms_counts": (
            stale.groupBy("kind", served, ms_bin).agg(
                F.lit(LAG_MS_BIN).alias("bin_ms"), F.count(F.lit(1)).alias("count")
            ),
            ("kind", "served_by", "lag_ms"),
        ),
    }
    if lags is not None:
        parts["apply_lag_timeline"] = (apply_lag_timeline(lags, history), ("run", "node", "t_s"))
    frames = collect_frames(parts)
    frames.setdefault("apply_lag_timeline", [])
    return frames


def _apply_lag_results(lags: DataFrame) -> list[dict[str, Any]]:
    """Per node: entries (indexes applied), p50/p99/max apply lag in ms (from apply_lag)."""
    aggs: list[Column] = [F.count(F.lit(1)).alias("entries")]
    aggs += [F.percentile("lag_ms", p).alias(f"p{round(p * 100)}_ms") for p in PERCENTILES]
    aggs.append(F.max("lag_ms").alias("max_ms"))
    rows = lags.groupBy("node").agg(*aggs).orderBy("node").collect()
    return [{k: _num(v) for k, v in r.asDict().items()} for r in rows]
