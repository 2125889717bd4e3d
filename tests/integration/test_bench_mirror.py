"""The mirror benchmark runs end to end: a tiny run against nats-server and jetraft completes every
phase with checked replies, prints the table with a nonzero rate in every cell, shows the mirrors
answering the upstream's Direct Gets, and appends its markdown section only where told to."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.mirror_bench import JETRAFT, MIRRORS, NATS, UPSTREAM, MirrorBenchConfig, main

pytestmark = pytest.mark.integration

TINY_MSGS = 64
TINY_GETS = 300
TINY_CATCHUP_MSGS = 500
TINY_WINDOW = 50
RATE = re.compile(r"^\d[\d,]*$")


def test_a_tiny_mirror_bench_run_prints_every_rate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results.md"
    argv = [
        "--quick",
        "--msgs",
        str(TINY_MSGS),
        "--gets",
        str(TINY_GETS),
        "--catchup-msgs",
        str(TINY_CATCHUP_MSGS),
        "--window",
        str(TINY_WINDOW),
        "--append-results",
        str(results),
    ]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, out + err
    lines = out.splitlines()
    assert any(
        line.split() == ["phase", "metric", NATS, JETRAFT, f"{JETRAFT}/{NATS}"] for line in lines
    )
    config = MirrorBenchConfig(
        msgs=TINY_MSGS, gets=TINY_GETS, catchup_msgs=TINY_CATCHUP_MSGS, window=TINY_WINDOW
    )
    for phase in config.phases():
        row = next((line for line in lines if line.startswith(phase + " ")), None)
        assert row is not None, f"no row for {phase!r} in\n{out}"
        cells = row[len(phase) :].split()
        assert cells[0] == "msgs/s"
        for rate in cells[1:3]:
            assert RATE.match(rate) and int(rate.replace(",", "")) > 0, row
        assert float(cells[3]) > 0, row
    # with two mirrors every stream took a share of the upstream's Direct Gets, on both servers
    two_mirrors = next(line for line in lines if "by seq, 2 mirrors:" in line)
    for name in (UPSTREAM, *MIRRORS):
        assert two_mirrors.count(f"{name} ") == 2, two_mirrors
    section = results.read_text()
    assert section.startswith("\n## Mirrors") and "| direct get by seq, 0 mirrors |" in section
