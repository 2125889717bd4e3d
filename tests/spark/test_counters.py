"""Counter streams judged twice: by the chaos checker (jepsen_like/checker.py, ``counter``) and by
the Spark analysis (spark/counters.py), on one planted run directory; both must name exactly the
planted findings, and the counter stream's id-less messages are no phantom writes.

Planted run, counter stream N (every node logs the same stores, seqs 1..9):

* n.a, clean: a1 +5 (seq 1, total 5), a2 -3 (seq 2, 2); a3 +2 timed out, then acked as a
  duplicate of seq 4; a4 +7 refused; a5 +1 unknown twice; f1 +100 invoked, never completed
  (the checker also calls the history malformed for it: the harness closes such ops as info);
  a6 +10 (seq 5, 14). Final total 14 (a5 and f1 not applied: fine).
* n.b, a wrong final total: b1 +4 (seq 3, 4), b2 -2 unknown; final 3 (4 or 2 would do).
* n.c, a wrong acked total: c1 +3 (seq 6, 3), c2 +2 acked at seq 7 with total 9 (seq 6 and 7
  adjacent: 5 was owed); final 5.
* n.d, unread: d1 +1 (seq 8); its final reads all timed out.
* n.e, one seq acked twice: e1 +1 and e2 +1 both acked at seq 9; final 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from jepsen_like.checker import check_run
from spark.counters import analyze_counters
from spark.load import load_runs
from spark.writes import phantom_writes, write_outcomes
from tests.spark.conftest import RunBuilder, spark_findings

NODES = ("n1", "n2", "n3")
STREAM = "N"
FINAL_PROCESS_BASE = 10_000

Finding = tuple[str, str, str]  # (checker kind, stream, subject / id / seq)

PLANTED: frozenset[Finding] = frozenset(
    {
        ("final-total", STREAM, "n.b"),
        ("acked-total", STREAM, "c2"),
        ("unread", STREAM, "n.d"),
        ("seq-shared", STREAM, "9"),
    }
)
# checker detail.kind -> the detail field that identifies it
CHECKER_KEYS = {"final-total": "subject", "unread": "subject", "acked-total": "id"}
CHECKER_KEYS["seq-shared"] = "seq"
# spark/counters.py check -> (checker kind, the field that identifies it)
SPARK_KEYS = {
    "final_total": ("final-total", "subject"),
    "unread": ("unread", "subject"),
    "acked_total": ("acked-total", "id"),
    "seq_shared": ("seq-shared", "seq"),
}


class Planter:
    def __init__(self, b: RunBuilder) -> None:
        self.b = b
        self.t = 0.0
        self.process = 0

    def tick(self) -> float:
        self.t += 10
        return self.t

    def incr(
        self,
        msg_id: str,
        subject: str,
        incr: int,
        outcomes: tuple[str, ...] = ("ok",),
        seq: int | None = None,
        val: int | None = None,
    ) -> None:
        """Attempts with ``outcomes`` (the last ok one acks ``seq``, a duplicate when ``val``
        is None); "pending": invoked, never completed."""
        self.process += 1
        for attempt, outcome in enumerate(outcomes, start=1):
            value = {"stream": STREAM, "subject": subject, "id": msg_id, "incr": incr}
            value["attempt"] = attempt
            self.b.op(self.tick(), self.process, "n1", "invoke", "increment", **value)
            if outcome == "pending":
                continue
            done: dict[str, Any] = dict(value)
            if outcome == "ok":
                done["seq"] = seq
                done |= {"duplicate": True} if val is None else {"val": str(val)}
            else:
                done["error"] = "timeout" if outcome == "info" else {"err_code": 10008}
            self.b.op(self.tick(), self.process, "n1", outcome, "increment", **done)

    def final(self, subject: str, total: int | None) -> None:
        """A final read of ``subject`` from every node (None: it times out)."""
        for i, node in enumerate(NODES):
            value = {"stream": STREAM, "subject": subject}
            p = FINAL_PROCESS_BASE + i
            self.b.op(self.tick(), p, node, "invoke", "counter_read", **value)
            if total is None:
                self.b.op(self.tick(), p, node, "info", "counter_read", **value, error="timeout")
            else:
                answer = {"seq": 1, "val": str(total), "served_by": node}
                self.b.op(self.tick(), p, node, "ok", "counter_read", **value, **answer)


def planted_run(root: Path) -> Path:
    b = RunBuilder(root, NODES)
    for node in NODES:
        config = {"name": STREAM, "subjects": ["n.>"], "allow_msg_counter": True}
        b.row(node, STREAM, 0, "open", t_ms=0, config=config, created_ns=0, digest="00")
    p = Planter(b)
    p.incr("a1", "n.a", 5, seq=1, val=5)
    p.incr("a2", "n.a", -3, seq=2, val=2)
    p.incr("b1", "n.b", 4, seq=3, val=4)
    p.incr("a3", "n.a", 2, ("info", "ok"), seq=4)
    p.incr("a4", "n.a", 7, ("fail",))
    p.incr("a5", "n.a", 1, ("info", "info"))
    p.incr("f1", "n.a", 100, ("pending",))
    p.incr("a6", "n.a", 10, seq=5, val=14)
    p.incr("b2", "n.b", -2, ("info",))
    p.incr("c1", "n.c", 3, seq=6, val=3)
    p.incr("c2", "n.c", 2, seq=7, val=9)
    p.incr("d1", "n.d", 1, seq=8, val=1)
    p.incr("e1", "n.e", 1, seq=9, val=1)
    p.incr("e2", "n.e", 1, seq=9, val=2)
    for seq in range(1, 10):
        for node in NODES:
            b.row(node, STREAM, seq, "store", t_ms=seq, seq=seq, subject="n.x", ts_ns=seq)
    for subject, total in (("n.a", 14), ("n.b", 3), ("n.c", 5), ("n.d", None), ("n.e", 2)):
        p.final(subject, total)
    return b.write()


def checker_findings(verdict: dict[str, Any]) -> set[Finding]:
    counted = verdict["anomaly_counts"].get("counter", 0)
    assert counted == sum(a["type"] == "counter" for a in verdict["anomalies"])
    return {
        (a["detail"]["kind"], a["detail"]["stream"], str(a["detail"][CHECKER_KEYS[kind]]))
        for a in verdict["anomalies"]
        if a["type"] == "counter" and (kind := a["detail"]["kind"])
    }


@pytest.fixture(scope="module")
def both(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    run = planted_run(tmp_path_factory.mktemp("counters") / "run")
    verdict = check_run(run, write=False)
    loaded = load_runs(spark, [run])
    try:
        results, frames = analyze_counters(loaded.history)
        phantoms = phantom_writes(write_outcomes(loaded.history), loaded.log).count()
    finally:
        loaded.unpersist()
    return {"verdict": verdict, "results": results, "frames": frames, "phantoms": phantoms}


def test_checker_and_spark_report_exactly_the_planted_counter_findings(
    both: dict[str, Any],
) -> None:
    verdict, results = both["verdict"], both["results"]
    # each side against the answer first, so a failure says which side is wrong
    malformed = [a["detail"] for a in verdict["anomalies"] if a["type"] == "malformed-history"]
    assert malformed == [{"problems": ["op 16 (increment) never completed"], "count": 1}]
    assert {a["type"] for a in verdict["anomalies"]} == {"counter", "malformed-history"}
    assert checker_findings(verdict) == PLANTED, "jepsen_like checker"
    assert spark_findings(results, SPARK_KEYS) == PLANTED, "spark analysis"
    assert results["findings"] == len(PLANTED) and both["frames"] == {}


def test_both_count_the_increments_alike(both: dict[str, Any]) -> None:
    stats, incs = both["verdict"]["stats"], both["results"]["increments"]
    assert incs == {"total": 14, "ok": 10, "fail": 1, "info": 3, "retries": 2}
    assert (stats["counter_increments"], stats["counter_acked"]) == (incs["total"], incs["ok"])
    assert (stats["counter_failed"], stats["counter_indeterminate"]) == (incs["fail"], incs["info"])
    assert stats["counter_retries"] == incs["retries"]
    subjects = {s["subject"]: s for s in both["results"]["subjects"]}
    for subject, totals in stats["counter_totals"].items():
        mine = subjects[subject]
        assert [mine["lo"], mine["hi"]] == totals["explainable"], subject
        assert (mine["acked_sum"], mine["indeterminate"], mine["method"]) == (
            totals["acked_sum"],
            totals["indeterminate"],
            totals["method"],
        )
        assert [str(t) for t in mine["final"]] == totals["final"], subject
    wrong = both["results"]["final_total"]["examples"][0]
    assert (wrong["lo"], wrong["hi"], wrong["method"]) == (2, 4, "exact")
    assert sorted(f["served_by"] for f in wrong["finals"]) == list(NODES)


def test_a_counter_streams_messages_are_no_phantom_writes(both: dict[str, Any]) -> None:
    assert both["phantoms"] == 0
