"""``jetraft analyze RUN [RUN ...] [--master URL] [--out DIR]``: the Spark analysis of chaos runs.

Registered with the ``jetraft`` command through the ``jetraft.commands`` entry point
(``register``); importing this module is cheap — PySpark is imported only when the command
runs, and a missing PySpark or Java is a one-line message saying how to install it, not a stack
trace. The same job runs three ways:

* ``jetraft analyze RUN`` — Spark in local mode on this machine (``--master local[*]``);
* ``jetraft analyze --master spark://host:7077 RUN ...`` — on a running Spark cluster: its
  workers need Java 17 and, at the path ``$PYSPARK_PYTHON`` names, a Python 3.11 with jetraft
  installed (``pip install 'jetraft[analysis]'``; the driver also ships its own ``protocol/``,
  ``engine/`` and ``spark/`` so the replay runs the driver's code), and the run directories
  must be at the same path on the driver and every worker (a shared file system: executors
  read the files, the driver reads ``run.json`` and writes the report);
* ``PYSPARK_PYTHON=... spark-submit --master spark://host:7077 .../spark/cli.py RUN ...``
  from any directory (the master and settings are spark-submit's then; ``--py-files`` is not
  needed). Without ``PYSPARK_PYTHON`` spark-submit runs the driver with ``python3`` from PATH.

Must never: import pyspark at module import, or exit 0 when the analysis found something.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
from pathlib import Path
from typing import Any, Final

COMMAND: Final = "analyze"
INSTALL_HINT: Final = "pip install 'jetraft[analysis]'"
EXIT_ERROR: Final = 2  # = spark.job.EXIT_ERROR (not imported: that module needs pyspark)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories made by jetraft chaos")
    p.add_argument(
        "--master",
        default=None,
        help="Spark master URL: local[*] (the default), local[N], spark://host:7077, ...",
    )
    p.add_argument(
        "--out",
        default=None,
        help="report directory (default RUN/analysis; for several runs <common parent>/analysis)",
    )
    p.add_argument(
        "--no-spark-progress",
        action="store_true",
        help="hide Spark's console progress bar (the per-stage lines stay)",
    )


def register(sub: Any) -> None:
    p = sub.add_parser(
        COMMAND,
        help="Spark analysis of chaos runs: replica agreement, lost writes, stale reads",
    )
    add_arguments(p)
    p.set_defaults(func=main)


def missing_requirement() -> str | None:
    """Why the analysis cannot start here, or None."""
    if importlib.util.find_spec("pyspark") is None:
        return f"PySpark is not installed: {INSTALL_HINT}"
    if importlib.util.find_spec("matplotlib") is None:
        return f"matplotlib is not installed: {INSTALL_HINT}"
    if shutil.which("java") is None:
        return "Spark needs Java 17 on PATH (e.g. apt-get install openjdk-17-jre-headless)"
    return None


def main(args: argparse.Namespace) -> int:
    problem = missing_requirement()
    if problem is not None:
        print(f"jetraft {COMMAND}: {problem}", file=sys.stderr)
        return EXIT_ERROR
    from spark.job import run_job
    from spark.session import DEFAULT_MASTER, under_spark_submit

    master = args.master
    if master is None and not under_spark_submit():
        master = DEFAULT_MASTER
    return run_job(
        [Path(r) for r in args.runs],
        master=master,
        out_dir=Path(args.out) if args.out else None,
        spark_progress=not args.no_spark_progress,
    )


def cli_main(argv: list[str] | None = None) -> int:
    """``python -m spark.cli`` / ``spark-submit spark/cli.py``: the same arguments."""
    parser = argparse.ArgumentParser(prog=f"jetraft {COMMAND}")
    add_arguments(parser)
    return main(parser.parse_args(argv))


if __name__ == "__main__":
    # spark-submit runs this file as a script: the repository's packages must be importable,
    # and this directory must not shadow top-level modules (spark/load.py as `load`)
    here = Path(__file__).resolve().parent
    if sys.path and Path(sys.path[0] or ".").resolve() == here:
        del sys.path[0]
    sys.path.insert(0, str(here.parent))
    sys.exit(cli_main())
