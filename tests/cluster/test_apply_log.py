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
from cluster.apply_log import NO_APPLY_OBSERVER, ApplyLog, observe_applies
from engine.entries import (
    BatchCommitEntry,
    DeleteMsgEntry,
    Entry,
    ExpireEntry,
    InboundMsg,
    PublishEntry,
    PurgeEntry,
    decode_entry,
    encode_entry,
)
from engine.memstore import MemoryStore
from engine.store import StoredMsg
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


def test_without_a_log_the_store_is_left_alone_and_the_observer_does_nothing() -> None:
    store = MemoryStore()
    chosen, observer = observe_applies(None, "A", store)
    assert chosen is store
    assert observer is NO_APPLY_OBSERVER


T0_NS = 1_800_000_000_000_000_000
S_NS = 1_000_000_000


def _inbound(subject: str, msg_id: str) -> InboundMsg:
    return InboundMsg(subject, b"", json.dumps({"id": msg_id}).encode())


def test_the_log_observer_writes_each_applys_and_transfers_effect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Driven as a replica drives it; the rows' fields and key order are the file format the
    chaos harness and Spark read."""
    monkeypatch.setattr("cluster.apply_log.time.time_ns", lambda: 7)
    path = tmp_path / "applied.jsonl"
    log = ApplyLog(path, "n1")
    cfg = StreamConfig(
        name="A",
        subjects=["a.>"],
        max_msgs_per_subject=2,
        allow_msg_ttl=True,
        subject_delete_marker_ttl=60 * S_NS,
        max_age=10 * S_NS,
        allow_atomic=True,
    )
    store, observer = observe_applies(log, "A", MemoryStore())
    stream = Stream(cfg, store, T0_NS)
    observer.opened(stream)
    store.remove_through(0)  # a change outside any entry: no row of the next entry's
    entries: list[Entry] = [
        PublishEntry(T0_NS, (_inbound("a.x", "p0"), _inbound("a.x", "p1"), _inbound("a.y", "p2"))),
        PublishEntry(T0_NS + 1, (_inbound("a.x", "p3"), InboundMsg("a.z", b"", b"not json"))),
        BatchCommitEntry(T0_NS + 2, "b1", (_inbound("a.b", "q0"), _inbound("a.b", "q1")), True),
        DeleteMsgEntry(T0_NS + 3, 3, False),
        PurgeEntry(T0_NS + 4, "a.b", 0, 0),
        ExpireEntry(T0_NS + 20 * S_NS),
        PublishEntry(T0_NS + 21 * S_NS, (_inbound("a.x", "r0"), _inbound("a.w", "r1"))),
        PurgeEntry(T0_NS + 22 * S_NS, "", 0, 0),
    ]
    for index, entry in enumerate(entries, start=1):
        raw = encode_entry(entry)
        observer.applying()
        stream.apply(index, decode_entry(raw))
        observer.applied(stream, index, lambda i: 10 + i, raw, entry)
    # a state transfer's changes, made on the store outside any entry
    store.append(StoredMsg(100, "a.t", b"", b'{"id":"t0"}', T0_NS + 30 * S_NS))
    store.append(StoredMsg(101, "a.t", b"", b'{"id":"t1"}', T0_NS + 30 * S_NS))
    store.remove(100)
    store.remove_through(50)
    observer.transferred(stream)
    log.close()

    lines = path.read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    assert [r["op"] for r in rows if r["op"] in ("open", "entry", "transfer")] == (
        ["open"] + ["entry"] * len(entries) + ["transfer"]
    )
    events = [
        (r["index"], r["term"], r["op"], r["seq"], r["id"], r["batch"], r.get("reason"))
        for r in rows
        if r["op"] not in ("open", "entry", "transfer")
    ]
    assert events == [
        (1, 11, "store", 1, "p0", None, None),
        (1, 11, "store", 2, "p1", None, None),
        (1, 11, "store", 3, "p2", None, None),
        (2, 12, "store", 4, "p3", None, None),
        (2, 12, "delete", 1, "p0", None, "limit"),
        (2, 12, "store", 5, None, None, None),
        (3, 13, "store", 6, "q0", "b1", None),
        (3, 13, "store", 7, "q1", "b1", None),
        (4, 14, "delete", 3, "p2", None, None),
        (5, 15, "purge", 6, "q0", None, None),
        (5, 15, "purge", 7, "q1", None, None),
        (6, 16, "expire", 2, "p1", None, None),
        (6, 16, "marker", 8, None, None, None),
        (6, 16, "expire", 4, "p3", None, None),
        (6, 16, "marker", 9, None, None, None),
        (6, 16, "expire", 5, None, None, None),
        (7, 17, "store", 10, "r0", None, None),
        (7, 17, "store", 11, "r1", None, None),
        (8, 18, "purge", None, None, None, None),
        (8, 0, "store", 100, "t0", None, "transfer"),
        (8, 0, "store", 101, "t1", None, "transfer"),
        (8, 0, "delete", 100, "t0", None, "transfer"),
        (8, 0, "purge", None, None, None, None),
    ]
    # one row of each shape, byte for byte
    for line in [
        '{"node":"n1","stream":"A","index":2,"term":12,"op":"delete","seq":1,"reason":"limit",'
        '"subject":"a.x","id":"p0","batch":null,"ts_ns":1800000000000000000,"applied_ns":7}',
        '{"node":"n1","stream":"A","index":3,"term":13,"op":"store","seq":6,"subject":"a.b",'
        '"id":"q0","batch":"b1","ts_ns":1800000000000000002,"applied_ns":7}',
        '{"node":"n1","stream":"A","index":5,"term":15,"op":"purge","seq":7,"subject":"a.b",'
        '"id":"q1","batch":null,"ts_ns":1800000000000000002,"applied_ns":7}',
        '{"node":"n1","stream":"A","index":8,"term":18,"op":"purge","seq":null,"through":11,'
        '"subject":null,"id":null,"batch":null,"ts_ns":null,"applied_ns":7}',
        '{"node":"n1","stream":"A","index":8,"term":0,"reason":"transfer","op":"store","seq":100,'
        '"subject":"a.t","id":"t0","batch":null,"ts_ns":1800000030000000000,"applied_ns":7}',
        '{"node":"n1","stream":"A","index":8,"term":0,"op":"delete","seq":100,"reason":"transfer",'
        '"subject":"a.t","id":"t0","batch":null,"ts_ns":1800000030000000000,"applied_ns":7}',
    ]:
        assert line in lines
    keys = {r["op"]: list(r) for r in rows if r["op"] in ("open", "entry", "transfer")}
    head = ["node", "stream", "index", "term", "op", "seq"]
    assert keys == {
        "open": [*head, "config", "created_ns", "digest", "applied_ns"],
        "entry": [*head, "entry", "digest", "applied_ns"],
        "transfer": [*head, "digest", "applied_ns"],
    }
    # the open and entry rows replay the replica to the digests it logged
    replay = Stream(StreamConfig.model_validate(rows[0]["config"]), MemoryStore(), T0_NS)
    assert replay.digest().hex() == rows[0]["digest"]
    for row in rows:
        if row["op"] == "entry":
            replay.apply(row["index"], decode_entry(base64.b64decode(row["entry"])))
            assert replay.digest().hex() == row["digest"]


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


def test_fsync_ledger_never_goes_back_for_fsyncs_that_finish_out_of_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each line holds the size from before its fsync; two overlapping fsyncs of one file may
    finish in either order, so a line never claims less than an earlier one, unless the file
    was truncated below it meanwhile."""
    from cluster import sync_ledger

    ledger = tmp_path / "ledger"
    ledger_fd = os.open(ledger, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    monkeypatch.setattr(sync_ledger, "_ledger_fd", ledger_fd)
    monkeypatch.setattr(sync_ledger, "_recorded", {})
    data = tmp_path / "seg"
    data.write_bytes(b"x" * 120)
    fd = os.open(data, os.O_RDWR)
    try:
        sync_ledger._note(fd, 120)  # the later fsync finished first
        sync_ledger._note(fd, 100)
        os.ftruncate(fd, 10)
        sync_ledger._note(fd, 10)
    finally:
        os.close(fd)
        os.close(ledger_fd)
    sizes = [int(line.split("\t")[1]) for line in ledger.read_text().splitlines()]
    assert sizes == [120, 120, 10]
