"""The store-parametrized stream harness fixtures, shared by the engine suites that drive a
``Stream`` (tests/engine/stream, tests/engine/ttl, tests/engine/batch).

A conftest imports the fixtures it wants (a fixture is visible only under the conftest that
names it, so each suite re-exports these). Every test that asks for ``make_harness`` runs once
per store kind.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.engine.stream.harness import STORE_KINDS, Harness, MakeHarness, make_config


def harnesses(store_kind: str, directory: Path, **defaults: Any) -> Iterator[MakeHarness]:
    """A fixture body: yields ``make(**config_overrides)`` (``defaults`` under the overrides),
    each call a fresh stream in its own store under ``directory``; closes them all afterwards."""
    made: list[Harness] = []
    counter = iter(range(1_000_000))

    def make(**overrides: Any) -> Harness:
        config = make_config(**{**defaults, **overrides})
        h = Harness(store_kind, directory / f"store-{next(counter)}", config)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


@pytest.fixture(params=STORE_KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_harness(store_kind: str, tmp_path: Path) -> Iterator[MakeHarness]:
    """``make_harness(**config_overrides)``: a fresh stream on the parametrized store."""
    yield from harnesses(store_kind, tmp_path)
