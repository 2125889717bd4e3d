"""Per-consumer delivery numbers from the history's ``consume`` ops (the chaos ``consumer``
workload): for each (run, stream, consumer), how many messages were delivered, how many of the
deliveries were redeliveries, how many distinct messages that covers, and the **delivery lag** of
first deliveries: the time from the publish's acknowledgement to the completion of the pull that
delivered it (milliseconds; 0 when the pull completed first, as a message can be delivered
before its publisher hears the PubAck). The checks themselves (lost, redelivered after a
confirmed ack, out of order) are the checker's (``jepsen_like/checker.py``); this stage measures.

Must never: read files or sockets (``spark/load.py`` reads), or count a delivery twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from jepsen_like.contract import CONSUME, OK, PUBLISH

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# a consume op's completion value: msgs are [seq, id, deliveries, consumer seq]
_CONSUME_SCHEMA: Final = "stream STRING, consumer STRING, msgs ARRAY<ARRAY<STRING>>"
NS_PER_MS: Final = 1_000_000
LAG_PERCENTILES: Final = (0.5, 0.99)


def deliveries(history: DataFrame) -> DataFrame:
    """One row per delivered message: ``run, stream, consumer, time_ns, seq, id, deliveries``."""
    from pyspark.sql import functions as F

    consumes = history.where((F.col("f") == CONSUME) & (F.col("type") == OK)).select(
        "run", "time_ns", F.from_json("value", _CONSUME_SCHEMA).alias("v")
    )
    return consumes.select(
        "run",
        "time_ns",
        F.col("v.stream").alias("stream"),
        F.col("v.consumer").alias("consumer"),
        F.explode("v.msgs").alias("m"),
    ).select(
        "run",
        "stream",
        "consumer",
        "time_ns",
        F.col("m")[0].cast("bigint").alias("seq"),
        F.col("m")[1].alias("id"),
        F.col("m")[2].cast("bigint").alias("deliveries"),
    )


def analyze_consumers(history: DataFrame) -> tuple[dict[str, Any], dict[str, DataFrame]]:
    """(the ``consumers`` section of the results, no frames to plot)."""
    from pyspark.sql import functions as F

    delivered = deliveries(history)
    acked = history.where((F.col("f") == PUBLISH) & (F.col("type") == OK)).select(
        "run", "id", F.col("time_ns").alias("acked_ns")
    )
    firsts = (
        delivered.where(F.col("deliveries") == 1)
        .join(acked, ["run", "id"], "left")
        .select(
            "run",
            "stream",
            "consumer",
            F.greatest(F.lit(0.0), (F.col("time_ns") - F.col("acked_ns")) / NS_PER_MS).alias(
                "lag_ms"
            ),
        )
    )
    counts = delivered.groupBy("run", "stream", "consumer").agg(
        F.count("*").alias("deliveries"),
        F.sum(F.when(F.col("deliveries") > 1, 1).otherwise(0)).alias("redeliveries"),
        F.countDistinct("seq").alias("messages"),
    )
    lags = firsts.groupBy("run", "stream", "consumer").agg(
        F.percentile_approx("lag_ms", list(LAG_PERCENTILES)).alias("lag_ms"),
        F.max("lag_ms").alias("lag_max_ms"),
    )
    rows = counts.join(lags, ["run", "stream", "consumer"], "left").orderBy(
        "run", "stream", "consumer"
    )
    out: list[dict[str, Any]] = []
    for r in rows.collect():
        lag = r["lag_ms"] or []
        p50 = lag[0] if lag else None
        p99 = lag[1] if len(lag) > 1 else None
        out.append(
            {
                "run": r["run"],
                "stream": r["stream"],
                "consumer": r["consumer"],
                "messages": int(r["messages"]),
                "deliveries": int(r["deliveries"]),
                "redeliveries": int(r["redeliveries"]),
                "lag_p50_ms": None if p50 is None else round(float(p50), 1),
                "lag_p99_ms": None if p99 is None else round(float(p99), 1),
                "lag_max_ms": None if r["lag_max_ms"] is None else round(r["lag_max_ms"], 1),
            }
        )
    return {"count": len(out), "by_consumer": out}, {}
