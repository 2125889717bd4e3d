"""Read-after-write staleness on hand-made histories with planted answers (spark/staleness.py).

The planted run: stream S on n1 (leader), n2, n3. A Direct Get served by follower n2 during a
partition misses two acknowledged writes to its subject (lag 2 seqs, 150 ms); a MSG.GET misses
an acknowledged seq (a violation); an expired message explains a not_found; an info write is
owed to nobody; the other reads are fresh. A second run judged with it has a not_found read
whose owed write was expired without any logged removal: stale.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark.report import write_report
from spark.staleness import (
    StalenessInputError,
    analyze_staleness,
    fault_windows,
    judge_runs,
    merge_windows,
    reads,
    summarize,
    with_fault,
    with_role,
)

T0_NS = 1_800_000_000_000_000_000
MS = 1_000_000
RUN = "r1"
HISTORY_SCHEMA = (
    "run string, index long, time_ns long, process string, node string, type string, "
    "f string, value string"
)
LEADERS_SCHEMA = "run string, time_ns long, stream string, leader string"
LOG_SCHEMA = (
    "run string, node string, stream string, index long, op string, seq long, "
    "through long, applied_ns long"
)


@dataclass
class History:
    """Ops appended in real-time order; ``index`` is the position, as in history.jsonl."""

    rows: list[tuple[Any, ...]] = field(default_factory=list)
    run: str = RUN

    def op(
        self, t_ms: float, process: int | str, node: str | None, type_: str, f: str, **value: Any
    ) -> int:
        index = len(self.rows)
        row = (
            self.run,
            index,
            T0_NS + int(t_ms * MS),
            str(process),
            node,
            type_,
            f,
            json.dumps(value),
        )
        self.rows.append(row)
        return index

    def publish(self, t_ms: float, process: int, subject: str, seq: int, ack_ms: float) -> None:
        value = {"stream": "S", "id": f"m{seq}", "subject": subject}
        self.op(t_ms, process, "n1", "invoke", "publish", **value)
        self.op(ack_ms, process, "n1", "ok", "publish", **value, seq=seq)

    def frame(self, spark: SparkSession) -> DataFrame:
        return spark.createDataFrame(self.rows, HISTORY_SCHEMA)


def read(
    h: History,
    t_ms: float,
    done_ms: float,
    kind: str,
    process: int,
    request: dict[str, Any],
    served_by: str | None,
    **answer: Any,
) -> int:
    index = h.op(t_ms, process, served_by, "invoke", kind, stream="S", request=request)
    h.op(
        done_ms,
        process,
        served_by,
        "ok",
        kind,
        stream="S",
        request=request,
        served_by=served_by,
        **answer,
    )
    return index


def planted(h: History) -> dict[str, int]:
    """The planted run; returns the invoke index of each interesting read."""
    reads_at: dict[str, int] = {}
    h.publish(1000, 0, "s.a", 1, 1010)
    h.op(1020, "nemesis", None, "invoke", "partition-start", nodes=["n2"])
    h.op(1021, "nemesis", None, "info", "partition-start", nodes=["n2"])
    h.publish(1030, 0, "s.a", 2, 1040)
    h.publish(1050, 0, "s.b", 3, 1060)
    h.publish(1070, 0, "s.a", 4, 1100)
    reads_at["stale_direct"] = read(
        h,
        1250,
        1260,
        "direct_get",
        1,
        {"last_by_subj": "s.a"},
        "n2",
        seq=2,
        id="m2",
        subject="s.a",
    )
    h.op(1300, "nemesis", None, "invoke", "partition-stop", nodes=["n2"])
    h.op(1301, "nemesis", None, "info", "partition-stop", nodes=["n2"])
    reads_at["stale_msg_get"] = read(h, 1400, 1410, "msg_get", 2, {"seq": 4}, "n3", not_found=True)
    reads_at["fresh_leader"] = read(
        h,
        1420,
        1430,
        "direct_get",
        1,
        {"last_by_subj": "s.a"},
        "n1",
        seq=4,
        id="m4",
        subject="s.a",
    )
    reads_at["fresh_seq"] = read(
        h, 1440, 1450, "direct_get", 1, {"seq": 3}, "n3", seq=3, id="m3", subject="s.b"
    )
    # an info write (timeout): may or may not be stored, owed to nobody either way
    h.op(1460, 0, "n1", "invoke", "publish", stream="S", id="m5", subject="s.c")
    h.op(3460, 0, "n1", "info", "publish", stream="S", id="m5", subject="s.c", error="timeout")
    reads_at["info_not_found"] = read(
        h, 3500, 3510, "direct_get", 1, {"last_by_subj": "s.c"}, "n2", not_found=True
    )
    reads_at["newer_than_acked"] = read(
        h,
        3520,
        3530,
        "msg_get",
        2,
        {"last_by_subj": "s.c"},
        "n3",
        seq=5,
        id="m5",
        subject="s.c",
    )
    # concurrent with a write (the ack comes after the read's invoke): not owed
    h.op(3540, 0, "n1", "invoke", "publish", stream="S", id="m6", subject="s.a")
    reads_at["concurrent"] = read(
        h,
        3545,
        3550,
        "direct_get",
        1,
        {"last_by_subj": "s.a"},
        "n2",
        seq=4,
        id="m4",
        subject="s.a",
    )
    h.op(3560, 0, "n1", "ok", "publish", stream="S", id="m6", subject="s.a", seq=6)
    # batch seqs 7, 8 on s.e, then seq 8 expires (log row): a not_found is explained
    batch = {"stream": "S", "batch": "b1", "ids": ["m7", "m8"], "subject": "s.e"}
    h.op(3600, 0, "n1", "invoke", "batch", **batch)
    h.op(3610, 0, "n1", "ok", "batch", **batch, seq=8, count=2, seqs=[7, 8])
    reads_at["expired"] = read(
        h, 6000, 6010, "direct_get", 1, {"last_by_subj": "s.e"}, "n2", not_found=True
    )
    # a read that fails (no answer) is skipped, not judged
    h.op(6020, 1, "n2", "invoke", "direct_get", stream="S", request={"seq": 1})
    h.op(6030, 1, "n2", "fail", "direct_get", stream="S", request={"seq": 1}, error="503")
    return reads_at


def leaders(spark: SparkSession) -> DataFrame:
    rows = [(RUN, T0_NS + t * MS, "S", "n1") for t in range(0, 7000, 500)]
    return spark.createDataFrame(rows, LEADERS_SCHEMA)


def expire_log(spark: SparkSession) -> DataFrame:
    rows = [
        (RUN, node, "S", 20, "expire", 8, None, T0_NS + (5600 + 10 * i) * MS)
        for i, node in enumerate(["n1", "n2", "n3"])
    ] + [(RUN, "n1", "S", 7, "store", 7, None, T0_NS + 3605 * MS)]
    return spark.createDataFrame(rows, LOG_SCHEMA)


# tiny frames through many small stages: adaptive re-planning and code generation cost more
# than they save, so this module turns them off on the shared session (and restores them)
SMALL_DATA_CONF = {
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}


@pytest.fixture(scope="module", autouse=True)
def small_data_conf(spark: SparkSession) -> Iterator[None]:
    before = {k: spark.conf.get(k, None) for k in SMALL_DATA_CONF}
    for key, value in SMALL_DATA_CONF.items():
        spark.conf.set(key, value)
    yield
    for key, old in before.items():
        if old is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, old)


# a second run judged beside the planted one (runs never mix: every window is per run)
UNEXPLAINED_RUN = "r-unexplained"


def unexplained(h: History) -> None:
    """A not_found read of a subject whose acknowledged messages (a batch: seqs 7 and 8) were
    expired, but no node logged a removal (the log has no rows for this run)."""
    batch = {"stream": "S", "batch": "b1", "ids": ["m7", "m8"], "subject": "s.e"}
    h.op(3600, 0, "n1", "invoke", "batch", **batch)
    h.op(3610, 0, "n1", "ok", "batch", **batch, seq=8, count=2, seqs=[7, 8])
    read(h, 6000, 6010, "direct_get", 1, {"last_by_subj": "s.e"}, "n2", not_found=True)


@dataclass
class Planted:
    at: dict[str, int]
    rows: dict[int, dict[str, Any]]  # judged reads of the planted run by invoke index
    results: dict[str, Any]  # of the planted run alone
    frames: dict[str, list[dict[str, Any]]]
    unexplained: list[dict[str, Any]]  # judged reads of UNEXPLAINED_RUN


@pytest.fixture(scope="module")
def planted_run(spark: SparkSession) -> Planted:
    h, other = History(), History(run=UNEXPLAINED_RUN)
    at = planted(h)
    unexplained(other)
    history = spark.createDataFrame(h.rows + other.rows, HISTORY_SCHEMA).cache()
    log = expire_log(spark)
    judged = judge_runs(history, leaders(spark), log).cache()
    rows = [r.asDict() for r in judged.collect()]
    mine = F.col("run") == RUN
    results, frames = summarize(judged.filter(mine), history.filter(mine), log)
    judged.unpersist()
    history.unpersist()
    return Planted(
        at,
        {r["invoke_index"]: r for r in rows if r["run"] == RUN},
        results,
        frames,
        [r for r in rows if r["run"] == UNEXPLAINED_RUN],
    )


def test_judge_finds_exactly_the_planted_stale_reads(planted_run: Planted) -> None:
    at, rows = planted_run.at, planted_run.rows
    judged = {i: r for i, r in rows.items() if r["outcome"] == "ok"}
    assert len(judged) == len(at) and len(rows) == len(at) + 1  # + the failed read
    stale = {i for i, r in rows.items() if r["stale"]}
    assert stale == {at["stale_direct"], at["stale_msg_get"]}

    direct = rows[at["stale_direct"]]
    assert (direct["kind"], direct["served_by"], direct["role"]) == ("direct_get", "n2", "follower")
    assert direct["fault"] == "partition"
    assert direct["expected_seq"] == 4
    assert direct["lag_seqs"] == 2
    assert direct["lag_ms"] == pytest.approx(150.0)

    msg = rows[at["stale_msg_get"]]
    assert (msg["kind"], msg["mode"], msg["fault"]) == ("msg_get", "seq", "none")
    assert msg["lag_seqs"] == 1  # seq 4 was the stream's acknowledged tail
    assert msg["lag_ms"] == pytest.approx(300.0)

    assert rows[at["fresh_leader"]]["role"] == "leader"
    expired = rows[at["expired"]]
    assert expired["explained_by_removal"] and not expired["stale"]
    assert expired["expected_seq"] == 8
    for name in ("fresh_leader", "fresh_seq", "info_not_found", "newer_than_acked", "concurrent"):
        r = rows[at[name]]
        assert not r["stale"] and r["lag_seqs"] is None and r["lag_ms"] is None, name


def test_analyze_reports_the_planted_numbers(planted_run: Planted) -> None:
    at, results, frames = planted_run.at, planted_run.results, planted_run.frames

    assert results["reads"]["judged"] == len(at)
    assert results["reads"]["skipped"] == {"fail": 1}
    direct = results["by_kind"]["direct_get"]
    assert (direct["reads"], direct["stale"], direct["explained_by_removal"]) == (6, 1, 1)
    assert direct["lag_seqs"] == {"p50": 2.0, "p99": 2.0, "max": 2}
    assert direct["lag_ms"] == {"p50": 150.0, "p99": 150.0, "max": 150.0}
    assert results["msg_get_violations"]["count"] == 1
    [example] = results["msg_get_violations"]["examples"]
    assert (example["invoke_index"], example["served_by"]) == (at["stale_msg_get"], "n3")
    [worst] = results["direct_get_stale_examples"]
    assert (worst["invoke_index"], worst["lag_ms"]) == (at["stale_direct"], 150.0)
    # the report places an example in time from its invoke_ns and the run's first op (t0_ns)
    invoke = planted_run.rows[at["stale_direct"]]["invoke_ns"]
    assert worst["invoke_ns"] == invoke
    [span] = frames["run_spans"]
    assert span["t0_ns"] == T0_NS + 1000 * MS  # the planted run's first op, its publish
    assert span["bucket_s"] == 0.1  # a short run: the smallest bucket (a round width)

    groups = {(g["kind"], g["served_by"], g["role"], g["fault"]): g for g in results["groups"]}
    g = groups[("direct_get", "n2", "follower", "partition")]
    assert (g["reads"], g["stale"], g["stale_rate"]) == (1, 1, 1.0)
    assert g["lag_ms"]["max"] == 150.0
    by_fault = {(g["kind"], g["fault"]): g["stale"] for g in results["by_fault"]}
    assert by_fault == {
        ("direct_get", "none"): 0,
        ("direct_get", "partition"): 1,
        ("msg_get", "none"): 1,
    }
    by_node = {(g["kind"], g["served_by"]): (g["reads"], g["stale"]) for g in results["by_node"]}
    assert by_node == {
        ("direct_get", "n1"): (1, 0),
        ("direct_get", "n2"): (4, 1),
        ("direct_get", "n3"): (1, 0),
        ("msg_get", "n3"): (2, 1),
    }
    assert [(g["run"], g["kind"], g["stale"]) for g in results["by_run"]] == [
        (RUN, "direct_get", 1),
        (RUN, "msg_get", 1),
    ]

    [window] = frames["fault_windows"]
    assert window["fault"] == "partition"
    assert (window["start_s"], window["end_s"]) == (pytest.approx(0.02), pytest.approx(0.301))
    assert sum(p["stale"] for p in frames["staleness_timeline"]) == 2
    assert sum(p["reads"] for p in frames["staleness_timeline"]) == len(at)
    assert frames["lag_seqs_counts"] == [
        {"kind": "direct_get", "served_by": "n2", "lag_seqs": 2, "count": 1},
        {"kind": "msg_get", "served_by": "n3", "lag_seqs": 1, "count": 1},
    ]
    assert [(c["served_by"], c["lag_ms"]) for c in frames["lag_ms_counts"]] == [
        ("n2", 150.0),
        ("n3", 300.0),
    ]
    # apply lag from the log rows: the expire at index 20 applied 10 and 20 ms after n1's
    lag = {r["node"]: r["max_ms"] for r in results["apply_lag"]}
    assert lag == {"n1": 0.0, "n2": 10.0, "n3": 20.0}
    assert {r["node"] for r in frames["apply_lag_timeline"]} == {"n1", "n2", "n3"}


def test_without_removal_rows_the_expired_read_counts_as_stale(planted_run: Planted) -> None:
    [row] = planted_run.unexplained
    # no removal is known: not_found lacked both acked writes of the subject (seqs 7 and 8)
    assert (row["stale"], row["expected_seq"], row["lag_seqs"]) == (True, 8, 2)
    assert row["lag_ms"] == pytest.approx(6000 - 3610)


def test_a_clean_run_has_no_stale_reads(spark: SparkSession) -> None:
    h = History()
    h.op(0, "nemesis", None, "invoke", "kill-start", nodes=["n2"])  # never stopped
    for seq in range(1, 6):
        t = seq * 100
        h.publish(t, 0, "s.k", seq, t + 5)
        read(
            h,
            t + 10,
            t + 12,
            "direct_get",
            1,
            {"last_by_subj": "s.k"},
            "n2",
            seq=seq,
            id=f"m{seq}",
            subject="s.k",
        )
        read(
            h,
            t + 20,
            t + 22,
            "msg_get",
            2,
            {"seq": seq},
            "n3",
            seq=seq,
            id=f"m{seq}",
            subject="s.k",
        )
    results, frames = analyze_staleness(h.frame(spark), leaders(spark))

    assert results["reads"]["judged"] == 10
    for kind in ("direct_get", "msg_get"):
        summary = results["by_kind"][kind]
        assert (summary["reads"], summary["stale"], summary["stale_rate"]) == (5, 0, 0.0)
        assert summary["lag_ms"] == {"p50": None, "p99": None, "max": None}
    assert results["msg_get_violations"] == {"count": 0, "examples": []}
    assert results["direct_get_stale_examples"] == []
    assert {g["fault"] for g in results["by_fault"]} == {"kill"}  # unstopped: to the end
    assert frames["lag_seqs_counts"] == [] and frames["lag_ms_counts"] == []
    assert "apply_lag" not in results and frames["apply_lag_timeline"] == []


def test_role_follows_the_nearest_earlier_leader_sample(spark: SparkSession) -> None:
    h = History()
    read(h, 100, 110, "direct_get", 1, {"seq": 1}, "n2", not_found=True)  # before any sample
    read(h, 600, 610, "direct_get", 1, {"seq": 1}, "n2", not_found=True)  # n1 leads
    read(h, 1000, 1010, "direct_get", 1, {"seq": 1}, "n2", not_found=True)  # same ns: n2 leads
    read(h, 1600, 1610, "direct_get", 1, {"seq": 1}, None, not_found=True)  # nobody named
    samples = [(RUN, T0_NS + 500 * MS, "S", "n1"), (RUN, T0_NS + 1000 * MS, "S", "n2")]
    roles = with_role(reads(h.frame(spark)), spark.createDataFrame(samples, LEADERS_SCHEMA))
    got = [r["role"] for r in roles.orderBy("invoke_index").collect()]
    assert got == ["unknown", "follower", "leader", "unknown"]


def test_missing_columns_are_a_clear_error(spark: SparkSession) -> None:
    bad = spark.createDataFrame([(RUN, 1)], "run string, index long")
    with pytest.raises(StalenessInputError, match="history frame lacks columns"):
        reads(bad)


def test_the_planted_results_make_a_report(planted_run: Planted, tmp_path: Path) -> None:
    json_path, html_path = write_report(
        tmp_path, {"staleness": planted_run.results}, planted_run.frames
    )
    loaded = json.loads(json_path.read_text())["staleness"]
    assert loaded == planted_run.results
    assert loaded["by_kind"]["direct_get"]["lag_ms"]["max"] == 150.0
    html = html_path.read_text()
    assert html.count("data:image/png;base64,") == 3
    assert "INVALID: 1 finding</b> in 1 of 1 check: MSG.GET freshness 1." in html
    assert "1 of 2 reads stale" in html  # the check's line
    assert "id='stale-examples'" in html and "id='msg-get-violations'" in html


def test_overlapping_faults_label_a_read_with_both(spark: SparkSession) -> None:
    h = History()
    h.op(0, "nemesis", None, "invoke", "kill-start", nodes=["n2"])
    h.op(1, "nemesis", None, "info", "kill-start", nodes=["n2"])
    read(h, 10, 11, "direct_get", 1, {"seq": 1}, "n2", not_found=True)  # kill
    h.op(20, "nemesis", None, "invoke", "partition-start", nodes=["n3"])
    h.op(21, "nemesis", None, "info", "partition-start", nodes=["n3"])
    read(h, 30, 31, "direct_get", 1, {"seq": 1}, "n2", not_found=True)  # kill+partition
    h.op(40, "nemesis", None, "invoke", "kill-stop", nodes=["n2"])
    h.op(41, "nemesis", None, "info", "kill-stop", nodes=["n2"])
    read(h, 50, 51, "direct_get", 1, {"seq": 1}, "n2", not_found=True)  # partition
    h.op(60, "nemesis", None, "invoke", "partition-stop", nodes=["n3"])
    h.op(61, "nemesis", None, "info", "partition-stop", nodes=["n3"])
    read(h, 70, 71, "direct_get", 1, {"seq": 1}, "n2", not_found=True)  # none
    history = h.frame(spark)
    labelled = with_fault(reads(history), fault_windows(history))
    got = [r["fault"] for r in labelled.orderBy("invoke_index").collect()]
    assert got == ["kill", "kill+partition", "partition", "none"]


def test_merge_windows_joins_overlaps_of_one_fault_only() -> None:
    rows = [
        {"run": "r", "fault": "kill", "start_index": 10, "end_index": 20},
        {"run": "r", "fault": "kill", "start_index": 15, "end_index": 30},
        {"run": "r", "fault": "kill", "start_index": 40, "end_index": 50},
        {"run": "r", "fault": "pause", "start_index": 12, "end_index": 13},
    ]
    assert merge_windows(rows) == [
        ("r", "kill", 10, 30),
        ("r", "kill", 40, 50),
        ("r", "pause", 12, 13),
    ]
