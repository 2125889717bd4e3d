"""The many-streams benchmark runs end to end: a tiny run over two R3 streams on a jetraft cluster
completes with every PubAck checked and prints a nonzero rate and CPU per message."""

from __future__ import annotations

import re

import pytest

from bench.multi_stream import main

pytestmark = pytest.mark.integration

LINE = re.compile(r"^jetraft: 2 R3 streams, (\d[\d,]*) msgs/s, server CPU (\d+\.\d) µs/msg$", re.M)


def test_a_tiny_multi_stream_run_prints_a_rate(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--jetraft-only", "--streams", "2", "--msgs", "2000", "--window", "50"])
    out = capsys.readouterr().out
    assert code == 0, out
    found = LINE.search(out)
    assert found is not None, out
    assert int(found.group(1).replace(",", "")) > 0 and float(found.group(2)) > 0
