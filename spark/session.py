"""The SparkSession every spark/ job runs on: local mode by default, any ``--master`` otherwise.

``build_session("local[*]")`` starts Spark inside this process (Java 17 on PATH) and its
Python workers with this interpreter; a ``spark://host:7077`` (or ``yarn``, ``k8s://...``)
master runs the same job on a cluster, whose executors then run ``$PYSPARK_PYTHON`` (default
``python3``): a Python 3.11 with jetraft's runtime dependencies (pydantic, sortedcontainers,
msgpack) installed. The replay code itself (``protocol/``, ``engine/``, ``spark/`` and the
run-directory contract ``jepsen_like/contract.py``) is shipped to them as a zip by
``ship_code``. Under ``spark-submit`` the session the launcher configured
is reused (``getOrCreate``), so ``--master`` there wins.

Must never: open sockets itself (Spark does), or read anything but configuration and the
source files it ships.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

APP_NAME: Final = "jetraft-analyze"
DEFAULT_MASTER: Final = "local[*]"
LOG_LEVEL: Final = "WARN"
# local mode: few shuffle partitions (Spark's 200 are 200 tiny tasks on a laptop); a cluster
# gets Spark's default unless told otherwise
LOCAL_SHUFFLE_PARTITIONS: Final = 4
DEFAULT_DRIVER_MEMORY: Final = "2g"
SHUFFLE_PARTITIONS: Final = "spark.sql.shuffle.partitions"
# the packages a replay needs on an executor (spark/ imports engine/, engine/ imports protocol/)
SHIPPED_PACKAGES: Final = ("protocol", "engine", "spark")
# ...and the one harness module spark/ imports, the run-directory contract, with its package's
# (empty) __init__: without it the worker's installed jepsen_like would shadow the shipped
# file. The rest of jepsen_like (asyncio clients, nemeses) has no business on an executor.
SHIPPED_MODULES: Final = ("jepsen_like/__init__.py", "jepsen_like/contract.py")
REPO_ROOT: Final = Path(__file__).resolve().parent.parent
PYSPARK_PYTHON: Final = "PYSPARK_PYTHON"  # the executors' Python (PySpark reads it at start)


def is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def under_spark_submit() -> bool:
    """True in a driver that ``spark-submit`` launched (it hands the driver its JVM gateway)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build_session(
    master: str | None = DEFAULT_MASTER,
    app_name: str = APP_NAME,
    *,
    progress: bool = True,
    shuffle_partitions: int | None = None,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A SparkSession on ``master`` (None: the one ``spark-submit`` was given); ``progress``
    shows Spark's console progress bar.

    Local mode runs executors' Python workers with this interpreter (the venv that has
    jetraft installed) unless ``$PYSPARK_PYTHON`` names another; elsewhere they run
    ``$PYSPARK_PYTHON`` (default ``python3``), a path on the workers. The web UI is off unless
    ``conf`` turns it on."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    local = master is not None and is_local(master)
    settings: dict[str, str] = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "true" if progress else "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": DEFAULT_DRIVER_MEMORY,
    }
    if local:
        settings["spark.pyspark.python"] = sys.executable
        settings["spark.pyspark.driver.python"] = sys.executable
        settings[SHUFFLE_PARTITIONS] = str(shuffle_partitions or LOCAL_SHUFFLE_PARTITIONS)
        # a laptop's hostname often resolves to a LAN address Spark then warns about
        settings["spark.driver.host"] = "127.0.0.1"
        settings["spark.driver.bindAddress"] = "127.0.0.1"
    elif shuffle_partitions is not None:
        settings[SHUFFLE_PARTITIONS] = str(shuffle_partitions)
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    if local:
        # a local driver binds to 127.0.0.1 only; the env var silences Spark's hostname warning
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # PySpark starts its Python workers with $PYSPARK_PYTHON, else `python3` from PATH (the
        # spark.pyspark.python setting reaches only spark-submit's driver): without this, the
        # workers run some other interpreter that may lack jetraft and its dependencies, and
        # the replay finds `engine` only when the working directory is the repository
        os.environ.setdefault(PYSPARK_PYTHON, sys.executable)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(LOG_LEVEL)
    actual = session.sparkContext.master or ""
    if not is_local(actual):
        ship_code(session)
    elif master is None and not session.sparkContext.getConf().contains(SHUFFLE_PARTITIONS):
        # spark-submit --master local[...] without its own setting: the local default
        session.conf.set(SHUFFLE_PARTITIONS, str(shuffle_partitions or LOCAL_SHUFFLE_PARTITIONS))
    return session


def ship_code(session: SparkSession) -> Path:
    """Zip ``SHIPPED_PACKAGES`` and ``SHIPPED_MODULES`` and add the zip to the executors'
    Python path."""
    tmp = tempfile.mkdtemp(prefix="jetraft-analyze-")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    out = Path(tmp) / "jetraft_replay.zip"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for package in SHIPPED_PACKAGES:
            for path in sorted((REPO_ROOT / package).rglob("*.py")):
                zf.write(path, str(path.relative_to(REPO_ROOT)))
        for module in SHIPPED_MODULES:
            zf.write(REPO_ROOT / module, module)
    session.sparkContext.addPyFile(str(out))
    return out
