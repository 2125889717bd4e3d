"""The CI chaos smoke: `jetraft chaos` on 3 nodes with kill and partition faults, end to end,
with route authentication and route TLS (verify) on, through the per-link TCP proxies.

The long runs (5 nodes, 300 s of faults, each nemesis) are documented in the README."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SMOKE_SECONDS = 25


def test_chaos_smoke_run_is_valid_and_follows_the_run_directory_contract(tmp_path: Path) -> None:
    run = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "cluster.cli",
        "chaos",
        "--nodes",
        "3",
        "--time",
        str(SMOKE_SECONDS),
        "--workload",
        "mix",
        "--nemesis",
        "kill,partition",
        "--seed",
        "7",
        "--out",
        str(run),
    ]
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=240, cwd=Path(__file__).parents[2]
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "verdict: VALID" in done.stdout
    meta = json.loads((run / "run.json").read_text())
    assert meta["seed"] == 7 and meta["nodes"] == ["n1", "n2", "n3"] and meta["recovered"]
    # the cluster ran as deployments do: route authentication and verified route TLS
    assert meta["cluster"]["route_security"]
    for node in meta["nodes"]:
        conf = run / "nodes" / node / "route-security.conf"
        assert conf.stat().st_mode & 0o777 == 0o600
        assert "authorization" in conf.read_text() and "verify: true" in conf.read_text()
        server_log = (run / "nodes" / node / "server.log").read_text()
        assert "route to" in server_log
        # every peer presented the run's credentials: a refusal here is a dialing bug
        assert "authorization violation" not in server_log
    ops = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    assert [op["index"] for op in ops] == list(range(len(ops)))
    assert {"publish", "batch", "read_all"} <= {op["f"] for op in ops}
    faults = [op for op in ops if op["process"] == "nemesis" and op["type"] == "info"]
    assert any(op["f"].endswith("-start") for op in faults)
    acked = [op for op in ops if op["f"] == "publish" and op["type"] == "ok"]
    assert acked and all(isinstance(op["value"]["seq"], int) for op in acked)
    for node in meta["nodes"]:
        rows = (run / "nodes" / node / "log.jsonl").read_text().splitlines()
        assert rows, node
        row = json.loads(rows[0])
        assert {"node", "stream", "index", "term", "op", "seq", "applied_ns"} <= set(row)
    leaders = [json.loads(line) for line in (run / "leaders.jsonl").read_text().splitlines()]
    assert leaders and {row["leader"] for row in leaders} & set(meta["nodes"])
    verdict = json.loads((run / "verdict.json").read_text())
    assert verdict["valid"] is True and verdict["anomalies"] == []
