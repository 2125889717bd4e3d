"""The chaos harness's db and nemeses.

Fast tests drive the file faults (sync-ledger truncation, corruption), the nemeses' choices and
their determinism on a ClusterDB that is never started, and check that libfaketime skews a
child's wall clock but not its monotonic clock. Integration tests start real 3-node clusters
(jetraft and nats-server) through the link proxies: a partitioned leader is replaced, a killed
node restarts and catches up, a paused node stops answering and comes back, skewed clocks show
in the apply log, and every process is gone after stop.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js.errors import BadRequestError

from jepsen_like import db as dbmod
from jepsen_like.db import (
    ClusterDB,
    UnsupportedFault,
    clock_offset_text,
    corrupt_file,
    data_files,
    find_nats_server,
    read_sync_ledger,
    truncate_to_ledger,
)
from jepsen_like.nemesis import (
    ClockNemesis,
    CorruptNemesis,
    DelayNemesis,
    KillNemesis,
    PartitionNemesis,
    PowerNemesis,
    choose_targets,
    fork_rng,
    links_between,
    make_nemesis,
    ring_cut,
)
from protocol.errors import CLUSTER_NO_PEERS

PYTHON = str(Path(sys.executable))
WAIT_S = 30.0
POLL_S = 0.1
CLOCK_SKEW_S = 3600.0
CLOCK_TOLERANCE_S = 60.0
STREAM = "J"


# --- helpers ----------------------------------------------------------------------------------
def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _ledger_line(path: Path, size: int) -> str:
    return f"{path.stat().st_ino}\t{size}\t{path}\n"


def _fake_store(store: Path) -> dict[str, Path]:
    """A store laid out like jetraft's: segments, Raft journals, and files never data."""
    return {
        "seg1": _write(store / "jetstream/streams/S/msgs/seg-00000001.blk", b"a" * 1000),
        "seg2": _write(store / "jetstream/streams/S/msgs/seg-00000002.blk", b"b" * 300),
        "journal": _write(store / "jetstream/streams/S/raft/journal/raft.log", b"c" * 500),
        "meta_journal": _write(store / "jetstream/meta/raft/journal/raft.log", b"d" * 200),
        "meta": _write(store / "jetstream/streams/S/raft/journal/meta.json", b"{}"),
        "lock": _write(store / "jetstream/streams/S/raft/journal/LOCK", b""),
    }


@pytest.fixture
async def idle_db(tmp_path: Path) -> AsyncIterator[ClusterDB]:
    """A 3-node jetraft ClusterDB that is never started (ports reserved, no processes)."""
    db = ClusterDB(tmp_path / "run", 3, "jetraft", python=PYTHON, apply_log=False)
    try:
        yield db
    finally:
        await db.stop()


async def _eventually(
    cond: Callable[[], Awaitable[Any]], what: str, timeout_s: float = WAIT_S
) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = await cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} not within {timeout_s:.0f}s")
        await asyncio.sleep(POLL_S)


def _pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


# --- file faults ------------------------------------------------------------------------------
def test_clock_offset_text_is_libfaketime_syntax() -> None:
    assert clock_offset_text(5) == "+5s"
    assert clock_offset_text(-2.5) == "-2.5s"
    assert clock_offset_text(0) == "+0s"
    assert clock_offset_text(3600.25) == "+3600.25s"


def test_sync_ledger_keeps_the_last_size_per_inode_and_skips_torn_lines(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    ledger.write_text("7\t10\t/x/a.blk\n8\t5\t/x/b\n7\t30\t/x/a.blk\nnot a line\n9\t4")
    assert read_sync_ledger(ledger) == {7: 30, 8: 5}
    assert read_sync_ledger(tmp_path / "absent") == {}


def test_truncate_to_ledger_cuts_every_file_to_its_last_fsync(tmp_path: Path) -> None:
    store = tmp_path / "store"
    files = _fake_store(store)
    # a file fsynced under a temporary name and renamed afterwards keeps its synced size
    tmp_name = _write(store / "jetstream/peers.json.tmp", b'{"peers": []}')
    ledger_text = _ledger_line(tmp_name, 13)
    renamed = store / "jetstream/peers.json"
    os.replace(tmp_name, renamed)
    ledger_text += (
        _ledger_line(files["seg1"], 400)
        + _ledger_line(files["seg1"], 600)
        + _ledger_line(files["journal"], 500)
        + _ledger_line(files["meta"], 2)
    )
    ledger = tmp_path / "ledger"
    ledger.write_text(ledger_text + "123")  # and a torn last line

    rows = truncate_to_ledger(store, ledger)

    by_file = {row["file"]: row for row in rows}
    assert by_file == {
        "jetstream/streams/S/msgs/seg-00000001.blk": {
            "file": "jetstream/streams/S/msgs/seg-00000001.blk",
            "from": 1000,
            "to": 600,
            "in_ledger": True,
        },
        "jetstream/streams/S/msgs/seg-00000002.blk": {
            "file": "jetstream/streams/S/msgs/seg-00000002.blk",
            "from": 300,
            "to": 0,
            "in_ledger": False,
        },
        "jetstream/meta/raft/journal/raft.log": {
            "file": "jetstream/meta/raft/journal/raft.log",
            "from": 200,
            "to": 0,
            "in_ledger": False,
        },
    }
    assert files["seg1"].read_bytes() == b"a" * 600
    assert files["seg2"].read_bytes() == b""  # never fsynced: emptied, not removed
    assert files["journal"].stat().st_size == 500
    assert renamed.read_bytes() == b'{"peers": []}'
    assert files["lock"].exists()
    # a second power loss finds nothing more to cut
    assert truncate_to_ledger(store, ledger) == []


async def test_power_loss_truncates_every_node_then_restarts_all(
    idle_db: ClusterDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    restarted: list[tuple[str, bool]] = []

    async def fake_restart(name: str, *, wait_healthy: bool = True, timeout_s: float = 0) -> None:
        restarted.append((name, wait_healthy))

    async def fake_wait_healthy(names: Any = None, timeout_s: float = 0) -> None:
        return None

    monkeypatch.setattr(idle_db, "restart", fake_restart)
    monkeypatch.setattr(idle_db, "wait_healthy", fake_wait_healthy)
    for name in idle_db.names:
        files = _fake_store(idle_db.store_dir(name))
        idle_db.ledger_path(name).parent.mkdir(parents=True, exist_ok=True)
        idle_db.ledger_path(name).write_text(_ledger_line(files["seg1"], 100))

    result = await PowerNemesis().start(idle_db, random.Random(1))

    assert result["f"] == "power-start"
    value = result["value"]
    assert value["killed"] == []
    assert sorted(restarted) == [(name, False) for name in idle_db.names]
    seg1 = [r for r in value["truncated"] if r["file"].endswith("seg-00000001.blk")]
    assert [(r["node"], r["from"], r["to"]) for r in seg1] == [
        (name, 1000, 100) for name in idle_db.names
    ]
    for name in idle_db.names:
        seg1_path = idle_db.store_dir(name) / "jetstream/streams/S/msgs/seg-00000001.blk"
        assert data_files(idle_db.store_dir(name)) == [seg1_path]


async def test_power_loss_is_unsupported_on_nats_server(tmp_path: Path) -> None:
    db = ClusterDB(tmp_path / "run", 3, "nats", python=PYTHON)
    try:
        with pytest.raises(UnsupportedFault):
            await db.power_loss()
        action = await PowerNemesis().start(db, random.Random(1))
        assert "unsupported" in action["value"]
        clock = await ClockNemesis().start(db, random.Random(1))
        assert "unsupported" in clock["value"]
    finally:
        await db.stop()


def test_data_files_are_segments_and_raft_journals(tmp_path: Path) -> None:
    files = _fake_store(tmp_path)
    _write(tmp_path / "jetstream/streams/S/msgs/seg-00000003.blk", b"")  # empty: nothing to hit
    assert data_files(tmp_path) == sorted(
        [files["seg1"], files["seg2"], files["journal"], files["meta_journal"]]
    )


@pytest.mark.parametrize("mode", ["bitflip", "truncate"])
def test_corrupt_file_records_exactly_what_it_changed(tmp_path: Path, mode: str) -> None:
    original = bytes(random.Random(5).randbytes(4096))
    path = _write(tmp_path / "seg.blk", original)
    change = corrupt_file(path, random.Random(9), mode)
    data = path.read_bytes()
    assert change["mode"] == mode and change["size_before"] == len(original)
    if mode == "truncate":
        assert change["size_after"] < len(original)
        assert data == original[: change["size_after"]]
        return
    assert data != original and len(data) == len(original)
    replay = bytearray(original)
    for flip in change["flips"]:
        assert replay[flip["offset"]] == flip["before"]
        replay[flip["offset"]] ^= 1 << flip["bit"]
        assert replay[flip["offset"]] == flip["after"]
    assert bytes(replay) == data
    # the same seed does the same damage
    copy = _write(tmp_path / "copy.blk", original)
    assert corrupt_file(copy, random.Random(9), mode) == change


@pytest.mark.parametrize("mode", ["bitflip", "truncate"])
def test_corrupt_file_damages_data_not_the_reserved_zeros_after_it(
    tmp_path: Path, mode: str
) -> None:
    data = b"\x01" * 100
    path = _write(tmp_path / "seg.blk", data + bytes(1 << 16))
    for seed in range(20):
        copy = _write(tmp_path / f"copy-{seed}.blk", path.read_bytes())
        change = corrupt_file(copy, random.Random(seed), mode)
        assert change["size_before"] == len(data)
        if mode == "truncate":
            assert change["size_after"] < len(data)
        else:
            assert all(flip["offset"] < len(data) for flip in change["flips"])
    store = tmp_path / "store"
    empty = _write(store / "jetstream/streams/S/msgs/seg-00000009.blk", bytes(4096))
    with_data = _write(store / "jetstream/streams/S/msgs/seg-00000008.blk", data + bytes(9))
    assert data_files(store) == [with_data]
    with pytest.raises(ValueError):
        corrupt_file(empty, random.Random(1), mode)


async def test_corrupt_nemesis_hits_a_minority_once_each(
    idle_db: ClusterDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    restarted: list[str] = []

    async def fake_restart(name: str, *, wait_healthy: bool = True, timeout_s: float = 0) -> None:
        restarted.append(name)

    monkeypatch.setattr(idle_db, "restart", fake_restart)
    for name in idle_db.names:
        _fake_store(idle_db.store_dir(name))
    nemesis = CorruptNemesis()
    first = await nemesis.start(idle_db, random.Random(3))
    value = first["value"]
    assert first["f"] == "corrupt-start"
    assert value["node"] in idle_db.names and restarted == [value["node"]]
    assert value["mode"] in ("bitflip", "truncate")
    hit = idle_db.store_dir(value["node"]) / value["file"]
    assert hit in data_files(idle_db.store_dir(value["node"])) or value["size_after"] == 0
    # 3 nodes: (3 - 1) // 2 = 1 node may ever be corrupted
    second = await nemesis.start(idle_db, random.Random(4))
    assert "skipped" in second["value"] and restarted == [value["node"]]


async def test_corrupt_refuses_a_live_node(
    idle_db: ClusterDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(idle_db, "alive", lambda name: True)
    with pytest.raises(RuntimeError):
        idle_db.corrupt("n1", random.Random(1))


# --- nemesis choices --------------------------------------------------------------------------
def test_links_between_cuts_every_cross_link_both_ways() -> None:
    links = links_between([["a"], ["b", "c"]])
    assert links == sorted([("a", "b"), ("a", "c"), ("b", "a"), ("c", "a")])


@pytest.mark.parametrize("n", [5, 7])
def test_ring_cut_leaves_each_node_a_different_majority(n: int) -> None:
    order = [f"n{i}" for i in random.Random(n).sample(range(1, n + 1), n)]
    cut = set(ring_cut(order))
    views = {}
    for node in order:
        reachable = {node} | {peer for peer in order if peer != node and (node, peer) not in cut}
        assert n // 2 < len(reachable) < n
        assert all((peer, node) not in cut for peer in reachable if peer != node)
        views[node] = frozenset(reachable)
    assert len(set(views.values())) == n


async def test_partition_nemesis_blocks_what_it_reports(idle_db: ClusterDB) -> None:
    modes = set()
    for seed in range(30):
        action = await PartitionNemesis().start(idle_db, random.Random(seed))
        value = action["value"]
        modes.add(value["mode"])
        blocked = idle_db.proxies.blocked
        if value["mode"] in ("halves", "leader"):
            groups = value["groups"]
            assert sorted(n for group in groups for n in group) == idle_db.names
            assert blocked == frozenset(links_between(groups))
        else:
            assert value["mode"] == "bridge"
            a, b = value["cut"][0]
            assert blocked == frozenset({(a, b), (b, a)})
            assert value["bridge"] not in (a, b)
        healed = await PartitionNemesis().stop(idle_db, random.Random(seed))
        assert sorted(tuple(pair) for pair in healed["value"]["healed"]) == sorted(blocked)
        assert idle_db.proxies.blocked == frozenset()
    assert modes == {"halves", "leader", "bridge"}


async def test_five_node_ring_partition(tmp_path: Path) -> None:
    db = ClusterDB(tmp_path / "run", 5, "jetraft", python=PYTHON, apply_log=False)
    try:
        for seed in range(40):
            action = await PartitionNemesis().start(db, random.Random(seed))
            if action["value"]["mode"] == "ring":
                order = action["value"]["order"]
                assert db.proxies.blocked == frozenset(ring_cut(order))
                return
            await PartitionNemesis().stop(db, random.Random(seed))
        pytest.fail("no ring partition in 40 seeds")
    finally:
        await db.stop()


async def test_delay_nemesis_sets_and_clears_every_link(idle_db: ClusterDB) -> None:
    action = await DelayNemesis().start(idle_db, random.Random(2))
    mean = action["value"]["mean_ms"]
    assert mean > 0
    assert {d.mean_ms for d in idle_db.proxies.delays().values()} == {mean}
    await DelayNemesis().stop(idle_db, random.Random(2))
    assert {d.mean_ms for d in idle_db.proxies.delays().values()} == {0.0}


async def test_same_seed_same_faults(idle_db: ClusterDB) -> None:
    async def schedule(seed: int) -> list[Any]:
        rng = random.Random(seed)
        out = []
        for _ in range(5):
            out.append((await PartitionNemesis().start(idle_db, rng))["value"])
            await PartitionNemesis().stop(idle_db, rng)
            out.append((await DelayNemesis().start(idle_db, rng))["value"])
        return out

    assert await schedule(11) == await schedule(11)
    assert await schedule(11) != await schedule(12)


async def test_each_start_advances_the_rng_by_one_draw_whatever_the_cluster_answers(
    idle_db: ClusterDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    quiet, busy = random.Random(11), random.Random(11)
    nothing = await KillNemesis().start(idle_db, quiet)  # no node alive: nothing to choose
    assert nothing["value"]["nodes"] == []
    monkeypatch.setattr(idle_db, "alive", lambda name: True)
    monkeypatch.setattr(idle_db, "kill", lambda name: None)
    some = await KillNemesis().start(idle_db, busy)
    assert some["value"]["nodes"]
    assert quiet.getstate() == busy.getstate()
    mode, targets = await choose_targets(idle_db, fork_rng(busy), None, "majority")
    assert mode == "majority" and len(targets) == 2


def test_make_nemesis_knows_every_name() -> None:
    for name in ("kill", "pause", "partition", "delay", "clock", "power", "corrupt"):
        assert make_nemesis(name, stream="S").name == name
    with pytest.raises(ValueError):
        make_nemesis("meteor")


# --- clock ------------------------------------------------------------------------------------
CLOCK_PROBE = "import time, json; print(json.dumps([time.time(), time.monotonic()]))"


def test_libfaketime_skews_wall_clock_but_not_monotonic(tmp_path: Path) -> None:
    db = ClusterDB(tmp_path / "run", 1, "jetraft", python=PYTHON, apply_log=False)
    try:
        if not db.clock_supported:
            pytest.skip("libfaketime is not installed")
        for offset in (CLOCK_SKEW_S, -CLOCK_SKEW_S):
            assert db.set_clock_offset("n1", offset)
            wall, mono = time.time(), time.monotonic()
            out = subprocess.run(
                [PYTHON, "-c", CLOCK_PROBE],
                env=db.node_env("n1"),
                capture_output=True,
                check=True,
                timeout=WAIT_S,
            )
            child_wall, child_mono = json.loads(out.stdout)
            assert abs(child_wall - (wall + offset)) < CLOCK_TOLERANCE_S
            assert abs(child_mono - mono) < CLOCK_TOLERANCE_S
    finally:
        asyncio.run(db.stop())


# --- real clusters ----------------------------------------------------------------------------
async def _stream_last_seqs(db: ClusterDB) -> dict[str, int | None]:
    seqs: dict[str, int | None] = {}
    for name in db.names:
        view = await db.jetraftz(name)
        entry = next((s for s in (view or {}).get("streams", []) if s["name"] == STREAM), None)
        seqs[name] = None if entry is None else int(entry["state"]["last_seq"])
    return seqs


async def _publish_ok(url: str, payload: bytes) -> int:
    """Publish through a node until acknowledged (routes may still be reconnecting)."""
    nc = await nats.connect(url, max_reconnect_attempts=1)
    try:
        js = nc.jetstream()

        async def attempt() -> int:
            try:
                return int((await js.publish(f"{STREAM.lower()}.x", payload, timeout=2)).seq)
            except (nats.errors.Error, TimeoutError):
                return 0

        seq: int = await _eventually(attempt, "publish acknowledged")
        return seq
    finally:
        await nc.close()


@pytest.mark.integration
async def test_jetraft_cluster_under_faults(tmp_path: Path) -> None:
    db = ClusterDB(tmp_path / "run", 3, "jetraft", python=PYTHON)
    await db.start()
    pids = [db.pid(name) for name in db.names]
    try:
        assert all(db.alive(name) for name in db.names)
        nc = await nats.connect(db.client_url("n1"))
        js = nc.jetstream()
        await js.add_stream(name=STREAM, subjects=[f"{STREAM.lower()}.>"], num_replicas=3)
        for i in range(10):
            await js.publish(f"{STREAM.lower()}.x", json.dumps({"id": f"a{i}"}).encode())
        await nc.close()
        leader = await _eventually(lambda: db.stream_leader(STREAM), "a stream leader")

        # isolate the leader: the other two elect one of themselves and keep accepting writes
        others = [name for name in db.names if name != leader]
        db.proxies.block(links_between([[leader], others]))

        async def new_leader() -> str | None:
            found = await db.stream_leader(STREAM)
            return found if found in others else None

        await _eventually(new_leader, "a new leader among the majority")
        seq = await _publish_ok(db.client_url(others[0]), b'{"id": "p1"}')
        assert seq > 10
        db.proxies.unblock_all()

        async def converged() -> bool:
            return set((await _stream_last_seqs(db)).values()) == {seq}

        await _eventually(converged, "every replica at the last seq after healing")

        # kill -9 a node: it is gone, and after a restart it catches up
        victim = others[1]
        db.kill(victim)
        assert not db.alive(victim) and await db.jetraftz(victim) is None
        seq = await _publish_ok(db.client_url(others[0]), b'{"id": "k1"}')
        await db.restart(victim)
        assert db.alive(victim)

        async def caught_up() -> bool:
            return set((await _stream_last_seqs(db)).values()) == {seq}

        await _eventually(caught_up, "the restarted node catching up")

        # pause: alive but silent; resume: answering again
        db.pause(victim)
        assert db.alive(victim) and db.paused(victim)
        assert not await db.healthy(victim)
        db.resume(victim)
        await db.wait_healthy([victim])

        if db.clock_supported and db.apply_log_enabled:
            # every node an hour ahead: the entries they apply carry the skewed wall clock
            for name in db.names:
                db.set_clock_offset(name, CLOCK_SKEW_S)
            await _publish_ok(db.client_url("n1"), b'{"id": "c1"}')
            rows = [json.loads(line) for line in db.apply_log_path("n1").read_text().splitlines()]
            skewed = next(r for r in rows if r.get("id") == "c1")
            assert abs(skewed["applied_ns"] / 1e9 - (time.time() + CLOCK_SKEW_S)) < WAIT_S
            for name in db.names:
                db.set_clock_offset(name, 0.0)

        # the kill nemesis restarts whatever it killed
        killed = await KillNemesis(STREAM).start(db, random.Random(5))
        assert killed["value"]["nodes"] and not any(db.alive(n) for n in killed["value"]["nodes"])
        healed = await KillNemesis(STREAM).stop(db, random.Random(5))
        assert healed["value"]["errors"] == {}
        assert all(db.alive(name) for name in db.names)
        await db.wait_healthy()
    finally:
        await db.stop()
    assert not any(db.alive(name) for name in db.names)
    assert all(pid is not None and _pid_gone(pid) for pid in pids)


@pytest.mark.integration
async def test_nats_server_cluster_start_kill_restart_stop(tmp_path: Path) -> None:
    if find_nats_server(PYTHON) is None:
        pytest.skip("nats-server is not installed")
    db = ClusterDB(tmp_path / "run", 3, "nats", python=PYTHON)
    await db.start()
    pids = [db.pid(name) for name in db.names]
    try:
        nc = await nats.connect(db.client_url("n2"))
        js = nc.jetstream()

        async def created() -> bool:
            # nats-server places a stream only on peers whose first STATSZ its meta leader has
            # received; until then a create answers 10005 "peer offline", which it may for a
            # moment after every node looks ready
            try:
                await js.add_stream(name=STREAM, subjects=[f"{STREAM.lower()}.>"], num_replicas=3)
            except BadRequestError as exc:
                if exc.err_code != CLUSTER_NO_PEERS.err_code:
                    raise
                return False
            return True

        await _eventually(created, "an R3 stream placed")
        await js.publish(f"{STREAM.lower()}.x", b'{"id": "a"}')
        await nc.close()
        leader = await _eventually(lambda: db.stream_leader(STREAM), "a stream leader")
        assert leader in db.names
        # every route goes through a proxy (the advertised URL is a black hole)
        assert sum(db.proxies.proxy(link).accepted for link in db.proxies.links) > 0

        victim = next(name for name in db.names if name != leader)
        db.kill(victim)
        assert not db.alive(victim)
        await db.restart(victim)
        assert await db.healthy(victim)
    finally:
        await db.stop()
    assert all(pid is not None and _pid_gone(pid) for pid in pids)


HARNESS_THAT_DIES = """
import asyncio, os, signal, sys
from pathlib import Path
from jepsen_like.db import ClusterDB
async def main() -> None:
    db = ClusterDB(Path(sys.argv[1]), 1, "jetraft", python=sys.executable, apply_log=False)
    await db.start()
    print(db.pid("n1"), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
asyncio.run(main())
"""


@pytest.mark.integration
async def test_nodes_die_with_a_killed_harness(tmp_path: Path) -> None:
    out = subprocess.run(
        [PYTHON, "-c", HARNESS_THAT_DIES, str(tmp_path / "run")],
        cwd=dbmod.PROJECT_ROOT,
        capture_output=True,
        timeout=WAIT_S * 2,
        check=False,
    )
    assert out.returncode == -9, out.stderr.decode()[-2000:]
    pid = int(out.stdout.split()[0])

    async def gone() -> bool:
        return _pid_gone(pid)

    try:
        await _eventually(gone, "the orphaned node's exit", timeout_s=10)
    finally:
        if not _pid_gone(pid):
            os.kill(pid, 9)


@pytest.mark.integration
@pytest.mark.slow
async def test_power_loss_keeps_every_acknowledged_message(tmp_path: Path) -> None:
    db = ClusterDB(tmp_path / "run", 3, "jetraft", python=PYTHON)
    await db.start()
    try:
        nc = await nats.connect(db.client_url("n1"))
        js = nc.jetstream()
        await js.add_stream(name=STREAM, subjects=[f"{STREAM.lower()}.>"], num_replicas=3)
        for i in range(50):
            await js.publish(f"{STREAM.lower()}.x", json.dumps({"id": f"a{i}"}).encode())
        await nc.close()
        action = await db.power_loss(timeout_s=dbmod.NODE_READY_TIMEOUT_S)
        assert sorted(action["killed"]) == db.names

        async def all_there() -> bool:
            return set((await _stream_last_seqs(db)).values()) == {50}

        await _eventually(all_there, "every acknowledged message after power loss")
    finally:
        await db.stop()
