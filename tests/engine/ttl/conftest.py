"""Fixtures for the TTL suite: the stream harness of tests/engine/stream on both stores."""

from __future__ import annotations

from tests.engine.stream.harness_fixtures import make_harness, store_kind

__all__ = ["make_harness", "store_kind"]
