"""Fixtures for the atomic batch suite: the stream harness of tests/engine_stream (every
store-dependent test runs on both stores) and batch message builders."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_STREAM_TESTS = Path(__file__).resolve().parent.parent / "engine_stream"
if str(_STREAM_TESTS) not in sys.path:
    sys.path.insert(0, str(_STREAM_TESTS))

from engine_stream_harness import STORE_KINDS, Harness, MakeHarness, make_config  # noqa: E402


@pytest.fixture(params=STORE_KINDS)
def batch_store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_batch_harness(batch_store_kind: str, tmp_path: Path) -> Iterator[MakeHarness]:
    """``make_batch_harness(**config_overrides)``: a fresh allow_atomic stream on the store."""
    made: list[Harness] = []
    counter = iter(range(1_000_000))

    def make(**overrides: Any) -> Harness:
        overrides.setdefault("allow_atomic", True)
        config = make_config(**overrides)
        h = Harness(batch_store_kind, tmp_path / f"store-{next(counter)}", config)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()
