"""Fixtures for the stream state machine suite: every store-dependent test runs on both stores."""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:
    sys.path.insert(0, str(_HERE))

from stream_harness_fixtures import make_harness, store_kind  # noqa: E402

__all__ = ["make_harness", "store_kind"]
