"""Fixtures for the atomic batch suite: the stream harness of tests/engine_stream (every
store-dependent test runs on both stores), on streams with ``allow_atomic`` set."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_STREAM_TESTS = Path(__file__).resolve().parent.parent / "engine_stream"
if str(_STREAM_TESTS) not in sys.path:
    sys.path.insert(0, str(_STREAM_TESTS))

from engine_stream_harness import MakeHarness  # noqa: E402
from stream_harness_fixtures import harnesses, store_kind  # noqa: E402

__all__ = ["make_batch_harness", "store_kind"]


@pytest.fixture
def make_batch_harness(store_kind: str, tmp_path: Path) -> Iterator[MakeHarness]:
    """``make_batch_harness(**config_overrides)``: a fresh allow_atomic stream on the store."""
    yield from harnesses(store_kind, tmp_path, allow_atomic=True)
