"""Lost / phantom writes, batches and TTL (spark/writes.py) on hand-made runs.

Planted run W (n1..n3), every anomaly with a known answer:
* stream Q: p4 acknowledged at seq 4 and stored nowhere (lost); p11 acknowledged at seq 11
  where every node stored p12 (lost, and an ack mismatch on 3 nodes); p5 removed by a limit and
  p6 stored on n1 only (neither is lost); "ghost" stored but never published and p8 stored
  although its publish failed (phantoms); p9 stored at seqs 9 and 10 (a duplicate);
* stream P: p13 removed by a range purge (not lost);
* stream B: batch b1 stored partially on n1, b2 stored at seqs 4 and 6 around another message
  (not contiguous, on 3 nodes), the abandoned batch b3 has a message stored on n2;
* stream T: t1 (TTL 2s) expired after 1s, t3 (no TTL, no max_age) expired at all; stream A
  (max_age 10s): a1 expired after 5s — three premature expiries; t2 (TTL 1s) expired in time,
  then read from n2 after n2 expired it (a violation), from n3 before n3 did, through MSG.GET
  before every node did, from n1 after n1 restarted but before it re-applied the expiry, and
  through MSG.GET after every node had (a violation).
Run C is clean. Run K (a clock nemesis run) reads a message after its expiry: not judged for
served-after-expiry, since the nodes' clocks were skewed. All three runs are analysed by one
``analyze_writes`` (one set of Spark jobs for the module); each finding carries its run.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from engine.entries import ExpireEntry, encode_entry
from spark.job import WRITE_CHECKS
from spark.load import load_runs
from spark.writes import analyze_writes, entry_ts_ns, entry_type, ttl_seconds
from tests.spark.conftest import RunBuilder, ns

ALL = ("n1", "n2", "n3")


def expire(
    b: RunBuilder, nodes: tuple[str, ...], stream: str, index: int, at_ms: float, **msg: Any
) -> None:
    """An expire entry (leader time ``at_ms``) applied at ``index`` removing one message."""
    raw = base64.b64encode(encode_entry(ExpireEntry(ns(at_ms)))).decode()
    for node in nodes:
        applied = msg.get("applied_ms", {}).get(node, at_ms) if "applied_ms" in msg else at_ms
        b.row(node, stream, index, "entry", t_ms=applied, entry=raw, digest="d")
        b.row(
            node,
            stream,
            index,
            "expire",
            t_ms=applied,
            seq=msg["seq"],
            id=msg["id"],
            subject="x",
            ts_ns=ns(msg.get("ts_ms", 0)),
        )


def open_row(
    b: RunBuilder, nodes: tuple[str, ...], stream: str, *, t_ms: float, max_age: int = 0
) -> None:
    config = {"name": stream, "max_age": max_age, "subject_delete_marker_ttl": 0}
    for node in nodes:
        b.row(node, stream, 0, "open", t_ms=t_ms, config=config, created_ns=ns(0), digest="d")


def planted_w(root: Path) -> Path:
    b = RunBuilder(root)
    t = 0.0

    def tick() -> float:
        nonlocal t
        t += 10
        return t

    # --- Q ---
    for i in (1, 2, 3):
        b.publish(f"p{i}", "Q", "q.x", t_ms=tick(), seq=i)
        b.store(ALL, "Q", i, i, f"p{i}", t_ms=t)
    b.publish("p4", "Q", "q.x", t_ms=tick(), seq=4)  # lost
    b.publish("p5", "Q", "q.x", t_ms=tick(), seq=5)
    b.store(ALL, "Q", 5, 5, "p5", t_ms=t)
    for node in ALL:
        b.row(node, "Q", 6, "delete", t_ms=t, seq=5, id="p5", reason="limit")
    b.publish("p6", "Q", "q.x", t_ms=tick(), seq=6)
    b.store(("n1",), "Q", 7, 6, "p6", t_ms=t)
    b.store(("n2",), "Q", 8, 7, "ghost", t_ms=tick())  # phantom: never published
    b.publish("p8", "Q", "q.x", t_ms=tick(), outcome="fail")
    b.store(ALL, "Q", 9, 8, "p8", t_ms=t)  # phantom: its publish failed
    b.publish("p9", "Q", "q.x", t_ms=tick(), seq=9)
    b.store(ALL, "Q", 10, 9, "p9", t_ms=t)
    b.store(ALL, "Q", 11, 10, "p9", t_ms=t)  # duplicate
    b.publish("p11", "Q", "q.x", t_ms=tick(), seq=11)  # lost + ack mismatch
    b.publish("p12", "Q", "q.x", t_ms=tick(), outcome="info")
    b.store(ALL, "Q", 12, 11, "p12", t_ms=t)
    # --- P ---
    b.publish("p13", "P", "p.x", t_ms=tick(), seq=1)
    b.store(ALL, "P", 1, 1, "p13", t_ms=t)
    for node in ALL:
        b.row(node, "P", 2, "purge", t_ms=t, through=1)
    # --- B ---
    b.batch("b1", ["b1.1", "b1.2", "b1.3"], "B", "b.x", t_ms=tick(), seqs=[1, 2, 3])
    b.store(("n1",), "B", 1, 1, "b1.1", t_ms=t, batch="b1")
    b.store(("n1",), "B", 1, 2, "b1.2", t_ms=t, batch="b1")
    for seq in (1, 2, 3):
        b.store(("n2", "n3"), "B", 1, seq, f"b1.{seq}", t_ms=t, batch="b1")
    b.batch("b2", ["b2.1", "b2.2"], "B", "b.x", t_ms=tick(), seqs=[4, 6])
    b.publish("bx", "B", "b.x", t_ms=t, seq=5, process=1)
    b.store(ALL, "B", 2, 4, "b2.1", t_ms=t, batch="b2")
    b.store(ALL, "B", 3, 5, "bx", t_ms=t)
    b.store(ALL, "B", 4, 6, "b2.2", t_ms=t, batch="b2")
    b.batch("b3", ["b3.1", "b3.2"], "B", "b.x", t_ms=tick(), outcome="fail", abandon=True)
    b.store(("n2",), "B", 5, 7, "b3.1", t_ms=t, batch="b3")
    # --- T and A: times from 0 (the messages' ts) ---
    open_row(b, ALL, "T", t_ms=0)
    open_row(b, ALL, "A", t_ms=0, max_age=10 * 1_000_000_000)
    b.publish("t1", "T", "t.x", t_ms=0, seq=1, ttl="2s")
    b.publish("t2", "T", "t.x", t_ms=0, seq=2, ttl="1s")
    b.publish("t3", "T", "t.x", t_ms=0, seq=3)
    b.publish("a1", "A", "a.x", t_ms=0, seq=1, process=1)
    b.publish("a2", "A", "a.x", t_ms=0, seq=2, process=1)
    for seq, msg_id in ((1, "t1"), (2, "t2"), (3, "t3")):
        b.store(ALL, "T", seq, seq, msg_id, t_ms=1, ts_ms=0)
    for seq in (1, 2):
        b.store(ALL, "A", seq, seq, f"a{seq}", t_ms=1, ts_ms=0)
    expire(b, ALL, "T", 4, 1000, seq=1, id="t1")  # premature: due at 2s
    expire(b, ("n1", "n2"), "T", 5, 1500, seq=2, id="t2", applied_ms={"n1": 1600, "n2": 1600})
    expire(b, ("n3",), "T", 5, 1500, seq=2, id="t2", applied_ms={"n3": 5000})
    expire(b, ALL, "T", 6, 3000, seq=3, id="t3")  # premature: no deadline at all
    expire(b, ALL, "A", 3, 5000, seq=1, id="a1")  # premature: max_age 10s
    expire(b, ALL, "A", 4, 12_000, seq=2, id="a2")
    b.read("direct_get", "T", {"seq": 2}, t_ms=3000, served_by="n2", seq=2, msg_id="t2", process=5)
    b.read("direct_get", "T", {"seq": 2}, t_ms=3100, served_by="n3", seq=2, msg_id="t2", process=6)
    b.read("msg_get", "T", {"seq": 2}, t_ms=3200, served_by="n1", seq=2, msg_id="t2", process=7)
    open_row(b, ("n1",), "T", t_ms=4000)  # n1 restarts and re-applies
    expire(b, ("n1",), "T", 5, 1500, seq=2, id="t2", applied_ms={"n1": 4500})
    b.read("direct_get", "T", {"seq": 2}, t_ms=4200, served_by="n1", seq=2, msg_id="t2", process=5)
    b.read("msg_get", "T", {"seq": 2}, t_ms=6000, served_by="n1", seq=2, msg_id="t2", process=7)
    return b.write()


def clean_c(root: Path) -> Path:
    b = RunBuilder(root)
    for i in (1, 2, 3):
        b.publish(f"c{i}", "Q", "q.x", t_ms=10 * i, seq=i)
        b.store(ALL, "Q", i, i, f"c{i}", t_ms=10 * i)
    b.batch("cb", ["cb.1", "cb.2"], "Q", "q.b", t_ms=40, seqs=[4, 5])
    for seq in (4, 5):
        b.store(ALL, "Q", 4, seq, f"cb.{seq - 3}", t_ms=40, batch="cb")
    open_row(b, ALL, "T", t_ms=0)
    b.publish("c4", "T", "t.x", t_ms=0, seq=1, ttl="1s")
    b.store(ALL, "T", 1, 1, "c4", t_ms=1, ts_ms=0)
    b.read("direct_get", "T", {"seq": 1}, t_ms=500, served_by="n2", seq=1, msg_id="c4", process=5)
    expire(b, ALL, "T", 2, 2000, seq=1, id="c4")
    return b.write()


def clock_skewed_k(root: Path) -> Path:
    b = RunBuilder(root, nemeses=["clock"])
    open_row(b, ALL, "T", t_ms=0)
    b.publish("k1", "T", "t.x", t_ms=0, seq=1, ttl="1s")
    b.store(ALL, "T", 1, 1, "k1", t_ms=1, ts_ms=0)
    expire(b, ALL, "T", 2, 1000, seq=1, id="k1")
    b.read("direct_get", "T", {"seq": 1}, t_ms=3000, served_by="n1", seq=1, msg_id="k1")
    return b.write()


@pytest.fixture(scope="module")
def results(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("writes")
    w, c, k = planted_w(root / "W"), clean_c(root / "C"), clock_skewed_k(root / "K")
    loaded = load_runs(spark, [w, c, k])
    res, frames = analyze_writes(loaded.history, loaded.log, loaded.meta)
    loaded.unpersist()
    return {
        "w": str(w.resolve()),
        "c": str(c.resolve()),
        "k": str(k.resolve()),
        "res": res,
        "frames": frames,
    }


def _by_run(r: dict[str, Any], check: str, run: str) -> list[dict[str, Any]]:
    return [e for e in r["res"][check]["examples"] if e["run"] == run]


def test_lost_writes_are_the_acked_ones_nothing_explains(results: dict[str, Any]) -> None:
    lost = results["res"]["lost"]
    assert lost["count"] == 2
    assert [(e["stream"], e["id"], e["seq"], e["stored_on"]) for e in lost["examples"]] == [
        ("Q", "p4", 4, []),
        ("Q", "p11", 11, []),
    ]
    mismatch = results["res"]["ack_mismatch"]
    assert mismatch["count"] == 3
    assert {(e["node"], e["seq"], e["id"], e["stored_id"]) for e in mismatch["examples"]} == {
        (n, 11, "p11", "p12") for n in ALL
    }


def test_phantoms_and_duplicates(results: dict[str, Any]) -> None:
    phantom = results["res"]["phantom"]
    got = {
        (e["stream"], e["seq"], e["id"], e["kind"], tuple(e["nodes"])) for e in phantom["examples"]
    }
    assert got == {
        ("Q", 7, "ghost", "never_published", ("n2",)),
        ("Q", 8, "p8", "failed", ALL),
        ("B", 7, "b3.1", "failed", ("n2",)),
    }
    assert phantom["count"] == 3
    dup = results["res"]["duplicate"]
    assert dup["count"] == 1
    assert (dup["examples"][0]["id"], dup["examples"][0]["seqs"]) == ("p9", [9, 10])


def test_batches_not_whole_or_not_contiguous(results: dict[str, Any]) -> None:
    batches = results["res"]["batches"]
    got = sorted(
        (e["batch"], e["node"], e["kind"], e["expected"], e["stored"], e["seqs"])
        for e in batches["examples"]
    )
    assert got == [
        ("b1", "n1", "partial", 3, 2, [1, 2]),
        ("b2", "n1", "non_contiguous", 2, 2, [4, 6]),
        ("b2", "n2", "non_contiguous", 2, 2, [4, 6]),
        ("b2", "n3", "non_contiguous", 2, 2, [4, 6]),
        ("b3", "n2", "abandoned_stored", 2, 1, [7]),
    ]
    assert batches["count"] == 5


def test_premature_expiries_with_their_deadlines(results: dict[str, Any]) -> None:
    early = results["res"]["premature_expiry"]
    got = {
        (e["stream"], e["id"]): (e["expire_ns"], e["deadline_ns"], e["early_ms"], e["nodes"])
        for e in early["examples"]
    }
    assert got == {
        ("T", "t1"): (ns(1000), ns(2000), 1000.0, list(ALL)),
        ("T", "t3"): (ns(3000), None, None, list(ALL)),
        ("A", "a1"): (ns(5000), ns(10_000), 5000.0, list(ALL)),
    }
    assert early["count"] == 3


def test_reads_served_after_the_serving_node_expired_the_message(results: dict[str, Any]) -> None:
    served = results["res"]["served_after_expiry"]
    got = [
        (e["run"], e["f"], e["served_by"], e["seq"], e["expired_on"]) for e in served["examples"]
    ]
    assert got == [
        (results["w"], "direct_get", "n2", 2, ["n1", "n2"]),
        (results["w"], "msg_get", "n1", 2, ["n1", "n2", "n3"]),
    ]
    assert served["count"] == 2


def test_the_clean_run_has_no_finding(results: dict[str, Any]) -> None:
    for check in WRITE_CHECKS:
        assert _by_run(results, check, results["c"]) == [], check
    # every count is accounted for by run W's examples above (fewer than MAX_EXAMPLES each)
    assert results["res"]["findings"] == 2 + 3 + 3 + 1 + 5 + 3 + 2
    for check in WRITE_CHECKS:
        examples = results["res"][check]["examples"]
        assert results["res"][check]["count"] == len(examples), check
        assert {e["run"] for e in examples} <= {results["w"]}, check
    outcomes = {
        (r["run"], r["f"], r["outcome"]): r["count"] for r in results["frames"]["write_outcomes"]
    }
    assert outcomes[(results["c"], "publish", "ok")] == 4
    assert outcomes[(results["c"], "batch", "ok")] == 2
    assert outcomes[(results["w"], "publish", "fail")] == 1
    assert outcomes[(results["w"], "publish", "info")] == 1


def test_a_clock_skewed_run_is_not_judged_for_served_after_expiry(
    results: dict[str, Any],
) -> None:
    assert results["res"]["served_after_expiry"]["skipped_runs"] == [results["k"]]
    for check in WRITE_CHECKS:  # K's read after the expiry is no finding of any kind
        assert _by_run(results, check, results["k"]) == [], check
    outcomes = {
        (r["run"], r["f"], r["outcome"]): r["count"] for r in results["frames"]["write_outcomes"]
    }
    assert outcomes[(results["k"], "publish", "ok")] == 1


def test_entry_time_and_type_decode_in_the_jvm(spark: SparkSession) -> None:
    from pyspark.sql import functions as F

    rows = [(base64.b64encode(encode_entry(ExpireEntry(ts))).decode(),) for ts in (1, ns(1234))]
    df = spark.createDataFrame(rows, "entry string")
    got = df.select(entry_ts_ns(F.col("entry")), entry_type(F.col("entry"))).collect()
    assert [tuple(r) for r in got] == [(1, 4), (ns(1234), 4)]


def test_ttl_texts_parse_as_the_server_parses_them() -> None:
    assert ttl_seconds(["2s", "1m", "never", "5", "500ms", "bogus"]) == {
        "2s": 2,
        "1m": 60,
        "never": -1,
        "5": 5,
        "500ms": 0,
        "bogus": 0,
    }
