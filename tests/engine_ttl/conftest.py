"""Fixtures for the TTL suite: the stream harness of tests/engine_stream on both stores."""

from __future__ import annotations

import sys
from pathlib import Path

_HARNESS_DIR = Path(__file__).resolve().parents[1] / "engine_stream"
if str(_HARNESS_DIR) not in sys.path:
    sys.path.insert(0, str(_HARNESS_DIR))

from stream_harness_fixtures import make_harness, store_kind  # noqa: E402

__all__ = ["make_harness", "store_kind"]
