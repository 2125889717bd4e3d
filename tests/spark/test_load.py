"""Run directories into DataFrames (spark/load.py): line numbers, many runs, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark.load import (
    MAX_ERRORS_SHOWN,
    LoadError,
    discover_run,
    explain_line,
    load_runs,
    recover_glued,
)
from tests.spark.conftest import RunBuilder, ns, publish_entry


def small_run(root: Path, nodes: tuple[str, ...] = ("n1", "n2")) -> RunBuilder:
    b = RunBuilder(root, nodes)
    b.open_stream("S")
    b.apply("S", 1, publish_entry(1, "s.x", "m1"), t_ms=1)
    b.publish("m1", "S", "s.x", t_ms=0, seq=1)
    b.read("direct_get", "S", {"last_by_subj": "s.x"}, t_ms=5, served_by="n2", seq=1, msg_id="m1")
    b.op(6, "nemesis", None, "info", "partition-start", mode="ring", cut=[["n1", "n2"]])
    b.leader(0, "S", "n1")
    b.leader(500, "S", None)
    return b


def test_two_runs_load_with_their_lines_and_values(spark: SparkSession, tmp_path: Path) -> None:
    a = small_run(tmp_path / "a").write()
    b = small_run(tmp_path / "b", ("n1", "n2", "n3")).write()
    loaded = load_runs(spark, [a, b])
    assert [r.run for r in loaded.runs] == [str(a.resolve()), str(b.resolve())]
    assert loaded.dropped == []
    logs = loaded.log.orderBy("run", "node", "line").collect()
    for run, nodes in ((a, 2), (b, 3)):
        mine = [r for r in logs if r["run"] == str(run.resolve())]
        assert len({r["node"] for r in mine}) == nodes
        for node in {r["node"] for r in mine}:
            rows = [r for r in mine if r["node"] == node]
            on_disk = (run / "nodes" / node / "log.jsonl").read_text().splitlines()
            assert [r["line"] for r in rows] == list(range(1, len(on_disk) + 1))
            assert [r["op"] for r in rows] == [json.loads(x)["op"] for x in on_disk]
    opened = next(r for r in logs if r["op"] == "open")
    assert json.loads(opened["config"])["name"] == "S" and opened["created_ns"] > 0
    hist = {r["index"]: r for r in loaded.history.filter(f"run = '{a.resolve()}'").collect()}
    assert len(hist) == 5
    assert (hist[1]["f"], hist[1]["type"], hist[1]["seq"], hist[1]["process"]) == (
        "publish",
        "ok",
        1,
        "0",
    )
    read_ok = hist[3]
    assert (read_ok["req_last_by_subj"], read_ok["served_by"], read_ok["id"]) == ("s.x", "n2", "m1")
    nemesis = hist[4]
    assert (nemesis["process"], nemesis["mode"], nemesis["f"]) == (
        "nemesis",
        "ring",
        "partition-start",
    )
    assert json.loads(nemesis["value"])["cut"] == [["n1", "n2"]]
    leaders = loaded.leaders.orderBy("run", "line").collect()
    assert [(r["line"], r["leader"]) for r in leaders] == [(1, "n1"), (2, None)] * 2
    meta = {r["run"]: r for r in loaded.meta.collect()}
    assert meta[str(b.resolve())]["nodes"] == ["n1", "n2", "n3"]
    assert meta[str(a.resolve())]["started_ns"] == ns(0)
    loaded.unpersist()


SPLIT_OPS = 120  # history lines of ~150 bytes: 4 blocks of 4 KiB


def test_line_numbers_hold_when_spark_splits_a_file(spark: SparkSession, tmp_path: Path) -> None:
    b = RunBuilder(tmp_path / "big", ["n1"])
    for i in range(SPLIT_OPS):
        b.op(i, i % 4, "n1", "invoke", "publish", stream="S", id=f"m{i}", subject="s.x")
    run = b.write()
    assert (run / "history.jsonl").stat().st_size > 3 * 4096  # a first, middle and last block
    old = spark.conf.get("spark.sql.files.maxPartitionBytes")
    spark.conf.set("spark.sql.files.maxPartitionBytes", "4096")
    try:
        loaded = load_runs(spark, [run])
        rows = loaded.history.select("line", "index").collect()
        assert loaded.history.rdd.getNumPartitions() > 1
    finally:
        spark.conf.set("spark.sql.files.maxPartitionBytes", old or "128m")
    assert sorted((r["line"], r["index"]) for r in rows) == [(i + 1, i) for i in range(SPLIT_OPS)]


def test_torn_last_lines_are_dropped_and_glued_rows_recovered(
    spark: SparkSession, tmp_path: Path
) -> None:
    run = small_run(tmp_path / "torn").write()
    history = run / "history.jsonl"
    history.write_text(history.read_text() + '{"index": 5, "time_ns": 12')  # cut by a kill
    log = run / "nodes" / "n1" / "log.jsonl"
    lines = log.read_text().splitlines()
    # the node was killed mid-row, restarted and appended its next row to the torn line
    glued = lines[1][: len(lines[1]) // 2] + lines[2]
    log.write_text("\n".join([lines[0], glued, *lines[3:]]) + "\n")
    loaded = load_runs(spark, [run])
    assert [(Path(d["file"]).name, d["line"], d["recovered"]) for d in loaded.dropped] == [
        ("history.jsonl", 6, 0),
        ("log.jsonl", 2, 1),
    ]
    assert "torn last line" in loaded.dropped[0]["reason"]
    assert loaded.history.count() == 5
    n1 = loaded.log.filter("node = 'n1'").orderBy("line").collect()
    assert [r["op"] for r in n1] == [json.loads(x)["op"] for x in (lines[0], lines[2], *lines[3:])]
    assert [r["line"] for r in n1] == list(range(1, len(lines)))


# (file, line, bad text, what the error must say): each planted in a run of its own
BAD_LINES = [
    ("history.jsonl", 2, "not json at all", "not JSON"),
    (
        "history.jsonl",
        1,
        '{"index": "x", "time_ns": 1, "process": 1, "type": "ok", "f": "a"}',
        "'index' is not an integer",
    ),
    (
        "history.jsonl",
        3,
        '{"index": 1, "time_ns": 1, "process": 1, "type": "done", "f": "a"}',
        "'type' 'done'",
    ),
    (
        "history.jsonl",
        2,
        '{"index": 1, "time_ns": 1, "process": 1, "type": "ok", "f": "publish", '
        '"value": {"seq": "7"}}',
        "'value.seq' is not an integer",
    ),
    (
        "nodes/n2/log.jsonl",
        2,
        '{"node": "n2", "stream": "S", "index": 1, "op": "entry"}',
        "without 'entry'",
    ),
    (
        "nodes/n2/log.jsonl",
        1,
        '{"node": "n2", "stream": "S", "index": 1, "op": "frob"}',
        "'op' 'frob'",
    ),
    ("leaders.jsonl", 1, "[1, 2]", "not a JSON object"),
]


@pytest.fixture(scope="module")
def bad_line_errors(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> dict[int, tuple[Path, str]]:
    """Each BAD_LINES case's corrupted file and the LoadError message it appears in: the runs
    are loaded a few at a time (as many as one error message lists in full), so every bad line
    must be found and named even beside others."""
    root = tmp_path_factory.mktemp("bad")
    out: dict[int, tuple[Path, str]] = {}
    cases = list(enumerate(BAD_LINES))
    for start in range(0, len(cases), MAX_ERRORS_SHOWN):
        group = cases[start : start + MAX_ERRORS_SHOWN]
        paths: dict[int, Path] = {}
        runs: list[Path] = []
        for case, (file, line, bad, _reason) in group:
            run = small_run(root / f"bad{case}").write()
            path = run / file
            lines = path.read_text().splitlines()
            lines[line - 1] = bad
            path.write_text("\n".join(lines) + "\n")
            paths[case] = path
            runs.append(run)
        with pytest.raises(LoadError) as info:
            load_runs(spark, runs)
        message = str(info.value)
        assert message.count("\n  ") == len(group), message  # one error line per bad line
        out.update({case: (path, message) for case, path in paths.items()})
    return out


@pytest.mark.parametrize("case", range(len(BAD_LINES)), ids=[c[-1] for c in BAD_LINES])
def test_a_bad_line_is_an_error_naming_file_and_line(
    bad_line_errors: dict[int, tuple[Path, str]], case: int
) -> None:
    _file, line, _bad, reason = BAD_LINES[case]
    path, message = bad_line_errors[case]
    named = [e for e in message.splitlines() if e.strip().startswith(f"{path.resolve()}:{line}: ")]
    assert len(named) == 1 and reason in named[0], message


def test_missing_or_bad_run_files_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(LoadError, match="not a directory"):
        discover_run(tmp_path / "nope")
    run = tmp_path / "r"
    run.mkdir()
    with pytest.raises(LoadError, match=r"run\.json: missing"):
        discover_run(run)
    (run / "run.json").write_text('{"nodes": ["n1"],\n "seed": }')
    (run / "history.jsonl").write_text("")
    with pytest.raises(LoadError, match=r"run\.json:2: not JSON"):
        discover_run(run)
    (run / "run.json").write_text('{"nodes": "n1"}')
    with pytest.raises(LoadError, match="'nodes' is not a list"):
        discover_run(run)
    (run / "run.json").write_text("{}")
    found = discover_run(run)
    assert found.logs == {} and found.leaders is None


def test_a_run_without_logs_or_leaders_loads_empty_frames(
    spark: SparkSession, tmp_path: Path
) -> None:
    b = RunBuilder(tmp_path / "nats", system="nats")
    b.publish("m1", "S", "s.x", t_ms=0, seq=1)
    loaded = load_runs(spark, [b.write()])
    assert loaded.history.count() == 2
    assert loaded.log.count() == 0 and loaded.leaders.count() == 0


def test_explain_and_recover_lines() -> None:
    assert explain_line("log", '{"node":"n","stream":"S","index":1,"op":"store","seq":1}') is None
    assert explain_line("log", '{"node":"n","stream":"S","index":1,"op":"store"}') == (
        "a 'store' row without 'seq'"
    )
    assert explain_line("log", '{"node":"n","stream":"S","index":1,"op":"purge"}') is not None
    assert explain_line("history", "") == "empty line"
    assert explain_line("leaders", '{"time_ns": 1, "stream": "S", "leader": 3}') == (
        "'leader' is not a string"
    )
    row = (
        '{"node":"n","stream":"S","index":2,"op":"open","config":{"a":{"b":1}},'
        '"created_ns":1,"digest":"d"}'
    )
    assert recover_glued("log", '{"node":"n","stream":"S","ind' + row) == row
    assert recover_glued("log", '{"node":"n","stream":"S","ind{"x": 1}') is None
