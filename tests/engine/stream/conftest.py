"""Fixtures for the stream state machine suite: every store-dependent test runs on both stores."""

from __future__ import annotations

from tests.engine.stream.harness_fixtures import make_harness, store_kind

__all__ = ["make_harness", "store_kind"]
