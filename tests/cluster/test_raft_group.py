"""The Raft glue's durability rule: an append is acknowledged only once it is on disk."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from cluster.raft.adapter import _GroupTransport
from cluster.raft.driver import RAFT_SYNC_BEHIND_BYTES_MIN, RaftDriver
from cluster.raft.group import RAFT_LEADER_FALLBACK_S, RaftGroup
from cluster.raft.journal import LOG_FILE_NAME, DurableJournal
from engine import disk


class _Routes:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, dict[str, Any]]] = []

    def send_raft(self, peer: str, group: str, message: dict[str, Any]) -> bool:
        self.sent.append((peer, group, message))
        return True

    def connected(self, _peer: str) -> bool:
        return False

    def flush(self) -> None:
        pass


class _Driver:
    def __init__(self) -> None:
        self.sync_requests: list[str] = []

    def request_sync(self, name: str) -> None:
        self.sync_requests.append(name)


class _Peer:
    """What the adapter's transport reads of pysyncobj's Node: its id."""

    def __init__(self, node_id: str) -> None:
        self.id = node_id


def _no_apply(_index: int, _payload: bytes) -> None:
    return None


def _transport(tmp_path: Path) -> tuple[_Routes, _Driver, DurableJournal, _GroupTransport]:
    """A follower's reply transport over a journal holding pysyncobj's first entry, synced."""
    routes, driver = _Routes(), _Driver()
    journal = DurableJournal(tmp_path / "j")
    journal.add(b"\x01", 1, 0)
    journal.sync()
    transport = _GroupTransport("S.X", routes, journal, lambda: driver.request_sync("S.X"))
    return routes, driver, journal, transport


def test_append_reply_waits_for_fsync(tmp_path: Path) -> None:
    routes, driver, journal, transport = _transport(tmp_path)
    leader = _Peer("n1")
    ack = {"type": "next_node_idx", "next_node_idx": 3, "reset": False, "success": True}

    journal.add(b"\x00entry", 2, 1)  # an append from the leader, not yet on disk
    transport.send(leader, ack)
    assert routes.sent == [] and driver.sync_requests == ["S.X"]
    # other messages (votes, negative replies) do not wait
    transport.send(leader, {"type": "next_node_idx", "success": False, "reset": True})
    assert len(routes.sent) == 1

    journal.sync(commit_index=False)  # what RaftGroup's syncs do, inline or in a worker
    transport.release_held()
    assert not journal.dirty
    assert routes.sent[-1] == ("n1", "S.X", ack)

    # nothing pending: the reply goes straight out
    transport.send(leader, ack)
    assert routes.sent[-1] == ("n1", "S.X", ack) and len(routes.sent) == 3
    journal._destroy()


def _ack(next_index: int) -> dict[str, Any]:
    return {"type": "next_node_idx", "next_node_idx": next_index, "reset": False, "success": True}


def test_a_reply_waits_for_a_sync_that_began_after_its_entries(tmp_path: Path) -> None:
    """The journal lets a worker thread sync while its owner keeps appending: a sync that was
    under way when an entry arrived does not release that entry's reply."""
    routes, _driver, journal, transport = _transport(tmp_path)
    leader = _Peer("n1")
    journal.add(b"\x00a", 2, 1)
    transport.send(leader, _ack(3))

    def arrives_during_the_fsync(_fd: int, _size: int) -> None:
        disk.stop_observing_fsync(arrives_during_the_fsync)
        journal.add(b"\x00b", 3, 1)
        transport.send(leader, _ack(4))

    disk.observe_fsync(arrives_during_the_fsync)
    try:
        journal.sync(commit_index=False)
    finally:
        if arrives_during_the_fsync in disk._observers:
            disk.stop_observing_fsync(arrives_during_the_fsync)
    transport.release_held()
    assert [m["next_node_idx"] for _p, _g, m in routes.sent] == [3]
    assert journal.dirty and transport.holding
    journal.sync(commit_index=False)
    transport.release_held()
    assert [m["next_node_idx"] for _p, _g, m in routes.sent] == [3, 4]
    assert not transport.holding
    journal._destroy()


def test_a_held_reply_for_entries_replaced_meanwhile_is_dropped(tmp_path: Path) -> None:
    """A new leader may truncate the entries a held reply acknowledges before the sync ends:
    that reply must not go out (it would count this node for entries it no longer holds).
    The same entries sent again (same index, same term) are the same entries."""
    routes, _driver, journal, transport = _transport(tmp_path)
    journal.add(b"\x00old", 2, 1)
    transport.send(_Peer("n1"), _ack(3))  # to the leader of term 1
    journal.deleteEntriesFrom(1)  # the leader of term 2 replaces entry 2
    journal.add(b"\x00new", 2, 2)
    transport.send(_Peer("n2"), _ack(3))
    journal.add(b"\x00again", 3, 2)
    journal.deleteEntriesFrom(2)  # the same entry 3 of term 2, truncated and sent again
    journal.add(b"\x00again", 3, 2)
    transport.send(_Peer("n2"), _ack(4))
    journal.sync(commit_index=False)
    transport.release_held()
    assert [(peer, m["next_node_idx"]) for peer, _g, m in routes.sent] == [("n2", 3), ("n2", 4)]
    journal._destroy()


def _follower_with_unsynced_append(tmp_path: Path, name: str, routes: _Routes) -> RaftGroup:
    """A follower that took an append from n1 (entries 2-3) and holds its reply for the fsync."""
    driver = _Driver()
    group = RaftGroup(
        f"S.{name}", "n3", ["n1", "n2", "n3"], tmp_path / name, routes, driver, _no_apply
    )
    group.receive(
        "n1",
        {
            "type": "append_entries",
            "term": 1,
            "commit_index": 1,
            "entries": [(b"\x00x", 2, 1), (b"\x00y", 3, 1)],
            "prevLogIdx": 1,
            "prevLogTerm": 0,
        },
    )
    assert group.journal.dirty and group.sync_pending and routes.sent == []
    return group


async def test_one_round_fsyncs_every_groups_journal_side_by_side(tmp_path: Path) -> None:
    """With many groups on a node, a round of ticks costs about one fsync, not one per group:
    the journals are fsynced in parallel threads, and each group's reply goes out once its own
    journal is on disk."""
    routes = _Routes()
    groups = [_follower_with_unsynced_append(tmp_path, f"G{i}", routes) for i in range(4)]
    driver = RaftDriver()
    barrier = threading.Barrier(len(groups), timeout=10)
    synced_on: set[str] = set()

    def observe(fd: int, _size: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(LOG_FILE_NAME):
            synced_on.add(threading.current_thread().name)
            barrier.wait()  # returns only when all four fsyncs are under way at once

    disk.observe_fsync(observe)
    try:
        driver.tick_all(groups)
    finally:
        disk.stop_observing_fsync(observe)
        await driver.close()
        for group in groups:
            group.close()
    assert len(synced_on) == len(groups)
    replies = sorted(
        (g, m["next_node_idx"]) for _p, g, m in routes.sent if m["type"] == "next_node_idx"
    )
    assert replies == [(g.group_name, 4) for g in groups]
    assert not any(g.journal.dirty for g in groups)


@pytest.mark.parametrize("others", [0, 1], ids=["alone", "beside-another"])
async def test_a_group_whose_journal_sync_fails_stops_and_sends_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, others: int
) -> None:
    """A failed fsync may have lost the appended entries and the journal refuses everything
    after it: the reply that promised them never goes out, and the group stops on this node (no
    tick, no peer message) while the other groups go on. Inline (one group to sync) and in the
    thread pool (several) alike."""
    routes = _Routes()
    bad = _follower_with_unsynced_append(tmp_path, "bad", routes)
    good = [_follower_with_unsynced_append(tmp_path, f"good{i}", routes) for i in range(others)]
    real_fsync = disk.fsync
    bad_dir = str(bad.journal.path)

    def fsync(fd: int, data_bytes: int | None = None) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").startswith(bad_dir):
            raise OSError(5, "Input/output error")
        real_fsync(fd, data_bytes)

    monkeypatch.setattr(disk, "fsync", fsync)
    ticked: list[str] = []
    for group in (bad, *good):
        real_tick = group.tick
        monkeypatch.setattr(
            group, "tick", lambda g=group, t=real_tick: (ticked.append(g.group_name), t())[1]
        )
    driver = RaftDriver()
    try:
        driver.groups.update({g.group_name: g for g in (bad, *good)})
        driver.tick_all([bad, *good])
        assert bad.failed is not None and "Input/output error" in bad.failed
        driver.on_raft(
            "n1",
            bad.group_name,
            {"type": "request_vote", "term": 9, "last_log_index": 9, "last_log_term": 9},
        )
        driver.tick_all([bad, *good])  # stopped: not synced or ticked again
    finally:
        driver.groups.clear()
        await driver.close()
        for group in (bad, *good):
            group.journal._destroy()
    replies = [g for _p, g, m in routes.sent if m["type"] in ("next_node_idx", "response_vote")]
    assert replies == [g.group_name for g in good]
    assert ticked == [g.group_name for g in good] * 2
    assert bad.term == 1  # the vote request never reached it


def test_a_snapshot_chunk_never_commits_the_followers_unverified_entries(tmp_path: Path) -> None:
    """Found by the chaos harness (partition nemesis): a deposed leader kept entries of its term
    that were never committed; the new leader, having compacted past them, sent a snapshot, and
    pysyncobj raised the follower's commit index from that message alone, so the replica applied
    the deposed leader's entries and diverged."""

    def make(name: str) -> RaftGroup:
        return RaftGroup(
            "S.X", "n1", ["n1", "n2", "n3"], tmp_path / name, _Routes(), _Driver(), _no_apply
        )

    snapshot_chunk = {"type": "append_entries", "term": 5, "commit_index": 40, "serialized": None}
    for name, fixed in (("fixed", True), ("raw", False)):
        group = make(name)
        for idx in range(2, 7):  # the deposed leader's own entries, term 4, never committed
            group.journal.add(b"\x00divergent", idx, 4)
        assert group.commit_index == 1
        if fixed:
            group.receive("n2", dict(snapshot_chunk))
            assert group.commit_index == 1
        else:  # what pysyncobj does on its own: the bug this guards against
            group.core.receive("n2", dict(snapshot_chunk))
            assert group.commit_index == 6
        group.close()


async def test_a_deposed_leader_fails_its_queued_proposals_instead_of_forwarding(
    tmp_path: Path,
) -> None:
    """Found by the pause nemesis: a leader paused with publishes queued, on resuming as a
    follower, had pysyncobj forward them to the new leader, which also received them directly:
    the same publish was stored twice. Stream groups refuse; the meta group may forward."""
    import pytest

    from cluster.raft import NotLeaderError

    for name, forward in (("stream", False), ("meta", True)):
        routes = _Routes()
        group = RaftGroup(
            "S.X",
            "n1",
            ["n1", "n2", "n3"],
            tmp_path / name,
            routes,
            _Driver(),
            _no_apply,
            forward_proposals=forward,
        )
        group.core.follow("n2")  # a follower that knows the new leader
        future = group.propose(b"publish")
        group.core.check_proposals()
        forwarded = [m for _peer, _g, m in routes.sent if m.get("type") == "apply_command"]
        if forward:
            assert len(forwarded) == 1 and not future.done()
        else:
            assert forwarded == []
            with pytest.raises(NotLeaderError):
                await future
        group.close()


def test_a_node_whose_journal_lost_synced_entries_does_not_vote_until_caught_up(
    tmp_path: Path,
) -> None:
    """The Jepsen NATS 2.12.1 scenario: a node whose disk lost entries it had acknowledged votes
    for a candidate that lacks them, and a committed write is lost. Such a node abstains (no
    vote, no campaign) until a leader has brought its commit index up to the leader's."""

    def make(routes: _Routes) -> RaftGroup:
        return RaftGroup(
            "S.X", "n1", ["n1", "n2", "n3"], tmp_path / "g", routes, _Driver(), _no_apply
        )

    group = make(_Routes())
    for idx in range(2, 8):
        group.journal.add(b"\x00entry-%d" % idx, idx, 1)
    group.journal.sync()
    group.close()
    log_path = tmp_path / "g" / "journal" / LOG_FILE_NAME
    raw = bytearray(log_path.read_bytes())
    raw[-60] ^= 0x04  # inside an entry before the last: intact records follow the damage
    log_path.write_bytes(bytes(raw))

    routes = _Routes()
    group = make(routes)
    assert group.journal.lost_synced_entries and group.abstaining
    last_idx = group.journal[-1][1]
    assert last_idx < 7
    vote = {"type": "request_vote", "term": 2, "last_log_index": last_idx, "last_log_term": 1}
    group.receive("n2", dict(vote))
    assert not [m for _p, _g, m in routes.sent if m.get("type") == "response_vote"]
    # the leader (term 2) sends what is missing, with its commit index: caught up, votes again
    missing = [(b"\x00entry-%d" % i, i, 1) for i in range(last_idx + 1, 8)]
    append = {
        "type": "append_entries",
        "term": 2,
        "commit_index": 7,
        "prevLogIdx": last_idx,
        "prevLogTerm": 1,
        "entries": missing,
    }
    group.receive("n2", append)
    assert group.commit_index == 7 and not group.abstaining
    vote3 = {"type": "request_vote", "term": 3, "last_log_index": 7, "last_log_term": 1}
    group.receive("n3", vote3)
    assert [m for _p, _g, m in routes.sent if m.get("type") == "response_vote"]
    group.close()


def _pipes() -> set[str]:
    """The pipes this process has open (/proc/self/fd links such as ``pipe:[123]``)."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the listing's own fd, closed meanwhile
        if target.startswith("pipe:"):
            found.add(target)
    return found


def test_a_group_opens_no_wakeup_pipe_and_still_answers_appends(tmp_path: Path) -> None:
    """pysyncobj wakes its own thread through a pipe; the driver ticks groups itself, so a
    group keeps no pipe (two fds, a write per proposal and a select per tick)."""
    before = _pipes()
    routes = _Routes()
    group = _follower_with_unsynced_append(tmp_path, "p", routes)
    try:
        assert _pipes() == before
        group.sync_journal()
        group.release_synced()
        group.tick()
        assert [m["next_node_idx"] for _p, _g, m in routes.sent] == [4]
    finally:
        group.close()


class _FlushCountingRoutes(_Routes):
    def __init__(self) -> None:
        super().__init__()
        self.flushes = 0

    def flush(self) -> None:
        self.flushes += 1


async def test_a_leader_tells_the_followers_the_new_commit_index_before_it_applies(
    tmp_path: Path,
) -> None:
    """The append carrying a new commit index is written to the followers before the leader's
    own apply of the committed entry starts: the replicas apply side by side, not one after the
    other (a large batch takes milliseconds to apply)."""
    routes = _FlushCountingRoutes()
    seen_at_apply: list[tuple[int, list[tuple[str, int]], int]] = []

    def apply(index: int, _payload: bytes) -> None:
        told = [
            (peer, int(m["commit_index"]))
            for peer, _g, m in routes.sent
            if m["type"] == "append_entries"
        ]
        seen_at_apply.append((index, told, routes.flushes))

    group = RaftGroup("S.E", "n1", ["n1", "n2", "n3"], tmp_path / "E", routes, _Driver(), apply)
    driver = RaftDriver()
    driver.add(group)
    try:
        for peer in ("n2", "n3"):
            driver.on_peer_up(peer)
        group.core.become_leader()
        assert group.is_leader
        future = group.propose(b"payload")
        driver.tick_all([group])  # appended here, sent to n2 and n3, synced behind the loop
        index = group.last_log_index
        assert index > group.commit_index
        await _synced_through(group, index)
        routes.sent.clear()
        flushes_before = routes.flushes
        reply = {"type": "next_node_idx", "next_node_idx": index + 1}
        driver.on_raft("n2", "S.E", reply | {"reset": False, "success": True})
        driver.tick_all([group])  # n1 and n2 hold it: committed, then applied here
        assert future.done() and future.exception() is None
        applied = [entry for entry in seen_at_apply if entry[0] == index]
        assert len(applied) == 1
        _index, told, flushes = applied[0]
        assert sorted(peer for peer, commit in told if commit >= index) == ["n2", "n3"]
        assert flushes > flushes_before
    finally:
        await driver.close()


SYNC_WAIT_S = 10.0
# an entry large enough that the leader syncs it behind the loop
LARGE_PAYLOAD = b"x" * RAFT_SYNC_BEHIND_BYTES_MIN


async def _synced_through(group: RaftGroup, index: int) -> None:
    """Let the loop run until the leader's background sync covers ``index``."""
    deadline = time.monotonic() + SYNC_WAIT_S
    while group.journal.synced_index < index:
        assert time.monotonic() < deadline, "the leader's journal sync did not end"
        await asyncio.sleep(0.005)


def _leader_with_a_gated_sync(
    tmp_path: Path, name: str
) -> tuple[RaftGroup, RaftDriver, threading.Event]:
    """A leader of n1..n3 whose journal syncs wait until the returned event is set (its no-op
    entry of becoming leader, small and synced inline, already synced)."""
    gate = threading.Event()
    group = RaftGroup(
        name, "n1", ["n1", "n2", "n3"], tmp_path / name, _Routes(), _Driver(), _no_apply
    )
    real_sync = group.sync_journal

    def gated_sync() -> None:
        assert gate.wait(SYNC_WAIT_S), "the test never opened the gate"
        real_sync()

    group.sync_journal = gated_sync  # type: ignore[method-assign]
    driver = RaftDriver()
    driver.add(group)
    for peer in ("n2", "n3"):
        driver.on_peer_up(peer)
    group.core.become_leader()
    assert group.is_leader
    gate.set()
    driver.tick_all([group])
    assert not group.journal.dirty
    gate.clear()
    return group, driver, gate


def _append_reply(driver: RaftDriver, group: RaftGroup, peer: str, index: int) -> None:
    driver.on_raft(peer, group.group_name, _ack(index + 1))
    driver.tick_all([group])


async def test_a_leader_counts_itself_only_for_entries_its_journal_synced(
    tmp_path: Path,
) -> None:
    """A leader's sync of a large entry runs behind the loop. Until it ends, one follower's
    acknowledgement is not a majority (the leader's copy may still be lost in a power cut);
    both followers' are. Once the sync ends, the leader and one follower are."""
    group, driver, gate = _leader_with_a_gated_sync(tmp_path, "S.L")
    try:
        first = group.propose(LARGE_PAYLOAD)
        driver.tick_all([group])  # appended and sent; its sync waits at the gate
        index = group.last_log_index
        assert group.journal.synced_index < index
        _append_reply(driver, group, "n2", index)
        assert group.commit_index < index and not first.done()
        _append_reply(driver, group, "n3", index)
        assert group.commit_index == index
        await asyncio.wait_for(first, SYNC_WAIT_S)  # committed by the followers alone
        second = group.propose(LARGE_PAYLOAD)
        driver.tick_all([group])
        index = group.last_log_index
        _append_reply(driver, group, "n2", index)
        assert group.commit_index < index and not second.done()
        gate.set()
        await _synced_through(group, index)
        driver.tick_all([group])  # (the sync's end also kicks the group)
        assert group.commit_index == index
        await asyncio.wait_for(second, SYNC_WAIT_S)
    finally:
        gate.set()
        await driver.close()


async def test_a_leader_that_steps_down_in_the_tick_still_counts_only_its_synced_entries(
    tmp_path: Path,
) -> None:
    """pysyncobj raises the commit index, then its fallback timer turns a leader that heard from
    no majority for too long into a follower, then it applies: the commit it applies is the one
    that counts the leader only for what its journal synced (here: one follower acknowledged an
    entry whose sync on the leader has not ended, which is no majority)."""
    group, driver, gate = _leader_with_a_gated_sync(tmp_path, "S.F")
    try:
        future = group.propose(LARGE_PAYLOAD)
        driver.tick_all([group])  # its sync waits at the gate
        index = group.last_log_index
        _append_reply(driver, group, "n2", index)
        assert group.commit_index < index
        group.core.hear_nothing_for(RAFT_LEADER_FALLBACK_S + 1)
        driver.tick_all([group])
        assert not group.is_leader
        assert group.commit_index < index and group.last_applied < index
        await asyncio.sleep(0)
        assert not future.done() or future.exception() is not None
    finally:
        gate.set()
        await driver.close()


async def test_a_sync_behind_the_loop_that_fails_stops_the_group_before_anything_reaches_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's failed fsync poisons the journal at once; until the loop hears of it the
    group would still take messages and ticks, whose appends and votes the journal refuses. The
    driver checks the journal first: the group stops, and nothing raises into the routes."""
    group, driver, gate = _leader_with_a_gated_sync(tmp_path, "S.X")
    try:
        group.propose(LARGE_PAYLOAD)
        driver.tick_all([group])  # its sync waits at the gate

        def failing_fsync(_fd: int, _data_bytes: int | None = None) -> None:
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(disk, "fsync", failing_fsync)
        gate.set()
        deadline = time.monotonic() + SYNC_WAIT_S
        while group.journal.failed is None:  # the loop does not run: its callback waits
            assert time.monotonic() < deadline, "the sync did not fail"
            time.sleep(0.005)
        assert group.failed is None
        vote = {
            "type": "request_vote",
            "term": group.term + 1,
            "last_log_index": 99,
            "last_log_term": group.term + 1,
        }
        driver.on_raft("n2", group.group_name, vote)  # would raise JournalFailedError
        assert group.failed is not None and "journal" in group.failed
        driver.tick_all([group])
        await asyncio.sleep(0.01)  # the worker's news arrives for a stopped group: nothing
        assert group.failed is not None
    finally:
        gate.set()
        await driver.close()
