"""End to end: a short ``jetraft chaos`` run (3 nodes, mix workload, kill nemesis) analysed by
``jetraft analyze``, its report checked against the chaos harness's own ``verdict.json``.

The chaos run is made once per module (a subprocess, as a user runs it). Two ways through the
analysis:

* in ``make test``: ``jetraft analyze CHAOS_RUN PLANTED_RUN`` through the real command line
  (``cluster.cli.main``: the ``jetraft`` entry point with its registered subcommands) in this
  process, on the shared warm Spark session — the same code as the command minus a JVM start
  and its warm-up, which cost most of a minute on a 2-core machine. Two runs at once: the chaos
  run and a tiny run with a planted lost write (so the command must exit 1 and name it, and
  every finding must belong to the planted run when the harness judged the chaos run valid);
  then the same command on a copy of the chaos run with a malformed line in the middle;
* marked ``slow`` (``pytest -m slow tests/spark``): ``jetraft analyze`` as a subprocess on the
  chaos run alone and on the malformed copy, and ``spark-submit spark/cli.py`` on a planted
  run, each starting its own local Spark.

The report must agree with the verdict: the same history ops, acknowledged / failed / unknown
writes, successful reads per kind and node-log rows; and when the harness judged the run valid,
the analysis must find nothing in it either (no lost write, no replica divergence, no stale
MSG.GET).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from spark.job import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK
from spark.report import PLOTS
from tests.spark.conftest import (
    SPARK_TEST_TIMEOUT_S,
    TINY_LOST_WRITE_COUNTS,
    TINY_RUN_COUNTS,
    tiny_run,
)

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
STAGES = ("loading", "agreement", "writes", "staleness", "consumers", "counters", "report")
CHAOS_SECONDS = 10
CHAOS_SEED = 7
CHAOS_TIMEOUT_S = 240
SUBPROCESS_ANALYZE_TIMEOUT_S = 600
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# the harness's "indeterminate" writes are the analysis's info and never-completed ones
INDETERMINATE = ("info", "pending")
NO_EXTRA: Mapping[str, int] = {}


def jetraft() -> list[str]:
    script = BIN / "jetraft"
    return [str(script)] if script.exists() else [sys.executable, "-m", "cluster.cli"]


@pytest.fixture(scope="module")
def chaos_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("chaos") / "run"
    cmd = [
        sys.executable,
        "-m",
        "cluster.cli",
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
        str(CHAOS_SEED),
        "--out",
        str(run),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=CHAOS_TIMEOUT_S, cwd=ROOT)
    # 1: the harness found anomalies; the analysis is still checked against its verdict
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    assert (run / "verdict.json").is_file(), done.stdout[-3000:]
    return run


def check_report(
    run: Path, out: Path, stdout: str, extra: Mapping[str, int] = NO_EXTRA
) -> dict[str, Any]:
    """The report in ``out`` against ``run``'s verdict.json (``extra``: what other runs analysed
    with it add, in TINY_RUN_COUNTS' keys); returns the report."""
    for stage in STAGES:
        assert f"] {stage}: " in stdout, stdout
    verdict = json.loads((run / "verdict.json").read_text())
    stats = verdict["stats"]
    report = json.loads((out / "report.json").read_text())

    rows = report["input"]["rows"]
    assert rows["history"] == stats["ops"] + extra.get("history", 0)
    # a line the harness could not parse (a kill tore it) the analysis drops or recovers
    torn = len(report["input"]["dropped_lines"]) + sum(stats.get("unparsed_lines", {}).values())
    assert abs(rows["log"] - stats["log_rows"] - extra.get("log", 0)) <= torn, (rows, stats)
    assert rows["leaders"] > extra.get("leaders", 0)

    outcomes = report["writes"]["writes"]["by_outcome"]
    assert outcomes.get("ok", 0) == stats["acked_writes"] + extra.get("ok", 0)
    assert stats["acked_writes"] > 0
    assert outcomes.get("fail", 0) == stats["failed_writes"]
    assert sum(outcomes.get(k, 0) for k in INDETERMINATE) == stats["indeterminate_writes"]

    by_f_type = stats["by_f_type"]
    by_kind = report["staleness"]["by_kind"]
    for kind in ("direct_get", "msg_get"):
        want = by_f_type.get(f"{kind}:ok", 0) + extra.get(kind, 0)
        assert by_kind[kind]["reads"] == want, kind
    incs = report["counters"]["increments"]
    assert (incs["ok"], incs["fail"]) == (stats["counter_acked"], stats["counter_failed"])
    assert (incs["info"], incs["retries"]) == (
        stats["counter_indeterminate"],
        stats["counter_retries"],
    )
    assert stats["counter_acked"] > 0  # the mix workload increments counters

    judged = report["staleness"]["reads"]["judged"]
    assert judged == stats["reads"] + extra.get("direct_get", 0) + extra.get("msg_get", 0)
    assert stats["reads"] > 0

    replay = report["agreement"]["replay"]
    assert replay["rows"] > extra.get("replayed", 0)
    assert replay["matched"] + replay["mismatched"] + replay["unreplayable"] == replay["rows"]
    if verdict["valid"]:
        # the harness's checks passed: the analysis must find nothing in this run either
        # (a replay may stop short of a node's end, which is its reach, not a finding)
        assert replay["mismatched"] == replay["findings"] == 0, report["agreement"]
        assert report["staleness"]["msg_get_violations"]["count"] == 0
        assert report["agreement"]["split_brain"]["diverging_indexes"] == 0
        assert report["agreement"]["entry_divergence"]["count"] == 0
        for key in ("lost", "ack_mismatch", "phantom", "duplicate", "batches"):
            assert all(e["run"] != str(run.resolve()) for e in report["writes"][key]["examples"])
        for key in ("final_total", "unread", "acked_total", "seq_shared"):
            assert report["counters"][key]["count"] == 0, report["counters"][key]

    html = (out / "report.html").read_text()
    images = html.split("data:image/png;base64,")[1:]
    assert len(images) == len(PLOTS)
    for image in images:
        assert base64.b64decode(image[: image.index("'")]).startswith(PNG_MAGIC)
    for _key, title in PLOTS:
        assert title in html
    return report


def corrupt_a_middle_line(run: Path, dest: Path) -> tuple[Path, int]:
    """A copy of ``run`` whose history has one malformed line in the middle (not a torn last
    line, which is tolerated); returns the file and the line number."""
    shutil.copytree(run, dest, ignore=shutil.ignore_patterns("analysis"))
    history = dest / "history.jsonl"
    lines = history.read_text().splitlines()
    line = len(lines) // 2
    lines[line - 1] = lines[line - 1][: len(lines[line - 1]) // 2]  # cut short: not JSON
    history.write_text("\n".join(lines) + "\n")
    return history, line


@pytest.mark.integration
@pytest.mark.timeout(CHAOS_TIMEOUT_S + SPARK_TEST_TIMEOUT_S)
def test_analyze_a_chaos_run_and_a_planted_run_together(
    spark: SparkSession, chaos_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cluster.cli import main as jetraft_main

    planted = tiny_run(tmp_path / "planted", lose_a_write=True)
    out = tmp_path / "report"
    argv = ["analyze", str(chaos_run), str(planted), "--out", str(out), "--no-spark-progress"]
    code = jetraft_main(argv)
    stdout = capsys.readouterr().out
    extra = {k: TINY_RUN_COUNTS[k] + TINY_LOST_WRITE_COUNTS.get(k, 0) for k in TINY_RUN_COUNTS}
    report = check_report(chaos_run, out, stdout, extra)
    assert not (chaos_run / "analysis").exists() and not (planted / "analysis").exists()

    assert code == EXIT_FINDINGS
    keys = [str(chaos_run.resolve()), str(planted.resolve())]
    assert [r["run"] for r in report["runs"]] == sorted(keys)
    lost = report["writes"]["lost"]
    planted_lost = [e for e in lost["examples"] if e["run"] == keys[1]]
    assert [(e["stream"], e["id"], e["seq"], e["stored_on"]) for e in planted_lost] == [
        ("S", "m3", 3, [])
    ]
    if json.loads((chaos_run / "verdict.json").read_text())["valid"]:
        by_check = report["verdict"]["by_check"]
        assert {k: n for k, n in by_check.items() if n} == {"lost": 1}, by_check
        assert report["verdict"]["findings"] == 1
        assert "verdict: 1 finding(s): lost 1" in stdout


@pytest.mark.integration
@pytest.mark.timeout(CHAOS_TIMEOUT_S + SPARK_TEST_TIMEOUT_S)
def test_analyze_names_the_file_and_line_of_a_malformed_line(
    spark: SparkSession, chaos_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cluster.cli import main as jetraft_main

    history, line = corrupt_a_middle_line(chaos_run, tmp_path / "bad")
    code = jetraft_main(["analyze", str(history.parent), "--no-spark-progress"])
    assert code == EXIT_ERROR
    err = capsys.readouterr().err
    assert f"{history.resolve()}:{line}: not JSON" in err, err
    assert "Traceback" not in err
    assert not (history.parent / "analysis").exists()


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(CHAOS_TIMEOUT_S + 2 * SUBPROCESS_ANALYZE_TIMEOUT_S)
def test_jetraft_analyze_as_a_subprocess(chaos_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    cmd = [*jetraft(), "analyze", str(chaos_run), "--out", str(out), "--no-spark-progress"]
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=SUBPROCESS_ANALYZE_TIMEOUT_S, cwd=tmp_path
    )
    assert done.returncode in (EXIT_OK, EXIT_FINDINGS), done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    report = check_report(chaos_run, out, done.stdout)
    if json.loads((chaos_run / "verdict.json").read_text())["valid"]:
        assert report["verdict"]["valid"] and report["verdict"]["findings"] == 0, report["verdict"]
        assert done.returncode == EXIT_OK and "verdict: no findings" in done.stdout

    history, line = corrupt_a_middle_line(chaos_run, tmp_path / "bad")
    cmd = [*jetraft(), "analyze", str(history.parent), "--no-spark-progress"]
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=SUBPROCESS_ANALYZE_TIMEOUT_S, cwd=tmp_path
    )
    assert done.returncode == EXIT_ERROR, done.stdout[-2000:] + done.stderr[-3000:]
    assert f"{history.resolve()}:{line}: not JSON" in done.stderr, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert not (history.parent / "analysis").exists()


@pytest.mark.slow
@pytest.mark.timeout(SUBPROCESS_ANALYZE_TIMEOUT_S + 60)
def test_spark_submit_runs_the_job_script(tmp_path: Path) -> None:
    """``spark-submit spark/cli.py`` (the documented way onto a cluster), here with a local
    master: from another directory, with spark-submit's own session."""
    run = tiny_run(tmp_path / "run", lose_a_write=True)
    out = tmp_path / "report"
    cmd = [
        str(BIN / "spark-submit"),
        "--master",
        "local[1]",
        str(ROOT / "spark" / "cli.py"),
        str(run),
        "--out",
        str(out),
        "--no-spark-progress",
    ]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_ANALYZE_TIMEOUT_S,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == EXIT_FINDINGS, done.stdout[-3000:] + done.stderr[-3000:]
    assert "starting Spark: local[1]" in done.stdout
    assert "verdict: 1 finding(s): lost 1" in done.stdout
    report = json.loads((out / "report.json").read_text())
    assert report["spark"]["master"] == "local[1]"
    assert report["writes"]["lost"]["examples"][0]["id"] == "m3"
    assert report["agreement"]["replay"]["matched"] == TINY_RUN_COUNTS["replayed"]
    assert report["input"]["rows"]["history"] == (
        TINY_RUN_COUNTS["history"] + TINY_LOST_WRITE_COUNTS["history"]
    )
