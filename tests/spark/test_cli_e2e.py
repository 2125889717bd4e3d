"""``jetraft analyze`` (spark/cli.py, spark/job.py): registration, the verdict and exit codes,
bad input. The whole analysis through this CLI — a chaos run and a planted run analysed
together, progress lines, report files — is test_e2e.py."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from spark import cli, job
from spark.job import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK, WRITE_CHECKS, default_out_dir
from tests.spark.conftest import tiny_run

ROOT = Path(__file__).resolve().parents[2]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="jetraft")
    sub = parser.add_subparsers(dest="command", required=True)
    cli.register(sub)
    return parser.parse_args(argv)


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


def fake_analysis(monkeypatch: pytest.MonkeyPatch, by_check: dict[str, int]) -> dict[str, Any]:
    """Replaces the analysis by one whose verdict has ``by_check``; returns what it was given.
    (The real analysis runs on planted runs through this CLI in test_e2e.py.)"""
    seen: dict[str, Any] = {}

    def fake_analyze(
        session: SparkSession, runs: list[Path], out: Path, progress: Any
    ) -> tuple[dict[str, Any], Path, Path]:
        seen.update(session=session, runs=runs, out=out)
        stale: dict[str, Any] = {"msg_get_violations": {"count": by_check.get("stale_msg_get", 0)}}
        agreement = {
            "replay": {"findings": by_check.get("replay_mismatch", 0)},
            "split_brain": {"diverging_indexes": by_check.get("split_brain", 0)},
            "entry_divergence": {"count": by_check.get("entry_divergence", 0)},
            "lone_entries": {"count": by_check.get("lone_entry", 0)},
        }
        writes = {k: {"count": by_check.get(k, 0)} for k in WRITE_CHECKS}
        counters = {"findings": by_check.get("counter", 0)}
        results = {"verdict": job.verdict(agreement, writes, stale, counters)}
        return results, out / "report.json", out / "report.html"

    monkeypatch.setattr(job, "analyze", fake_analyze)
    return seen


def test_the_verdict_counts_every_check() -> None:
    counts = {"replay_mismatch": 1, "split_brain": 2, "entry_divergence": 3, "lone_entry": 4}
    counts |= {k: 10 + i for i, k in enumerate(WRITE_CHECKS)} | {"stale_msg_get": 20}
    counts |= {"counter": 30}
    agreement = {
        "replay": {"findings": 1},
        "split_brain": {"diverging_indexes": 2},
        "entry_divergence": {"count": 3},
        "lone_entries": {"count": 4},
    }
    writes = {k: {"count": 10 + i} for i, k in enumerate(WRITE_CHECKS)}
    stale = {"msg_get_violations": {"count": 20}}
    v = job.verdict(agreement, writes, stale, {"findings": 30})
    assert v == {"valid": False, "findings": sum(counts.values()), "by_check": counts}
    clean = job.verdict(
        {k: {kk: 0 for kk in d} for k, d in agreement.items()},
        {k: {"count": 0} for k in WRITE_CHECKS},
        {},  # a run without reads: no staleness section
    )
    assert clean["valid"] and clean["findings"] == 0 and set(clean["by_check"].values()) == {0}


def test_findings_exit_1_and_are_named(
    spark: SparkSession,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = fake_analysis(monkeypatch, {"lost": 1, "stale_msg_get": 2})
    run, out_dir = tmp_path / "run", tmp_path / "reports"
    argv = ["analyze", str(run), "--out", str(out_dir), "--no-spark-progress"]
    assert cli.main(parse(argv)) == EXIT_FINDINGS
    assert "verdict: 3 finding(s): lost 1, stale_msg_get 2" in capsys.readouterr().out
    assert seen == {"session": spark, "runs": [run], "out": out_dir}
    assert spark.sparkContext._jsc is not None  # the shared session was left running


def test_a_clean_verdict_exits_0(
    spark: SparkSession,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = fake_analysis(monkeypatch, {})
    runs = [tmp_path / "a" / "r1", tmp_path / "b" / "r2"]
    assert cli.main(parse(["analyze", *map(str, runs), "--no-spark-progress"])) == EXIT_OK
    assert "verdict: no findings" in capsys.readouterr().out
    assert seen == {"session": spark, "runs": runs, "out": (tmp_path / "analysis").resolve()}


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


def test_the_replay_code_is_shipped_to_cluster_executors(spark: SparkSession) -> None:
    import zipfile

    from spark.session import ship_code

    shipped = ship_code(spark)
    names = set(zipfile.ZipFile(shipped).namelist())
    assert {"engine/stream.py", "engine/entries.py", "protocol/models.py"} <= names
    assert {"spark/agreement.py", "spark/load.py"} <= names
    # of the harness only the contract spark/ reads run directories through (and its package)
    assert {n for n in names if n.startswith("jepsen_like/")} == {
        "jepsen_like/__init__.py",
        "jepsen_like/contract.py",
    }
    assert not any(n.startswith("cluster/") for n in names)


def test_the_shipped_contract_imports_from_the_zip_alone(
    spark: SparkSession, tmp_path: Path
) -> None:
    # an executor has the zip, not this checkout: the contract must come from the zip, need no
    # site-packages (-S) and bring none of the rest of the harness with it
    from spark.session import ship_code

    shipped = ship_code(spark)
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]); import jepsen_like.contract as c; "
        "print(c.__file__); import jepsen_like.checker"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", probe, str(shipped)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.stdout.strip() == str(shipped / "jepsen_like" / "contract.py")
    assert "No module named 'jepsen_like.checker'" in done.stderr


def test_python_workers_run_this_interpreter(spark: SparkSession) -> None:
    # not `python3` from PATH: that one may lack jetraft, which the replay imports in workers
    # (a lambda: cloudpickle ships it by value, as a test module's function cannot be imported)
    ran = spark.sparkContext.parallelize([0], 1).map(lambda _: sys.executable).collect()
    assert ran == [sys.executable]
