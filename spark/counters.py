"""Counter streams (the chaos ``counter`` workload, ADR-49): the checker's ``counter`` check
derived again from the history's ``increment`` and ``counter_read`` ops, in Spark.

Semantics (the checker's, ``jepsen_like/checker.py``; ``tests/spark/test_counters.py`` holds
the two to the same findings on one history):

* An **increment** is its msg id (``value.id``) over all its attempts: ``ok`` when an attempt
  completed ``ok`` (its ``seq``, and the PubAck's total ``val`` unless it was a duplicate),
  ``fail`` when every attempt completed ``fail``, ``info`` otherwise (an attempt that timed out
  or never completed). Failed increments count for nothing.
* **final_total**: per subject, a final ``counter_read`` whose total (0 when not found) minus
  the acked increments' sum is not a subset sum of the indeterminate increments. Exact (the
  set of subset sums, built with a higher-order ``aggregate``) while their count times the span
  of their sums is at most ``contract.COUNTER_EXACT_WORK``, else only within that span
  (``method``: ``exact`` or ``bounds``). One finding per subject, listing the reads.
* **unread**: a subject with acked increments and no successful final read.
* **acked_total**: an acked total that is not the subject's previous acked total (or 0) plus
  the increments acked between them and its own, judged only where every seq in between is an
  acked increment's (``dense_rank`` over the acked seqs: then no unknown increment of the
  subject can lie there).
* **seq_shared**: two increments acked at one seq.

Totals are read as 64-bit integers here (the checker's are unbounded): a total beyond that
range reads as null and is a finding.

Must never: read files or sockets (``spark/load.py`` reads), or count a failed increment.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from jepsen_like.contract import COUNTER_EXACT_WORK, COUNTER_READ, FAIL, INCREMENT, INFO, INVOKE, OK
from spark.load import collect_findings

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

_INCREMENT_SCHEMA: Final = (
    "stream STRING, subject STRING, id STRING, incr BIGINT, seq BIGINT, val STRING"
)
_READ_SCHEMA: Final = (
    "stream STRING, subject STRING, seq BIGINT, val STRING, not_found BOOLEAN, served_by STRING"
)
MAX_EXAMPLES: Final = 20  # findings listed in full, and subjects in the table (counts exact)
CHECKS: Final = ("final_total", "unread", "acked_total", "seq_shared")
SUBJECT_KEYS: Final = ["run", "stream", "subject"]


def _total(text: Column) -> Column:
    return text.try_cast("bigint")


def increments(history: DataFrame) -> DataFrame:
    """One row per increment: ``run, stream, subject, id, incr, outcome, seq, val, attempts``
    (``seq`` when acked; ``val`` when acked with a total)."""
    from pyspark.sql import functions as F

    ops = history.where(F.col("f") == INCREMENT).select(
        "run", "type", F.from_json("value", _INCREMENT_SCHEMA).alias("v")
    )
    ops = ops.select("run", "type", "v.*")
    is_ok = F.col("type") == OK
    per = ops.groupBy("run", "stream", "id").agg(
        F.first("subject").alias("subject"),
        F.first("incr").alias("incr"),
        F.max(is_ok).alias("has_ok"),
        F.max(F.col("type") == INFO).alias("has_info"),
        F.sum(F.when(F.col("type") == INVOKE, 1).otherwise(0)).alias("attempts"),
        F.sum(F.when(F.col("type") != INVOKE, 1).otherwise(0)).alias("completions"),
        F.max(F.when(is_ok, F.col("seq"))).alias("seq"),
        F.max(F.when(is_ok, _total(F.col("val")))).alias("val"),
    )
    outcome = (
        F.when(F.col("has_ok"), F.lit(OK))
        .when(F.col("has_info") | (F.col("attempts") > F.col("completions")), F.lit(INFO))
        .otherwise(F.lit(FAIL))
    )
    return per.select(
        "run", "stream", "subject", "id", "incr", outcome.alias("outcome"), "seq", "val", "attempts"
    )


def subject_totals(incs: DataFrame, history: DataFrame) -> DataFrame:
    """Per subject: ``acked, acked_sum, indeterminate, lo, hi, method, reach`` (the subset sums
    of the indeterminate increments lie in ``lo..hi``; ``reach`` is their set when ``method`` is
    ``exact``) and ``finals``: every successful final read as ``(served_by, total)``."""
    from pyspark.sql import functions as F

    ok, unknown = F.col("outcome") == OK, F.col("outcome") == INFO
    per = incs.groupBy(*SUBJECT_KEYS).agg(
        F.sum(F.when(ok, 1).otherwise(0)).alias("acked"),
        F.sum(F.when(ok, F.col("incr")).otherwise(0)).alias("acked_sum"),
        F.collect_list(F.when(unknown, F.col("incr"))).alias("unknown"),
    )
    zero = F.lit(0).cast("bigint")
    lo = F.aggregate("unknown", zero, lambda acc, x: acc + F.least(x, zero))
    hi = F.aggregate("unknown", zero, lambda acc, x: acc + F.greatest(x, zero))
    per = per.select(*SUBJECT_KEYS, "acked", "acked_sum", "unknown", lo.alias("lo"), hi.alias("hi"))
    exact = F.size("unknown") * (F.col("hi") - F.col("lo")) <= COUNTER_EXACT_WORK
    sums = F.aggregate(
        "unknown",
        F.array(zero),
        lambda acc, x: F.array_union(acc, F.transform(acc, lambda s: s + x)),
    )
    per = per.select(
        *SUBJECT_KEYS,
        "acked",
        "acked_sum",
        F.size("unknown").alias("indeterminate"),
        "lo",
        "hi",
        F.when(exact, F.lit("exact")).otherwise(F.lit("bounds")).alias("method"),
        F.when(exact, sums).alias("reach"),
    )
    reads = history.where((F.col("f") == COUNTER_READ) & (F.col("type") == OK)).select(
        "run", F.from_json("value", _READ_SCHEMA).alias("v")
    )
    total = F.when(F.col("v.not_found"), F.lit(0)).otherwise(_total(F.col("v.val")))
    finals = reads.groupBy(
        "run", F.col("v.stream").alias("stream"), F.col("v.subject").alias("subject")
    ).agg(
        F.collect_list(
            F.struct(F.col("v.served_by").alias("served_by"), total.alias("total"))
        ).alias("finals")
    )
    filled: dict[str, bool | float | int | str] = {
        "acked": 0,
        "acked_sum": 0,
        "indeterminate": 0,
        "lo": 0,
        "hi": 0,
        "method": "exact",
    }
    return (
        per.join(finals, SUBJECT_KEYS, "full")
        .fillna(filled)
        .withColumn("reach", F.coalesce("reach", F.array(zero)))
        .withColumn("finals", F.coalesce("finals", F.array()))
    )


def final_total_findings(subjects: DataFrame) -> DataFrame:
    """``run, stream, subject, acked_sum, indeterminate, lo, hi, method, finals``: subjects a
    final read of which the acked and indeterminate increments cannot explain (``finals`` lists
    those reads)."""
    from pyspark.sql import functions as F

    def explained(read: Column) -> Column:
        d = read["total"] - F.col("acked_sum")
        in_span = (d >= F.col("lo")) & (d <= F.col("hi"))
        hit = (F.col("method") != "exact") | F.array_contains("reach", d)
        return F.coalesce(in_span & hit, F.lit(False))

    bad = F.filter("finals", lambda r: ~explained(r))
    return (
        subjects.withColumn("finals", bad)
        .where(F.size("finals") > 0)
        .select(
            *SUBJECT_KEYS,
            "acked_sum",
            "indeterminate",
            (F.col("acked_sum") + F.col("lo")).alias("lo"),
            (F.col("acked_sum") + F.col("hi")).alias("hi"),
            "method",
            "finals",
        )
    )


def acked_total_findings(incs: DataFrame) -> DataFrame:
    """``run, stream, subject, id, seq, incr, val, expected, after_id, after_seq, after_val``:
    acked totals that do not follow from the previous one (see the module doc)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    known = incs.where((F.col("outcome") == OK) & F.col("seq").isNotNull())
    by_seq = Window.partitionBy("run", "stream").orderBy("seq")
    in_subject = Window.partitionBy(*SUBJECT_KEYS).orderBy("seq", "id")
    so_far = in_subject.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    known = known.select(
        *SUBJECT_KEYS,
        "id",
        "seq",
        "incr",
        "val",
        F.dense_rank().over(by_seq).alias("rank"),
        F.sum("incr").over(so_far).alias("running"),
    )
    totals = known.where(F.col("val").isNotNull())

    def before(name: str) -> Column:
        return F.coalesce(F.lag(name).over(in_subject), F.lit(0))

    totals = totals.select(
        "*",
        F.lag("id").over(in_subject).alias("after_id"),
        before("seq").alias("after_seq"),
        before("val").alias("after_val"),
        before("rank").alias("after_rank"),
        before("running").alias("after_running"),
    )
    expected = F.col("after_val") + F.col("running") - F.col("after_running")
    accounted = F.col("rank") - F.col("after_rank") == F.col("seq") - F.col("after_seq")
    return totals.where(accounted & (F.col("val") != expected)).select(
        *SUBJECT_KEYS,
        "id",
        "seq",
        "incr",
        "val",
        expected.alias("expected"),
        "after_id",
        "after_seq",
        "after_val",
    )


def analyze_counters(
    history: DataFrame, *, max_examples: int = MAX_EXAMPLES
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the ``counters`` section of the results, no frames to plot): ``increments`` (by
    outcome, and retries), ``subjects`` (per subject: acked sum, indeterminate increments, the
    explainable range and method, the final totals read), each of ``CHECKS`` as ``{"count",
    "examples"}``, and ``findings`` (their total)."""
    from pyspark.sql import functions as F

    incs = increments(history).cache()
    try:
        subjects = subject_totals(incs, history)
        outcomes = incs.groupBy("outcome").agg(
            F.count("*").alias("increments"), F.sum(F.col("attempts") - 1).alias("retries")
        )
        shown = subjects.select(
            *SUBJECT_KEYS,
            "acked",
            "acked_sum",
            "indeterminate",
            (F.col("acked_sum") + F.col("lo")).alias("lo"),
            (F.col("acked_sum") + F.col("hi")).alias("hi"),
            "method",
            F.array_sort(F.array_distinct(F.col("finals.total"))).alias("final"),
        )
        unread = subjects.where((F.col("acked") > 0) & (F.size("finals") == 0)).select(
            *SUBJECT_KEYS, "acked", "acked_sum"
        )
        shared = (
            incs.where((F.col("outcome") == OK) & F.col("seq").isNotNull())
            .groupBy("run", "stream", "seq")
            .agg(F.sort_array(F.collect_set("id")).alias("ids"))
            .where(F.size("ids") > 1)
        )
        found = collect_findings(
            {
                "final_total": (final_total_findings(subjects), SUBJECT_KEYS),
                "unread": (unread, SUBJECT_KEYS),
                "acked_total": (acked_total_findings(incs), [*SUBJECT_KEYS, "seq"]),
                "seq_shared": (shared, ["run", "stream", "seq"]),
                "subjects": (shown, SUBJECT_KEYS),
                "outcomes": (outcomes, ["outcome"]),
            },
            max_examples,
        )
    finally:
        incs.unpersist()
    by_outcome = {r["outcome"]: r for r in found.pop("outcomes")["examples"]}
    subject_rows = found.pop("subjects")
    results: dict[str, Any] = {
        "increments": {
            "total": sum(int(r["increments"]) for r in by_outcome.values()),
            **{k: int(by_outcome.get(k, {}).get("increments", 0)) for k in (OK, FAIL, INFO)},
            "retries": sum(int(r["retries"] or 0) for r in by_outcome.values()),
        },
        "subjects": subject_rows["examples"],
        **found,
        "findings": sum(int(found[c]["count"]) for c in CHECKS),
    }
    return results, {}
