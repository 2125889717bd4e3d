"""The chaos checker (jepsen_like/checker.py) and the Spark analysis (spark/writes.py) judge
lost writes, duplicates and partial batches twice, once per layer; on the same run directory
they must name the same anomalies. Both read it through the one contract,
jepsen_like/contract.py, so a disagreement here is in the checks, not in the names they match.

Planted run (stream S, nodes n1..n3, every node logs the same rows), with its known answer:

* clean: p1, p2 acknowledged and stored; p3 acknowledged, stored, then removed by a MSG.DELETE
  (gone, but explained); batch b0 acknowledged and stored whole at contiguous seqs; p6 failed
  and p7 unknown (info), neither stored; a MSG.GET that found p1;
* duplicate: p4 acknowledged at seq 6, stored at seqs 6 and 7;
* partial batch: b1 of three messages acknowledged with count 2 and stored as two;
* lost: p5 acknowledged at seq 10, stored by no node, no removal logged, absent from the final
  read.

The comparison is over the kinds both sides check, each anomaly reduced to what identifies it
(``lost`` and ``duplicate``: stream and id; ``partial-batch``: stream and batch), so a check
that misses an anomaly, or flags a clean operation, on either side fails the test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from jepsen_like.checker import check_run
from spark.load import load_runs
from spark.writes import analyze_writes
from tests.spark.conftest import RunBuilder, spark_findings

NODES = ("n1", "n2", "n3")
STREAM = "S"
SUBJECT = "s.x"

Finding = tuple[str, str, str]  # (kind, stream, id or batch)

PLANTED: frozenset[Finding] = frozenset(
    {
        ("lost", STREAM, "p5"),
        ("duplicate", STREAM, "p4"),
        ("partial-batch", STREAM, "b1"),
    }
)
# checker anomaly type -> the detail field that identifies it
CHECKER_KEYS = {"lost": "id", "duplicate": "id", "partial-batch": "batch"}
# spark/writes.py result -> (checker anomaly type, the field that identifies it); every kind of
# the ``batches`` check (partial, non_contiguous, abandoned_stored) is a checker partial-batch
SPARK_KEYS = {
    "lost": ("lost", "id"),
    "duplicate": ("duplicate", "id"),
    "batches": ("partial-batch", "batch"),
}


def planted_run(root: Path) -> Path:
    b = RunBuilder(root, NODES)
    t = 0.0

    def tick() -> float:
        nonlocal t
        t += 10
        return t

    process = iter(range(100))  # one process per op: no op waits for another's completion
    # clean publishes, one of them deleted afterwards (a logged removal explains its absence)
    for index, seq, msg_id in ((1, 1, "p1"), (2, 2, "p2"), (3, 3, "p3")):
        b.publish(msg_id, STREAM, SUBJECT, t_ms=tick(), seq=seq, process=next(process))
        b.store(NODES, STREAM, index, seq, msg_id, t_ms=t)
    deleted_at = tick()
    for node in NODES:
        b.row(node, STREAM, 4, "delete", t_ms=deleted_at, seq=3, id="p3", subject=SUBJECT)
    # a clean batch: whole, contiguous, in one entry
    b0 = ["b0.1", "b0.2"]
    b.batch("b0", b0, STREAM, SUBJECT, t_ms=tick(), seqs=[4, 5], process=next(process))
    for seq, msg_id in ((4, "b0.1"), (5, "b0.2")):
        b.store(NODES, STREAM, 5, seq, msg_id, t_ms=t, batch="b0")
    # duplicate: one publish, stored by two entries
    b.publish("p4", STREAM, SUBJECT, t_ms=tick(), seq=6, process=next(process))
    b.store(NODES, STREAM, 6, 6, "p4", t_ms=t)
    b.store(NODES, STREAM, 7, 7, "p4", t_ms=t)
    # partial batch: three messages, acknowledged and stored as two
    b1 = ["b1.1", "b1.2", "b1.3"]
    b.batch("b1", b1, STREAM, SUBJECT, t_ms=tick(), seqs=[8, 9], process=next(process))
    for seq, msg_id in ((8, "b1.1"), (9, "b1.2")):
        b.store(NODES, STREAM, 8, seq, msg_id, t_ms=t, batch="b1")
    # lost: acknowledged, stored nowhere
    b.publish("p5", STREAM, SUBJECT, t_ms=tick(), seq=10, process=next(process))
    # clean outcomes that stored nothing: refused, and unknown
    b.publish("p6", STREAM, SUBJECT, t_ms=tick(), outcome="fail", process=next(process))
    b.publish("p7", STREAM, SUBJECT, t_ms=tick(), outcome="info", process=next(process))
    b.read(
        "msg_get",
        STREAM,
        {"seq": 1},
        t_ms=tick(),
        served_by="n1",
        seq=1,
        msg_id="p1",
        process=next(process),
    )
    # the final read: what a correct server holds after all this (seq 3 deleted, 10 never made)
    held = {1: "p1", 2: "p2", 4: "b0.1", 5: "b0.2", 6: "p4", 7: "p4", 8: "b1.1", 9: "b1.2"}
    final = next(process)
    b.op(tick(), final, "n1", "invoke", "read_all", stream=STREAM)
    b.op(
        tick(),
        final,
        "n1",
        "ok",
        "read_all",
        stream=STREAM,
        first_seq=1,
        last_seq=9,
        messages=[{"seq": s, "id": i, "subject": SUBJECT} for s, i in sorted(held.items())],
        missing=[3],
        unknown=[],
        served_by="n1",
    )
    return b.write()


def checker_findings(verdict: dict[str, Any]) -> set[Finding]:
    assert all(
        verdict["anomaly_counts"].get(kind, 0)
        == sum(a["type"] == kind for a in verdict["anomalies"])
        for kind in CHECKER_KEYS
    ), "the verdict lists fewer anomalies than it counts: the comparison would miss some"
    return {
        (a["type"], a["detail"]["stream"], str(a["detail"][CHECKER_KEYS[a["type"]]]))
        for a in verdict["anomalies"]
        if a["type"] in CHECKER_KEYS
    }


@pytest.fixture(scope="module")
def both(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    run = planted_run(tmp_path_factory.mktemp("agreement") / "run")
    verdict = check_run(run, write=False)
    loaded = load_runs(spark, [run])
    try:
        results, _frames = analyze_writes(loaded.history, loaded.log, loaded.meta)
    finally:
        loaded.unpersist()
    return {"checker": checker_findings(verdict), "spark": spark_findings(results, SPARK_KEYS)}


def test_checker_and_spark_report_exactly_the_planted_anomalies(both: dict[str, Any]) -> None:
    # each side against the answer first, so a failure says which side is wrong
    assert both["checker"] == PLANTED, "jepsen_like checker"
    assert both["spark"] == PLANTED, "spark analysis"
    assert both["checker"] == both["spark"]
