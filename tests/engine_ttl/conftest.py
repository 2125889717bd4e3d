"""Fixtures for the TTL suite: the stream harness of tests/engine_stream on both stores."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_HARNESS_DIR = Path(__file__).resolve().parents[1] / "engine_stream"
if str(_HARNESS_DIR) not in sys.path:
    sys.path.insert(0, str(_HARNESS_DIR))

from engine_stream_harness import STORE_KINDS, Harness, MakeHarness, make_config  # noqa: E402


@pytest.fixture(params=STORE_KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_harness(store_kind: str, tmp_path: Path) -> Iterator[MakeHarness]:
    """``make_harness(**config_overrides)``: a fresh stream on the parametrized store."""
    made: list[Harness] = []
    counter = iter(range(1_000_000))

    def make(**overrides: Any) -> Harness:
        h = Harness(store_kind, tmp_path / f"store-{next(counter)}", make_config(**overrides))
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()
