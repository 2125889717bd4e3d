"""Fixtures for the atomic batch suite: the stream harness of tests/engine/stream (every
store-dependent test runs on both stores), on streams with ``allow_atomic`` set."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engine.stream.harness import MakeHarness
from tests.engine.stream.harness_fixtures import harnesses, store_kind

__all__ = ["make_batch_harness", "store_kind"]


@pytest.fixture
def make_batch_harness(store_kind: str, tmp_path: Path) -> Iterator[MakeHarness]:
    """``make_batch_harness(**config_overrides)``: a fresh allow_atomic stream on the store."""
    yield from harnesses(store_kind, tmp_path, allow_atomic=True)
