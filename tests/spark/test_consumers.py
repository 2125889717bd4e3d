"""Per-consumer deliveries, redeliveries and delivery lag (spark/consumers.py) on hand-made ops.

Consumer D of stream C: c1 acknowledged at 0 ms and delivered at 40 ms; c2 acknowledged at 10 ms,
delivered at 40 ms, and delivered again at 90 ms (a redelivery); c3 delivered at 5 ms, before its
publish was acknowledged at 20 ms (lag 0). A failed consume op and a publish of another stream
count for nothing. Consumer E of the same stream delivered c1 once, 100 ms after its ack.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import SparkSession

from spark.consumers import analyze_consumers

T0 = 1_700_000_000_000_000_000
MS = 1_000_000


def _op(f: str, t_ms: float, type_: str, value: dict[str, Any]) -> tuple[Any, ...]:
    return ("R", T0 + int(t_ms * MS), f, type_, value.get("id"), json.dumps(value))


def _consume(t_ms: float, consumer: str, msgs: list[list[Any]], type_: str = "ok") -> Any:
    return _op("consume", t_ms, type_, {"stream": "C", "consumer": consumer, "msgs": msgs})


def test_deliveries_redeliveries_and_lag(spark: SparkSession) -> None:
    rows = [
        _op("publish", 0, "ok", {"stream": "C", "id": "c1", "seq": 1}),
        _op("publish", 10, "ok", {"stream": "C", "id": "c2", "seq": 2}),
        _consume(5, "D", [[3, "c3", 1, 1]]),
        _op("publish", 20, "ok", {"stream": "C", "id": "c3", "seq": 3}),
        _op("publish", 25, "ok", {"stream": "X", "id": "x1", "seq": 1}),
        _consume(40, "D", [[1, "c1", 1, 2], [2, "c2", 1, 3]]),
        _consume(60, "D", [[9, "c9", 1, 9]], type_="info"),
        _consume(90, "D", [[2, "c2", 2, 4]]),
        _consume(100, "E", [[1, "c1", 1, 1]]),
    ]
    history = spark.createDataFrame(
        rows, "run STRING, time_ns BIGINT, f STRING, type STRING, id STRING, value STRING"
    )
    section, frames = analyze_consumers(history)
    assert frames == {}
    assert section["count"] == 2
    d, e = section["by_consumer"]
    assert (d["consumer"], d["messages"], d["deliveries"], d["redeliveries"]) == ("D", 3, 4, 1)
    assert d["lag_max_ms"] == 40.0  # c1: acked at 0, delivered at 40 (c2: 30, c3: 0)
    assert d["lag_p50_ms"] == 30.0
    assert (e["consumer"], e["messages"], e["deliveries"], e["redeliveries"]) == ("E", 1, 1, 0)
    assert e["lag_max_ms"] == 100.0
