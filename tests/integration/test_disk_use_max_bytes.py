"""A stream's max_bytes bounds its disk use, not just the bytes it counts."""

from __future__ import annotations

from pathlib import Path

import nats
import pytest

from engine.filestore import SEGMENT_BYTES_MAX_DEFAULT, segment_bytes_for
from tests.servers import start_jetraft

pytestmark = pytest.mark.integration

MAX_BYTES = 1024 * 1024
PAYLOAD = b"x" * 10_000
PUBLISHED = 2_000  # 20 MB through a 1 MiB stream
# the limit, the active segment and one partly expired one, plus the node's small files
DISK_BOUND_BYTES = MAX_BYTES + 2 * segment_bytes_for(MAX_BYTES) + 1024 * 1024


def test_segments_follow_the_limit() -> None:
    assert segment_bytes_for(-1) == SEGMENT_BYTES_MAX_DEFAULT
    assert segment_bytes_for(MAX_BYTES) == MAX_BYTES // 4
    assert segment_bytes_for(1) >= 64 * 1024
    assert segment_bytes_for(10**12) == SEGMENT_BYTES_MAX_DEFAULT


def _disk_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


async def test_disk_use_stays_near_max_bytes(tmp_path: Path) -> None:
    server = start_jetraft(tmp_path)
    try:
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        await js.add_stream(name="SMALL", subjects=["small"], max_bytes=MAX_BYTES)
        peak = 0
        for n in range(PUBLISHED):
            await js.publish("small", PAYLOAD)
            if n % 200 == 0:
                peak = max(peak, _disk_bytes(server.store_dir))
        info = await js.stream_info("SMALL")
        assert info.state.bytes <= MAX_BYTES and info.state.last_seq == PUBLISHED
        peak = max(peak, _disk_bytes(server.store_dir))
        assert peak <= DISK_BOUND_BYTES, (peak, DISK_BOUND_BYTES)
        await nc.close()
    finally:
        server.stop()
