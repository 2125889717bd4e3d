"""The applied-entry log (one row per message event, on every replica) and the fsync ledger."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest

from cluster import cli
from engine.entries import decode_entry
from engine.memstore import MemoryStore
from engine.stream import Stream
from protocol.models import StreamConfig
from tests.cluster.inprocess import InProcessCluster, wait_for


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[InProcessCluster]:
    c = InProcessCluster(tmp_path, 3)
    original = c.options

    def with_log(i: int):  # type: ignore[no-untyped-def]
        opts = original(i)
        opts.apply_log = tmp_path / f"n{i}" / "jetstream" / "applied.jsonl"
        return opts

    c.options = with_log  # type: ignore[method-assign]
    try:
        await c.start()
        yield c
    finally:
        await c.stop()


def _rows(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_every_replica_logs_the_same_events(
    cluster: InProcessCluster, tmp_path: Path
) -> None:
    nc = await nats.connect(cluster.urls[0])
    try:
        js = nc.jetstream(timeout=5)
        await js.add_stream(
            name="A", subjects=["a.>"], num_replicas=3, allow_msg_ttl=True, max_msgs_per_subject=2
        )
        for i in range(3):
            await js.publish("a.x", json.dumps({"id": f"p{i}"}).encode())
        await js.publish("a.t", json.dumps({"id": "t1"}).encode(), headers={"Nats-TTL": "1s"})
        await js.delete_msg("A", 3)
    finally:
        await nc.close()
    paths = [tmp_path / f"n{i}" / "jetstream" / "applied.jsonl" for i in range(3)]

    def all_expired() -> bool:
        return all(p.is_file() and any(r["op"] == "expire" for r in _rows(p)) for p in paths)

    await wait_for(all_expired, "the TTL expiry on every replica")
    logs = [_rows(p) for p in paths]
    strip = [
        [{k: v for k, v in r.items() if k not in ("node", "applied_ns")} for r in rows]
        for rows in logs
    ]
    assert strip[0] == strip[1] == strip[2]
    message_ops = {"store", "marker", "expire", "delete", "purge"}
    events = [
        (r["op"], r["seq"], r["id"], r.get("reason")) for r in logs[0] if r["op"] in message_ops
    ]
    assert events == [
        ("store", 1, "p0", None),
        ("store", 2, "p1", None),
        ("store", 3, "p2", None),
        ("delete", 1, "p0", "limit"),
        ("store", 4, "t1", None),
        ("delete", 3, "p2", None),
        ("expire", 4, "t1", None),
    ]
    assert {r["node"] for r in logs[1]} == {"n1"}
    indexes = [r["index"] for r in logs[0]]
    assert indexes == sorted(indexes)
    # the open and entry rows replay the replica through the engine to the digests it reported
    opened = next(r for r in logs[0] if r["op"] == "open")
    stream = Stream(
        StreamConfig.model_validate(opened["config"]), MemoryStore(), opened["created_ns"]
    )
    assert stream.digest().hex() == opened["digest"]
    entries = [r for r in logs[0] if r["op"] == "entry"]
    assert len(entries) == 6  # 3 publishes, 1 publish with TTL, 1 delete, 1 expire
    for row in entries:
        stream.apply(row["index"], decode_entry(base64.b64decode(row["entry"])))
        assert stream.digest().hex() == row["digest"], row["index"]

    out = tmp_path / "export.jsonl"
    assert cli.main(["log", "export", "--store_dir", str(tmp_path / "n2"), "--out", str(out)]) == 0
    assert _rows(out) == logs[2]


def test_fsync_ledger_records_what_was_made_durable(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    script = (
        "from cluster import sync_ledger\n"
        "from engine.filestore import FileStore\n"
        "from engine.store import StoredMsg\n"
        "assert sync_ledger.install_from_env()\n"
        f"s = FileStore({str(tmp_path / 'msgs')!r})\n"
        "s.append(StoredMsg(1, 'a', b'', b'x' * 100, 1))\n"
        "s.sync()\n"
        "s.append(StoredMsg(2, 'a', b'', b'y' * 100, 2))\n"
        "s.flush()\n"  # written, not fsynced: must not show in the ledger
    )
    env = {**os.environ, "JETRAFT_SYNC_LEDGER": str(ledger)}
    subprocess.run(
        [sys.executable, "-c", script], check=True, env=env, cwd=Path(__file__).parents[2]
    )
    rows = [line.split("\t") for line in ledger.read_text().splitlines()]
    segs = [r for r in rows if r[2].endswith(".blk")]
    assert segs, rows
    seg_path = Path(segs[-1][2])
    synced = int(segs[-1][1])
    assert int(segs[-1][0]) == seg_path.stat().st_ino
    assert 100 < synced < seg_path.stat().st_size  # the second append is past the synced size
