"""``jetraft analyze`` (spark/cli.py, spark/job.py): registration, exit codes, progress lines,
the report files; and end to end, a short ``jetraft chaos`` run analysed by ``jetraft analyze``."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark import cli
from spark.job import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK, default_out_dir
from tests.spark.conftest import RunBuilder, publish_entry

ROOT = Path(__file__).resolve().parents[2]
STAGES = ("loading", "agreement", "writes", "staleness", "report")
CHAOS_SECONDS = 15
CHAOS_TIMEOUT_S = 300
ANALYZE_TIMEOUT_S = 480


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="jetraft")
    sub = parser.add_subparsers(dest="command", required=True)
    cli.register(sub)
    return parser.parse_args(argv)


def tiny_run(root: Path, *, lose_a_write: bool = False) -> Path:
    b = RunBuilder(root)
    b.open_stream("S")
    for i in (1, 2):
        b.publish(f"m{i}", "S", "s.x", t_ms=10 * i, seq=i)
        b.apply("S", i, publish_entry(10 * i, "s.x", f"m{i}"), t_ms=10 * i + 5)
        b.leader(10 * i, "S", "n1")
    b.read("direct_get", "S", {"seq": 1}, t_ms=40, served_by="n2", seq=1, msg_id="m1")
    b.read("msg_get", "S", {"last_by_subj": "s.x"}, t_ms=50, served_by="n1", seq=2, msg_id="m2")
    if lose_a_write:
        b.publish("m3", "S", "s.x", t_ms=60, seq=3)  # acknowledged, stored nowhere
    return b.write()


def test_importing_the_cli_does_not_import_pyspark() -> None:
    code = "import sys, spark.cli; print('pyspark' in sys.modules, 'spark.job' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["False", "False"]


def test_register_adds_analyze_with_its_options() -> None:
    args = parse(["analyze", "r1", "r2", "--master", "local[2]", "--out", "o"])
    assert (args.runs, args.master, args.out, args.func) == (
        ["r1", "r2"],
        "local[2]",
        "o",
        cli.main,
    )
    args = parse(["analyze", "r1"])
    assert args.master is None and args.out is None and not args.no_spark_progress


def test_without_pyspark_it_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = cli.importlib.util.find_spec
    monkeypatch.setattr(
        cli.importlib.util, "find_spec", lambda name: None if name == "pyspark" else real(name)
    )
    assert cli.main(parse(["analyze", "r1"])) == EXIT_ERROR
    err = capsys.readouterr().err
    assert "pip install 'jetraft[analysis]'" in err and "Traceback" not in err


def test_default_report_directories(tmp_path: Path) -> None:
    assert default_out_dir([tmp_path / "a"]) == (tmp_path / "a" / "analysis").resolve()
    both = [tmp_path / "c" / "x", tmp_path / "c" / "y" / "z"]
    assert default_out_dir(both) == (tmp_path / "c" / "analysis").resolve()


def test_analyze_reports_and_exits_by_findings(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clean = tiny_run(tmp_path / "clean")
    assert cli.main(parse(["analyze", str(clean), "--no-spark-progress"])) == EXIT_OK
    out = capsys.readouterr().out
    for stage in STAGES:
        assert f"] {stage}: " in out, out
    assert "verdict: no findings" in out
    report = json.loads((clean / "analysis" / "report.json").read_text())
    assert report["verdict"]["valid"] and report["verdict"]["findings"] == 0
    assert report["agreement"]["replay"]["matched"] == 3 * 3  # open + 2 entries on 3 nodes
    assert report["staleness"]["reads"]["judged"] == 2
    assert (clean / "analysis" / "report.html").read_text().count("data:image/png;base64,") == 3
    assert spark.sparkContext._jsc is not None  # the shared session was left running

    planted = tiny_run(tmp_path / "planted", lose_a_write=True)
    out_dir = tmp_path / "reports"
    argv = ["analyze", str(planted), "--out", str(out_dir), "--no-spark-progress"]
    assert cli.main(parse(argv)) == EXIT_FINDINGS
    assert "verdict: 1 finding(s): lost 1" in capsys.readouterr().out
    lost = json.loads((out_dir / "report.json").read_text())["writes"]["lost"]
    assert lost["count"] == 1 and lost["examples"][0]["id"] == "m3"


def test_bad_input_exits_2_with_the_file_and_line(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tiny_run(tmp_path / "bad")
    history = run / "history.jsonl"
    lines = history.read_text().splitlines()
    lines[2] = "{oops"
    history.write_text("\n".join(lines) + "\n")
    assert cli.main(parse(["analyze", str(run), "--no-spark-progress"])) == EXIT_ERROR
    err = capsys.readouterr().err
    assert f"{history.resolve()}:3: not JSON" in err and "Traceback" not in err
    assert not (run / "analysis").exists()


@pytest.mark.integration
@pytest.mark.timeout(CHAOS_TIMEOUT_S + ANALYZE_TIMEOUT_S + 60)
def test_a_short_chaos_run_analysed_end_to_end(tmp_path: Path) -> None:
    jetraft = [sys.executable, "-m", "cluster.cli"]
    run = tmp_path / "run"
    chaos = [
        *jetraft,
        "chaos",
        "--nodes",
        "3",
        "--time",
        str(CHAOS_SECONDS),
        "--workload",
        "mix",
        "--nemesis",
        "kill",
        "--seed",
        "7",
        "--out",
        str(run),
    ]
    done = subprocess.run(chaos, cwd=ROOT, capture_output=True, text=True, timeout=CHAOS_TIMEOUT_S)
    assert done.returncode in (0, 1), done.stderr[-3000:]  # 1: the chaos checkers found something
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    analyze = [*jetraft, "analyze", str(run), "--master", "local[2]", "--no-spark-progress"]
    done = subprocess.run(
        analyze, cwd=ROOT, capture_output=True, text=True, timeout=ANALYZE_TIMEOUT_S, env=env
    )
    assert done.returncode in (EXIT_OK, EXIT_FINDINGS), done.stderr[-3000:]
    for stage in STAGES:
        assert f"] {stage}: " in done.stdout, done.stdout
    report = json.loads((run / "analysis" / "report.json").read_text())
    replay = report["agreement"]["replay"]
    assert replay["rows"] > 0 and replay["matched"] > 0
    assert report["staleness"]["reads"]["judged"] > 0
    assert report["writes"]["writes"]["by_outcome"].get("ok", 0) > 0
    # the server's guarantees: no replica disagreement, nothing lost, no stale MSG.GET
    by_check = report["verdict"]["by_check"]
    assert by_check["replay_mismatch"] == by_check["split_brain"] == 0, report["agreement"]
    assert by_check["lost"] == by_check["stale_msg_get"] == 0, by_check
    assert (run / "analysis" / "report.html").is_file()


def test_the_replay_code_is_shipped_to_cluster_executors(spark: SparkSession) -> None:
    import zipfile

    from spark.session import ship_code

    shipped = ship_code(spark)
    names = set(zipfile.ZipFile(shipped).namelist())
    assert {"engine/stream.py", "engine/entries.py", "protocol/models.py"} <= names
    assert {"spark/agreement.py", "spark/load.py"} <= names
    assert not any(n.startswith(("cluster/", "jepsen_like/")) for n in names)
